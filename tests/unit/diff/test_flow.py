"""Flow control in ket diff: expiry, limits, uniqueness windows and debounces that may hold back,
discard or skip work are for review."""

from __future__ import annotations

from typing import Any

import pytest

from ket.diff import diff_manifests

from .build import WORKER, change, job, manifest

SUBJECT = "job sales.send"


def diff_job(before: dict[str, Any], after: dict[str, Any]) -> list[Any]:
    """The changes between two versions of job sales.send."""
    return diff_manifests(
        manifest(jobs={"sales.send": before}), manifest(jobs={"sales.send": after})
    )


def test_an_expiry_added_is_for_review() -> None:
    assert diff_job(job(), job(expires_in="10m")) == [
        change(
            "review",
            "expires_in_added",
            SUBJECT,
            "expires_in added: 10m; queued jobs not started within 10m of their run time will "
            "be discarded",
            new="10m",
        )
    ]


def test_an_expiry_shortened_is_for_review() -> None:
    assert diff_job(job(expires_in="1h"), job(expires_in="10m")) == [
        change(
            "review",
            "expires_in_shortened",
            SUBJECT,
            "expires_in shortened from 1h to 10m; queued jobs waiting longer than 10m will be "
            "discarded",
            old="1h",
            new="10m",
        )
    ]


def test_an_expiry_lengthened_removed_or_rewritten_is_safe() -> None:
    assert diff_job(job(expires_in="10m"), job(expires_in="1h")) == [
        change(
            "safe",
            "expires_in_lengthened",
            SUBJECT,
            "expires_in lengthened from 10m to 1h",
            old="10m",
            new="1h",
        )
    ]
    assert diff_job(job(expires_in="10m"), job()) == [
        change(
            "safe",
            "expires_in_removed",
            SUBJECT,
            "expires_in removed (was 10m); jobs wait to start however long it takes",
            old="10m",
        )
    ]
    assert diff_job(job(expires_in="600s"), job(expires_in="10m")) == [
        change(
            "safe",
            "expires_in_restated",
            SUBJECT,
            "expires_in rewritten from 600s to 10m; same duration",
            old="600s",
            new="10m",
        )
    ]
    assert diff_job(job(expires_in="10m"), job(expires_in="10m")) == []


ONE = {"limit": 1}
THREE = {"limit": 3}
PER_CUSTOMER = {"limit": 1, "key": ["customer_id"]}


def test_a_concurrency_limit_added_or_removed_is_for_review() -> None:
    assert diff_job(job(), job(concurrency_limit=PER_CUSTOMER)) == [
        change(
            "review",
            "concurrency_limit_added",
            SUBJECT,
            "concurrency_limit added: 1 at once for each customer_id; jobs over it wait",
            new=PER_CUSTOMER,
        )
    ]
    assert diff_job(job(concurrency_limit=THREE), job()) == [
        change(
            "review",
            "concurrency_limit_removed",
            SUBJECT,
            "concurrency_limit removed (was 3 at once); what it held back is no longer held back",
            old=THREE,
        )
    ]


def test_a_concurrency_limit_lowered_is_for_review_and_raised_is_safe() -> None:
    assert diff_job(job(concurrency_limit=THREE), job(concurrency_limit=ONE)) == [
        change(
            "review",
            "concurrency_limit_tightened",
            SUBJECT,
            "concurrency_limit lowered from 3 at once to 1 at once; jobs over it wait",
            old=THREE,
            new=ONE,
        )
    ]
    assert diff_job(job(concurrency_limit=ONE), job(concurrency_limit=THREE)) == [
        change(
            "safe",
            "concurrency_limit_loosened",
            SUBJECT,
            "concurrency_limit raised from 1 at once to 3 at once",
            old=ONE,
            new=THREE,
        )
    ]


@pytest.mark.parametrize(
    ("before", "after", "shown"),
    [
        ([], ["customer_id"], "from none to customer_id"),
        (["customer_id"], [], "from customer_id to none"),
        (["a", "b"], ["b", "a"], "from (a, b) to (b, a)"),
        (["a"], ["a", "b"], "from a to (a, b)"),
    ],
    ids=["added", "removed", "reordered", "widened"],
)
def test_a_concurrency_key_changed_is_for_review(
    before: list[str], after: list[str], shown: str
) -> None:
    old, new = {"limit": 2, "key": before}, {"limit": 2, "key": after}
    dumped_old = {"limit": 2, "key": before} if before else {"limit": 2}
    dumped_new = {"limit": 2, "key": after} if after else {"limit": 2}
    assert diff_job(job(concurrency_limit=old), job(concurrency_limit=new)) == [
        change(
            "review",
            "concurrency_limit_key_changed",
            SUBJECT,
            f"concurrency_limit key changed {shown}; attempts running now were counted under "
            "the old key",
            old=dumped_old,
            new=dumped_new,
        )
    ]


def test_a_key_changed_with_a_raised_limit_gives_both() -> None:
    changes = diff_job(
        job(concurrency_limit=ONE), job(concurrency_limit={"limit": 5, "key": ["a"]})
    )
    assert [(c.severity, c.kind) for c in changes] == [
        ("review", "concurrency_limit_key_changed"),
        ("safe", "concurrency_limit_loosened"),
    ]


def rate(limit: int, period: str, *key: str) -> dict[str, Any]:
    return {"limit": limit, "period": period} | ({"key": list(key)} if key else {})


@pytest.mark.parametrize(
    ("before", "after", "kind", "severity", "message"),
    [
        (
            rate(20, "1s"),
            rate(10, "1s"),
            "rate_limit_tightened",
            "review",
            "rate_limit tightened from 20 per 1s to 10 per 1s; jobs over it wait",
        ),
        (
            rate(20, "1s"),
            rate(20, "1m"),
            "rate_limit_tightened",
            "review",
            "rate_limit tightened from 20 per 1s to 20 per 1m; jobs over it wait",
        ),
        (
            rate(10, "1m"),
            rate(20, "1m"),
            "rate_limit_loosened",
            "safe",
            "rate_limit loosened from 10 per 1m to 20 per 1m",
        ),
        (
            rate(10, "1m"),
            rate(10, "1s"),
            "rate_limit_loosened",
            "safe",
            "rate_limit loosened from 10 per 1m to 10 per 1s",
        ),
        (
            rate(60, "1m"),
            rate(1, "1s"),
            "rate_limit_reshaped",
            "review",
            "rate_limit changed from 60 per 1m to 1 per 1s (1 to 1 starts a second); the bursts "
            "it allows move",
        ),
        (
            rate(10, "1s"),
            rate(100, "1m"),
            "rate_limit_reshaped",
            "review",
            "rate_limit changed from 10 per 1s to 100 per 1m (10 to 1.667 starts a second); the "
            "bursts it allows move",
        ),
        (
            rate(5, "60s"),
            rate(5, "1m"),
            "rate_limit_restated",
            "safe",
            "rate_limit rewritten from 5 per 60s to 5 per 1m; same rate",
        ),
    ],
    ids=[
        "lower-limit",
        "longer-period",
        "higher-limit",
        "shorter-period",
        "same-rate-other-bursts",
        "lower-rate-bigger-bursts",
        "rewritten",
    ],
)
def test_a_rate_limit_changed_is_classified_by_the_starts_it_allows(
    before: dict[str, Any], after: dict[str, Any], kind: str, severity: Any, message: str
) -> None:
    assert diff_job(job(rate_limit=before), job(rate_limit=after)) == [
        change(severity, kind, SUBJECT, message, old=before, new=after)
    ]


def test_a_rate_limit_added_removed_or_rekeyed_is_for_review() -> None:
    keyed = rate(10, "1m", "partner")
    assert diff_job(job(), job(rate_limit=keyed)) == [
        change(
            "review",
            "rate_limit_added",
            SUBJECT,
            "rate_limit added: 10 per 1m for each partner; jobs over it wait",
            new=keyed,
        )
    ]
    assert diff_job(job(rate_limit=keyed), job()) == [
        change(
            "review",
            "rate_limit_removed",
            SUBJECT,
            "rate_limit removed (was 10 per 1m for each partner); what it held back is no "
            "longer held back",
            old=keyed,
        )
    ]
    assert diff_job(job(rate_limit=keyed), job(rate_limit=rate(10, "1m"))) == [
        change(
            "review",
            "rate_limit_key_changed",
            SUBJECT,
            "rate_limit key changed from partner to none; attempts running now were counted "
            "under the old key",
            old=keyed,
            new=rate(10, "1m"),
        )
    ]


def test_a_job_added_with_limits_is_only_a_job_added() -> None:
    old = manifest(modules=("sales",))
    new = manifest(jobs={"sales.send": job(expires_in="1m", concurrency_limit=ONE)})
    assert [(c.kind, c.subject) for c in diff_manifests(old, new)] == [("job_added", SUBJECT)]


def with_limits(limits: dict[str, Any], **queues: int) -> dict[str, Any]:
    return {"queues": {**WORKER["queues"], **queues}, "limits": limits}


def test_queue_limits_are_classified_as_a_jobs_are() -> None:
    limited = with_limits({"mail": {"concurrency_limit": {"limit": 10}}})
    looser = with_limits({"mail": {"concurrency_limit": {"limit": 20}}})
    assert diff_manifests(manifest(), manifest(worker=limited)) == [
        change(
            "review",
            "concurrency_limit_added",
            "queue mail",
            "concurrency_limit added: 10 at once; jobs over it wait",
            new={"limit": 10},
        )
    ]
    assert diff_manifests(manifest(worker=limited), manifest(worker=looser)) == [
        change(
            "safe",
            "concurrency_limit_loosened",
            "queue mail",
            "concurrency_limit raised from 10 at once to 20 at once",
            old={"limit": 10},
            new={"limit": 20},
        )
    ]
    rated = with_limits({"mail": {"rate_limit": rate(100, "1m")}})
    assert [
        (c.severity, c.kind, c.subject) for c in diff_manifests(manifest(worker=rated), manifest())
    ] == [("review", "rate_limit_removed", "queue mail")]


def test_a_queue_added_with_limits_is_only_a_queue_added() -> None:
    worker = with_limits({"partners": {"rate_limit": rate(5, "1s")}}, partners=3)
    assert [(c.kind, c.subject) for c in diff_manifests(manifest(), manifest(worker=worker))] == [
        ("queue_added", "queue partners")
    ]


DEFAULT_STATES = ["available", "scheduled", "executing", "retryable", "completed"]


def window(period: str, *key: str, states: list[str] | None = None) -> dict[str, Any]:
    """A unique entry as a manifest has it: its states always written."""
    found = {"period": period, "states": states or DEFAULT_STATES}
    return found | ({"key": list(key)} if key else {})


def test_a_unique_window_added_or_removed_is_for_review() -> None:
    keyed = window("1h", "customer_id")
    assert diff_job(job(), job(unique=keyed)) == [
        change(
            "review",
            "unique_added",
            SUBJECT,
            "unique added: 1h for each customer_id; enqueues that wrote a job may now join an "
            "earlier one, and their work is skipped",
            new=keyed,
        )
    ]
    states = window("1d", states=["available", "scheduled"])
    assert diff_job(job(unique=states), job()) == [
        change(
            "review",
            "unique_removed",
            SUBJECT,
            "unique removed (was 1d over (available, scheduled)); the duplicates it prevented "
            "are written again",
            old=states,
        )
    ]


@pytest.mark.parametrize(
    ("before", "after", "kind", "severity", "message"),
    [
        (
            window("1h"),
            window("1d"),
            "unique_lengthened",
            "review",
            "unique period lengthened from 1h to 1d; enqueues join jobs enqueued longer ago, "
            "and more work is skipped",
        ),
        (
            window("1d"),
            window("1h"),
            "unique_shortened",
            "review",
            "unique period shortened from 1d to 1h; enqueues that joined an earlier job may "
            "write one again",
        ),
        (
            window("1h", "customer_id"),
            window("1h", "customer_id", "partner"),
            "unique_key_changed",
            "review",
            "unique key changed from customer_id to (customer_id, partner); other enqueues are "
            "duplicates, and jobs enqueued so far hold the old key",
        ),
        (
            window("1h"),
            window("1h", states=["available", "scheduled"]),
            "unique_states_changed",
            "review",
            "unique states changed from (available, scheduled, executing, retryable, completed) "
            "to (available, scheduled); enqueues join jobs in other states",
        ),
        (
            window("60m", "customer_id"),
            window("1h", "customer_id"),
            "unique_restated",
            "safe",
            "unique period rewritten from 60m to 1h; same window",
        ),
    ],
    ids=["lengthened", "shortened", "rekeyed", "other-states", "rewritten"],
)
def test_a_unique_window_changed_is_classified_by_what_joins(
    before: dict[str, Any], after: dict[str, Any], kind: str, severity: Any, message: str
) -> None:
    assert diff_job(job(unique=before), job(unique=after)) == [
        change(severity, kind, SUBJECT, message, old=before, new=after)
    ]
    assert diff_job(job(unique=before), job(unique=before)) == []


def test_a_unique_window_rekeyed_and_lengthened_gives_both() -> None:
    changes = diff_job(job(unique=window("1h")), job(unique=window("2h", "customer_id")))
    assert [(c.severity, c.kind) for c in changes] == [
        ("review", "unique_key_changed"),
        ("review", "unique_lengthened"),
    ]


def debounced(period: str, *key: str, max_wait: str | None = None) -> dict[str, Any]:
    found: dict[str, Any] = {"period": period} | ({"key": list(key)} if key else {})
    return found | ({"max_wait": max_wait} if max_wait else {})


def test_a_debounce_added_or_removed_is_for_review() -> None:
    keyed = debounced("30s", "customer_id", max_wait="5m")
    assert diff_job(job(), job(debounce=keyed)) == [
        change(
            "review",
            "debounce_added",
            SUBJECT,
            "debounce added: 30s for each customer_id, at most 5m; jobs wait 30s after the last "
            "enqueue of their key, and the enqueues before they start join them",
            new=keyed,
        )
    ]
    assert diff_job(job(debounce=debounced("30s")), job()) == [
        change(
            "review",
            "debounce_removed",
            SUBJECT,
            "debounce removed (was 30s); every enqueue writes a job that runs on its own",
            old=debounced("30s"),
        )
    ]


@pytest.mark.parametrize(
    ("before", "after", "kind", "severity", "message"),
    [
        (
            debounced("30s"),
            debounced("1m"),
            "debounce_lengthened",
            "review",
            "debounce period lengthened from 30s to 1m; jobs wait longer to run",
        ),
        (
            debounced("1m"),
            debounced("30s"),
            "debounce_shortened",
            "safe",
            "debounce period shortened from 1m to 30s; jobs run sooner",
        ),
        (
            debounced("60s"),
            debounced("1m"),
            "debounce_restated",
            "safe",
            "debounce period rewritten from 60s to 1m; same wait",
        ),
        (
            debounced("30s", "customer_id"),
            debounced("30s", "partner"),
            "debounce_key_changed",
            "review",
            "debounce key changed from customer_id to partner; enqueues join other waiting "
            "jobs, and jobs waiting now were keyed otherwise",
        ),
        (
            debounced("30s", max_wait="5m"),
            debounced("30s"),
            "debounce_max_wait_loosened",
            "review",
            "debounce max_wait removed (was 5m); a job enqueued again and again may wait as "
            "long as the enqueues go on",
        ),
        (
            debounced("30s", max_wait="5m"),
            debounced("30s", max_wait="1h"),
            "debounce_max_wait_loosened",
            "review",
            "debounce max_wait lengthened from 5m to 1h; a job enqueued again and again waits "
            "longer",
        ),
        (
            debounced("30s"),
            debounced("30s", max_wait="5m"),
            "debounce_max_wait_tightened",
            "safe",
            "debounce max_wait added: 5m; a job enqueued again and again runs at most 5m after "
            "its first enqueue",
        ),
        (
            debounced("30s", max_wait="1h"),
            debounced("30s", max_wait="5m"),
            "debounce_max_wait_tightened",
            "safe",
            "debounce max_wait shortened from 1h to 5m; a job enqueued again and again runs sooner",
        ),
        (
            debounced("30s", max_wait="300s"),
            debounced("30s", max_wait="5m"),
            "debounce_restated",
            "safe",
            "debounce max_wait rewritten from 300s to 5m; same wait",
        ),
    ],
    ids=[
        "lengthened",
        "shortened",
        "rewritten",
        "rekeyed",
        "max-wait-removed",
        "max-wait-lengthened",
        "max-wait-added",
        "max-wait-shortened",
        "max-wait-rewritten",
    ],
)
def test_a_debounce_changed_is_classified_by_how_long_jobs_wait(
    before: dict[str, Any], after: dict[str, Any], kind: str, severity: Any, message: str
) -> None:
    assert diff_job(job(debounce=before), job(debounce=after)) == [
        change(severity, kind, SUBJECT, message, old=before, new=after)
    ]
    assert diff_job(job(debounce=before), job(debounce=before)) == []


def test_a_debounce_shortened_with_its_max_wait_lengthened_gives_both() -> None:
    changes = diff_job(
        job(debounce=debounced("1m", max_wait="5m")),
        job(debounce=debounced("30s", max_wait="10m")),
    )
    assert [(c.severity, c.kind) for c in changes] == [
        ("review", "debounce_max_wait_loosened"),
        ("safe", "debounce_shortened"),
    ]


def test_a_unique_window_swapped_for_a_debounce_is_both_for_review() -> None:
    changes = diff_job(job(unique=window("1h")), job(debounce=debounced("30s")))
    assert [(c.severity, c.kind) for c in changes] == [
        ("review", "debounce_added"),
        ("review", "unique_removed"),
    ]


def test_a_job_added_with_a_window_or_a_debounce_is_only_a_job_added() -> None:
    old = manifest(modules=("sales",))
    new = manifest(
        jobs={"sales.send": job(unique=window("1h")), "sales.ping": job(debounce=debounced("1s"))}
    )
    assert [(c.kind, c.subject) for c in diff_manifests(old, new)] == [
        ("job_added", "job sales.ping"),
        ("job_added", SUBJECT),
    ]
