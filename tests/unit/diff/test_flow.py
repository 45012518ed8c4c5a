"""Flow control in ket diff: expiry and limits that may hold back or discard work are for review."""

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
