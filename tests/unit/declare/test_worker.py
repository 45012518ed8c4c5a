"""WorkerConfig: documented defaults, strict values, the poll range, per-host concurrency, and
queues given as dicts with their fleet-wide limits."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from ket.declare import WorkerConfig
from ket.declare.flow import ConcurrencyLimit, QueueLimits, RateLimit
from ket.declare.worker import MAX_CONCURRENCY, check_concurrency

WEEK = 7 * 86_400_000


def test_worker_config_defaults() -> None:
    assert WorkerConfig().model_dump() == {
        "queues": {"default": 10},
        "poll_min_ms": 50,
        "poll_max_ms": 2_000,
        "tenant_refresh_ms": 30_000,
        "lease_ms": 30_000,
        "shutdown_grace_ms": 15_000,
        "schedule_sweep_ms": 30_000,
        "retention_ms": {"completed": WEEK, "discarded": WEEK, "cancelled": WEEK},
        "limits": {},
    }


def test_a_partial_retention_keeps_the_default_for_the_states_it_leaves_out() -> None:
    config = WorkerConfig.model_validate(
        {"retention_ms": {"completed": 3_600_000, "cancelled": None}}
    )
    assert config.retention_ms == {"completed": 3_600_000, "discarded": WEEK, "cancelled": None}


@pytest.mark.parametrize(
    ("retention", "where"),
    [
        ({"done": 1}, "retention_ms.done.[key]"),
        ({"completed": 0}, "retention_ms.completed"),
        ({"completed": "7d"}, "retention_ms.completed"),
        (7, "retention_ms"),
    ],
    ids=["unknown-state", "zero", "text", "not-a-dict"],
)
def test_a_bad_retention_is_refused_naming_it(retention: object, where: str) -> None:
    with pytest.raises(ValidationError) as refused:
        WorkerConfig.model_validate({"retention_ms": retention})
    assert where in str(refused.value)


def test_default_queues_are_not_shared_between_configs() -> None:
    first, second = WorkerConfig(), WorkerConfig()
    first.queues["mail"] = 1
    assert second.queues == {"default": 10}


def test_given_values_replace_defaults() -> None:
    config = WorkerConfig.model_validate({"queues": {"mail": 4}, "lease_ms": 5_000})
    assert (config.queues, config.lease_ms, config.poll_min_ms) == ({"mail": 4}, 5_000, 50)


@pytest.mark.parametrize(
    "values",
    [
        {"poll_min_ms": 0},
        {"lease_ms": -1},
        {"queues": {"default": 0}},
        {"queues": {"default": MAX_CONCURRENCY + 1}},
        {"queues": {}},
        {"poll_min_ms": 300, "poll_max_ms": 200},
        {"shutdown_grace_ms": -1},
        {"lease_ms": True},
        {"lease_ms": "100"},
        {"lease_ms": 1.0},
        {"queues": {"default": True}},
        {"colour": "red"},
    ],
)
def test_invalid_values_are_refused(values: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        WorkerConfig.model_validate(values)


def test_zero_shutdown_grace_and_equal_poll_bounds_are_allowed() -> None:
    config = WorkerConfig.model_validate(
        {"shutdown_grace_ms": 0, "poll_min_ms": 100, "poll_max_ms": 100}
    )
    assert (config.shutdown_grace_ms, config.poll_min_ms, config.poll_max_ms) == (0, 100, 100)


def test_worker_config_is_frozen() -> None:
    with pytest.raises(ValidationError):
        WorkerConfig().lease_ms = 1


def test_a_concurrency_of_up_to_the_maximum_is_allowed() -> None:
    config = WorkerConfig.model_validate({"queues": {"default": 1, "mail": MAX_CONCURRENCY}})
    assert config.queues == {"default": 1, "mail": MAX_CONCURRENCY}


def test_with_concurrency_replaces_the_named_queues_and_keeps_the_rest() -> None:
    config = WorkerConfig.model_validate({"queues": {"default": 2, "mail": 4}, "lease_ms": 5_000})
    changed = config.with_concurrency({"mail": 9})
    assert (changed.queues, changed.lease_ms) == ({"default": 2, "mail": 9}, 5_000)
    assert config.queues == {"default": 2, "mail": 4}


def test_with_concurrency_refuses_a_queue_that_is_not_declared_naming_the_declared_ones() -> None:
    config = WorkerConfig.model_validate({"queues": {"mail": 4, "default": 2}})
    with pytest.raises(ValueError) as raised:
        config.with_concurrency({"reports": 3})
    assert str(raised.value) == "queue 'reports' is not declared (declared: default, mail)"


def test_serving_keeps_only_the_queues_a_host_serves_in_their_declared_order() -> None:
    config = WorkerConfig.model_validate(
        {"queues": {"default": 2, "mail": 4, "reports": 1}, "lease_ms": 5_000}
    )
    narrowed = config.serving(["reports", "default"])
    assert (list(narrowed.queues.items()), narrowed.lease_ms) == (
        [("default", 2), ("reports", 1)],
        5_000,
    )
    assert config.queues == {"default": 2, "mail": 4, "reports": 1}


def test_serving_refuses_a_queue_that_is_not_declared_or_no_queue_at_all() -> None:
    config = WorkerConfig.model_validate({"queues": {"mail": 4, "default": 2}})
    with pytest.raises(ValueError) as raised:
        config.serving(["mail", "reports"])
    assert str(raised.value) == "queue 'reports' is not declared (declared: default, mail)"
    with pytest.raises(ValidationError, match="queues must name at least one queue"):
        config.serving([])


@pytest.mark.parametrize("value", [0, -1, MAX_CONCURRENCY + 1, True, "5", 5.0])
def test_with_concurrency_holds_a_value_to_the_rule_of_a_declared_one(value: object) -> None:
    with pytest.raises(ValidationError):  # the declared rule...
        WorkerConfig.model_validate({"queues": {"default": value}})
    with pytest.raises(ValueError) as raised:  # ...is the one an override meets
        WorkerConfig().with_concurrency({"default": value})  # type: ignore[dict-item]
    assert str(raised.value) == (
        f"a queue's concurrency must be a whole number from 1 to 1000, got {value!r}"
    )


def test_check_concurrency_returns_a_valid_value() -> None:
    assert [check_concurrency(n) for n in (1, 50, MAX_CONCURRENCY)] == [1, 50, MAX_CONCURRENCY]


PARTNERS = {
    "concurrency": 4,
    "concurrency_limit": 10,
    "rate_limit": {"limit": 100, "period": "1m"},
}


def test_a_queue_given_as_a_dict_has_its_concurrency_in_queues_and_its_limits_apart() -> None:
    config = WorkerConfig.model_validate({"queues": {"default": 2, "partners": PARTNERS}})
    assert config.queues == {"default": 2, "partners": 4}
    assert config.limits == {
        "partners": QueueLimits(
            concurrency_limit=ConcurrencyLimit(limit=10),
            rate_limit=RateLimit(limit=100, period="1m", seconds=60.0),
        )
    }


def test_a_queue_dict_with_its_concurrency_alone_has_no_limits() -> None:
    config = WorkerConfig.model_validate({"queues": {"default": {"concurrency": 3}}})
    assert (config.queues, config.limits) == ({"default": 3}, {})
    unset = {"concurrency": 3, "concurrency_limit": None, "rate_limit": None}
    config = WorkerConfig.model_validate({"queues": {"default": unset}})
    assert (config.queues, config.limits) == ({"default": 3}, {})


def test_limits_survive_a_dump_and_a_per_host_concurrency() -> None:
    config = WorkerConfig.model_validate({"queues": {"default": 2, "partners": PARTNERS}})
    assert config.model_dump()["limits"] == {
        "partners": {"concurrency_limit": 10, "rate_limit": {"limit": 100, "period": "1m"}}
    }
    assert WorkerConfig.model_validate(config.model_dump()) == config
    changed = config.with_concurrency({"partners": 8})
    assert (changed.queues, changed.limits) == ({"default": 2, "partners": 8}, config.limits)


@pytest.mark.parametrize(
    ("partners", "where", "message"),
    [
        (
            {"concurrency_limit": 10},
            "queues.partners",
            "a queue given as a dict needs its 'concurrency' (jobs at once per worker process)",
        ),
        (
            {"concurrency": 0, "concurrency_limit": 10},
            "queues.partners",
            "Input should be greater than 0",
        ),
        (
            {"concurrency": 4, "concurrency_limit": {"limit": 1, "key": ["customer_id"]}},
            "limits.partners",
            "concurrency_limit: a queue's limit takes no key",
        ),
        (
            {"concurrency": 4, "rate_limit": {"limit": 0, "period": "1s"}},
            "limits.partners",
            "rate_limit: limit must be a whole number from 1 to 2147483647, got 0",
        ),
        ({"concurrency": 4, "burst": 5}, "limits.partners", "unknown key 'burst'"),
    ],
    ids=["no-concurrency", "zero-concurrency", "keyed", "zero-rate", "unknown-key"],
)
def test_a_bad_queue_dict_is_refused_naming_the_queue(
    partners: dict[str, Any], where: str, message: str
) -> None:
    with pytest.raises(ValidationError) as refused:
        WorkerConfig.model_validate({"queues": {"partners": partners}})
    (error,) = refused.value.errors()
    assert ".".join(str(p) for p in error["loc"]) == where
    assert message in error["msg"]


def test_limits_for_a_queue_the_worker_lacks_are_refused() -> None:
    with pytest.raises(ValidationError) as refused:
        WorkerConfig.model_validate({"limits": {"mail": {"concurrency_limit": 1}}})
    assert "limits name queues that queues lacks: mail" in str(refused.value)
