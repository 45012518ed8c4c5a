"""`ket jobs list` as an operator runs it on the embedded default: repeated filters mean any of
them, a queue or job name the deployment does not declare is refused, and a database that was
never migrated is reported, not created."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from ket.store import ErrorInfo, JobClaim, NewJob, Settle
from ket.store.sql import SqlStore

from .conftest import Project, Result, run_ket

APP = """
from ket import define_deployment, define_job, define_module

def noop(ctx, input):
    pass

app = define_module(name="app", jobs={
    "ping": define_job(idempotent=True, handler=noop),
    "mail": define_job(idempotent=True, queue="mail", handler=noop),
    "sms": define_job(idempotent=True, queue="sms", handler=noop),
})
main = define_deployment(
    name="main", modules=[app], worker={"queues": {"default": 1, "mail": 1, "sms": 1}}
)
"""


def _seed(root: Path, jobs: list[NewJob], *, discard: int = 0, cancel: int = 0) -> list[int]:
    """Insert `jobs` into the default tenant; the first `discard` of them (queue `default`) are
    run once and discarded, the last `cancel` cancelled."""

    async def main() -> list[int]:
        store = await SqlStore.open(f"sqlite:///{root / '.ket' / 'default.db'}")
        try:
            ids = [inserted.id for inserted in await store.job_insert(jobs)]
            if discard:
                claim = JobClaim(queue="default", limit=discard, worker_id="w", lease_seconds=60)
                error = ErrorInfo(error="gave up")
                await store.job_settle(
                    [
                        Settle(id=job.id, fence=job.fence, outcome="discarded", error=error)
                        for job in await store.job_claim(claim)
                    ]
                )
            for job_id in ids[len(ids) - cancel :] if cancel else []:
                await store.job_cancel(job_id)
            return ids
        finally:
            await store.close()

    return asyncio.run(main())


def _listed(root: Path, *args: str) -> list[tuple[int, str]]:
    """The (id, state) of the jobs `ket jobs list ARGS` prints, newest first."""
    done = run_ket("jobs", "list", "--format", "json", *args, cwd=root)
    assert done.code == 0, done.err
    return [(row["id"], row["state"]) for row in json.loads(done.out)]


def _migrated(project: Project) -> Path:
    root = project({"app/workspace.py": APP})
    migrated = run_ket("migrate", cwd=root)
    assert migrated.code == 0, migrated.err
    return root


def _refused(done: Result) -> str:
    """The one line of a refusal (exit 2, no traceback)."""
    assert done.code == 2, done
    assert done.out == ""
    assert "Traceback" not in done.err
    [line] = done.err.splitlines()
    return line


def test_repeated_state_queue_and_job_filters_list_jobs_matching_any_of_them(
    project: Project,
) -> None:
    root = _migrated(project)
    discarded, available, cancelled = _seed(
        root,
        [NewJob(name="app.ping"), NewJob(name="app.ping"), NewJob(name="app.ping")],
        discard=1,
        cancel=1,
    )
    mail, sms = _seed(
        root, [NewJob(name="app.mail", queue="mail"), NewJob(name="app.sms", queue="sms")]
    )

    states = _listed(root, "--state", "discarded", "--state", "cancelled")
    assert states == [(cancelled, "cancelled"), (discarded, "discarded")]
    assert _listed(root, "--queue", "mail", "--queue", "sms") == [
        (sms, "available"),
        (mail, "available"),
    ]
    assert [job_id for job_id, _ in _listed(root, "--job", "app.mail", "--job", "app.ping")] == [
        mail,
        cancelled,
        available,
        discarded,
    ]
    # different filters still combine: every one must hold
    assert _listed(root, "--job", "app.ping", "--job", "app.sms", "--state", "available") == [
        (sms, "available"),
        (available, "available"),
    ]


def test_repeated_tags_list_jobs_carrying_any_of_them(project: Project) -> None:
    root = _migrated(project)
    billing, eu, both, _ = _seed(
        root,
        [
            NewJob(name="app.ping", tags=("billing",)),
            NewJob(name="app.ping", tags=("eu",)),
            NewJob(name="app.ping", tags=("billing", "eu")),
            NewJob(name="app.ping", tags=("urgent",)),
        ],
    )
    listed = _listed(root, "--tag", "billing", "--tag", "eu")
    assert [job_id for job_id, _ in listed] == [both, eu, billing]
    assert [job_id for job_id, _ in _listed(root, "--tag", "billing")] == [both, billing]


def test_listing_before_migrate_says_to_run_migrate_and_creates_no_database(
    project: Project,
) -> None:
    root = project({"app/workspace.py": APP})
    for command in (("jobs", "list"), ("jobs", "show", "1"), ("jobs", "stats")):
        line = _refused(run_ket(*command, cwd=root))
        assert line.startswith("ket: error: "), line
        assert "run `ket migrate`" in line, line
        assert "default.db" in line, line
        assert not (root / ".ket" / "default.db").exists(), command
    assert run_ket("migrate", cwd=root).code == 0  # the command that may create it
    assert (root / ".ket" / "default.db").is_file()
    assert _listed(root) == []


def test_an_undeclared_queue_or_job_is_refused_naming_it_and_the_known_ones(
    project: Project,
) -> None:
    root = _migrated(project)
    _seed(root, [NewJob(name="app.mail", queue="mail")])
    queue = _refused(run_ket("jobs", "list", "--queue", "mail", "--queue", "mial", cwd=root))
    assert "'mial'" in queue and "deployment 'main'" in queue, queue
    assert "(queues: default, mail, sms)" in queue, queue
    assert queue.endswith("did you mean 'mail'?"), queue
    job = _refused(run_ket("jobs", "list", "--job", "app.mali", cwd=root))
    assert "'app.mali'" in job and "(jobs: app.mail, app.ping, app.sms)" in job, job
    assert job.endswith("did you mean 'app.mail'?"), job
    cancel = _refused(run_ket("jobs", "cancel", "--queue", "exprots", "--yes", cwd=root))
    assert "'exprots'" in cancel and "(queues: default, mail, sms)" in cancel, cancel
    assert _listed(root, "--queue", "mail") != []  # nothing was cancelled


def test_a_queue_no_longer_declared_is_taken_while_jobs_have_it(project: Project) -> None:
    root = _migrated(project)
    [old] = _seed(root, [NewJob(name="app.gone", queue="retired")])
    assert _listed(root, "--queue", "retired") == [(old, "available")]
    assert _listed(root, "--job", "app.gone") == [(old, "available")]


def test_without_a_workspace_queues_and_jobs_are_not_checked(project: Project) -> None:
    root = _migrated(project)
    _seed(root, [NewJob(name="app.mail", queue="mail")])
    elsewhere = root / "elsewhere"  # no pyproject.toml above it names a workspace
    elsewhere.mkdir()
    (elsewhere / "pyproject.toml").write_text("[project]\nname = 'ops'\n", encoding="utf-8")
    url = ("--database-url", f"sqlite:///{root / '.ket' / 'default.db'}")
    done = run_ket("jobs", "list", "--queue", "mial", *url, cwd=elsewhere)
    assert (done.code, done.out) == (0, "no jobs\n"), done.err
