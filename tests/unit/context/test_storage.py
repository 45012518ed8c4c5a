"""`ctx.storage`: tenant folders, atomic writes, key safety and the storage effects."""

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
from ket.context import storage as storage_module
from ket.declare.effect import parse_effect
from ket.errors import EffectError, StorageKeyError

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


def storage(root: Path, *effects: str, tenant: str = "acme") -> Storage:
    return Storage(operation(*(effects or BOTH)), tenant, root=root)


def test_put_then_get_returns_the_blob_text_as_utf8(tmp_path: Path) -> None:
    store = storage(tmp_path)

    async def scenario() -> tuple[bytes | None, bytes | None]:
        await store.put("invoices/INV-1.txt", "Hóa đơn 1\n")
        await store.put("raw.bin", b"\x00\xff")
        return await store.get("invoices/INV-1.txt"), await store.get("raw.bin")

    assert run(scenario()) == ("Hóa đơn 1\n".encode(), b"\x00\xff")


def test_blobs_are_files_under_the_root_and_tenant(tmp_path: Path) -> None:
    run(storage(tmp_path).put("invoices/INV-1.txt", "one"))
    assert (tmp_path / "acme" / "invoices" / "INV-1.txt").read_text() == "one"


def test_get_of_a_missing_key_or_of_a_folder_is_none(tmp_path: Path) -> None:
    store = storage(tmp_path)

    async def scenario() -> list[bytes | None]:
        await store.put("invoices/INV-1.txt", "one")
        return [await store.get("nothing.txt"), await store.get("invoices")]

    assert run(scenario()) == [None, None]


def test_put_replaces_the_blob_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    store = storage(tmp_path)

    async def scenario() -> bytes | None:
        await store.put("a.txt", "first")
        await store.put("a.txt", "second")
        return await store.get("a.txt")

    assert run(scenario()) == b"second"
    assert [p.name for p in (tmp_path / "acme").iterdir()] == ["a.txt"]


def test_a_failed_write_leaves_the_old_blob_and_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = storage(tmp_path)
    run(store.put("a.txt", "old"))

    def broken_replace(source: str, target: str, **folders: int) -> None:
        raise OSError("disk on fire")

    monkeypatch.setattr(storage_module.os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk on fire"):
        run(store.put("a.txt", "new"))
    assert [p.name for p in (tmp_path / "acme").iterdir()] == ["a.txt"]
    assert (tmp_path / "acme" / "a.txt").read_text() == "old"


def test_delete_reports_whether_there_was_a_blob(tmp_path: Path) -> None:
    store = storage(tmp_path)

    async def scenario() -> list[object]:
        await store.put("invoices/INV-1.txt", "one")
        return [
            await store.delete("invoices/INV-1.txt"),
            await store.delete("invoices/INV-1.txt"),
            await store.delete("invoices"),  # a folder of keys is not a blob
            await store.get("invoices/INV-1.txt"),
        ]

    assert run(scenario()) == [True, False, False, None]


def test_list_returns_the_keys_under_a_prefix_sorted(tmp_path: Path) -> None:
    store = storage(tmp_path)

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
        ]

    everything, invoices, partial, by_letters, missing = run(scenario())
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
    assert missing == []


def test_list_of_a_tenant_with_no_blobs_is_empty(tmp_path: Path) -> None:
    assert run(storage(tmp_path).list()) == []


def test_tenants_never_see_each_others_blobs(tmp_path: Path) -> None:
    acme, globex = storage(tmp_path, tenant="acme"), storage(tmp_path, tenant="globex")

    async def scenario() -> list[object]:
        await acme.put("invoices/INV-1.txt", "acme's")
        seen = [await globex.get("invoices/INV-1.txt"), await globex.list()]
        await globex.put("invoices/INV-1.txt", "globex's")
        await globex.delete("invoices/INV-1.txt")
        return [*seen, await acme.get("invoices/INV-1.txt"), await acme.list()]

    assert run(scenario()) == [None, [], b"acme's", ["invoices/INV-1.txt"]]


@pytest.mark.parametrize(
    ("key", "problem"),
    [
        ("/etc/passwd", "absolute paths are refused"),
        ("../globex/secret.txt", "'..' segments are refused"),
        ("invoices/../../globex/x", "'..' segments are refused"),
        ("./a.txt", "'.' segments are refused"),
        ("invoices//INV-1.txt", "empty segments are refused"),
        ("invoices/", "empty segments are refused"),
        ("", "it is empty"),
        ("invoices\\INV-1.txt", "backslashes are refused"),
        ("a\x00b", "control characters are refused"),
        (".ket-tmp-123", "reserved"),
        ("x" * 300, "longer than 255 bytes"),
    ],
)
def test_unsafe_keys_are_refused_naming_the_key(tmp_path: Path, key: str, problem: str) -> None:
    store = storage(tmp_path / "storage")
    for attempt in (store.put(key, "x"), store.get(key), store.delete(key)):
        with pytest.raises(StorageKeyError) as raised:
            run(attempt)
        assert f"storage key {key!r} is not allowed: " in str(raised.value)
        assert problem in str(raised.value)
    assert isinstance(raised.value, ValueError)
    assert list(tmp_path.rglob("*")) == []  # nothing written anywhere, not even the folder


@pytest.mark.parametrize("prefix", ["/etc", "../", "invoices/../../x", "a\\b"])
def test_unsafe_list_prefixes_are_refused(tmp_path: Path, prefix: str) -> None:
    with pytest.raises(StorageKeyError, match="storage prefix"):
        run(storage(tmp_path).list(prefix))


def test_a_key_below_a_blob_is_refused_clearly(tmp_path: Path) -> None:
    store = storage(tmp_path)
    run(store.put("a", "blob"))
    with pytest.raises(StorageKeyError, match="'a/b' cannot be written: part of its path"):
        run(store.put("a/b", "below a blob"))
    run(store.put("c/d", "blob"))
    with pytest.raises(StorageKeyError, match="'c' cannot be written: it holds other keys"):
        run(store.put("c", "over a folder"))


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
    tmp_path: Path, effects: tuple[str, ...], call: str, message: str
) -> None:
    store = storage(tmp_path, *effects)
    args = {"put": ("k", "v"), "delete": ("k",), "get": ("k",), "list": ()}[call]
    with pytest.raises(EffectError) as raised:
        run(getattr(store, call)(*args))
    assert str(raised.value) == f"sales.issue_invoice {message}"
    assert list(tmp_path.rglob("*")) == []


def test_the_effect_is_checked_before_the_key(tmp_path: Path) -> None:
    with pytest.raises(EffectError, match="storage:write"):
        run(storage(tmp_path, "storage:read").put("../escape", "x"))


@pytest.mark.parametrize("tenant", ["", "..", "a/b", ".hidden"])
def test_a_tenant_that_cannot_name_a_folder_is_refused(tmp_path: Path, tenant: str) -> None:
    with pytest.raises(ValueError, match="cannot name a storage folder"):
        Storage(operation(*BOTH), tenant, root=tmp_path)


def test_file_io_runs_off_the_event_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    threads: list[int] = []
    real_write, real_read = storage_module._write, storage_module._read

    def write(*args: Any) -> None:
        threads.append(threading.get_ident())
        real_write(*args)

    def read(*args: Any) -> bytes | None:
        threads.append(threading.get_ident())
        return real_read(*args)

    monkeypatch.setattr(storage_module, "_write", write)
    monkeypatch.setattr(storage_module, "_read", read)
    store = storage(tmp_path)

    async def scenario() -> int:
        await store.put("a.txt", "x")
        await store.get("a.txt")
        return threading.get_ident()

    loop_thread = run(scenario())
    assert len(threads) == 2
    assert loop_thread not in threads


def test_a_plain_handler_uses_storage_without_await_through_the_adapter(tmp_path: Path) -> None:
    store = storage(tmp_path)

    async def scenario() -> tuple[bytes | None, list[str]]:
        plain = Blocking(store, asyncio.get_running_loop())

        def handler() -> tuple[bytes | None, list[str]]:
            plain.put("invoices/INV-1.txt", "one")
            return plain.get("invoices/INV-1.txt"), plain.list()

        return await asyncio.to_thread(handler)

    assert run(scenario()) == (b"one", ["invoices/INV-1.txt"])


def test_data_of_another_type_is_refused(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="bytes or str, got dict"):
        run(storage(tmp_path).put("a.json", {"not": "serialised"}))  # type: ignore[arg-type]
