"""Rules for flow control: a job's expiry, the concurrency and rate limits of a job or a queue, and
a job's uniqueness window and debounce.

What a person should look at is whatever may hold back or throw away work that was flowing: an
expiry added or shortened discards queued jobs that wait longer; a limit added or tightened makes
jobs wait; a limit removed lets loose what it protected; a key changed counts running attempts
under another key. Lengthening, loosening and removing an expiry only let more work through.
A uniqueness window skips the work of the enqueues that join an earlier job, so any change to
what joins is for review; a debounce makes jobs wait, so only a shorter wait is safe.
"""

from __future__ import annotations

from collections.abc import Sequence

from ket.diff.field import dump
from ket.diff.rule import Finding
from ket.manifest.model import (
    ConcurrencyLimitEntry,
    DebounceEntry,
    JobEntry,
    QueueLimitsEntry,
    RateLimitEntry,
    UniqueEntry,
)


def expiry_findings(old: JobEntry, new: JobEntry) -> list[Finding]:
    """`expires_in` added or shortened (review), removed, lengthened or rewritten (safe)."""
    before, after = old.expires_in, new.expires_in
    was, now = old.expires_in_seconds, new.expires_in_seconds
    if before == after:
        return []
    if was is None:
        message = (
            f"expires_in added: {after}; queued jobs not started within {after} of their run "
            "time will be discarded"
        )
        return [Finding(kind="expires_in_added", message=message, new=after)]
    if now is None:
        message = f"expires_in removed (was {before}); jobs wait to start however long it takes"
        return [Finding(kind="expires_in_removed", message=message, old=before)]
    if now < was:
        message = (
            f"expires_in shortened from {before} to {after}; queued jobs waiting longer than "
            f"{after} will be discarded"
        )
        kind = "expires_in_shortened"
    elif now > was:
        message, kind = f"expires_in lengthened from {before} to {after}", "expires_in_lengthened"
    else:
        message = f"expires_in rewritten from {before} to {after}; same duration"
        kind = "expires_in_restated"
    return [Finding(kind=kind, message=message, old=before, new=after)]


def job_limit_findings(old: JobEntry, new: JobEntry) -> list[Finding]:
    """A job's concurrency and rate limits compared."""
    return [
        *concurrency_findings(old.concurrency_limit, new.concurrency_limit),
        *rate_findings(old.rate_limit, new.rate_limit),
    ]


def queue_limit_findings(old: QueueLimitsEntry, new: QueueLimitsEntry) -> list[Finding]:
    """A queue's concurrency and rate limits compared, as a job's are."""
    return [
        *concurrency_findings(old.concurrency_limit, new.concurrency_limit),
        *rate_findings(old.rate_limit, new.rate_limit),
    ]


def concurrency_findings(
    old: ConcurrencyLimitEntry | None, new: ConcurrencyLimitEntry | None
) -> list[Finding]:
    """Added, lowered, removed or re-keyed (review); raised (safe)."""
    if old == new:
        return []
    if old is None or new is None:
        return _added_or_removed("concurrency_limit", old, new)
    found = _key_changed("concurrency_limit", old, new)
    shown = f"from {_at_once(old)} to {_at_once(new)}"
    if new.limit < old.limit:
        message = f"concurrency_limit lowered {shown}; jobs over it wait"
        found.append(_finding("concurrency_limit_tightened", message, old, new))
    elif new.limit > old.limit:
        message = f"concurrency_limit raised {shown}"
        found.append(_finding("concurrency_limit_loosened", message, old, new))
    return found


def rate_findings(old: RateLimitEntry | None, new: RateLimitEntry | None) -> list[Finding]:
    """Added, tightened, reshaped, removed or re-keyed (review); loosened or rewritten (safe).

    A rate is tighter when it allows no more starts in a period no shorter (fewer starts a
    second, or the same spread wider), looser the other way round. A change that is neither,
    such as 60 per 1m to 1 per 1s, moves the bursts it allows: a person weighs that.
    """
    if old == new:
        return []
    if old is None or new is None:
        return _added_or_removed("rate_limit", old, new)
    found = _key_changed("rate_limit", old, new)
    shown = f"from {_per_period(old)} to {_per_period(new)}"
    more = (new.limit >= old.limit, new.seconds <= old.seconds)
    fewer = (new.limit <= old.limit, new.seconds >= old.seconds)
    if (new.limit, new.seconds) == (old.limit, old.seconds):
        if old.period != new.period:
            message = f"rate_limit rewritten {shown}; same rate"
            found.append(_finding("rate_limit_restated", message, old, new))
    elif all(fewer):
        message = f"rate_limit tightened {shown}; jobs over it wait"
        found.append(_finding("rate_limit_tightened", message, old, new))
    elif all(more):
        message = f"rate_limit loosened {shown}"
        found.append(_finding("rate_limit_loosened", message, old, new))
    else:
        before, after = old.limit / old.seconds, new.limit / new.seconds
        message = (
            f"rate_limit changed {shown} ({before:.4g} to {after:.4g} starts a second); "
            "the bursts it allows move"
        )
        found.append(_finding("rate_limit_reshaped", message, old, new))
    return found


def unique_findings(old: UniqueEntry | None, new: UniqueEntry | None) -> list[Finding]:
    """Added, removed, re-keyed, over other states, lengthened or shortened (review); the
    period rewritten (safe). Whatever changes what an enqueue joins skips work that ran, or
    runs work that was skipped."""
    if old == new:
        return []
    if new is not None and old is None:
        message = (
            f"unique added: {_window(new)}; enqueues that wrote a job may now join an earlier "
            "one, and their work is skipped"
        )
        return [Finding(kind="unique_added", message=message, new=dump(new))]
    if old is not None and new is None:
        message = (
            f"unique removed (was {_window(old)}); the duplicates it prevented are written again"
        )
        return [Finding(kind="unique_removed", message=message, old=dump(old))]
    assert old is not None and new is not None
    found: list[Finding] = []
    if old.key != new.key:
        message = (
            f"unique key changed from {_key(old.key)} to {_key(new.key)}; other enqueues are "
            "duplicates, and jobs enqueued so far hold the old key"
        )
        found.append(_finding("unique_key_changed", message, old, new))
    if old.states != new.states:
        message = (
            f"unique states changed from {_key(old.states)} to {_key(new.states)}; enqueues "
            "join jobs in other states"
        )
        found.append(_finding("unique_states_changed", message, old, new))
    shown = f"from {old.period} to {new.period}"
    if new.seconds > old.seconds:
        message = (
            f"unique period lengthened {shown}; enqueues join jobs enqueued longer ago, and "
            "more work is skipped"
        )
        found.append(_finding("unique_lengthened", message, old, new))
    elif new.seconds < old.seconds:
        message = (
            f"unique period shortened {shown}; enqueues that joined an earlier job may write "
            "one again"
        )
        found.append(_finding("unique_shortened", message, old, new))
    elif old.period != new.period:
        message = f"unique period rewritten {shown}; same window"
        found.append(_finding("unique_restated", message, old, new))
    return found


def debounce_findings(old: DebounceEntry | None, new: DebounceEntry | None) -> list[Finding]:
    """Added, removed, re-keyed or lengthened (review); shortened or rewritten (safe); its
    max_wait removed or lengthened (review), added or shortened (safe)."""
    if old == new:
        return []
    if new is not None and old is None:
        message = (
            f"debounce added: {_debounce(new)}; jobs wait {new.period} after the last enqueue "
            "of their key, and the enqueues before they start join them"
        )
        return [Finding(kind="debounce_added", message=message, new=dump(new))]
    if old is not None and new is None:
        message = (
            f"debounce removed (was {_debounce(old)}); every enqueue writes a job that runs on "
            "its own"
        )
        return [Finding(kind="debounce_removed", message=message, old=dump(old))]
    assert old is not None and new is not None
    found: list[Finding] = []
    if old.key != new.key:
        message = (
            f"debounce key changed from {_key(old.key)} to {_key(new.key)}; enqueues join "
            "other waiting jobs, and jobs waiting now were keyed otherwise"
        )
        found.append(_finding("debounce_key_changed", message, old, new))
    shown = f"from {old.period} to {new.period}"
    if new.seconds > old.seconds:
        message = f"debounce period lengthened {shown}; jobs wait longer to run"
        found.append(_finding("debounce_lengthened", message, old, new))
    elif new.seconds < old.seconds:
        message = f"debounce period shortened {shown}; jobs run sooner"
        found.append(_finding("debounce_shortened", message, old, new))
    elif old.period != new.period:
        message = f"debounce period rewritten {shown}; same wait"
        found.append(_finding("debounce_restated", message, old, new))
    found += _max_wait(old, new)
    return found


def _max_wait(old: DebounceEntry, new: DebounceEntry) -> list[Finding]:
    """A job enqueued again and again waits up to max_wait: longer when it is removed or
    lengthened (loosened: review), shorter when it is added or shortened (tightened: safe)."""
    before, after = old.max_wait, new.max_wait
    was, now = old.max_wait_seconds, new.max_wait_seconds
    if before == after:
        return []
    loosened, tightened = "debounce_max_wait_loosened", "debounce_max_wait_tightened"
    if was is None:
        message = (
            f"debounce max_wait added: {after}; a job enqueued again and again runs at most "
            f"{after} after its first enqueue"
        )
        return [_finding(tightened, message, old, new)]
    if now is None:
        message = (
            f"debounce max_wait removed (was {before}); a job enqueued again and again may "
            "wait as long as the enqueues go on"
        )
        return [_finding(loosened, message, old, new)]
    shown = f"from {before} to {after}"
    if now > was:
        message = (
            f"debounce max_wait lengthened {shown}; a job enqueued again and again waits longer"
        )
        return [_finding(loosened, message, old, new)]
    if now < was:
        message = f"debounce max_wait shortened {shown}; a job enqueued again and again runs sooner"
        return [_finding(tightened, message, old, new)]
    message = f"debounce max_wait rewritten {shown}; same wait"
    return [_finding("debounce_restated", message, old, new)]


Limit = ConcurrencyLimitEntry | RateLimitEntry


def _added_or_removed(option: str, old: Limit | None, new: Limit | None) -> list[Finding]:
    if new is not None:
        message = f"{option} added: {_describe(new)}; jobs over it wait"
        return [Finding(kind=f"{option}_added", message=message, new=dump(new))]
    assert old is not None
    message = f"{option} removed (was {_describe(old)}); what it held back is no longer held back"
    return [Finding(kind=f"{option}_removed", message=message, old=dump(old))]


def _key_changed(option: str, old: Limit, new: Limit) -> list[Finding]:
    if old.key == new.key:
        return []
    message = (
        f"{option} key changed from {_key(old.key)} to {_key(new.key)}; attempts running now "
        "were counted under the old key"
    )
    return [_finding(f"{option}_key_changed", message, old, new)]


def _finding(
    kind: str,
    message: str,
    old: Limit | UniqueEntry | DebounceEntry,
    new: Limit | UniqueEntry | DebounceEntry,
) -> Finding:
    return Finding(kind=kind, message=message, old=dump(old), new=dump(new))


def _describe(limit: Limit) -> str:
    text = _at_once(limit) if isinstance(limit, ConcurrencyLimitEntry) else _per_period(limit)
    return text + (f" for each {_key(limit.key)}" if limit.key else "")


def _window(window: UniqueEntry) -> str:
    key = f" for each {_key(window.key)}" if window.key else ""
    states = "" if window.default_states else f" over {_key(window.states)}"
    return f"{window.period}{key}{states}"


def _debounce(debounce: DebounceEntry) -> str:
    key = f" for each {_key(debounce.key)}" if debounce.key else ""
    wait = f", at most {debounce.max_wait}" if debounce.max_wait is not None else ""
    return f"{debounce.period}{key}{wait}"


def _at_once(limit: ConcurrencyLimitEntry) -> str:
    return f"{limit.limit} at once"


def _per_period(limit: RateLimitEntry) -> str:
    return f"{limit.limit} per {limit.period}"


def _key(fields: Sequence[str]) -> str:
    if not fields:
        return "none"
    return fields[0] if len(fields) == 1 else "(" + ", ".join(fields) + ")"
