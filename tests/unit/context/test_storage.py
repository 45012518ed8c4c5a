"""`ctx.storage` on every backend: tenant spaces, atomic writes, key safety and the storage effects.

Each behaviour test runs on both backends: files under a folder, and an S3 bucket on a real S3
API server (moto's, started by the tests). What a backend really holds is read back around it:
the files on disk, or the bucket's objects over plain HTTP.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest
from pydantic import BaseModel

from ket.catalog import OperationSpec
from ket.context import Blocking, Storage
from ket.declare.effect import parse_effect
from ket.errors import EffectError, StorageKeyError
from ket.storage import BlobStore, LocalBlobs, blobs_from_url
from ket.storage import local as local_module
from tests.s3_server import S3Server

T = TypeVar("T")
BOTH = ("storage:read", "storage:write")


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coroutine)


def operation(*effects: str, name: str = "sales.issue_invoice") -> OperationSpec:
    return OperationSpec(
        name=name,
        handler=lambda ctx, input: None,
        input_model=BaseModel,
        effects=frozenset(parse_effect(effect) for effect in effects),
        cross_company=False,
    )


class Backend:
    """A backend under test, and what it really holds (by `<tenant>/<key>`, temporary files
    and partial objects included)."""

    kind: str
    blobs: BlobStore

    def stored(self) -> dict[str, bytes]:
        raise NotImplementedError

    def untouched(self) -> bool:
        """Nothing was ever written: no blob, and (on disk) not even a folder."""
        raise NotImplementedError

    def storage(self, *effects: str, tenant: str = "acme") -> Storage:
        return Storage(operation(*(effects or BOTH)), tenant, blobs=self.blobs)


class Files(Backend):
    kind = "local"

    def __init__(self, root: Path) -> None:
        self.root = root
        self.blobs = LocalBlobs(root)

    def stored(self) -> dict[str, bytes]:
        return {
            path.relative_to(self.root).as_posix(): path.read_bytes()
            for path in sorted(self.root.rglob("*"))
            if path.is_file()
        }

    def untouched(self) -> bool:
        return not self.root.exists()


class Bucket(Backend):
    kind = "s3"

    def __init__(self, server: S3Server, bucket: str) -> None:
        self.server = server
        self.bucket = bucket
        self.blobs = blobs_from_url(server.url(bucket, prefix="blobs"))

    def stored(self) -> dict[str, bytes]:
        found = self.server.objects(self.bucket)
        assert all(name.startswith("blobs/") for name in found), found
        return {name.removeprefix("blobs/"): data for name, data in found.items()}

    def untouched(self) -> bool:
        return self.server.objects(self.bucket) == {} == self.multipart()

    def multipart(self) -> dict[str, bytes]:
        return dict.fromkeys(self.server.multipart_uploads(self.bucket), b"")


@pytest.fixture(params=["local", "s3"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "local":
        return Files(tmp_path / "storage")
    return Bucket(request.getfixturevalue("s3_server"), request.getfixturevalue("s3_bucket"))


def test_put_then_get_returns_the_blob_text_as_utf8(backend: Backend) -> None:
    store = backend.storage()

    async def scenario() -> tuple[bytes | None, bytes | None]:
        await store.put("invoices/INV-1.txt", "Hóa đơn 1\n")
        await store.put("raw.bin", b"\x00\xff")
        return await store.get("invoices/INV-1.txt"), await store.get("raw.bin")

    assert run(scenario()) == ("Hóa đơn 1\n".encode(), b"\x00\xff")


def test_blobs_are_stored_under_the_tenant_and_the_key(backend: Backend) -> None:
    run(backend.storage().put("invoices/INV-1.txt", "one"))
    assert backend.stored() == {"acme/invoices/INV-1.txt": b"one"}


def test_keys_with_spaces_unicode_and_url_characters_round_trip_as_written(
    backend: Backend,
) -> None:
    keys = ["a b.txt", "Hóa đơn/1.txt", "plus+sign", "q?x#y&z=1", "50%.txt", "~tilde:colon"]
    store = backend.storage()

    async def scenario() -> tuple[list[bytes | None], list[str]]:
        for key in keys:
            await store.put(key, key)
        return [await store.get(key) for key in keys], await store.list()

    found, listed = run(scenario())
    assert found == [key.encode() for key in keys]
    assert listed == sorted(keys)
    assert backend.stored() == {f"acme/{key}": key.encode() for key in keys}


def test_get_of_a_missing_key_or_of_a_folder_is_none(backend: Backend) -> None:
    store = backend.storage()

    async def scenario() -> list[bytes | None]:
        await store.put("invoices/INV-1.txt", "one")
        return [await store.get("nothing.txt"), await store.get("invoices")]

    assert run(scenario()) == [None, None]


def test_put_replaces_the_blob_and_leaves_no_temporary_file(backend: Backend) -> None:
    store = backend.storage()

    async def scenario() -> bytes | None:
        await store.put("a.txt", "first")
        await store.put("a.txt", "second")
        return await store.get("a.txt")

    assert run(scenario()) == b"second"
    assert backend.stored() == {"acme/a.txt": b"second"}


def test_a_reader_sees_the_old_blob_or_the_new_one_never_part_of_one(backend: Backend) -> None:
    store = backend.storage()
    old, new = b"o" * 3_000_000, b"n" * 3_000_000
    run(store.put("big.bin", old))

    async def scenario() -> list[bytes | None]:
        writer = asyncio.create_task(store.put("big.bin", new))
        seen = []
        while not writer.done():
            seen.append(await store.get("big.bin"))
        await writer
        return [*seen, await store.get("big.bin")]

    seen = run(scenario())
    assert {blob in (old, new) for blob in seen} == {True}
    assert seen[-1] == new


def test_a_failed_write_leaves_the_old_blob_and_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the local backend's rename; for S3, a PUT cut off mid-body: tests/integration/test_s3.py
    files = Files(tmp_path / "storage")
    store = files.storage()
    run(store.put("a.txt", "old"))

    def broken_replace(source: str, target: str, **folders: int) -> None:
        raise OSError("disk on fire")

    monkeypatch.setattr("ket.folder.os.replace", broken_replace)
    with pytest.raises(OSError, match="disk on fire"):
        run(store.put("a.txt", "new"))
    assert files.stored() == {"acme/a.txt": b"old"}


def test_delete_reports_whether_there_was_a_blob(backend: Backend) -> None:
    store = backend.storage()

    async def scenario() -> list[object]:
        await store.put("invoices/INV-1.txt", "one")
        return [
            await store.delete("invoices/INV-1.txt"),
            await store.delete("invoices/INV-1.txt"),
            await store.delete("invoices"),  # a folder of keys is not a blob
            await store.get("invoices/INV-1.txt"),
        ]

    assert run(scenario()) == [True, False, False, None]
    assert backend.stored() == {}


def test_list_returns_the_keys_under_a_prefix_sorted(backend: Backend) -> None:
    store = backend.storage()

    async def scenario() -> list[list[str]]:
        for key in ["invoices/INV-2.txt", "invoices/INV-10.txt", "receipts/r1", "top.txt"]:
            await store.put(key, key)
        await store.put("invoices/2030/INV-3.txt", "nested")
        return [
            await store.list(),
            await store.list("invoices/"),
            await store.list("invoices/INV-1"),
            await store.list("inv"),
            await store.list("missing/"),
            await store.list("invoices/2030/INV-3.txt/"),
        ]

    everything, invoices, partial, by_letters, missing, below_a_blob = run(scenario())
    assert everything == [
        "invoices/2030/INV-3.txt",
        "invoices/INV-10.txt",
        "invoices/INV-2.txt",
        "receipts/r1",
        "top.txt",
    ]
    assert invoices == ["invoices/2030/INV-3.txt", "invoices/INV-10.txt", "invoices/INV-2.txt"]
    assert partial == ["invoices/INV-10.txt"]
    assert by_letters == invoices
    assert missing == below_a_blob == []


def test_list_of_a_tenant_with_no_blobs_is_empty(backend: Backend) -> None:
    assert run(backend.storage().list()) == []


def test_tenants_never_see_each_others_blobs(backend: Backend) -> None:
    acme, globex = backend.storage(tenant="acme"), backend.storage(tenant="globex")
    acme2 = backend.storage(tenant="acme2")  # a name that starts with the other's

    async def scenario() -> list[object]:
        await acme.put("invoices/INV-1.txt", "acme's")
        seen = [await globex.get("invoices/INV-1.txt"), await globex.list(), await acme2.list()]
        await globex.put("invoices/INV-1.txt", "globex's")
        await acme2.put("x", "acme2's")
        await globex.delete("invoices/INV-1.txt")
        return [*seen, await acme.get("invoices/INV-1.txt"), await acme.list()]

    assert run(scenario()) == [None, [], [], b"acme's", ["invoices/INV-1.txt"]]
    assert backend.stored() == {"acme/invoices/INV-1.txt": b"acme's", "acme2/x": b"acme2's"}


def test_two_tenants_writing_the_same_key_keep_two_blobs(backend: Backend) -> None:
    acme, globex = backend.storage(tenant="acme"), backend.storage(tenant="globex")

    async def scenario() -> list[object]:
        await acme.put("report.txt", "acme's report")
        await globex.put("report.txt", "globex's report")
        return [await acme.get("report.txt"), await globex.get("report.txt")]

    assert run(scenario()) == [b"acme's report", b"globex's report"]
    assert backend.stored() == {
        "acme/report.txt": b"acme's report",
        "globex/report.txt": b"globex's report",
    }


UNSAFE_KEYS = [
    ("/etc/passwd", "absolute paths are refused"),
    ("../globex/secret.txt", "'..' segments are refused"),
    ("invoices/../../globex/x", "'..' segments are refused"),
    ("./a.txt", "'.' segments are refused"),
    ("invoices//INV-1.txt", "empty segments are refused"),
    ("invoices/", "empty segments are refused"),
    ("", "it is empty"),
    ("invoices\\INV-1.txt", "backslashes are refused"),
    ("a\x00b", "control characters are refused"),
    ("a\nb", "control characters are refused"),
    ("%2e%2e/globex/secret.txt", "percent-escapes such as '%2e' or '%2f' are refused"),
    ("..%2Fglobex%2Fsecret.txt", "percent-escapes such as '%2e' or '%2f' are refused"),
    ("a%00b", "percent-escapes"),
    (".ket-tmp-123", "reserved"),
    ("x" * 300, "longer than 255 bytes"),
    ("é" * 200, "longer than 255 bytes"),  # 400 bytes in UTF-8
    ("a/" * 600 + "b", "longer than 1024 characters"),
]


@pytest.mark.parametrize(("key", "problem"), UNSAFE_KEYS)
def test_unsafe_keys_are_refused_naming_the_key(backend: Backend, key: str, problem: str) -> None:
    store = backend.storage()
    for attempt in (store.put(key, "x"), store.get(key), store.delete(key)):
        with pytest.raises(StorageKeyError) as raised:
            run(attempt)
        assert f"storage key {key!r} is not allowed: " in str(raised.value)
        assert problem in str(raised.value)
    assert isinstance(raised.value, ValueError)
    assert backend.untouched()  # nothing written anywhere, not even a folder


@pytest.mark.parametrize("prefix", ["/etc", "../", "invoices/../../x", "a\\b", "%2e%2e/"])
def test_unsafe_list_prefixes_are_refused(backend: Backend, prefix: str) -> None:
    with pytest.raises(StorageKeyError, match="storage prefix"):
        run(backend.storage().list(prefix))


def test_on_disk_a_key_below_a_blob_is_refused_clearly(tmp_path: Path) -> None:
    store = Files(tmp_path).storage()
    run(store.put("a", "blob"))
    with pytest.raises(StorageKeyError, match="'a/b' cannot be written: part of its path"):
        run(store.put("a/b", "below a blob"))
    run(store.put("c/d", "blob"))
    with pytest.raises(StorageKeyError, match="'c' cannot be written: it holds other keys"):
        run(store.put("c", "over a folder"))


def test_in_a_bucket_a_key_and_the_keys_below_it_are_separate_blobs(
    s3_server: S3Server, s3_bucket: str
) -> None:
    bucket = Bucket(s3_server, s3_bucket)
    store = bucket.storage()

    async def scenario() -> list[object]:
        await store.put("a", "blob")
        await store.put("a/b", "below")
        return [await store.get("a"), await store.get("a/b"), await store.list()]

    assert run(scenario()) == [b"blob", b"below", ["a", "a/b"]]


@pytest.mark.parametrize(
    ("effects", "call", "message"),
    [
        (("storage:read",), "put", "may not write storage: declare the effect 'storage:write'"),
        (("storage:read",), "delete", "may not write storage: declare the effect 'storage:write'"),
        (("storage:write",), "get", "may not read storage: declare the effect 'storage:read'"),
        (("storage:write",), "list", "may not read storage: declare the effect 'storage:read'"),
        (("read:sales.Order",), "get", "may not read storage: declare the effect 'storage:read'"),
    ],
)
def test_undeclared_use_raises_effect_error_naming_the_effect(
    backend: Backend, effects: tuple[str, ...], call: str, message: str
) -> None:
    store = backend.storage(*effects)
    args = {"put": ("k", "v"), "delete": ("k",), "get": ("k",), "list": ()}[call]
    with pytest.raises(EffectError) as raised:
        run(getattr(store, call)(*args))
    assert str(raised.value) == f"sales.issue_invoice {message}"
    assert backend.untouched()


def test_the_effect_is_checked_before_the_key(backend: Backend) -> None:
    with pytest.raises(EffectError, match="storage:write"):
        run(backend.storage("storage:read").put("../escape", "x"))


@pytest.mark.parametrize("tenant", ["", "..", "a/b", ".hidden"])
def test_a_tenant_that_cannot_name_a_folder_is_refused(tmp_path: Path, tenant: str) -> None:
    with pytest.raises(ValueError, match="cannot name a storage folder"):
        Storage(operation(*BOTH), tenant, blobs=LocalBlobs(tmp_path))


def test_file_io_runs_off_the_event_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    threads: list[int] = []
    real_write, real_read = local_module._write, local_module._read

    def write(*args: Any) -> None:
        threads.append(threading.get_ident())
        real_write(*args)

    def read(*args: Any) -> bytes | None:
        threads.append(threading.get_ident())
        return real_read(*args)

    monkeypatch.setattr(local_module, "_write", write)
    monkeypatch.setattr(local_module, "_read", read)
    store = Files(tmp_path).storage()

    async def scenario() -> int:
        await store.put("a.txt", "x")
        await store.get("a.txt")
        return threading.get_ident()

    loop_thread = run(scenario())
    assert len(threads) == 2
    assert loop_thread not in threads


def test_a_plain_handler_uses_storage_without_await_through_the_adapter(backend: Backend) -> None:
    store = backend.storage()

    async def scenario() -> tuple[bytes | None, list[str]]:
        plain = Blocking(store, asyncio.get_running_loop())

        def handler() -> tuple[bytes | None, list[str]]:
            plain.put("invoices/INV-1.txt", "one")
            return plain.get("invoices/INV-1.txt"), plain.list()

        return await asyncio.to_thread(handler)

    assert run(scenario()) == (b"one", ["invoices/INV-1.txt"])


def test_data_of_another_type_is_refused(backend: Backend) -> None:
    with pytest.raises(TypeError, match="bytes or str, got dict"):
        run(backend.storage().put("a.json", {"not": "serialised"}))  # type: ignore[arg-type]
    assert backend.untouched()


def test_without_a_backend_storage_keeps_files_under_the_projects_dot_ket(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.ket]\nworkspace = "app.py"\n')
    (tmp_path / "app" / "handlers").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "app" / "handlers")  # a command run from deeper in the project
    run(Storage(operation(*BOTH), "acme").put("a.txt", "here"))
    assert (tmp_path / ".ket" / "storage" / "acme" / "a.txt").read_text() == "here"
    assert list((tmp_path / "app").rglob("*.txt")) == []
