"""Rules for the fields of a common job or function: effects, schedule, limits, queue, flags."""

from __future__ import annotations

from typing import Any

from ket.diff import diff_manifests

from .build import change, function, job, manifest

SUBJECT = "job sales.send"
EVERY_15M = {"every": "15m", "fingerprint": "f32a8e09ad69c1f1"}
EVERY_30M = {"every": "30m", "fingerprint": "0e3a4f1b9c2d7a65"}
EVERY_900S = {"every": "900s", "fingerprint": "f32a8e09ad69c1f1"}
DAILY_SAIGON = {"daily_at": "03:00", "timezone": "Asia/Ho_Chi_Minh", "fingerprint": "7c06"}
DAILY_PARIS = {"daily_at": "03:00", "timezone": "Europe/Paris", "fingerprint": "a1b2"}
DAILY_PARIS_4 = {"daily_at": "04:00", "timezone": "Europe/Paris", "fingerprint": "c3d4"}


def diff_job(before: dict[str, Any], after: dict[str, Any]) -> list[Any]:
    """The changes between two versions of job sales.send."""
    return diff_manifests(
        manifest(jobs={"sales.send": before}), manifest(jobs={"sales.send": after})
    )


def test_added_effect_is_widening_for_review() -> None:
    old, new = ["read:sales.Order"], ["read:sales.Order", "storage:write", "transport:send"]
    assert diff_job(job(effects=old), job(effects=new)) == [
        change(
            "review",
            "effects_widened",
            SUBJECT,
            "effects widened: adds storage:write, transport:send",
            old=old,
            new=new,
        ),
    ]


def test_read_replaced_by_write_is_widening() -> None:
    old, new = ["read:sales.Order"], ["write:sales.Order"]
    assert diff_job(job(effects=old), job(effects=new)) == [
        change(
            "review",
            "effects_widened",
            SUBJECT,
            "effects widened: adds write:sales.Order",
            old=old,
            new=new,
        ),
    ]


def test_removed_effect_is_narrowing_and_safe() -> None:
    old, new = ["read:sales.Order", "transport:send"], ["read:sales.Order"]
    assert diff_job(job(effects=old), job(effects=new)) == [
        change(
            "safe",
            "effects_narrowed",
            SUBJECT,
            "effects narrowed: drops transport:send",
            old=old,
            new=new,
        ),
    ]


def test_write_replaced_by_read_is_narrowing() -> None:
    old, new = ["write:sales.Order"], ["read:sales.Order"]
    assert diff_job(job(effects=old), job(effects=new)) == [
        change(
            "safe",
            "effects_narrowed",
            SUBJECT,
            "effects narrowed: drops write:sales.Order",
            old=old,
            new=new,
        ),
    ]


def test_swapped_effects_are_widening_and_narrowing_at_once() -> None:
    old, new = ["transport:send"], ["storage:write"]
    assert diff_job(job(effects=old), job(effects=new)) == [
        change(
            "review", "effects_widened", SUBJECT, "effects widened: adds storage:write", old, new
        ),
        change(
            "safe", "effects_narrowed", SUBJECT, "effects narrowed: drops transport:send", old, new
        ),
    ]


def test_read_spelled_out_next_to_write_is_a_safe_restatement() -> None:
    old, new = ["write:sales.Order"], ["read:sales.Order", "write:sales.Order"]
    assert diff_job(job(effects=old), job(effects=new)) == [
        change(
            "safe",
            "effects_restated",
            SUBJECT,
            "effects rewritten without changing what they allow",
            old=old,
            new=new,
        ),
    ]


def test_function_effects_widened_are_for_review() -> None:
    old = manifest(functions={"sales.confirm": function()})
    new = manifest(functions={"sales.confirm": function(effects=["write:sales.Order"])})
    assert diff_manifests(old, new) == [
        change(
            "review",
            "effects_widened",
            "function sales.confirm",
            "effects widened: adds write:sales.Order",
            old=[],
            new=["write:sales.Order"],
        ),
    ]


def test_added_schedule_is_for_review() -> None:
    assert diff_job(job(), job(schedule=EVERY_15M)) == [
        change("review", "schedule_added", SUBJECT, "schedule added: every 15m", new=EVERY_15M),
    ]


def test_removed_schedule_is_for_review() -> None:
    assert diff_job(job(schedule=DAILY_SAIGON), job()) == [
        change(
            "review",
            "schedule_removed",
            SUBJECT,
            "schedule removed (was daily_at 03:00 in Asia/Ho_Chi_Minh); no more ticks are enqueued",
            old=DAILY_SAIGON,
        ),
    ]


def test_changed_schedule_is_for_review() -> None:
    assert diff_job(job(schedule=EVERY_15M), job(schedule=EVERY_30M)) == [
        change(
            "review",
            "schedule_changed",
            SUBJECT,
            "schedule changed from every 15m to every 30m",
            old=EVERY_15M,
            new=EVERY_30M,
        ),
    ]


def test_changed_timezone_is_its_own_change_naming_both_zones() -> None:
    assert diff_job(job(schedule=DAILY_SAIGON), job(schedule=DAILY_PARIS)) == [
        change(
            "review",
            "schedule_timezone_changed",
            SUBJECT,
            "schedule timezone changed from Asia/Ho_Chi_Minh to Europe/Paris; "
            "wall-clock ticks fire at other instants",
            old="Asia/Ho_Chi_Minh",
            new="Europe/Paris",
        ),
    ]


def test_changed_time_and_timezone_are_two_changes() -> None:
    assert diff_job(job(schedule=DAILY_SAIGON), job(schedule=DAILY_PARIS_4)) == [
        change(
            "review",
            "schedule_changed",
            SUBJECT,
            "schedule changed from daily_at 03:00 in Asia/Ho_Chi_Minh "
            "to daily_at 04:00 in Europe/Paris",
            old=DAILY_SAIGON,
            new=DAILY_PARIS_4,
        ),
        change(
            "review",
            "schedule_timezone_changed",
            SUBJECT,
            "schedule timezone changed from Asia/Ho_Chi_Minh to Europe/Paris; "
            "wall-clock ticks fire at other instants",
            old="Asia/Ho_Chi_Minh",
            new="Europe/Paris",
        ),
    ]


def test_schedule_rewritten_with_the_same_fingerprint_is_safe() -> None:
    assert diff_job(job(schedule=EVERY_15M), job(schedule=EVERY_900S)) == [
        change(
            "safe",
            "schedule_rewritten",
            SUBJECT,
            "schedule rewritten from every 15m to every 900s; same fingerprint, same ticks",
            old=EVERY_15M,
            new=EVERY_900S,
        ),
    ]


def test_cross_company_turned_on_is_for_review_and_off_is_safe() -> None:
    on = "cross_company turned on; it may now enqueue for and read across companies"
    assert diff_job(job(), job(cross_company=True)) == [
        change("review", "cross_company_enabled", SUBJECT, on, old=False, new=True),
    ]
    assert diff_job(job(cross_company=True), job()) == [
        change("safe", "cross_company_disabled", SUBJECT, "cross_company turned off", True, False),
    ]


def test_lowered_max_attempts_is_for_review_and_raised_is_safe() -> None:
    assert diff_job(job(max_attempts=20), job(max_attempts=5)) == [
        change(
            "review",
            "max_attempts_lowered",
            SUBJECT,
            "max_attempts lowered from 20 to 5; failing runs get fewer retries",
            old=20,
            new=5,
        ),
    ]
    assert diff_job(job(max_attempts=8), job(max_attempts=9)) == [
        change("safe", "max_attempts_raised", SUBJECT, "max_attempts raised from 8 to 9", 8, 9),
    ]


def test_lowered_timeout_is_for_review_and_raised_is_safe() -> None:
    assert diff_job(job(timeout_ms=60000), job(timeout_ms=30000)) == [
        change(
            "review",
            "timeout_ms_lowered",
            SUBJECT,
            "timeout_ms lowered from 60000 to 30000; runs that took longer will now time out",
            old=60000,
            new=30000,
        ),
    ]
    assert diff_job(job(timeout_ms=1000), job(timeout_ms=2000)) == [
        change(
            "safe", "timeout_ms_raised", SUBJECT, "timeout_ms raised from 1000 to 2000", 1000, 2000
        ),
    ]


def test_changed_queue_is_for_review() -> None:
    assert diff_job(job(queue="default"), job(queue="mail")) == [
        change(
            "review",
            "job_queue_changed",
            SUBJECT,
            "queue changed from default to mail; rows already queued stay on default",
            old="default",
            new="mail",
        ),
    ]


def test_priority_backoff_handler_and_idempotent_changes_are_safe() -> None:
    before = job()
    after = job(priority=-1, backoff="custom", handler="app.sales:send_v2", idempotent=False)
    assert diff_job(before, after) == [
        change(
            "safe",
            "backoff_changed",
            SUBJECT,
            "backoff changed from default to custom",
            "default",
            "custom",
        ),
        change(
            "safe",
            "handler_changed",
            SUBJECT,
            "handler changed from app.sales:send to app.sales:send_v2",
            old="app.sales:send",
            new="app.sales:send_v2",
        ),
        change(
            "safe",
            "idempotent_changed",
            SUBJECT,
            "idempotent changed from true to false",
            old=True,
            new=False,
        ),
        change("safe", "priority_changed", SUBJECT, "priority changed from 0 to -1", 0, -1),
    ]


def test_a_change_of_declared_tags_is_safe() -> None:
    assert diff_job(job(tags=["billing"]), job(tags=["billing"])) == []
    assert diff_job(job(), job(tags=["billing"])) == [
        change(
            "safe",
            "tags_changed",
            SUBJECT,
            "tags changed from none to billing",
            old=[],
            new=["billing"],
        )
    ]
