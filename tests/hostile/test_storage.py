"""Hostile storage folders: planted links (at the leaf, at a parent, at the tenant's folder;
pointing outside, or into another tenant), FIFOs, oversized blobs, and a permissive umask."""

from __future__ import annotations

import asyncio
import os
import shutil
import stat
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from ket import define_deployment, define_job, define_module
from ket.catalog import OperationSpec
from ket.context import Storage
from ket.context.storage import DEFAULT_MAX_BLOB_BYTES
from ket.declare.effect import parse_effect
from ket.errors import BlobRejected, StorageKeyError, TransportError
from ket.storage import LocalBlobs
from ket.transport import CaptureSender, DevSender
from ket.transport.message import parse_message
from tests.hostile.worker_step import WorkerStep

NO_LINKS = "ket never follows links in storage"
OPERATION = OperationSpec(
    name="files.attack",
    handler=lambda ctx, input: None,
    input_model=BaseModel,
    effects=frozenset(parse_effect(e) for e in ("storage:read", "storage:write")),
    cross_company=False,
)


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


class Folders:
    """Two tenants' storage under one root, and a folder outside it with a secret in it."""

    def __init__(self, tmp_path: Path, max_blob_bytes: int = DEFAULT_MAX_BLOB_BYTES) -> None:
        self.root = tmp_path / "storage"
        blobs = LocalBlobs(self.root)
        self.acme = Storage(OPERATION, "acme", blobs=blobs, max_blob_bytes=max_blob_bytes)
        self.globex = Storage(OPERATION, "globex", blobs=blobs)
        self.outside = tmp_path / "outside"
        self.outside.mkdir()
        self.secret = self.outside / "secret.txt"
        self.secret.write_text("outside secret")
        run(self.acme.put("invoices/INV-1.txt", "acme invoice"))
        run(self.globex.put("private/plan.txt", "globex plan"))
        self.plan = self.root / "globex" / "private" / "plan.txt"

    def plant(self, where: str, target: Path) -> Path:
        link = self.root / where
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(target)
        return link

    def untouched(self) -> bool:
        """The secret and the other tenant's plan are as they were, and nothing was added."""
        return (
            self.secret.read_text() == "outside secret"
            and sorted(p.name for p in self.outside.iterdir()) == ["secret.txt"]
            and self.plan.read_text() == "globex plan"
            and sorted(p.name for p in self.plan.parent.iterdir()) == ["plan.txt"]
        )


def refused(call: Any, message: str) -> None:
    with pytest.raises(StorageKeyError) as raised:
        run(call)
    assert str(raised.value) == message


# -- planted links --------------------------------------------------------------------------


def test_a_link_at_the_leaf_to_a_file_outside_is_never_read_written_or_deleted(
    tmp_path: Path,
) -> None:
    f = Folders(tmp_path)
    link = f.plant("acme/invoices/evil.txt", f.secret)
    message = (
        f"storage key 'invoices/evil.txt' is refused: 'invoices/evil.txt' is a symbolic link; "
        f"{NO_LINKS}"
    )
    refused(f.acme.get("invoices/evil.txt"), message)
    refused(f.acme.put("invoices/evil.txt", "overwritten"), message)
    refused(f.acme.delete("invoices/evil.txt"), message)
    assert link.is_symlink() and f.untouched()
    assert run(f.acme.list()) == ["invoices/INV-1.txt"]  # links are not keys


def test_a_link_at_a_parent_to_a_folder_outside_is_refused(tmp_path: Path) -> None:
    f = Folders(tmp_path)
    f.plant("acme/docs", f.outside)
    message = f"storage key 'docs/secret.txt' is refused: 'docs' is a symbolic link; {NO_LINKS}"
    refused(f.acme.get("docs/secret.txt"), message)
    refused(f.acme.put("docs/secret.txt", "overwritten"), message)
    refused(f.acme.delete("docs/secret.txt"), message)
    refused(
        f.acme.put("docs/new/file.txt", "planted"),
        f"storage key 'docs/new/file.txt' is refused: 'docs' is a symbolic link; {NO_LINKS}",
    )
    refused(
        f.acme.list("docs/"),
        f"storage prefix 'docs/' is refused: 'docs' is a symbolic link; {NO_LINKS}",
    )
    assert run(f.acme.list()) == ["invoices/INV-1.txt"]
    assert f.untouched()


def test_a_link_at_a_parent_into_another_tenants_folder_is_refused(tmp_path: Path) -> None:
    f = Folders(tmp_path)
    f.plant("acme/shared", f.root / "globex" / "private")
    message = f"storage key 'shared/plan.txt' is refused: 'shared' is a symbolic link; {NO_LINKS}"
    refused(f.acme.get("shared/plan.txt"), message)
    refused(f.acme.put("shared/plan.txt", "acme was here"), message)
    refused(f.acme.put("shared/extra.txt", "acme was here"), message.replace("plan", "extra"))
    assert f.untouched()


def test_a_link_at_the_leaf_into_another_tenants_blob_is_refused(tmp_path: Path) -> None:
    f = Folders(tmp_path)
    f.plant("acme/plan.txt", f.plan)
    message = f"storage key 'plan.txt' is refused: 'plan.txt' is a symbolic link; {NO_LINKS}"
    refused(f.acme.get("plan.txt"), message)
    refused(f.acme.put("plan.txt", "acme was here"), message)
    assert f.untouched()


def test_a_tenant_folder_that_is_a_link_to_another_tenant_is_refused(tmp_path: Path) -> None:
    f = Folders(tmp_path)
    shutil.rmtree(f.root / "acme")
    f.plant("acme", f.root / "globex")
    message = (
        "storage key 'private/plan.txt' is refused: the folder of tenant 'acme' is a symbolic "
        f"link; {NO_LINKS}"
    )
    refused(f.acme.get("private/plan.txt"), message)
    refused(f.acme.put("private/plan.txt", "acme was here"), message)
    refused(f.acme.list(), message.replace("key 'private/plan.txt'", "prefix ''"))
    assert f.untouched()


def test_a_fifo_planted_as_a_blob_is_refused_without_hanging(tmp_path: Path) -> None:
    f = Folders(tmp_path)
    os.mkfifo(f.root / "acme" / "pipe")
    refused(
        f.acme.get("pipe"),
        f"storage key 'pipe' is refused: 'pipe' is not a regular file or folder; {NO_LINKS}",
    )


def test_a_job_reading_through_a_planted_link_fails_naming_the_key(tmp_path: Path) -> None:
    f = Folders(tmp_path)
    f.plant("acme/docs", f.outside)

    async def scenario() -> tuple[list[str], Any]:
        async with files_worker(tmp_path, f.root) as step:
            job_id = await step.enqueue("files.copy", {"source": "docs/secret.txt"})
            return await step.drain(), await step.job(job_id)

    kinds, job = run(scenario())
    assert kinds == ["failed"] and job.state == "retryable"
    assert job.errors[0].error == (
        "StorageKeyError: storage key 'docs/secret.txt' is refused: 'docs' is a symbolic link; "
        f"{NO_LINKS}"
    )
    assert not (f.root / "acme" / "copy.txt").exists()
    assert f.untouched()


# -- the size cap ---------------------------------------------------------------------------


def test_a_blob_over_the_cap_is_refused_and_leaves_no_file(tmp_path: Path) -> None:
    f = Folders(tmp_path, max_blob_bytes=1_000)
    run(f.acme.put("exact.bin", b"x" * 1_000))
    with pytest.raises(BlobRejected) as raised:
        run(f.acme.put("reports/big.bin", b"x" * 1_001))
    assert str(raised.value) == (
        "storage key 'reports/big.bin': the blob is 1001 bytes, more than the cap of 1000 "
        "(KET_STORAGE_MAX_BYTES); nothing was written"
    )
    assert isinstance(raised.value, ValueError)
    with pytest.raises(BlobRejected):
        run(f.acme.put("exact.bin", "é" * 501))  # 1,002 bytes in UTF-8: the old blob stays
    assert (f.root / "acme" / "exact.bin").read_bytes() == b"x" * 1_000
    assert sorted(p.name for p in (f.root / "acme").iterdir()) == ["exact.bin", "invoices"]


def test_the_default_blob_cap_is_100_mib() -> None:
    assert DEFAULT_MAX_BLOB_BYTES == 100 * 1024 * 1024


def test_the_blob_cap_is_configured_by_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KET_STORAGE_MAX_BYTES", "10")
    root = tmp_path / "storage"

    async def scenario() -> tuple[list[str], Any]:
        async with files_worker(tmp_path, root) as step:
            job_id = await step.enqueue("files.write", {"key": "a.txt", "text": "eleven char"})
            await step.enqueue("files.write", {"key": "b.txt", "text": "ten chars!"})
            return await step.drain(), await step.job(job_id)

    kinds, job = run(scenario())
    assert kinds == ["failed", "completed"]
    assert "the blob is 11 bytes, more than the cap of 10" in job.errors[0].error
    assert sorted(p.name for p in (root / "acme").iterdir()) == ["b.txt"]


# -- modes, whatever the umask ----------------------------------------------------------------


@pytest.fixture
def permissive_umask() -> Iterator[None]:
    previous = os.umask(0)
    try:
        yield
    finally:
        os.umask(previous)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_blobs_are_0600_in_folders_0700_under_a_permissive_umask(
    tmp_path: Path, permissive_umask: None
) -> None:
    root = tmp_path / "ket" / "storage"
    store = Storage(OPERATION, "acme", blobs=LocalBlobs(root))
    run(store.put("a/b/c.txt", "blob"))
    run(store.put("a/b/c.txt", "replaced"))
    folders = [tmp_path / "ket", root, root / "acme", root / "acme/a", root / "acme/a/b"]
    assert {str(p.relative_to(tmp_path)): oct(mode(p)) for p in folders} == {
        str(p.relative_to(tmp_path)): "0o700" for p in folders
    }
    assert oct(mode(root / "acme/a/b/c.txt")) == "0o600"


def test_outbox_files_are_0600_in_folders_0700_under_a_permissive_umask(
    tmp_path: Path, permissive_umask: None
) -> None:
    outbox = tmp_path / "ket" / "outbox"
    sender = DevSender(outbox, clock=lambda: datetime(2030, 1, 15, tzinfo=UTC))
    run(sender.send(parse_message(MESSAGE), tenant="acme"))
    [eml] = (outbox / "acme").iterdir()
    assert [oct(mode(p)) for p in (tmp_path / "ket", outbox, outbox / "acme")] == ["0o700"] * 3
    assert oct(mode(eml)) == "0o600"


def test_an_outbox_folder_planted_as_a_link_is_refused(tmp_path: Path) -> None:
    outbox, elsewhere = tmp_path / "outbox", tmp_path / "elsewhere"
    outbox.mkdir()
    elsewhere.mkdir()
    (outbox / "acme").symlink_to(elsewhere)
    sender = DevSender(outbox)
    with pytest.raises(TransportError) as raised:
        run(sender.send(parse_message(MESSAGE), tenant="acme"))
    assert str(raised.value) == (
        f"the outbox of tenant 'acme' under {str(outbox)!r} is a link; ket never follows links "
        "in the outbox"
    )
    assert list(elsewhere.iterdir()) == []


# -- a deployment whose jobs use storage -----------------------------------------------------

MESSAGE = {
    "idempotency_key": "mail:o1",
    "from": {"address": "orders@example.com"},
    "to": [{"address": "ann@example.com"}],
    "subject": "Order 1001",
    "text": "Confirmed.",
}


async def copy(ctx: Any, input: Any) -> None:
    data = await ctx.storage.get(input.source)
    await ctx.storage.put("copy.txt", data or b"")


async def write(ctx: Any, input: Any) -> None:
    await ctx.storage.put(input.key, input.text)


FILES = define_deployment(
    name="files",
    modules=[
        define_module(
            name="files",
            jobs={
                "copy": define_job(
                    input={"source": "string"},
                    effects=["storage:read", "storage:write"],
                    idempotent=True,
                    handler=copy,
                ),
                "write": define_job(
                    input={"key": "string", "text": "string"},
                    effects=["storage:write"],
                    idempotent=True,
                    handler=write,
                ),
            },
        )
    ],
)


def files_worker(tmp_path: Path, root: Path) -> WorkerStep:
    return WorkerStep(
        FILES,
        database_url=f"sqlite:///{tmp_path / 'acme.db'}",
        sender=CaptureSender(),
        storage_root=root,
    )
