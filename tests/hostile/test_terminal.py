"""Terminal and log injection: job data with control characters never reaches a terminal raw.

A job's name, queue, unique key, payload, error text and traceback, and its worker's id, all
come from the database. Printed, they are escaped (`\\x1b`, `\\n`, `\\u2028`), so no escape
sequence reaches the operator's terminal and no newline forges a line; JSON escapes everything
outside ASCII, and parses back to the very strings stored.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ket.cli.output import EscapingFormatter, escape
from ket.store import ErrorInfo, JobClaim, JobQuery, NewJob, Settle
from ket.store.sql import SqlStore
from tests.acceptance.conftest import Result, run_ket
from tests.hostile.project import fresh_database, write_project

ESC = "\x1b"
NAME = f"app.ping{ESC}[2J"
QUEUE = f"mail{ESC}]0;owned{ESC}\\"
KEY = "key\r\nket: job 1: forged"
WORKER = "host:1:abc\u2028forged"
ERROR = f"ValueError: bad{ESC}[31m\n2026-12-03 07:00:00,000 ERROR ket.worker: forged"
TRACEBACK = (
    'Traceback (most recent call last):\n  File "app.py", line 1, in ping\n'
    f"ValueError: bad{ESC}[31m\n2026-12-03 07:00:00,000 ERROR ket.worker: forged\n"
)
PAYLOAD = {"note": f"{ESC}[8mhidden\u202eevil\u0085"}
# what an operator's terminal must never receive: C0/C1 controls but the newline, DEL, line
# and paragraph separators, bidirectional overrides and isolates
RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


async def _hostile_job(store: SqlStore) -> None:
    await store.job_insert(
        [NewJob(name=NAME, queue=QUEUE, unique_key=KEY, payload=PAYLOAD, max_attempts=3)]
    )
    [job] = await store.job_claim(
        JobClaim(queue=QUEUE, limit=1, worker_id=WORKER, lease_seconds=60)
    )
    await store.job_settle(
        [
            Settle(
                id=job.id,
                fence=job.fence,
                outcome="retryable",
                delay_seconds=3_600,
                error=ErrorInfo(error=ERROR, traceback=TRACEBACK),
            )
        ]
    )


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with fresh_database(request, tmp_path, _hostile_job) as url:
        yield url


def _jobs(tmp_path: Path, database: str, *argv: str) -> Result:
    env = {"KET_REGISTRY_URL": f"sqlite:///{tmp_path / 'registry.db'}"}
    result = run_ket("jobs", *argv, "--database-url", database, cwd=tmp_path, env=env)
    assert result.code == 0, result.err
    assert RAW.search(result.out) is None, result.out
    assert RAW.search(result.err) is None, result.err
    return result


def test_jobs_list_escapes_names_and_queues(tmp_path: Path, database: str) -> None:
    result = _jobs(tmp_path, database, "list")
    header, row = result.out.splitlines()
    assert header.startswith("ID  STATE")
    assert row.split()[:4] == ["1", "retryable", escape(QUEUE), escape(NAME)]
    assert "app.ping\\x1b[2J" in row


def test_jobs_show_escapes_every_field_and_cannot_forge_a_line(
    tmp_path: Path, database: str
) -> None:
    result = _jobs(tmp_path, database, "show", "1")
    lines = result.out.splitlines()
    assert f"unique_key:   {escape(KEY)}" in lines
    assert "unique_key:   key\\r\\nket: job 1: forged" in lines
    assert f"worker_id:    {escape(WORKER)}" in lines or "worker_id:    -" in lines
    [attempt] = [line for line in lines if line.startswith("  attempt 1 at ")]
    assert attempt.endswith(f": {escape(ERROR)}")
    # the traceback keeps its lines, each indented under its error: none starts like ket's own
    assert lines[-4:] == [
        "    Traceback (most recent call last):",
        '      File "app.py", line 1, in ping',
        "    ValueError: bad\\x1b[31m",
        "    2026-12-03 07:00:00,000 ERROR ket.worker: forged",
    ]
    assert not any(line.startswith(("2026", "ket:")) for line in lines)


def test_jobs_json_is_ascii_and_parses_back_to_the_stored_strings(
    tmp_path: Path, database: str
) -> None:
    shown = _jobs(tmp_path, database, "show", "1", "--format", "json")
    assert shown.out.isascii()
    job = json.loads(shown.out)
    assert (job["name"], job["queue"], job["unique_key"]) == (NAME, QUEUE, KEY)
    assert job["worker_id"] in (WORKER, None)
    [error] = job["errors"]
    assert (error["error"], error["traceback"]) == (ERROR, TRACEBACK)
    listed = _jobs(tmp_path, database, "list", "--format", "json")
    assert listed.out.isascii()
    assert json.loads(listed.out)[0]["unique_key"] == KEY
    stats = _jobs(tmp_path, database, "stats", "--format", "json")
    assert stats.out.isascii()
    assert json.loads(stats.out)["counts"] == [{"count": 1, "queue": QUEUE, "state": "retryable"}]


def test_jobs_stats_escapes_queue_names(tmp_path: Path, database: str) -> None:
    result = _jobs(tmp_path, database, "stats")
    assert result.out.splitlines()[1].split() == [escape(QUEUE), "1"]


def test_filter_values_are_escaped_in_errors(tmp_path: Path, database: str) -> None:
    env = {"KET_REGISTRY_URL": f"sqlite:///{tmp_path / 'registry.db'}"}
    result = run_ket(
        "jobs", "list", "--state", f"x{ESC}[2J", "--database-url", database, cwd=tmp_path, env=env
    )
    assert result.code == 2
    assert RAW.search(result.err) is None
    assert "invalid choice: 'x\\x1b[2J'" in result.err


# logs


def _format(record: logging.LogRecord) -> str:
    return EscapingFormatter("%(levelname)s %(name)s: %(message)s").format(record)


def _record(message: str, *args: object, exc: BaseException | None = None) -> logging.LogRecord:
    info = (type(exc), exc, exc.__traceback__) if exc is not None else None
    return logging.LogRecord("ket.jobs", logging.WARNING, __file__, 1, message, args, info)


def test_a_newline_in_a_logged_exception_text_cannot_forge_a_record() -> None:
    text = _format(_record("job %s failed: %s", 7, ERROR))
    assert text == (
        "WARNING ket.jobs: job 7 failed: ValueError: bad\\x1b[31m\\n"
        "2026-12-03 07:00:00,000 ERROR ket.worker: forged"
    )


def test_a_logged_traceback_keeps_its_lines_but_escapes_the_exception_text() -> None:
    try:
        raise ValueError(f"bad{ESC}[31m\nERROR ket.worker: forged")
    except ValueError as error:
        caught = error
    try:
        raise RuntimeError("second\u2028line") from caught
    except RuntimeError as error:
        text = _format(_record("it failed", exc=error))
    lines = text.splitlines()
    assert lines[0] == "WARNING ket.jobs: it failed"
    assert "ValueError: bad\\x1b[31m\\nERROR ket.worker: forged" in lines
    assert "RuntimeError: second\\u2028line" in lines
    assert "The above exception was the direct cause of the following exception:" in lines
    assert not any(line.startswith("ERROR") for line in lines)
    assert RAW.search(text) is None


def test_names_and_stack_info_are_escaped_too() -> None:
    record = _record("plain")
    record.name = f"ket.{ESC}[2J"
    record.stack_info = f"Stack (most recent call last):\n  x{ESC}"
    text = _format(record)
    assert RAW.search(text) is None
    assert text.splitlines() == [
        "WARNING ket.\\x1b[2J: plain",
        "Stack (most recent call last):",
        "  x\\x1b",
    ]


def test_escaping_keeps_printable_text_and_names_each_control() -> None:
    assert escape("café ü 日本 \\ tab") == "café ü 日本 \\ tab"
    assert escape("a\tb\rc\nd\x00e\x7ff\x9bg") == "a\\tb\\rc\\nd\\x00e\\x7ff\\x9bg"
    assert escape("\u2028\u2029\u202e\u2066\ud800") == "\\u2028\\u2029\\u202e\\u2066\\ud800"
    assert escape("one\ntwo\x1b", keep_newlines=True) == "one\ntwo\\x1b"


WORKER_APP = """
from ket import define_deployment, define_job, define_module

async def fail(ctx, input):
    raise ValueError("bad\\x1b[31m\\n2026-12-03 07:00:00,000 ERROR ket.worker: forged")

app = define_module(name="app", jobs={
    "fail": define_job(idempotent=True, max_attempts=1, handler=fail),
})
main = define_deployment(
    name="main", modules=[app], worker={"queues": {"default": 1}, "poll_min_ms": 10}
)
"""


def test_worker_log_lines_cannot_be_forged_by_a_jobs_exception(tmp_path: Path) -> None:
    root = write_project(tmp_path, WORKER_APP)
    env = {"KET_REGISTRY_URL": f"sqlite:///{root / 'registry.db'}"}
    assert run_ket("migrate", cwd=root, env=env).code == 0
    url = f"sqlite:///{root / '.ket' / 'default.db'}"

    async def enqueue() -> None:
        store = await SqlStore.open(url)
        try:
            await store.job_insert([NewJob(name="app.fail", max_attempts=1)])
        finally:
            await store.close()

    async def discarded() -> bool:
        store = await SqlStore.open(url)
        try:
            return bool(await store.job_list(JobQuery(states=("discarded",))))
        finally:
            await store.close()

    asyncio.run(enqueue())
    worker = subprocess.Popen(
        [sys.executable, "-m", "ket.cli.main", "worker"],
        cwd=root,
        env={**{k: v for k, v in os.environ.items() if not k.startswith("KET_")}, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 20
        while not asyncio.run(discarded()):
            if time.monotonic() > deadline or worker.poll() is not None:
                worker.kill()
                raise AssertionError(f"the job was not discarded: {worker.communicate()[0]}")
            time.sleep(0.1)
        worker.send_signal(signal.SIGTERM)
        output, _ = worker.communicate(timeout=20)
    finally:
        worker.kill()
    assert worker.returncode == 0, output
    assert RAW.search(output) is None, output
    assert "bad\\x1b[31m\\n2026-12-03 07:00:00,000 ERROR ket.worker: forged" in output
    assert not any(line.startswith("2026-12-03 07:00:00,000") for line in output.splitlines())


def test_escaping_a_long_text_is_fast() -> None:
    text = (ESC + "x\n") * 200_000
    started = time.process_time()  # CPU: a busy machine does not inflate it
    escaped = escape(text)
    assert time.process_time() - started < 1.0
    assert escaped.count("\\x1b") == 200_000
    assert "\n" not in escaped
