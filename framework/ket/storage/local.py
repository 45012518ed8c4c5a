"""LocalBlobs: blobs as files under `<root>/<tenant>/<key>`, the default backend.

Below the root no symbolic link is ever followed (ket.folder), so a planted link cannot lead a
read or a write into another tenant's folder or out of the root. Writes go to a temporary file
in the key's folder, flushed and renamed over the key: a reader sees the old blob or the new
one, and a failed write leaves neither a partial blob nor a temporary file. Blobs are 0600 files
in 0700 folders. File I/O runs in a worker thread, off the event loop.

A key cannot be both a blob and a folder of other keys here: after `a`, `a/b` is refused.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from ket import folder
from ket.errors import StorageKeyError
from ket.project import KET_FOLDER, project_root

_NO_LINKS = "ket never follows links in storage"


def default_storage_root() -> Path:
    """`<project root>/.ket/storage`, absolute: the same folder from wherever a command runs."""
    return project_root() / KET_FOLDER / "storage"


class LocalBlobs:
    """Blobs as files under `root`, one folder per tenant (see the module docstring)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    async def blob_put(self, tenant: str, key: str, data: bytes) -> None:
        await asyncio.to_thread(_write, self.root, tenant, key.split("/"), key, data)

    async def blob_get(self, tenant: str, key: str) -> bytes | None:
        return await asyncio.to_thread(_read, self.root, tenant, key.split("/"), key)

    async def blob_delete(self, tenant: str, key: str) -> bool:
        return await asyncio.to_thread(_delete, self.root, tenant, key.split("/"), key)

    async def blob_list(self, tenant: str, prefix: str) -> list[str]:
        start, _, _ = prefix.rpartition("/")
        parts = start.split("/") if start else []
        return await asyncio.to_thread(_list, self.root, tenant, parts, prefix)

    def __repr__(self) -> str:
        return f"LocalBlobs({str(self.root)!r})"


def _write(root: Path, tenant: str, parts: list[str], key: str, blob: bytes) -> None:
    try:
        with folder.opened(root, [tenant, *parts[:-1]], create=True) as where:
            assert where is not None  # created
            folder.write(where, parts[-1], blob, len(parts))
    except folder.Refused as refused:
        if refused.kind == "folder":
            raise StorageKeyError(
                f"storage key {key!r} cannot be written: it holds other keys"
            ) from None
        if refused.kind != "link" and refused.depth < len(parts):
            raise StorageKeyError(
                f"storage key {key!r} cannot be written: part of its path is a stored blob"
            ) from None
        raise _refused(tenant, key, parts, refused) from None


def _read(root: Path, tenant: str, parts: list[str], key: str) -> bytes | None:
    try:
        with folder.opened(root, [tenant, *parts[:-1]], create=False) as where:
            return None if where is None else folder.read(where, parts[-1], len(parts))
    except folder.Refused as refused:
        if _no_such_key(refused, parts):
            return None
        raise _refused(tenant, key, parts, refused) from None


def _delete(root: Path, tenant: str, parts: list[str], key: str) -> bool:
    # Emptied folders stay: removing them would race a concurrent put into the same folder.
    try:
        with folder.opened(root, [tenant, *parts[:-1]], create=False) as where:
            return where is not None and folder.remove(where, parts[-1], len(parts))
    except folder.Refused as refused:
        if _no_such_key(refused, parts):
            return False
        raise _refused(tenant, key, parts, refused) from None


def _list(root: Path, tenant: str, parts: list[str], prefix: str) -> list[str]:
    try:
        with folder.opened(root, [tenant, *parts], create=False) as where:
            found = [] if where is None else folder.files(where)
    except folder.Refused as refused:
        if _no_such_key(refused, [*parts, ""]):
            return []
        raise _refused(tenant, prefix, parts, refused, what="prefix") from None
    base = "".join(f"{part}/" for part in parts)
    return sorted(key for key in (base + path for path in found) if key.startswith(prefix))


def _no_such_key(refused: folder.Refused, parts: list[str]) -> bool:
    """A blob where a folder of the path would be: the key names nothing."""
    return refused.kind == "file" and refused.depth < len(parts)


def _refused(
    tenant: str, key: str, parts: list[str], refused: folder.Refused, *, what: str = "key"
) -> StorageKeyError:
    if refused.depth == 0:
        where = f"the folder of tenant {tenant!r}"
    else:
        where = repr("/".join(parts[: refused.depth]))
    kind = "a symbolic link" if refused.kind == "link" else "not a regular file or folder"
    return StorageKeyError(f"storage {what} {key!r} is refused: {where} is {kind}; {_NO_LINKS}")
