"""A claim within fleet-wide limits (the rule: ket.store.admission).

The queue's limited claims run one at a time, so that two workers never both count the same
free place. Each discards the queue's expired jobs, reads the running attempts, the due jobs
whose keys are not full and the starts within their rates' periods of the scopes they meet (a
scope found full passes its jobs over: other keys flow), admits what the limits allow and
claims those, and records their starts. The running attempts are the executing rows
themselves: an attempt gives its place back in the transaction that ends it, and one whose
worker was killed keeps it until rescue ends it.

PostgreSQL does all of it in one call of the function ket_limited_claim (migrations 11, 13 and
14), in autocommit, under a transaction-scoped advisory lock on the queue: one round trip, as
the plain claim. SQLite does it here step by step, in a transaction (the write lock it takes at
its start runs the claims one at a time), with admission.Counts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from ket.store.admission import (
    QUEUE_SCOPE,
    Admitted,
    Candidate,
    Counts,
    Start,
    kept_since,
    longest_period,
)
from ket.store.sql import statement as stmt
from ket.store.sql.fetch import Rows
from ket.store.types import ClaimLimits, JobClaim


async def limited_claim(
    rows: Rows, claim: JobClaim, limits: ClaimLimits, params: dict[str, Any], *, upkeep: bool
) -> tuple[list[Any], Admitted]:
    """Claim within `limits`; the claimed rows (as the plain claim returns them) and what was
    admitted (its `retry_at`: when a rate that held a job back frees). SQLite: with `upkeep`
    (at most once a second a queue: the store decides), it also discards the queue's expired
    jobs and forgets the starts past every period; in between, the claim's own filter keeps
    expired jobs from starting, and the old starts only cost the read. PostgreSQL's function
    does both each time (an index read when there is nothing to do)."""
    if rows.dialect == "postgresql":
        return await _limited_claim_postgres(rows, limits, params)
    queue = claim.queue
    now: datetime = params["now"]  # SQLite's instants come from Python
    if upkeep:
        await expire(rows, params)
    counts, found = await _candidates(rows, claim, limits, params)
    full_concurrency = counts.full()[0]
    admitted = counts.admit(found, claim.limit)
    admitted.contended = admitted.contended or bool(full_concurrency)
    claimed: list[Any] = []
    if admitted.ids:
        claimed = await rows.tuples(stmt.LIMIT_CLAIM, {**params, "ids": admitted.ids})
    recorded = counts.recorded(admitted)
    if recorded:
        await rows.many(
            stmt.RATE_RECORD,
            [{"p_queue": queue, "p_scope": s.scope, "p_at": s.at, "p_n": s.n} for s in recorded],
        )
    if upkeep and longest_period(limits):  # starts past every period count no more
        since = kept_since(limits, now)
        await rows.rows(stmt.RATE_FORGET, {"p_queue": queue, "p_since": since})
    return claimed, admitted


async def _candidates(
    rows: Rows, claim: JobClaim, limits: ClaimLimits, params: dict[str, Any]
) -> tuple[Counts, list[Candidate]]:
    """SQLite: what runs and started, and the candidates, as admission.Counts reads them, with
    the starts of the rate scopes the candidates meet only (and the queue's own), not every
    start of the period. A scope found full passes its jobs over: the candidates are read
    again past it (other keys flow), until the scopes they meet are all read."""
    queue, now = claim.queue, params["now"]
    since = kept_since(limits, now)
    running = [(key, n) for key, _, n in await rows.tuples(stmt.LIMIT_RUNNING, {"p_queue": queue})]
    starts: list[Start] = []
    read: set[str] = set()

    async def read_starts(scopes: set[str]) -> Counts:
        found = await rows.tuples(
            stmt.LIMIT_STARTS, {"p_queue": queue, "p_since": since, "scopes": sorted(scopes)}
        )
        starts.extend(Start(scope=scope, at=at, n=n) for scope, at, n in found)
        read.update(scopes)
        return Counts.read(limits, now, running, starts)

    if limits.rate is None:
        counts = Counts.read(limits, now, running, starts)
    else:
        counts = await read_starts({QUEUE_SCOPE})
    while True:
        full_concurrency, full_rate, queue_full = counts.full()
        if queue_full:
            return counts, []
        candidates = [
            Candidate(*row)
            for row in await rows.tuples(
                stmt.LIMIT_CANDIDATES,
                {
                    **params,
                    "full_concurrency": full_concurrency,
                    "full_rate": full_rate,
                    "limit": claim.limit,
                },
            )
        ]
        wanted = {
            job.rate_key
            for job in candidates
            if job.rate_key
            and job.rate_key not in read
            and (rules := limits.jobs.get(job.name)) is not None
            and rules.rate is not None
        }
        if not wanted:
            return counts, candidates
        counts = await read_starts(wanted)
        if not wanted & set(counts.full()[1]):  # none of them full: the same candidates
            return counts, candidates


async def _limited_claim_postgres(
    rows: Rows, limits: ClaimLimits, params: dict[str, Any]
) -> tuple[list[Any], Admitted]:
    """The claim as one call of ket_limited_claim: the limits as arrays, by job name."""
    names = sorted(limits.jobs)
    jobs = [limits.jobs[name] for name in names]
    queue_rate = limits.rate
    found = await rows.tuples(
        stmt.LIMITED_CLAIM,
        {
            **params,
            # the arrays as PostgreSQL's array literals, which the server casts: psycopg's
            # dumping of four lists cost a third of the call's CPU in the worker (a drain
            # claims a few jobs at a time, so per job it showed)
            "p_names": array_literal(names),
            "p_concurrency": array_literal([job.concurrency for job in jobs]),
            "p_rate": array_literal([None if job.rate is None else job.rate.limit for job in jobs]),
            "p_period": array_literal(
                [None if job.rate is None else job.rate.period_seconds for job in jobs]
            ),
            "p_queue_concurrency": limits.concurrency,
            "p_queue_rate": None if queue_rate is None else queue_rate.limit,
            "p_queue_period": None if queue_rate is None else queue_rate.period_seconds,
        },
    )
    *claimed, last = found  # every row, and the last (no job) alone, says what was admitted
    admitted = Admitted(
        ids=[row[0] for row in claimed], retry_at=last[-1], contended=bool(last[-2])
    )
    return [row[:-2] for row in claimed], admitted


def array_literal(values: Sequence[str | int | float | None]) -> str:
    """`values` as a PostgreSQL array literal: text quoted (backslash and double quote
    escaped), numbers as Python writes them (which PostgreSQL reads), None as NULL."""
    items = []
    for value in values:
        if value is None:
            items.append("NULL")
        elif isinstance(value, str):
            items.append('"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"')
        else:
            items.append(repr(value))
    return "{" + ",".join(items) + "}"


async def counts_of(rows: Rows, queue: str, limits: ClaimLimits, now: datetime) -> Counts:
    """What runs and what started of `queue` at `now`, as a limited claim reads them."""
    since = kept_since(limits, now)
    read = await rows.tuples(stmt.LIMIT_COUNTS, {"p_queue": queue, "p_since": since})
    return Counts.read(
        limits,
        now,
        ((key, n) for key, at, n in read if at is None),
        (Start(scope=key, at=at, n=n) for key, at, n in read if at is not None),
    )


async def held_back(rows: Rows, limits: Mapping[str, ClaimLimits], now: datetime) -> dict[str, int]:
    """By queue, how many due jobs its limits hold back now (for stats: no lock, a moment's
    view)."""
    held: dict[str, int] = {}
    for queue, queue_limits in sorted(limits.items()):
        full_concurrency, full_rate, queue_full = (
            await counts_of(rows, queue, queue_limits, now)
        ).full()
        [(n,)] = await rows.tuples(
            stmt.LIMIT_WAITING,
            {
                "now": now,
                "p_queue": queue,
                "p_queue_full": queue_full,
                "full_concurrency": full_concurrency,
                "full_rate": full_rate,
            },
        )
        held[queue] = int(n)
    return held


async def expire(rows: Rows, params: dict[str, Any]) -> None:
    """Up to `limit` of the queue's expired jobs discarded, each with its record `expired` (the
    plain claim does it in its own statement on PostgreSQL; SQLite and limited claims here)."""
    expired = await rows.tuples(stmt.EXPIRE, params)
    if expired:
        await rows.many(
            stmt.EXPIRED_ERRORS,
            [{"now": params["now"], "p_job_id": i, "p_attempt": a} for i, a in expired],
        )
