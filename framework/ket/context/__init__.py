"""The context a handler sees: the job, its abort signal, effect-checked operations."""

from ket.context.blocking import Blocking
from ket.context.context import JobContext
from ket.context.info import JobInfo, ScheduleInfo
from ket.context.jobs import Jobs
from ket.context.log import ContextLog
from ket.context.signal import AbortSignal

__all__ = [
    "AbortSignal",
    "Blocking",
    "ContextLog",
    "JobContext",
    "JobInfo",
    "Jobs",
    "ScheduleInfo",
]
