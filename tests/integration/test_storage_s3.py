"""`ctx.storage` on S3, against moto's S3 server started by the tests: what only a bucket can
show (one PUT per blob, an upload cut off mid-body, object-name limits, a missing bucket,
credentials), the test deployment, and real `ket worker` and `ket call` processes sharing blobs.

The behaviours both backends share run on both in tests/unit/context/test_storage.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from ket import define_deployment, define_function, define_job, define_module
from ket.catalog import OperationSpec
from ket.context import Storage
from ket.declare.effect import parse_effect
from ket.errors import StorageError, StorageKeyError
from ket.storage import blobs_from_url
from ket.testing import create_test_deployment
from tests.s3_server import CREDENTIALS, S3Server

OPERATION = OperationSpec(
    name="files.store",
    handler=lambda ctx, input: None,
    input_model=BaseModel,
    effects=frozenset(parse_effect(e) for e in ("storage:read", "storage:write")),
    cross_company=False,
)


def storage(url: str, tenant: str = "acme") -> Storage:
    return Storage(OPERATION, tenant, blobs=blobs_from_url(url))


# -- what only a bucket can show --------------------------------------------------------------


def test_a_blob_larger_than_a_multipart_chunk_is_still_one_put(
    s3_server: S3Server, s3_bucket: str
) -> None:
    blob = os.urandom(6 * 1024 * 1024)  # above obstore's 5 MiB multipart threshold
    asyncio.run(storage(s3_server.url(s3_bucket)).put("big.bin", blob))
    assert s3_server.objects(s3_bucket) == {"ket/acme/big.bin": blob}
    on_objects = [line for line in s3_server.requests(s3_bucket) if f" /{s3_bucket}/" in line]
    writes = [line for line in on_objects if not line.startswith("GET")]
    assert writes == [f"PUT /{s3_bucket}/ket/acme/big.bin HTTP/1.1"]
    assert s3_server.multipart_uploads(s3_bucket) == []


class StallingProxy:
    """A TCP proxy to the S3 server that passes the first `budget` bytes of what a client
    sends, then holds the rest: an upload cut off mid-body when the proxy closes."""

    def __init__(self, endpoint: str, budget: int) -> None:
        host, port = endpoint.removeprefix("http://").split(":")
        self.target = (host, int(port))
        self.budget = budget
        self.stalled = asyncio.Event()
        self.sockets: list[asyncio.StreamWriter] = []
        self.tasks: list[asyncio.Task[None]] = []

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream_reader, upstream = await asyncio.open_connection(*self.target)
        self.sockets += [writer, upstream]
        self.tasks += [
            asyncio.create_task(self._up(reader, upstream)),
            asyncio.create_task(self._down(upstream_reader, writer)),
        ]

    async def _up(self, reader: asyncio.StreamReader, upstream: asyncio.StreamWriter) -> None:
        sent = 0
        while chunk := await reader.read(65_536):
            room = self.budget - sent
            upstream.write(chunk[:room])
            await upstream.drain()
            sent += min(len(chunk), room)
            if sent >= self.budget:
                self.stalled.set()
                await asyncio.Event().wait()  # hold the rest until closed

    async def _down(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while chunk := await reader.read(65_536):
            writer.write(chunk)
            await writer.drain()

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        for socket in self.sockets:
            socket.close()
        self.server.close()
        await self.server.wait_closed()


def test_an_upload_cut_off_mid_body_leaves_the_old_blob_and_nothing_else(
    s3_server: S3Server, s3_bucket: str
) -> None:
    # past a 5 MiB part: were the put a multipart upload, a first part would be stored by now
    old, new = b"old blob", os.urandom(12 * 1024 * 1024)

    async def scenario() -> None:
        await storage(s3_server.url(s3_bucket)).put("report.bin", old)
        proxy = StallingProxy(s3_server.endpoint, budget=6 * 1024 * 1024)
        through = s3_server.url(s3_bucket, endpoint=await proxy.start())
        writing = asyncio.create_task(storage(through).put("report.bin", new))
        await asyncio.wait_for(proxy.stalled.wait(), 30)  # half the body is sent
        writing.cancel()  # as a job's timeout or a shutdown would
        with contextlib.suppress(asyncio.CancelledError):
            await writing
        await proxy.close()  # the server sees the connection end mid-body
        await asyncio.sleep(0.5)

    asyncio.run(scenario())
    assert s3_server.objects(s3_bucket) == {"ket/acme/report.bin": old}
    assert s3_server.multipart_uploads(s3_bucket) == []


def test_a_key_whose_object_name_would_pass_1024_bytes_is_refused_naming_it(
    s3_server: S3Server, s3_bucket: str
) -> None:
    key = "/".join(["é" * 100] * 5)  # 1,004 bytes in UTF-8; with 'ket/acme/', 1,013
    deep = storage(s3_server.url(s3_bucket, prefix="ket/" + "p" * 20))
    with pytest.raises(StorageKeyError) as raised:
        asyncio.run(deep.put(key, "x"))
    assert str(raised.value) == (
        f"storage key {key!r} is not allowed: with the bucket prefix and the tenant it makes an "
        "object name of 1034 bytes, more than the 1024 S3 takes"
    )
    asyncio.run(storage(s3_server.url(s3_bucket)).put(key, "fits"))
    assert s3_server.objects(s3_bucket) == {f"ket/acme/{key}": b"fits"}


def test_objects_ket_did_not_write_are_not_listed_as_keys(
    s3_server: S3Server, s3_bucket: str
) -> None:
    for name in ["ket/acme/%2e%2e/x", "ket/acme/.ket-tmp-1", "ket/acme/a b/%41", "ket/acme/ok"]:
        s3_server.put_object(s3_bucket, name, b"planted")
    assert asyncio.run(storage(s3_server.url(s3_bucket)).list()) == ["ok"]


def test_a_folder_marker_is_not_listed_as_a_key_but_an_empty_blob_is(
    s3_server: S3Server, s3_bucket: str
) -> None:
    store = storage(s3_server.url(s3_bucket))
    asyncio.run(store.put("empty", b""))
    for name in ["ket/acme/dir/", "ket/acme/dir/inside/"]:
        s3_server.put_object(s3_bucket, name, b"")
    assert asyncio.run(store.list()) == ["empty"]


def test_an_object_name_the_s3_client_cannot_read_fails_the_listing_naming_it(
    s3_server: S3Server, s3_bucket: str
) -> None:
    # obstore parses every name it lists; an empty segment is not a path to it
    s3_server.put_object(s3_bucket, "ket/acme/a//b", b"planted")
    with pytest.raises(StorageError, match="ket/acme/a//b"):
        asyncio.run(storage(s3_server.url(s3_bucket)).list())


def test_a_missing_bucket_is_an_error_naming_the_key_and_the_bucket_never_an_empty_read(
    s3_server: S3Server, s3_bucket: str
) -> None:
    url = s3_server.url("no-such-bucket-here")
    store = storage(url)
    for call, attempt in [
        ("put", store.put("a.txt", "x")),
        ("get", store.get("a.txt")),
        ("list", store.list("reports/")),
    ]:
        with pytest.raises(StorageError) as raised:
            asyncio.run(attempt)
        message = str(raised.value)
        assert message.startswith(
            f"storage {'prefix' if call == 'list' else 'key'} "
            f"{'reports/' if call == 'list' else 'a.txt'!r}: {call} on "
            f"S3Blobs('s3://no-such-bucket-here/ket', endpoint_url='{s3_server.endpoint}', "
            "region='us-east-1') failed: "
        )
        assert "\n" not in message and CREDENTIALS["AWS_SECRET_ACCESS_KEY"] not in message


def test_credentials_come_from_the_profile_aws_profile_names(
    s3_server: S3Server, s3_bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    credentials = tmp_path / "credentials"
    credentials.write_text(
        "[ket-test]\naws_access_key_id = profile-key\naws_secret_access_key = profile-secret\n"
    )
    for name in CREDENTIALS:
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_PROFILE", "ket-test")
    asyncio.run(storage(s3_server.url(s3_bucket)).put("a.txt", "via the profile"))
    assert s3_server.objects(s3_bucket) == {"ket/acme/a.txt": b"via the profile"}
    signed = s3_server.log.read_text()  # moto logs no credentials; the request went out signed

    monkeypatch.setenv("AWS_PROFILE", "no-such-profile")
    with pytest.raises(StorageError) as raised:
        blobs_from_url(s3_server.url(s3_bucket))
    assert str(raised.value).startswith("AWS_PROFILE='no-such-profile' gives no credentials: ")
    assert "profile-secret" not in str(raised.value) + signed


def test_the_test_deployment_keeps_blobs_where_storage_url_or_ket_storage_url_says(
    s3_server: S3Server, s3_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with create_test_deployment(FILES, storage_url=s3_server.url(s3_bucket)) as e2e:
        e2e.enqueue("files.write", {"key": "a.txt", "text": "from the argument"})
        assert e2e.drain_jobs() == 1
        assert e2e.client.call("files.read", {"key": "a.txt"}) == "from the argument"
    monkeypatch.setenv("KET_STORAGE_URL", s3_server.url(s3_bucket, prefix="env"))
    with create_test_deployment(FILES, tenant="acme") as e2e:
        e2e.enqueue("files.write", {"key": "b.txt", "text": "from the environment"})
        assert e2e.drain_jobs() == 1
    assert s3_server.objects(s3_bucket) == {
        "ket/default/a.txt": b"from the argument",
        "env/acme/b.txt": b"from the environment",
    }


async def write(ctx: Any, input: Any) -> None:
    await ctx.storage.put(input.key, input.text)


async def read(ctx: Any, input: Any) -> str | None:
    data = await ctx.storage.get(input.key)
    return None if data is None else data.decode()


FILES = define_deployment(
    name="files",
    modules=[
        define_module(
            name="files",
            functions={
                "read": define_function(
                    input={"key": "string"}, effects=["storage:read"], handler=read
                )
            },
            jobs={
                "write": define_job(
                    input={"key": "string", "text": "string"},
                    effects=["storage:write"],
                    idempotent=True,
                    handler=write,
                )
            },
        )
    ],
)

# -- real processes ---------------------------------------------------------------------------

APP = """
from ket import define_deployment, define_function, define_job, define_module

async def request_report(ctx, input):
    await ctx.jobs.enqueue("app.write_report", {"n": input.n})

async def write_report(ctx, input):
    await ctx.storage.put(f"reports/{input.n}.txt", f"report {input.n} for {ctx.tenant}")

async def read_report(ctx, input):
    data = await ctx.storage.get(f"reports/{input.n}.txt")
    return None if data is None else data.decode()

app = define_module(
    name="app",
    functions={
        "request_report": define_function(
            input={"n": "int"}, effects=["enqueue:app.write_report"], handler=request_report
        ),
        "read_report": define_function(
            input={"n": "int"}, effects=["storage:read"], handler=read_report
        ),
    },
    jobs={
        "write_report": define_job(
            idempotent=True, input={"n": "int"}, effects=["storage:write"], handler=write_report
        ),
    },
)
main = define_deployment(
    name="main", modules=[app],
    worker={"queues": {"default": 2}, "poll_min_ms": 20, "poll_max_ms": 200},
)
"""
SECRET = "e2e-secret-4f9c2a"  # moto takes any credentials: this one must never be printed


class Project:
    """A project folder on embedded SQLite whose blobs are in an S3 bucket."""

    def __init__(self, root: Path, storage_url: str) -> None:
        self.root = root
        (root / "pyproject.toml").write_text('[tool.ket]\nworkspace = "app.py"\n')
        (root / "app.py").write_text(textwrap.dedent(APP))
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("KET_", "AWS_"))}
        self.env.update(
            KET_STORAGE_URL=storage_url,
            AWS_ACCESS_KEY_ID="e2e-key",
            AWS_SECRET_ACCESS_KEY=SECRET,
        )

    def ket(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "ket.cli.main", *args],
            cwd=self.root,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    def run_worker_until(self, done: Callable[[], bool]) -> str:
        log = self.root / "worker.log"
        with log.open("w") as output:
            process = subprocess.Popen(
                [sys.executable, "-m", "ket.cli.main", "worker"],
                cwd=self.root,
                env=self.env,
                stdout=output,
                stderr=subprocess.STDOUT,
                text=True,
            )
        try:
            deadline = time.monotonic() + 60
            while not done():
                assert process.poll() is None, log.read_text()
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.1)
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=30)
        assert process.returncode == 0, log.read_text()
        return log.read_text()


def test_a_worker_process_writes_a_blob_to_s3_that_ket_call_reads_back(
    s3_server: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    project = Project(tmp_path, s3_server.url(s3_bucket, prefix="shared"))
    for args in [("migrate",), ("call", "app.request_report", '{"n": 7}')]:
        done = project.ket(*args)
        assert done.returncode == 0, done.stderr

    log = project.run_worker_until(lambda: s3_server.objects(s3_bucket) != {})

    assert s3_server.objects(s3_bucket) == {"shared/default/reports/7.txt": b"report 7 for default"}
    read_back = project.ket("call", "app.read_report", '{"n": 7}')
    assert (read_back.returncode, read_back.stdout) == (0, '"report 7 for default"\n')
    assert not (tmp_path / ".ket" / "storage").exists()  # nothing went to the local disk
    expected = f"ctx.storage keeps blobs in S3Blobs('s3://{s3_bucket}/shared', endpoint_url="
    assert expected in log
    assert SECRET not in log + read_back.stdout + read_back.stderr


@pytest.mark.parametrize("command", [["worker"], ["dev"], ["call", "app.read_report", '{"n": 1}']])
def test_a_malformed_storage_url_stops_the_command_at_start_naming_it(
    tmp_path: Path, command: list[str]
) -> None:
    project = Project(tmp_path, "s3://AKIDEXAMPLE:wJalrXUtnFEMI@bucket/ket")
    done = project.ket(*command)
    assert done.returncode == 2
    assert done.stderr == (
        "ket: error: malformed storage URL 's3://***@bucket/ket': credentials do not go in the "
        "URL; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE) in the "
        "environment; expected file: (the project's .ket/storage), file:///absolute/folder, or "
        "s3://bucket[/prefix][?endpoint_url=https://host:port&region=NAME]\n"
    )
    assert not (tmp_path / ".ket").exists()  # stopped before migrating or opening anything


def test_s3_storage_without_the_extra_stops_the_worker_saying_what_to_install(
    tmp_path: Path,
) -> None:
    project = Project(tmp_path, "s3://invoices/ket")
    without_obstore = (
        "import sys; sys.modules['obstore'] = None; sys.modules['obstore.store'] = None; "
        "from ket.cli.main import main; sys.exit(main(['worker']))"
    )
    done = subprocess.run(
        [sys.executable, "-c", without_obstore],
        cwd=tmp_path,
        env=project.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        "ket: error: KET_STORAGE_URL names S3 storage, which needs obstore: "
        "pip install 'ket-jobs[s3]'\n"
    )
