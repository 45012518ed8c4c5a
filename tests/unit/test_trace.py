"""OpenTelemetry traces: a request that enqueues and the job that runs later share one trace."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from ket import define_deployment, define_job, define_module
from ket.errors import KetError
from ket.testing import create_test_deployment
from ket.trace import enabled

EXPORTER = InMemorySpanExporter()
_PROVIDER = TracerProvider()
_PROVIDER.add_span_processor(SimpleSpanProcessor(EXPORTER))
trace.set_tracer_provider(_PROVIDER)  # once per process: this module owns it

SEEN: list[int] = []  # the span id each handler ran in


def report(ctx: Any, input: Any) -> None:
    SEEN.append(trace.get_current_span().get_span_context().span_id)
    if input.fail:
        raise RuntimeError("printer on fire")


async def report_async(ctx: Any, input: Any) -> None:
    SEEN.append(trace.get_current_span().get_span_context().span_id)


APP = define_deployment(
    name="traced",
    modules=[
        define_module(
            name="t",
            jobs={
                "report": define_job(
                    idempotent=True, input={"fail": "bool"}, max_attempts=1, handler=report
                ),
                "report_async": define_job(idempotent=True, handler=report_async),
            },
        )
    ],
)


@pytest.fixture
def traced(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("KET_OTEL", "1")
    EXPORTER.clear()
    SEEN.clear()
    yield


def _spans() -> dict[str, Any]:
    return {span.name: span for span in EXPORTER.get_finished_spans()}


@pytest.mark.parametrize("job", ["t.report", "t.report_async"])
def test_the_request_the_enqueue_and_the_run_share_one_trace(traced: None, job: str) -> None:
    tracer = trace.get_tracer("app")
    with create_test_deployment(APP) as e2e:
        with tracer.start_as_current_span("POST /orders"):
            e2e.enqueue(job, {"fail": False} if job == "t.report" else None)
        [stored] = e2e.jobs()
        assert stored.trace_context is not None and "traceparent" in stored.trace_context
        assert e2e.drain_jobs() == 1
    spans = _spans()
    request, enqueue, run = spans["POST /orders"], spans[f"enqueue {job}"], spans[f"run {job}"]
    trace_id = request.context.trace_id
    assert {s.context.trace_id for s in (request, enqueue, run)} == {trace_id}
    assert enqueue.parent.span_id == request.context.span_id
    assert run.parent.span_id == enqueue.context.span_id
    assert (enqueue.kind, run.kind) == (SpanKind.PRODUCER, SpanKind.CONSUMER)
    assert run.attributes["messaging.destination.name"] == "default"
    assert run.attributes["ket.job.outcome"] == "completed"
    assert run.attributes["ket.tenant"] == "default"
    assert [run.context.span_id] == SEEN  # the handler ran inside its attempt's span


def test_each_enqueue_of_a_job_without_input_is_a_span_of_its_own(traced: None) -> None:
    tracer = trace.get_tracer("app")
    with create_test_deployment(APP) as e2e:
        for request in ("POST /a", "POST /b"):
            with tracer.start_as_current_span(request):
                e2e.enqueue("t.report_async")
        contexts = [job.trace_context for job in e2e.jobs()]
    enqueues = [s for s in EXPORTER.get_finished_spans() if s.name == "enqueue t.report_async"]
    assert len(enqueues) == 2
    parents = [span.parent for span in enqueues]
    assert None not in parents  # each enqueue inside its request's span
    assert {parent.span_id for parent in parents if parent is not None} == {
        span.context.span_id for span in EXPORTER.get_finished_spans() if span.name[:4] == "POST"
    }
    assert contexts[0] != contexts[1] and None not in contexts


def test_a_failed_attempt_marks_its_span_with_the_error(traced: None) -> None:
    with create_test_deployment(APP) as e2e:
        e2e.enqueue("t.report", {"fail": True})
        assert e2e.drain_jobs() == 0
    run = _spans()["run t.report"]
    assert run.attributes["ket.job.outcome"] == "discarded"
    assert run.status.status_code is StatusCode.ERROR
    assert "printer on fire" in (run.status.description or "")


def test_without_ket_otel_nothing_is_traced_or_stored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KET_OTEL", raising=False)
    EXPORTER.clear()
    with create_test_deployment(APP) as e2e:
        e2e.enqueue("t.report_async")
        assert e2e.drain_jobs() == 1
        assert e2e.jobs()[0].trace_context is None
    assert EXPORTER.get_finished_spans() == ()


@pytest.mark.parametrize("value", ["yes", "2", "true"])
def test_a_bad_ket_otel_value_is_named(value: str) -> None:
    with pytest.raises(KetError, match=f"KET_OTEL must be 1 .* got {value!r}"):
        enabled({"KET_OTEL": value})
