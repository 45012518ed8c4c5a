"""`ket jobs retry` and `ket jobs cancel` by filter, as an operator runs them, on each store."""

from __future__ import annotations

import asyncio
import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from ket.store import ErrorInfo, JobClaim, NewJob, Settle
from ket.store.sql import SqlStore

from .conftest import REPO, Result


def _ket(tmp: Path, url: str, *args: str, stdin: int | None = subprocess.DEVNULL) -> Result:
    """`ket jobs ARGS --database-url URL`, standard input not a terminal unless given."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KET_")}
    env["KET_REGISTRY_URL"] = f"sqlite:///{tmp / 'registry.db'}"
    done = subprocess.run(
        [sys.executable, "-m", "ket.cli.main", "jobs", *args, "--database-url", url],
        cwd=tmp,
        env=env,
        stdin=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return Result(done.returncode, done.stdout, done.stderr)


def _seed(url: str, jobs: list[NewJob], discard: int = 0) -> list[int]:
    """Insert `jobs`; the first `discard` of them (queue `default`) are run once and discarded."""

    async def main() -> list[int]:
        store = await SqlStore.open(url)
        try:
            ids = [i.id for i in await store.job_insert(jobs)]
            if discard:
                claim = JobClaim(queue="default", limit=discard, worker_id="w", lease_seconds=60)
                claimed = await store.job_claim(claim)
                error = ErrorInfo(error="gave up")
                await store.job_settle(
                    [
                        Settle(id=c.id, fence=c.fence, outcome="discarded", error=error)
                        for c in claimed
                    ]
                )
            return ids
        finally:
            await store.close()

    return asyncio.run(main())


def _states(url: str) -> dict[int, tuple[str, int, int]]:
    """Each job's (state, attempt, number of errors)."""

    async def main() -> dict[int, tuple[str, int, int]]:
        from ket.store import JobQuery

        store = await SqlStore.open(url)
        try:
            rows = await store.job_list(JobQuery(limit=10_000))
            return {r.id: (r.state, r.attempt, len(r.errors)) for r in rows}
        finally:
            await store.close()

    return asyncio.run(main())


def _mail_and_sms(url: str) -> tuple[list[int], list[int]]:
    mail = _seed(url, [NewJob(name="app.mail", queue="mail") for _ in range(12)])
    sms = _seed(url, [NewJob(name="app.sms", queue="sms") for _ in range(3)])
    return mail, sms


def test_a_dry_run_counts_shows_the_first_ten_and_changes_nothing(
    tmp_path: Path, tenant_database: str
) -> None:
    mail, _ = _mail_and_sms(tenant_database)
    before = _states(tenant_database)
    text = _ket(tmp_path, tenant_database, "cancel", "--queue", "mail", "--dry-run")
    assert text.code == 0, text.err
    lines = text.out.splitlines()
    assert lines[0].startswith("12 jobs would be cancelled in tenant default (")
    assert lines[1].split() == ["ID", "JOB", "STATE", "QUEUE", "ENQUEUED", "AT"]
    assert [int(line.split()[0]) for line in lines[2:]] == mail[:10]
    assert all(line.split()[1:4] == ["app.mail", "available", "mail"] for line in lines[2:])
    shown = _ket(
        tmp_path, tenant_database, "cancel", "--queue", "mail", "--dry-run", "--format", "json"
    )
    body = json.loads(shown.out)
    assert (body["action"], body["dry_run"], body["matched"]) == ("cancel", True, 12)
    assert [job["id"] for job in body["sample"]] == mail[:10]
    assert set(body["sample"][0]) == {"id", "name", "state", "queue", "enqueued_at"}
    assert _states(tenant_database) == before


def test_without_yes_and_without_a_terminal_it_is_refused_and_nothing_changes(
    tmp_path: Path, tenant_database: str
) -> None:
    _mail_and_sms(tenant_database)
    before = _states(tenant_database)
    refused = _ket(tmp_path, tenant_database, "cancel", "--queue", "mail")
    assert refused.code == 2
    assert refused.out == ""
    assert "Cancel 12 jobs in tenant default (" in refused.err
    assert "pass --yes" in refused.err and "nothing was changed" in refused.err
    assert "Traceback" not in refused.err
    assert _states(tenant_database) == before


@pytest.mark.parametrize(("answer", "code", "changed"), [("n\n", 1, False), ("yes\n", 0, True)])
def test_on_a_terminal_it_asks_and_goes_ahead_only_on_yes(
    tmp_path: Path, tenant_database: str, answer: str, code: int, changed: bool
) -> None:
    mail, sms = _mail_and_sms(tenant_database)
    controller, terminal = pty.openpty()
    try:
        os.write(controller, answer.encode())
        done = _ket(tmp_path, tenant_database, "cancel", "--queue", "mail", stdin=terminal)
    finally:
        os.close(terminal)
        os.close(controller)
    assert done.code == code, done.err
    assert "Cancel 12 jobs in tenant default (" in done.err and "[y/N]" in done.err
    states = _states(tenant_database)
    assert {states[i][0] for i in mail} == {"cancelled" if changed else "available"}
    assert {states[i][0] for i in sms} == {"available"}


def test_with_yes_it_cancels_every_match_in_batches_and_reports_json(
    tmp_path: Path, tenant_database: str
) -> None:
    mail, sms = _mail_and_sms(tenant_database)
    done = _ket(
        tmp_path, tenant_database, "cancel", "--job", "app.mail", "--yes", "--format", "json"
    )
    assert done.code == 0, done.err
    body = json.loads(done.out)
    assert (body["dry_run"], body["matched"], body["changed"], body["skipped"]) == (
        False,
        12,
        12,
        0,
    )
    states = _states(tenant_database)
    assert {states[i][0] for i in mail} == {"cancelled"}
    assert {states[i][0] for i in sms} == {"available"}
    again = _ket(tmp_path, tenant_database, "cancel", "--job", "app.mail", "--yes")
    assert (again.code, again.out.split(":")[-1]) == (0, " none cancelled\n"), again.err


def test_retry_by_state_makes_discarded_jobs_available_keeping_their_history(
    tmp_path: Path, tenant_database: str
) -> None:
    ids = _seed(tenant_database, [NewJob(name="app.ping") for _ in range(5)], discard=3)
    done = _ket(tmp_path, tenant_database, "retry", "--state", "discarded", "--yes")
    assert done.code == 0, done.err
    assert done.out.startswith("retried 3 jobs in tenant default (")
    states = _states(tenant_database)
    assert [states[i] for i in ids] == [("available", 1, 1)] * 3 + [("available", 0, 0)] * 2


def test_older_than_keeps_recent_jobs(tmp_path: Path, tenant_database: str) -> None:
    _mail_and_sms(tenant_database)
    done = _ket(tmp_path, tenant_database, "cancel", "--older-than", "1h", "--yes")
    assert (done.code, done.out.split(":")[-1]) == (0, " none cancelled\n"), done.err
    assert {s for s, _, _ in _states(tenant_database).values()} == {"available"}


def test_tags_select_the_jobs_listed_shown_and_cancelled(
    tmp_path: Path, tenant_database: str
) -> None:
    both, billing, eu, plain = _seed(
        tenant_database,
        [
            NewJob(name="app.invoice", tags=("billing", "eu")),
            NewJob(name="app.invoice", tags=("billing",)),
            NewJob(name="app.invoice", tags=("eu",)),
            NewJob(name="app.invoice"),
        ],
    )
    listed = _ket(tmp_path, tenant_database, "list", "--tag", "billing", "--format", "json")
    assert listed.code == 0, listed.err
    assert [(job["id"], job["tags"]) for job in json.loads(listed.out)] == [
        (billing, ["billing"]),
        (both, ["billing", "eu"]),
    ]
    table = _ket(tmp_path, tenant_database, "list", "--tag", "eu")
    assert [line.split()[0] for line in table.out.splitlines()] == ["ID", str(eu), str(both)]
    assert table.out.splitlines()[2].split()[-1] == "billing,eu"
    shown = _ket(tmp_path, tenant_database, "show", str(both))
    assert "tags:         billing, eu\n" in shown.out
    # several tags: the jobs carrying any of them, as `list` shows them
    either = _ket(tmp_path, tenant_database, "list", "--tag", "eu", "--tag", "billing")
    assert [line.split()[0] for line in either.out.splitlines()[1:]] == [
        str(eu),
        str(billing),
        str(both),
    ]
    done = _ket(tmp_path, tenant_database, "cancel", "--tag", "eu", "--tag", "billing", "--yes")
    assert done.code == 0, done.err
    assert done.out.startswith("cancelled 3 jobs in tenant default ("), done.out
    states = _states(tenant_database)
    assert [states[i][0] for i in (both, billing, eu, plain)] == [
        "cancelled",
        "cancelled",
        "cancelled",
        "available",
    ]
    bad = _ket(tmp_path, tenant_database, "list", "--tag", "")
    assert bad.code == 2 and "got ''" in bad.err and "Traceback" not in bad.err


@pytest.mark.parametrize("tenant_database", ["postgresql"], indirect=True)  # SQLite has none
def test_the_password_is_never_shown(tmp_path: Path, tenant_database: str) -> None:
    _mail_and_sms(tenant_database)
    # the test server trusts its clients: the password is sent nowhere, yet must not be printed
    url = make_url(tenant_database).set(password="s3cret").render_as_string(hide_password=False)
    for args in (["--dry-run"], [], ["--dry-run", "--format", "json"]):
        done = _ket(tmp_path, url, "cancel", "--queue", "mail", *args)
        assert "s3cret" not in done.out + done.err
        assert "***" in done.out + done.err


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["retry"], "needs a job id, or filters"),
        (["retry", "--state", "completed"], "got 'completed'"),
        (["cancel", "--state", "available,bogus"], "got 'bogus'"),
        (["cancel", "--state", "cancelled"], "got 'cancelled'"),
        (["cancel", "--older-than", "a week"], "got 'a week'"),
        (["cancel", "--older-than", "99999999d"], "at most 36500d"),
        (["retry", "3", "--queue", "mail"], "an id takes none of --queue"),
    ],
)
def test_bad_filters_are_named_with_exit_2(
    tmp_path: Path, tenant_database: str, args: list[str], named: str
) -> None:
    _mail_and_sms(tenant_database)
    before = _states(tenant_database)
    done = _ket(tmp_path, tenant_database, *args, "--yes")
    assert done.code == 2, (done.out, done.err)
    assert "Traceback" not in done.err
    assert named in done.err.splitlines()[-1]
    assert _states(tenant_database) == before


def test_the_single_id_form_is_as_before(tmp_path: Path, tenant_database: str) -> None:
    mail, _ = _mail_and_sms(tenant_database)
    done = _ket(tmp_path, tenant_database, "cancel", str(mail[0]))
    assert (done.code, done.out) == (0, f"job {mail[0]}: available -> cancelled\n")
    again = _ket(tmp_path, tenant_database, "cancel", str(mail[0]))
    assert (again.code, again.err) == (1, f"ket: job {mail[0]}: already cancelled\n")


def test_help_is_as_docs_cli_md_shows_it() -> None:
    docs = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    for action in ("retry", "cancel"):
        done = subprocess.run(
            [sys.executable, "-m", "ket.cli.main", "jobs", action, "--help"],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "COLUMNS": "80"},
        )
        usage = done.stdout.split("\n\n")[0]
        assert usage in docs, usage
