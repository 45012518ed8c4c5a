"""SqlStore: the job store on PostgreSQL (psycopg 3, async) and SQLite (aiosqlite).

A store is a session (capabilities/session.py: its connections, its clock, its one wake path)
and one class per capability of the store contract (ket.store.contract), each in a module of
its own under capabilities/:

| module                  | class                  | capability (contract)                       |
|-------------------------|------------------------|---------------------------------------------|
| session.py              | SqlSession             | open, migrate, now, close; the wake path    |
| jobs.py                 | SqlJobs                | JobStore: insert, claim, settle, leases     |
| schedules.py            | SqlSchedules           | JobStore's ticks, ScheduleControl           |
| queries.py              | SqlQueries             | QueryableStore                              |
| bulk.py                 | SqlBulk                | BulkStore                                   |
| reruns.py               | SqlReruns              | RerunStore                                  |
| audit.py                | SqlAuditLog            | AuditLog                                    |
| dashboard_sessions.py   | SqlDashboardSessions   | SessionStore                                |
| ledger.py               | SqlSentLedger          | SentLedger                                  |
| vacuum.py               | SqlVacuum              | VacuumStore                                 |
| records.py              | SqlRecordStore         | RecordStore (the app's model rows)          |
| transactions.py         | SqlTransactions        | TransactionalStore                          |
| push.py                 | SqlPush                | PushStore                                   |
| paced.py                | SqlPacing              | PacedStore                                  |
| queues.py               | SqlQueueControl        | QueueControl (paused queues)                |
| minutes.py              | SqlMinutes             | MinuteStore (the dashboard's charts)        |
| steps.py                | SqlSteps               | StepStore (durable steps, ctx.step)         |

The statements themselves live beside them in ket.store.sql (statement.py, insert.py, bulk.py,
...). On PostgreSQL every operation a worker runs goes through the lane (lane.py: plain psycopg
connections running the statements' generated text), and the SQLAlchemy engine is made on first
use (model rows, a caller's transaction, operator commands, migrations): a worker whose handlers
use neither `ctx.db` nor `ctx.tx` never imports SQLAlchemy. SQLite has no lane: its engine is
made at open.
"""

from __future__ import annotations

from ket.store.sql.capabilities.audit import SqlAuditLog
from ket.store.sql.capabilities.bulk import SqlBulk
from ket.store.sql.capabilities.dashboard_sessions import SqlDashboardSessions
from ket.store.sql.capabilities.jobs import SqlJobs, insert_on
from ket.store.sql.capabilities.ledger import SqlSentLedger
from ket.store.sql.capabilities.minutes import SqlMinutes
from ket.store.sql.capabilities.paced import SqlPacing
from ket.store.sql.capabilities.push import SqlPush
from ket.store.sql.capabilities.queries import SqlQueries
from ket.store.sql.capabilities.queues import SqlQueueControl
from ket.store.sql.capabilities.reruns import SqlReruns
from ket.store.sql.capabilities.schedules import SqlSchedules
from ket.store.sql.capabilities.session import wakeups_of
from ket.store.sql.capabilities.steps import SqlSteps
from ket.store.sql.capabilities.transactions import SqlTransaction, SqlTransactions
from ket.store.sql.capabilities.vacuum import SqlVacuum


class SqlStore(
    SqlJobs,
    SqlSchedules,
    SqlQueueControl,
    SqlMinutes,
    SqlQueries,
    SqlBulk,
    SqlReruns,
    SqlSteps,
    SqlAuditLog,
    SqlDashboardSessions,
    SqlSentLedger,
    SqlVacuum,
    SqlTransactions,
    SqlPush,
    SqlPacing,
):
    """Jobs in a PostgreSQL or SQLite database: every capability of the store contract.

    Open one with `await SqlStore.open(url)`; `clock` replaces the database's time (tests). On
    PostgreSQL the operations of a worker run on a lane of plain psycopg connections (lane.py);
    the SQLAlchemy engine serves the rest and is made on first use.
    """


__all__ = ["SqlStore", "SqlTransaction", "insert_on", "wakeups_of"]
