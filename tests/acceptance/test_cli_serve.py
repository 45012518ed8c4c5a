"""`ket serve` and `ket dev --all` as a user runs them: real processes on a free port, called with
httpx, stopped with a signal."""

from __future__ import annotations

import os
import queue
import re
import resource
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx2 as httpx
import pytest

from tests.acceptance.conftest import REPO, Project, run_ket

DOCS = REPO / "docs" / "serve.md"
STARTED = re.compile(r"on (http://127\.0\.0\.1:\d+)")

APP = """
import asyncio

from ket import define_deployment, define_function, define_job, define_model, define_module
from ket.serve import AuthRequest, Principal


async def authenticate(request: AuthRequest) -> Principal | None:
    if request.bearer_token() == "t0ken":
        return Principal(subject="tester", company="north", permissions={"call:*"})
    return None


async def nap(ctx, input):
    await asyncio.sleep(input.seconds)
    return "rested"


async def add_note(ctx, input):
    async def write(tx):
        note_id = await tx.db.insert("app.Note", {"text": input.text})
        await tx.jobs.enqueue("app.file", {"note_id": note_id})
        return note_id

    return await ctx.tx(write)


async def file(ctx, input):
    await ctx.db.update("app.Note", {"id": input.note_id}, {"filed": True})


app = define_module(
    name="app",
    models={"Note": define_model({"text": "string", "filed": "bool?"})},
    functions={
        "nap": define_function(input={"seconds": "number"}, handler=nap),
        "add_note": define_function(
            input={"text": "string"},
            effects=["write:app.Note", "enqueue:app.file"],
            handler=add_note,
        ),
    },
    jobs={
        "file": define_job(
            input={"note_id": "id"}, effects=["write:app.Note"], idempotent=True, handler=file
        )
    },
)
main = define_deployment(name="main", modules=[app], serve={SERVE})
"""
SERVED = APP.replace("{SERVE}", '{"authenticate": authenticate}')
TOKEN = {"Authorization": "Bearer t0ken"}


class Server:
    """A `ket` process that serves HTTP: its address once it says it listens, its output."""

    def __init__(
        self,
        root: Path,
        *args: str,
        env: dict[str, str] | None = None,
        open_files: int | None = None,
    ) -> None:
        environment = {k: v for k, v in os.environ.items() if k != "KET_TIMEZONE"}
        environment.update(env or {})

        def limited() -> None:  # `ulimit -n open_files`: soft and hard
            if open_files is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, (open_files, open_files))

        self.process = subprocess.Popen(
            [sys.executable, "-m", "ket.cli.main", *args, "--port", "0"],
            cwd=root,
            env=environment,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            preexec_fn=limited if open_files is not None else None,
        )
        self.lines: list[str] = []
        self._drained = False
        self._queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.url = self._wait_for_address()

    def _read(self) -> None:
        assert self.process.stdout is not None
        with self.process.stdout:
            for line in self.process.stdout:
                self._queue.put(line)
        self._queue.put(None)

    def _wait_for_address(self) -> str:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                line = self._queue.get(timeout=0.5)
            except queue.Empty:
                continue
            if line is None:
                self._drained = True
                break
            self.lines.append(line)
            found = STARTED.search(line)
            if found and "serving the functions" in line:
                return found.group(1)
        self.process.kill()
        raise AssertionError("the server did not start:\n" + "".join(self.lines))

    def stop(self, number: int = signal.SIGTERM) -> tuple[int, str]:
        """Signal it; its exit code and everything it printed."""
        self.process.send_signal(number)
        code = self.process.wait(timeout=30)
        while (line := self._queue.get(timeout=5)) is not None:
            self.lines.append(line)
        self._drained = True
        return code, "".join(self.lines)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        while not self._drained and self._queue.get(timeout=5) is not None:
            pass  # until the reader has closed the pipe


@pytest.fixture
def start() -> Iterator[Callable[..., Server]]:
    started: list[Server] = []

    def make(
        root: Path, *args: str, env: dict[str, str] | None = None, open_files: int | None = None
    ) -> Server:
        server = Server(root, *args, env=env, open_files=open_files)
        started.append(server)
        return server

    yield make
    for server in started:
        server.kill()


def _block(text: str, after: str, language: str) -> str:
    """The first ```language block of `text` after the line `after`."""
    rest = text[text.index(after) :]
    found = re.search(rf"```{language}\n(.*?)```", rest, re.DOTALL)
    assert found, f"no {language} block after {after!r}"
    return found.group(1)


def test_the_quick_start_of_the_docs_runs_as_pasted(
    project: Project, start: Callable[..., Server]
) -> None:
    text = DOCS.read_text(encoding="utf-8")
    root = project({"app/workspace.py": _block(text, "and `app/workspace.py`", "python")})
    (root / "pyproject.toml").write_text(_block(text, "A complete project", "toml"))
    assert run_ket("migrate", cwd=root).code == 0
    server = start(root, "serve", env={"API_TOKEN": "s3cret"})
    # the answers the quick start shows, as it shows them
    shown = re.findall(
        r"^\$ curl (.*)\n(.*)$", _block(text, "API_TOKEN=s3cret ket serve", "text"), re.MULTILINE
    )
    assert len(shown) == 3
    for command, answer in shown:
        headers = dict(h.split(": ", 1) for h in re.findall(r"-H '([^']*)'", command))
        body = re.search(r"-d '([^']*)'", command)
        assert body
        got = httpx.post(
            server.url + "/functions/hello.greet",
            headers=headers,
            content=body.group(1),
            timeout=30,
        )
        assert got.text == answer
    code, output = server.stop(signal.SIGTERM)
    assert code == 0, output
    assert "received SIGTERM" in output and "server stopped" in output


def test_sigterm_lets_requests_in_flight_finish_then_exits_0(
    project: Project, start: Callable[..., Server], tenant_database: str
) -> None:
    root = project({"app/workspace.py": SERVED})
    env = {"KET_DATABASE_URL": tenant_database}  # on SQLite and on PostgreSQL
    assert run_ket("migrate", cwd=root, env=env).code == 0
    server = start(root, "serve", env=env)
    # a first request to a fresh server on a busy machine can take seconds (imports, tables)
    noted = httpx.post(
        server.url + "/functions/app.add_note", json={"text": "hi"}, headers=TOKEN, timeout=30
    )
    assert noted.status_code == 200, noted.text
    answers: list[httpx.Response] = []
    napping = threading.Thread(
        target=lambda: answers.append(
            httpx.post(
                server.url + "/functions/app.nap", json={"seconds": 1.5}, headers=TOKEN, timeout=30
            )
        )
    )
    napping.start()
    time.sleep(0.5)
    code, output = server.stop(signal.SIGTERM)
    napping.join(timeout=30)
    assert code == 0, output
    assert [(a.status_code, a.json()) for a in answers] == [(200, "rested")]
    # the note and its job were written to the tenant's database
    listed = run_ket("jobs", "list", "--format", "json", cwd=root, env=env)
    assert '"name": "app.file"' in listed.out


def test_refuses_to_start_without_an_authenticator(project: Project) -> None:
    root = project({"app/workspace.py": APP.replace("{SERVE}", "{}")})
    for command in (("serve",), ("dev", "--all")):
        result = run_ket(*command, "--port", "0", cwd=root)
        assert result.code == 2
        assert "declares no authenticator, and the server never serves anonymously" in result.err
        assert "Traceback" not in result.err


def test_a_port_in_use_is_refused_before_anything_starts(
    project: Project, start: Callable[..., Server]
) -> None:
    root = project({"app/workspace.py": SERVED})
    assert run_ket("migrate", cwd=root).code == 0
    server = start(root, "serve")
    port = server.url.rsplit(":", 1)[1]
    result = run_ket("serve", "--port", port, cwd=root)
    assert result.code == 2
    assert f"ket: error: cannot listen on 127.0.0.1:{port}:" in result.err


def test_dev_all_runs_the_worker_and_the_server_in_one_process(
    project: Project, start: Callable[..., Server]
) -> None:
    root = project({"app/workspace.py": SERVED})
    dev = start(root, "dev", "--all")
    noted = httpx.post(
        dev.url + "/functions/app.add_note", json={"text": "hi"}, headers=TOKEN, timeout=30
    )
    assert noted.status_code == 200, noted.text
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:  # the worker of the same process runs the job
        listed = run_ket("jobs", "list", "--state", "completed", "--format", "json", cwd=root)
        if '"name": "app.file"' in listed.out:
            break
        time.sleep(0.2)
    else:
        raise AssertionError("the job the function enqueued did not complete")
    code, output = dev.stop(signal.SIGINT)
    assert code == 0, output
    # uvicorn's own INFO lines are quiet (KET_LOG_THIRD_PARTY=1 lets them out): ket says it
    assert "worker stopped" in output and "HTTP server stopped" in output
    # the first things a user looks for: where the dashboard is and who signs in to it
    assert f"dashboard at {dev.url}/dashboard/: sign in with a token that " in output
    assert ".authenticate accepts" in output
    # the embedded default opens no PostgreSQL connection, and does not say it would
    assert "tenant databases on SQLite" in output and "PostgreSQL" not in output


def test_serve_metrics_count_requests_by_function_and_status_and_gauge_the_jobs(
    project: Project, start: Callable[..., Server]
) -> None:
    root = project({"app/workspace.py": SERVED})
    assert run_ket("migrate", cwd=root).code == 0
    server = start(root, "serve", "--metrics-port", "0", env={"KET_METRICS_REFRESH_S": "0.2"})
    scrape_url = next(
        re.search(r"serving metrics at (\S+)", line).group(1)  # type: ignore[union-attr]
        for line in server.lines
        if "serving metrics at" in line
    )
    assert not scrape_url.startswith(server.url)  # never on the functions' port
    calls = [
        ("app.add_note", {"text": "one"}),
        ("app.add_note", {"text": "two"}),
        ("app.add_note", {"text": 3}),  # 422
        ("app.nope", {}),  # 404
        ("app.nap", {"seconds": 0}),
    ]
    for name, body in calls:
        httpx.post(f"{server.url}/functions/{name}", json=body, headers=TOKEN, timeout=30)
    httpx.post(f"{server.url}/functions/app.nap", json={"seconds": 0}, timeout=30)  # 401

    def scrape() -> dict[str, float]:
        text = httpx.get(scrape_url, timeout=10).text
        return {
            line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith(("ket_http_requests_total", "ket_jobs{"))
        }

    # the two notes' jobs wait for a worker: the gauges read the tenant's job table, every
    # 0.2 s (one read may fall between the two notes' commits)
    available = 'ket_jobs{queue="default",state="available"}'
    deadline = time.monotonic() + 20
    while (seen := scrape()).get(available) != 2.0:
        assert time.monotonic() < deadline, seen
        time.sleep(0.2)
    requests = {k: v for k, v in seen.items() if k.startswith("ket_http_requests_total")}
    assert requests == {
        'ket_http_requests_total{function="app.add_note",status="200"}': 2.0,
        'ket_http_requests_total{function="app.add_note",status="422"}': 1.0,
        'ket_http_requests_total{function="unknown",status="404"}': 1.0,
        'ket_http_requests_total{function="app.nap",status="200"}': 1.0,
        'ket_http_requests_total{function="app.nap",status="401"}': 1.0,
    }
    code, output = server.stop(signal.SIGTERM)
    assert code == 0, output
    with pytest.raises(httpx.ConnectError):  # the exporter stopped with the server
        httpx.get(scrape_url, timeout=5)
