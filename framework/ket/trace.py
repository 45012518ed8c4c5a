"""OpenTelemetry traces (the `ket-jobs[otel]` extra): a span for each enqueue and each attempt.

Turned on with `KET_OTEL=1` in every process that enqueues or runs jobs. An enqueue makes a
short PRODUCER span, `enqueue <job>`, a child of whatever span is current (the web request that
enqueued, the handler of another job), and stores its W3C context with the job. An attempt runs
in a CONSUMER span, `run <job>`, whose parent is that stored context: the request, the enqueue
and every attempt of the job share one trace, however long the job waited and whichever worker
ran it. The spans go wherever the process's tracer provider sends them: ket configures no
exporter.

Off (the default), nothing here is imported on the job path and a job stores no context.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from ket.errors import KetError

if TYPE_CHECKING:
    from ket.store.types import ClaimedJob

VARIABLE = "KET_OTEL"
TRACER = "ket"


def enabled(environ: Mapping[str, str] | None = None) -> bool:
    """Whether `KET_OTEL` asks for traces; KetError, saying what to install, when it does and
    OpenTelemetry is missing."""
    value = (os.environ if environ is None else environ).get(VARIABLE, "").strip()
    if value in ("", "0"):
        return False
    if value != "1":
        raise KetError(f"{VARIABLE} must be 1 (traces on) or 0, got {value!r}")
    try:
        import opentelemetry.trace  # noqa: F401
    except ImportError:
        raise KetError(f"{VARIABLE}=1 needs OpenTelemetry: pip install 'ket-jobs[otel]'") from None
    return True


def enqueue_context(name: str, queue: str, tenant: str | None = None) -> dict[str, str] | None:
    """Record the enqueue of job `name` as a span; the W3C context a job carries to its runs."""
    from opentelemetry import propagate, trace

    tracer = trace.get_tracer(TRACER)
    attributes = _attributes(name, queue, tenant)
    with tracer.start_as_current_span(
        f"enqueue {name}", kind=trace.SpanKind.PRODUCER, attributes=attributes
    ):
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
    return carrier or None


@contextmanager
def attempt_span(job: ClaimedJob, tenant: str) -> Iterator[Any]:
    """The span of one attempt of `job`, current while it runs, a child of its enqueue."""
    from opentelemetry import propagate, trace

    parent = propagate.extract(job.trace_context) if job.trace_context else None
    attributes = _attributes(job.name, job.queue, tenant)
    attributes.update({"messaging.message.id": str(job.id), "ket.job.attempt": job.attempt})
    with trace.get_tracer(TRACER).start_as_current_span(
        f"run {job.name}",
        context=parent,
        kind=trace.SpanKind.CONSUMER,
        attributes=attributes,
        record_exception=False,  # the outcome says what happened, redacted
        set_status_on_exception=False,
    ) as span:
        yield span


def record_outcome(span: Any, outcome: str, error: str | None) -> None:
    """Mark the attempt's span with its outcome; an error status for what did not complete."""
    from opentelemetry.trace import Status, StatusCode

    span.set_attribute("ket.job.outcome", outcome)
    if outcome in ("failed", "discarded"):
        span.set_status(Status(StatusCode.ERROR, error))


def _attributes(name: str, queue: str, tenant: str | None) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "messaging.system": "ket",
        "messaging.destination.name": queue,
        "ket.job.name": name,
    }
    if tenant is not None:
        attributes["ket.tenant"] = tenant
    return attributes
