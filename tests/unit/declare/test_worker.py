"""WorkerConfig: documented defaults, strict values, and the poll range."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from ket.declare import WorkerConfig


def test_worker_config_defaults() -> None:
    assert WorkerConfig().model_dump() == {
        "queues": {"default": 10},
        "poll_min_ms": 50,
        "poll_max_ms": 2_000,
        "tenant_refresh_ms": 30_000,
        "lease_ms": 30_000,
        "shutdown_grace_ms": 15_000,
        "schedule_sweep_ms": 30_000,
    }


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
