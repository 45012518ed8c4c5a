"""The context a handler sees: the job, its abort signal, effect-checked operations."""

from ket.context.blocking import Blocking
from ket.context.context import FunctionContext, JobContext
from ket.context.db import Database
from ket.context.info import JobInfo, ScheduleInfo
from ket.context.jobs import Jobs
from ket.context.log import ContextLog
from ket.context.signal import AbortSignal
from ket.context.storage import Storage
from ket.context.transport import Transport
from ket.context.tx import Transactor, TxContext, build_db_and_tx

__all__ = [
    "AbortSignal",
    "Blocking",
    "ContextLog",
    "Database",
    "FunctionContext",
    "JobContext",
    "JobInfo",
    "Jobs",
    "ScheduleInfo",
    "Storage",
    "Transactor",
    "Transport",
    "TxContext",
    "build_db_and_tx",
]
