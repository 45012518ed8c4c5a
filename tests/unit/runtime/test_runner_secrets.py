"""The per-job step and secrets: the handler gets its secret values, nothing it raises keeps
them, the deployment's redact hook has the last word, and a secret no key opens discards the
job at once."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet

from ket import Discard, define_deployment, define_job, define_module
from ket.catalog import Catalog
from ket.context import AbortSignal
from ket.runtime.contexts import Contexts
from ket.runtime.events import Event, Hooks
from ket.runtime.runner import JobRunner, Result
from ket.store.memory import MemoryStore
from ket.store.types import JobClaim, JobRecord
from ket.transport import CaptureSender

SECRET = "sk-live-5b1f0e"
KEY = Fernet.generate_key().decode()
seen: list[str] = []


async def quotes_its_key(ctx: Any, input: Any) -> None:
    key = input.api_key.get_secret_value()
    seen.append(key)
    raise RuntimeError(f"the provider refused key {key!r} for account ACCT-1234-5678")


async def discards_quoting(ctx: Any, input: Any) -> None:
    raise Discard(f"key {input.api_key.get_secret_value()} is revoked")


def hide_accounts(text: str) -> str:
    return text.replace("ACCT-1234-5678", "ACCT-****")


def hide_accounts_or_fail(text: str) -> str:
    raise ValueError(text)  # its message quotes the text: it must not be kept either


def deployment(redact: Callable[[str], str] | None = hide_accounts) -> Any:
    module = define_module(
        name="v",
        jobs={
            "use": define_job(idempotent=True, input={"api_key": "secret"}, handler=quotes_its_key),
            "drop": define_job(
                idempotent=True, input={"api_key": "secret"}, handler=discards_quoting
            ),
        },
    )
    return define_deployment(name="vault", modules=[module], redact=redact)


@pytest.fixture
def attempt(tmp_path: Path) -> Callable[..., tuple[Result, JobRecord, list[Event]]]:
    """Enqueue `name` with `api_key` under `enqueue_keys`, run one attempt under `run_keys`,
    record it; the result, the stored job and the events."""

    def run(
        name: str,
        api_key: str = SECRET,
        *,
        enqueue_keys: str = "",
        run_keys: str = "",
        redact: Callable[[str], str] | None = hide_accounts,
    ) -> tuple[Result, JobRecord, list[Event]]:
        seen.clear()
        producer = Catalog.build(deployment(redact), environ={"KET_SECRET_KEYS": enqueue_keys})
        catalog = Catalog.build(deployment(redact), environ={"KET_SECRET_KEYS": run_keys})

        async def main() -> tuple[Result, JobRecord, list[Event]]:
            store = MemoryStore()
            hooks = Hooks()
            events: list[Event] = []
            hooks.subscribe(events.append)
            contexts = Contexts(
                store=store,
                catalog=catalog,
                tenant="acme",
                sender=CaptureSender(),
                storage_root=tmp_path,
            )
            await store.job_insert([producer.new_job(name, {"api_key": api_key})])
            [claimed] = await store.job_claim(
                JobClaim(queue="default", limit=1, worker_id="w", lease_seconds=30)
            )
            with ThreadPoolExecutor(1) as executor:
                runner = JobRunner(
                    catalog=catalog,
                    contexts=contexts,
                    executor=executor,
                    hooks=hooks,
                    tenant="acme",
                )
                result = await runner.run(claimed, AbortSignal())
                assert result.settle is not None
                await store.job_settle([result.settle])
                runner.report(result, applied=True)
            record = await store.job_get(claimed.id)
            assert record is not None
            await store.close()
            return result, record, events

        return asyncio.run(main())

    return run


Attempt = Callable[..., tuple[Result, JobRecord, list[Event]]]


def test_the_handler_gets_the_secret_and_its_error_text_keeps_none_of_it(
    attempt: Attempt, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="ket")
    result, record, events = attempt("v.use")
    assert seen == [SECRET]  # the handler did see the secret it then quoted
    [entry] = record.errors
    assert entry.error == ("RuntimeError: the provider refused key '***' for account ACCT-****")
    assert entry.traceback is not None
    assert "RuntimeError: the provider refused key '***'" in entry.traceback
    assert [e.error for e in events if e.kind == "failed"] == [entry.error]
    # what is shown of the attempt: the stored history, the result's error, events, the log
    everything = f"{record.errors}{result.error}{result.settle}{events}{caplog.text}"
    assert SECRET not in everything
    assert "ACCT-1234-5678" not in everything


def test_a_discard_reason_quoting_the_secret_is_redacted(attempt: Attempt) -> None:
    _, record, _ = attempt("v.drop")
    assert record.state == "discarded"
    assert [e.error for e in record.errors] == ["key *** is revoked"]


def test_a_failing_redact_hook_keeps_the_type_name_and_the_outcome_is_recorded(
    attempt: Attempt,
) -> None:
    _, record, _ = attempt("v.use", redact=hide_accounts_or_fail)
    assert record.state == "retryable"
    [entry] = record.errors
    assert entry.error == "RuntimeError (redaction failed)"
    assert entry.traceback == "(the traceback of RuntimeError is withheld: redaction failed)"


def test_without_a_hook_secret_values_are_still_hidden(attempt: Attempt) -> None:
    _, record, _ = attempt("v.use", redact=None)
    [entry] = record.errors
    assert entry.error == (
        "RuntimeError: the provider refused key '***' for account ACCT-1234-5678"
    )


def test_a_sealed_secret_opens_with_the_workers_keys(attempt: Attempt) -> None:
    _, record, _ = attempt("v.use", enqueue_keys=KEY, run_keys=KEY)
    assert seen == [SECRET]
    assert record.payload["api_key"].keys() == {"$sealed"}
    assert SECRET not in str(record.payload)


def test_a_sealed_secret_no_key_opens_discards_the_job_at_once_naming_it(
    attempt: Attempt,
) -> None:
    result, record, _ = attempt("v.use", enqueue_keys=KEY, run_keys="")
    assert seen == []  # the handler never ran
    assert (record.state, record.attempt) == ("discarded", 1)
    assert [e.error for e in record.errors] == [
        f"job {record.id}: cannot open its secret input: input field 'api_key' is sealed and "
        "KET_SECRET_KEYS is not set to open it"
    ]
    assert result.kind == "discarded"


def test_a_secret_sealed_with_a_dropped_key_discards_the_job_naming_it(
    attempt: Attempt,
) -> None:
    other = Fernet.generate_key().decode()
    _, record, _ = attempt("v.use", enqueue_keys=KEY, run_keys=other)
    assert seen == []
    assert record.state == "discarded"
    assert [e.error for e in record.errors] == [
        f"job {record.id}: cannot open its secret input: input field 'api_key': it opens with "
        "none of the 1 keys in KET_SECRET_KEYS; was the key that sealed it removed?"
    ]
