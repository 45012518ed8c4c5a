"""`ket jobs enqueue` and `ket jobs rerun` as an operator runs them, on the embedded default:
the client's validation (a bad value named, exit 2, nothing written), the new id, the audit
log, and a rerun linked to the finished job it reruns."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timedelta
from pathlib import Path

from cryptography.fernet import Fernet

from ket.store import AuditQuery, JobClaim, Settle
from ket.store.sql import SqlStore
from tests.acceptance.conftest import Project, run_ket

WORKSPACE = """
from ket import define_deployment, define_job, define_module

def flaky(ctx, input):
    pass

ops = define_module(
    name="ops",
    jobs={
        "flaky": define_job(
            idempotent=True,
            max_attempts=4,
            input={"note": "string", "token": "secret?"},
            handler=flaky,
        ),
    },
)
main = define_deployment(name="main", modules=[ops])
"""
KEYS = {"KET_SECRET_KEYS": Fernet.generate_key().decode()}


def _migrated(project: Project) -> Path:
    root = project({"app/workspace.py": WORKSPACE})
    done = run_ket("migrate", cwd=root)
    assert done.code == 0, done.err
    return root


def _show(root: Path, job_id: int) -> dict[str, object]:
    shown = run_ket("jobs", "show", str(job_id), "--format", "json", cwd=root)
    assert shown.code == 0, shown.err
    value: dict[str, object] = json.loads(shown.out)
    return value


def _settle(root: Path, outcome: str) -> None:
    """Claim the one due job and settle it with `outcome`."""

    async def run() -> None:
        store = await SqlStore.open(f"sqlite:///{root / '.ket' / 'default.db'}")
        try:
            [job] = await store.job_claim(
                JobClaim(queue="default", limit=1, worker_id="w", lease_seconds=30)
            )
            await store.job_settle([Settle(id=job.id, fence=job.fence, outcome=outcome)])  # type: ignore[arg-type]
        finally:
            await store.close()

    asyncio.run(run())


def _stored_payloads(root: Path, *ids: int) -> list[object]:
    async def run() -> list[object]:
        store = await SqlStore.open(f"sqlite:///{root / '.ket' / 'default.db'}")
        try:
            return [(await store.job_get(i)).payload for i in ids]  # type: ignore[union-attr]
        finally:
            await store.close()

    return asyncio.run(run())


def _audit(root: Path) -> list[tuple[object, ...]]:
    async def run() -> list[tuple[object, ...]]:
        store = await SqlStore.open(f"sqlite:///{root / '.ket' / 'default.db'}")
        try:
            found = await store.audit_list(AuditQuery())
        finally:
            await store.close()
        return [(r.entry.action, r.entry.job_id, r.entry.detail) for r in reversed(found)]

    return asyncio.run(run())


def test_enqueue_prints_the_new_id_and_takes_every_option(project: Project) -> None:
    root = _migrated(project)
    plain = run_ket("jobs", "enqueue", "ops.flaky", '{"note": "a"}', cwd=root)
    assert (plain.code, plain.out, plain.err) == (0, "enqueued job 1 (ops.flaky)\n", "")
    options = ["--tag", "x", "--tag", "y", "--priority", "-5", "--unique-key", "k"]
    later = run_ket(
        "jobs", "enqueue", "ops.flaky", '{"note": "b"}', "--run-in", "5m", *options, cwd=root
    )
    assert later.out == "enqueued job 2 (ops.flaky)\n", later.err
    again = run_ket(
        "jobs",
        "enqueue",
        "ops.flaky",
        '{"note": "c"}',
        "--unique-key",
        "k",
        "--format",
        "json",
        cwd=root,
    )
    assert json.loads(again.out) == {"id": 2, "job": "ops.flaky", "coalesced": True}
    text = run_ket("jobs", "enqueue", "ops.flaky", '{"note": "d"}', "--unique-key", "k", cwd=root)
    assert text.out == "coalesced with job 2 (ops.flaky), active with unique key 'k'\n"
    at = run_ket(
        "jobs",
        "enqueue",
        "ops.flaky",
        '{"note": "e"}',
        "--run-at",
        "2999-12-24T09:00:00+01:00",
        cwd=root,
    )
    assert at.out.startswith("enqueued job "), at.err
    at_id = int(at.out.split()[2])  # a coalesced attempt may have used up an id (SQLite)
    shown = _show(root, 2)
    assert (shown["state"], shown["priority"], shown["tags"], shown["unique_key"]) == (
        "scheduled",
        -5,
        ["x", "y"],
        "k",
    )
    delay = datetime.fromisoformat(str(shown["run_at"])) - datetime.fromisoformat(
        str(shown["enqueued_at"])
    )
    assert delay == timedelta(minutes=5)
    assert _show(root, at_id)["run_at"] == "2999-12-24T08:00:00+00:00"
    assert [(action, job) for action, job, _ in _audit(root)] == [
        ("enqueue", 1),
        ("enqueue", 2),
        ("enqueue", 2),
        ("enqueue", 2),
        ("enqueue", at_id),
    ]


def test_bad_enqueue_options_name_the_value_exit_2_and_write_nothing(project: Project) -> None:
    root = _migrated(project)
    for args, named in [
        (["ops.flaky", '{"note": 5}'], "invalid input for ops.flaky: note: Input should be"),
        (["ops.flaky", "{}"], "invalid input for ops.flaky: note: Field required"),
        (["ops.flaky", "not json"], "input is not valid JSON"),
        (["ops.nope", "{}"], "unknown job 'ops.nope'"),
        (["ops.flaky", '{"note": "a"}', "--run-in", "soon"], "'soon'"),
        (["ops.flaky", '{"note": "a"}', "--run-in=-5m"], "'-5m'"),
        (["ops.flaky", '{"note": "a"}', "--run-at", "2026-12-24T09:00:00"], "offset"),
        (
            ["ops.flaky", '{"note": "a"}', "--run-at", "2999-01-01T00:00:00Z", "--run-in", "5m"],
            "not both",
        ),
        (["ops.flaky", '{"note": "a"}', "--priority", "5000"], "priority must be an integer"),
        (["ops.flaky", '{"note": "a"}', "--priority", "high"], "'high'"),
        (["ops.flaky", '{"note": "a"}', "--tag", ""], "''"),
    ]:
        result = run_ket("jobs", "enqueue", *args, cwd=root)
        assert (result.code, result.out) == (2, ""), (args, result)
        *_, last = result.err.splitlines()  # a usage error prints the usage first
        assert "error: " in last and named in last and "Traceback" not in result.err, args
    assert run_ket("jobs", "list", cwd=root).out == "no jobs\n"
    assert _audit(root) == []


def test_rerun_makes_a_linked_copy_with_the_sealed_input_as_it_was(project: Project) -> None:
    root = _migrated(project)
    given = '{"note": "a", "token": "tok-123"}'
    enqueued = run_ket("jobs", "enqueue", "ops.flaky", given, "--tag", "t", cwd=root, env=KEYS)
    assert enqueued.code == 0, enqueued.err
    _settle(root, "completed")
    rerun = run_ket("jobs", "rerun", "1", cwd=root, env=KEYS)
    assert (rerun.code, rerun.out) == (0, "job 1 rerun as job 2\n"), rerun.err
    origin, copy = _show(root, 1), _show(root, 2)
    assert copy["payload"] == origin["payload"] == {"note": "a", "token": "***"}
    # the very token the enqueue sealed: copied as stored, never opened and sealed again
    [stored, copied] = _stored_payloads(root, 1, 2)
    assert stored == copied and "$sealed" in str(copied) and "tok-123" not in str(copied)
    assert (copy["state"], copy["attempt"], copy["max_attempts"], copy["tags"]) == (
        "available",
        0,
        4,
        ["t"],
    )
    assert (copy["rerun_of"], copy["reruns"], origin["reruns"]) == (1, [], [2])
    shown_copy = run_ket("jobs", "show", "2", cwd=root).out
    assert "rerun of:     job 1\n" in shown_copy and "tok-123" not in shown_copy
    assert "reruns:       job 2\n" in run_ket("jobs", "show", "1", cwd=root).out
    assert _audit(root)[-1] == ("rerun", 1, "rerun as job 2")


def test_rerun_refuses_work_that_has_not_finished_and_unknown_ids(project: Project) -> None:
    root = _migrated(project)
    run_ket("jobs", "enqueue", "ops.flaky", '{"note": "a"}', cwd=root)
    waiting = run_ket("jobs", "rerun", "1", cwd=root)
    assert (waiting.code, waiting.out) == (1, "")
    assert waiting.err == (
        "ket: job 1: it is available: only a finished job (completed, discarded or cancelled) "
        "is rerun; `ket jobs retry` is for retryable or discarded work\n"
    )
    missing = run_ket("jobs", "rerun", "99", cwd=root)
    assert (missing.code, missing.err) == (1, "ket: job 99: no such job\n")
    assert len(run_ket("jobs", "list", cwd=root).out.splitlines()) == 2  # the header and job 1


WINDOWED = """
from ket import define_deployment, define_job, define_module

def noop(ctx, input):
    pass

crm = define_module(
    name="crm",
    jobs={
        "welcome": define_job(
            idempotent=True,
            input={"customer_id": "id"},
            unique={"period": "1d", "key": ["customer_id"]},
            handler=noop,
        ),
        "reindex": define_job(
            idempotent=True,
            input={"document_id": "id", "revision": "int"},
            debounce={"period": "30s", "key": ["document_id"]},
            handler=noop,
        ),
    },
)
main = define_deployment(name="main", modules=[crm])
"""


def test_an_operator_s_enqueue_joins_the_job_of_its_window_or_debounce_key(
    project: Project,
) -> None:
    root = project({"app/workspace.py": WINDOWED})
    assert run_ket("migrate", cwd=root).code == 0
    first = run_ket("jobs", "enqueue", "crm.welcome", '{"customer_id": "c1"}', cwd=root)
    assert first.out == "enqueued job 1 (crm.welcome)\n", first.err
    again = run_ket("jobs", "enqueue", "crm.welcome", '{"customer_id": "c1"}', cwd=root)
    assert again.out == (
        "coalesced with job 1 (crm.welcome), enqueued within the unique window of its key\n"
    )
    edit = '{"document_id": "d1", "revision": %d}'
    assert run_ket("jobs", "enqueue", "crm.reindex", edit % 1, cwd=root).out == (
        "enqueued job 2 (crm.reindex)\n"
    )
    later = run_ket("jobs", "enqueue", "crm.reindex", edit % 2, cwd=root)
    assert later.out == (
        "coalesced with job 2 (crm.reindex), not started yet: it takes this input and its run "
        "time moves (debounce)\n"
    )
    shown = _show(root, 2)
    assert (shown["state"], shown["window_key"]) == ("scheduled", '["d1"]')
    shown_text = run_ket("jobs", "show", "2", cwd=root).out
    assert 'window_key:   ["d1"]\n' in shown_text
    assert '"revision": 2' in shown_text
