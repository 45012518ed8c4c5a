"""PostgreSQL's limited claim (the function ket_limited_claim) keeps the rule of
ket.store.admission, which SQLite and the memory store run: for any limits, running attempts,
recorded starts and waiting jobs, it claims the same jobs and says the same of contention and of
when a held rate frees."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from psycopg import sql
from sqlalchemy import create_engine

from ket.store.admission import Candidate, Counts, Start, kept_since, longest_period
from ket.store.sql import migrate
from ket.store.sql.limit import array_literal
from ket.store.sql.postgres_text import TEXT
from ket.store.types import ClaimLimits, JobLimits, Rate

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
NAMES = ("a", "b")


@pytest.fixture(scope="module")
def database(postgres_url: str) -> Iterator[psycopg.Connection[Any]]:
    """One migrated schema for every example, on one autocommit connection."""
    schema = f"ket_test_limited_rule_{uuid.uuid4().hex[:8]}"  # one per test process
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
        admin.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    engine = create_engine(
        postgres_url.replace("postgresql://", "postgresql+psycopg://"),
        connect_args={"options": f"-c search_path={schema}"},
    )
    with engine.begin() as connection:
        migrate(connection)
    engine.dispose()
    try:
        with psycopg.connect(
            postgres_url, autocommit=True, options=f"-c search_path={schema}"
        ) as connection:
            yield connection
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


rates = st.builds(Rate, limit=st.integers(1, 4), period_seconds=st.sampled_from([1.0, 2.5]))
job_limits = st.builds(
    JobLimits,
    concurrency=st.none() | st.integers(1, 3),
    rate=st.none() | rates,
)
claim_limits = st.builds(
    ClaimLimits,
    jobs=st.dictionaries(st.sampled_from(NAMES), job_limits, min_size=1, max_size=2),
    concurrency=st.none() | st.integers(1, 6),
    rate=st.none() | rates,
)
# a job: its name, its concurrency and rate key (an index, or none), priority, running or not
jobs = st.lists(
    st.tuples(
        st.sampled_from(NAMES),
        st.none() | st.integers(0, 1),
        st.none() | st.integers(0, 1),
        st.integers(0, 1),
        st.booleans(),
    ),
    min_size=1,
    max_size=12,
)
# a start recorded: its scope (a name and key index, or None: the queue's), age in ms, n
starts = st.lists(
    st.tuples(
        st.none() | st.tuples(st.sampled_from(NAMES), st.integers(0, 1)),
        st.integers(1, 3_000),
        st.integers(1, 2),
    ),
    max_size=8,
)


def _key(name: str, index: int | None) -> str | None:
    return None if index is None else f'{name}|["k{index}"]'


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(limits=claim_limits, waiting=jobs, started=starts, limit=st.integers(1, 5))
# a key's second job in one claim: held by its concurrency limit, and by its rate (which frees
# a period after the claim's own start, none being recorded before)
@example(
    limits=ClaimLimits(jobs={"a": JobLimits(concurrency=1)}),
    waiting=[("a", 0, None, 0, False), ("a", 0, None, 0, False)],
    started=[],
    limit=5,
)
@example(
    limits=ClaimLimits(jobs={"a": JobLimits(rate=Rate(limit=1, period_seconds=1.0))}),
    waiting=[("a", None, 0, 0, False), ("a", None, 0, 0, False), ("b", None, 0, 0, False)],
    started=[],
    limit=5,
)
def test_the_function_admits_what_the_rule_admits(
    database: psycopg.Connection[Any],
    limits: ClaimLimits,
    waiting: list[tuple[str, int | None, int | None, int, bool]],
    started: list[tuple[tuple[str, int] | None, int, int]],
    limit: int,
) -> None:
    database.execute("TRUNCATE ket_jobs, ket_rate_starts, ket_job_errors")
    rows = []
    for n, (name, concurrency, rate, priority, running) in enumerate(waiting):
        row = database.execute(
            "INSERT INTO ket_jobs (name, queue, state, priority, payload, payload_version, "
            "attempt, max_attempts, run_at, enqueued_at, fence, cancel_requested, "
            "concurrency_key, rate_key) VALUES (%s, 'q', %s, %s, '{}', 1, %s, 3, %s, %s, 0, "
            "false, %s, %s) RETURNING id",
            (
                name,
                "executing" if running else "available",
                priority,
                int(running),
                NOW - timedelta(seconds=10 - n % 3),
                NOW - timedelta(seconds=20),
                _key(name, concurrency),
                _key(name, rate),
            ),
        ).fetchone()
        assert row is not None
        rows.append((row[0], name, concurrency, rate, priority, running, n % 3))
    recorded = [
        Start(
            scope="*" if scope is None else str(_key(*scope)),
            at=NOW - timedelta(milliseconds=age),
            n=n,
        )
        for scope, age, n in started
    ]
    for start in recorded:
        database.execute(
            "INSERT INTO ket_rate_starts (queue, scope, at, n) VALUES ('q', %s, %s, %s)",
            (start.scope, start.at, start.n),
        )

    # the rule, as SQLite's claim applies it (sql/limit.py)
    since = kept_since(limits, NOW)
    executing = Counter(_key(name, c) for _, name, c, _, _, run, _ in rows if run)
    counts = Counts.read(limits, NOW, executing.items(), [s for s in recorded if s.at > since])
    full_concurrency, full_rate, queue_full = counts.full()
    due = sorted(
        (row for row in rows if not row[5]),
        key=lambda row: (row[4], NOW - timedelta(seconds=10 - row[6]), row[0]),
    )
    candidates = [
        Candidate(id=i, name=name, concurrency_key=_key(name, c), rate_key=_key(name, r))
        for i, name, c, r, _, _, _ in due
        if _key(name, c) not in full_concurrency and _key(name, r) not in full_rate
    ][:limit]
    expected = counts.admit([] if queue_full else candidates, limit)
    expected.contended = expected.contended or bool(full_concurrency)

    # the function
    names = sorted(limits.jobs)
    rules = [limits.jobs[name] for name in names]
    query = TEXT["query.limited_claim"].text
    found = database.execute(
        query,
        {
            "p_queue": "q",
            "limit": limit,
            "p_worker_id": "w",
            "now": NOW,
            "lease_s": 30.0,
            "lease_at": None,
            "p_names": names,
            "p_concurrency": [rule.concurrency for rule in rules],
            "p_rate": [None if rule.rate is None else rule.rate.limit for rule in rules],
            "p_period": [None if rule.rate is None else rule.rate.period_seconds for rule in rules],
            "p_queue_concurrency": limits.concurrency,
            "p_queue_rate": None if limits.rate is None else limits.rate.limit,
            "p_queue_period": None if limits.rate is None else limits.rate.period_seconds,
        },
    ).fetchall()
    *claimed, flags = found
    assert sorted(row[0] for row in claimed) == sorted(expected.ids)
    assert (flags[-2], flags[-1]) == (expected.contended, expected.retry_at)
    # and the starts it keeps are the rule's: those that may still count, and its own added to
    # the record of their tenth of the period
    kept: Counter[tuple[str, datetime]] = Counter()
    for start in [*recorded, *counts.recorded(expected)]:
        if start.at > kept_since(limits, NOW) or not longest_period(limits):
            kept[start.scope, start.at] += start.n
    stored: Counter[tuple[str, datetime]] = Counter()
    for scope, at, n in database.execute("SELECT scope, at, n FROM ket_rate_starts"):
        stored[scope, at] += n
    assert stored == +kept


@pytest.mark.parametrize(
    "values",
    [
        ["a", "b"],
        ['quo"te', "back\\slash", "com,ma", "{brace}", "sp ace", "NULL", ""],
        [1, None, 9_223_372_036_854_775_807],
        [1.0, None, 2.5, 0.1],
    ],
)
def test_the_limits_travel_as_array_literals_the_server_reads_back_as_given(
    database: psycopg.Connection[Any], values: list[Any]
) -> None:
    kind = (
        "text"
        if isinstance(values[0], str)
        else "bigint"
        if isinstance(values[0], int)
        else "float8"
    )
    [(found,)] = database.execute(f"SELECT %s::{kind}[]", (array_literal(values),)).fetchall()
    assert found == values
