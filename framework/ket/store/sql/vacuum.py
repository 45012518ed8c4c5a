"""VACUUM of the jobs table on PostgreSQL, when enough dead row versions piled up.

Every claim and every settlement leaves the job's previous row version dead, and its entry in
`ket_jobs_runnable` with it. A claim's index scan starts at the front of the queue, where the
claimed jobs' entries are: PostgreSQL marks them dead as it passes (so it no longer visits their
rows), but it still reads every index page that holds them until a VACUUM deletes them. Draining
a 200,000-job backlog, a 10-job claim had read 1,200 index pages by the end, against a handful
right after a VACUUM. Autovacuum comes at most once a minute (`autovacuum_naptime`), and waits
for a fifth of the table to be dead by default, so the worker asks for one itself.

VACUUM cannot run inside a transaction, so it runs on an autocommit connection. Only the table's
owner or the database's may vacuum it: for any other role the statement would do nothing but
warn, so the request answers `not_permitted` instead of running it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from ket.store.sql import statement as stmt
from ket.store.sql.fetch import Rows
from ket.store.types import OpenTransaction, Vacuum, Vacuumed

_TABLE = "ket_jobs"


@dataclass(frozen=True)
class VacuumStatements:
    """The counters of the jobs table and who may vacuum it; the VACUUM itself."""

    state: Any  # parameter `table`
    run: Any
    open_transactions: Any  # parameter `seconds`: open longer than that, oldest first


@cache
def statements(dialect: str) -> VacuumStatements:
    """The VACUUM statements (PostgreSQL's; another dialect never runs them)."""
    from sqlalchemy import text

    # The counters and who may vacuum: the table's owner or the database's (PostgreSQL 12-17;
    # a role given MAINTAIN on PostgreSQL 17 is not recognised and is answered not_permitted).
    state = text(
        """SELECT s.n_dead_tup AS dead, s.n_live_tup AS live,
            s.vacuum_count + s.autovacuum_count AS vacuums,
            pg_has_role(c.relowner, 'USAGE') OR pg_has_role(d.datdba, 'USAGE') AS permitted
        FROM pg_class AS c
        JOIN pg_stat_all_tables AS s ON s.relid = c.oid
        JOIN pg_database AS d ON d.datname = current_database()
        WHERE c.oid = to_regclass(:table)"""
    )
    # SKIP_LOCKED: a vacuum of the table already running (another worker's, autovacuum's) does
    # the work, so skip rather than queue behind it. INDEX_CLEANUP ON: by default PostgreSQL
    # skips the indexes when under 2 % of the table's pages hold dead rows, which in a large
    # table leaves the very entries the claim walks past. TRUNCATE OFF: giving empty pages at
    # the end back to the system takes a lock that would stop every claim meanwhile.
    run = text(f"VACUUM (SKIP_LOCKED, INDEX_CLEANUP ON, TRUNCATE OFF) {_TABLE}")
    # Transactions on this database open for long: what keeps a vacuum from removing dead rows
    # (only other roles' backends this role may see; pg_read_all_stats sees every one). No query
    # text: it may quote a job's payload.
    open_transactions = text(
        """SELECT pid, EXTRACT(EPOCH FROM clock_timestamp() - xact_start)::float8 AS seconds,
            state, application_name AS application
        FROM pg_stat_activity
        WHERE datname = current_database() AND pid <> pg_backend_pid()
            AND xact_start < clock_timestamp() - make_interval(secs => :seconds)
        ORDER BY xact_start
        LIMIT 10"""
    )
    return VacuumStatements(state=state, run=run, open_transactions=open_transactions)


@dataclass(frozen=True, kw_only=True, slots=True)
class _TableState:
    dead: int
    live: int
    vacuums: int
    permitted: bool


async def _state(rows: Rows) -> _TableState | None:
    found = await rows.rows(stmt.VACUUM_STATE, {"table": _TABLE})
    if not found:  # no jobs table here (not migrated): nothing to reclaim
        return None
    row = found[0]
    return _TableState(
        dead=row.dead, live=row.live, vacuums=row.vacuums, permitted=bool(row.permitted)
    )


async def vacuum_jobs(rows: Rows, vacuum: Vacuum) -> Vacuumed:
    """Vacuum `ket_jobs` if it is due and allowed; `rows` must be in autocommit mode."""
    before = await _state(rows)
    if before is None:
        return Vacuumed(outcome="not_due")
    if not before.permitted:
        return Vacuumed(outcome="not_permitted", dead_before=before.dead)
    if before.dead < vacuum.threshold + vacuum.scale_factor * before.live:
        return Vacuumed(outcome="not_due", dead_before=before.dead, dead_after=before.dead)
    await rows.rows(stmt.VACUUM_RUN)
    after = await _state(rows)
    if after is None or after.vacuums == before.vacuums:  # skipped: another vacuum was running
        return Vacuumed(outcome="not_due", dead_before=before.dead, dead_after=before.dead)
    return Vacuumed(outcome="vacuumed", dead_before=before.dead, dead_after=after.dead)


async def table_health(
    rows: Rows, long_seconds: float
) -> tuple[int | None, int | None, tuple[OpenTransaction, ...]]:
    """The jobs table's dead and live row versions, and the transactions open on the database
    for more than `long_seconds` (PostgreSQL)."""
    state = await _state(rows)
    found = await rows.rows(stmt.VACUUM_OPEN_TRANSACTIONS, {"seconds": long_seconds})
    open_ = tuple(
        OpenTransaction(
            pid=row.pid,
            seconds=float(row.seconds),
            state=row.state,
            application=row.application or None,
        )
        for row in found
    )
    if state is None:
        return None, None, open_
    return state.dead, state.live, open_
