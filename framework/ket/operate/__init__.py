"""What operators do to a tenant's jobs, shared by `ket jobs` and the dashboard.

Retry and cancel, of one job or of every job a filter selects, a rerun of a finished job and an
operator's enqueue, each written to the tenant's audit log (and logged under `ket.audit`) with
who did it; the schedules as an operator sees them; and the queues, with their pause. The CLI,
the dashboard and `ket serve`'s operator API are thin adapters over these functions, so a retry
or a pause from any of them changes the tenant the same way and leaves the same trace.
"""

from ket.operate.action import Actor, cancel_job, enqueue_traced, retry_job
from ket.operate.bulk import BulkOutcome, apply_bulk, count_bulk, selection_of
from ket.operate.queue import (
    QueueRow,
    declared_queue,
    declared_queues,
    pause_queue,
    queue_pauses,
    queue_rows,
    resumable_queue,
    resume_queue,
)
from ket.operate.rerun import rerun_job, rerun_text
from ket.operate.schedule import (
    ScheduleRow,
    pause_schedule,
    run_schedule_now,
    schedule_rows,
    scheduled_job,
)

__all__ = [
    "Actor",
    "BulkOutcome",
    "QueueRow",
    "ScheduleRow",
    "apply_bulk",
    "cancel_job",
    "count_bulk",
    "declared_queue",
    "declared_queues",
    "enqueue_traced",
    "pause_queue",
    "pause_schedule",
    "queue_pauses",
    "queue_rows",
    "rerun_job",
    "rerun_text",
    "resumable_queue",
    "resume_queue",
    "retry_job",
    "run_schedule_now",
    "schedule_rows",
    "scheduled_job",
    "selection_of",
]
