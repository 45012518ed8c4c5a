"""`ctx.storage`: the tenant's blobs, as files under `<root>/<tenant>/`, within declared effects.

Keys are relative POSIX paths of plain segments (`invoices/INV-1001.txt`); one tenant's keys
can never name another tenant's files. Writes are atomic (a temporary file renamed over the
key), so a reader sees the old blob or the new one, never half of one. File I/O runs in a
worker thread, off the event loop.
"""

from __future__ import annotations

import asyncio
import builtins
import os
import tempfile
from pathlib import Path

from ket.catalog import OperationSpec
from ket.errors import EffectError, StorageKeyError

DEFAULT_STORAGE_ROOT = Path(".ket") / "storage"
# Temporary files of unfinished writes; no key may name one, and listings skip them.
_TEMP_PREFIX = ".ket-tmp-"
_MAX_SEGMENT_BYTES = 255  # the usual file-name limit
_MAX_KEY_LENGTH = 1_024
_EXAMPLE = "use a relative path of plain names, e.g. 'invoices/INV-1001.txt'"


class Storage:
    """Blobs of one tenant: `put` and `delete` need `storage:write`, `get` and `list` need
    `storage:read`::

        await ctx.storage.put("invoices/INV-1001.txt", "Invoice INV-1001\\n")
        data = await ctx.storage.get("invoices/INV-1001.txt")   # bytes, or None
        keys = await ctx.storage.list("invoices/")               # sorted keys
    """

    __ket_api__ = True

    def __init__(
        self,
        operation: OperationSpec,
        tenant: str,
        *,
        root: str | os.PathLike[str] = DEFAULT_STORAGE_ROOT,
    ) -> None:
        if key_problem(tenant) or "/" in tenant or tenant.startswith("."):
            raise ValueError(f"tenant {tenant!r} cannot name a storage folder")
        self._operation = operation
        self.folder = Path(root) / tenant

    async def put(self, key: str, data: bytes | str) -> None:
        """Store `data` (text is stored as UTF-8) under `key`, replacing any blob there."""
        self._allow("write")
        path = self._path(key)
        if isinstance(data, str):
            blob = data.encode("utf-8")
        elif isinstance(data, bytes | bytearray | memoryview):
            blob = bytes(data)
        else:
            raise TypeError(f"storage data must be bytes or str, got {type(data).__name__}")
        await asyncio.to_thread(_write, path, key, blob)

    async def get(self, key: str) -> bytes | None:
        """The blob stored under `key`, or None."""
        self._allow("read")
        return await asyncio.to_thread(_read, self._path(key))

    async def delete(self, key: str) -> bool:
        """Delete the blob under `key`; False if there was none."""
        self._allow("write")
        return await asyncio.to_thread(_delete, self._path(key))

    async def list(self, prefix: str = "") -> builtins.list[str]:
        """Every key that starts with `prefix`, sorted."""
        self._allow("read")
        if not isinstance(prefix, str) or prefix.startswith("/") or "\\" in prefix:
            raise StorageKeyError(f"storage prefix {prefix!r} is not allowed; {_EXAMPLE}")
        folder, _, _ = prefix.rpartition("/")
        start = self._path(folder, what="prefix") if folder else self.folder
        return await asyncio.to_thread(_list, self.folder, start, prefix)

    def _allow(self, access: str) -> None:
        if not self._operation.allows("storage", access):
            raise EffectError(
                f"{self._operation.name} may not {access} storage: "
                f"declare the effect 'storage:{access}'"
            )

    def _path(self, key: str, *, what: str = "key") -> Path:
        problem = key_problem(key)
        if problem is not None:
            raise StorageKeyError(f"storage {what} {key!r} is not allowed: {problem}; {_EXAMPLE}")
        return self.folder.joinpath(*key.split("/"))

    def __repr__(self) -> str:
        return f"Storage({str(self.folder)!r})"


def key_problem(key: object) -> str | None:
    """What makes `key` unsafe as a storage key, or None when it is safe."""
    if not isinstance(key, str):
        return f"a key must be a string, not {type(key).__name__}"
    if not key:
        return "it is empty"
    if len(key) > _MAX_KEY_LENGTH:
        return f"it is longer than {_MAX_KEY_LENGTH} characters"
    if key.startswith("/"):
        return "absolute paths are refused"
    if "\\" in key:
        return "backslashes are refused"
    for segment in key.split("/"):
        problem = _segment_problem(segment)
        if problem is not None:
            return problem
    return None


def _segment_problem(segment: str) -> str | None:
    if not segment:
        return "empty segments are refused"
    if segment in (".", ".."):
        return f"{segment!r} segments are refused"
    if segment.startswith(_TEMP_PREFIX):
        return f"names starting with {_TEMP_PREFIX!r} are reserved"
    if any(ord(c) < 32 or c == "\x7f" for c in segment):
        return "control characters are refused"
    if len(segment.encode("utf-8")) > _MAX_SEGMENT_BYTES:
        return f"a segment is longer than {_MAX_SEGMENT_BYTES} bytes"
    return None


def _write(path: Path, key: str, blob: bytes) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise StorageKeyError(
            f"storage key {key!r} cannot be written: part of its path is a stored blob"
        ) from None
    if path.is_dir():
        raise StorageKeyError(f"storage key {key!r} cannot be written: it holds other keys")
    fd, temp = tempfile.mkstemp(prefix=_TEMP_PREFIX, dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(blob)
            file.flush()
            os.fsync(file.fileno())  # the rename must not land before the data does
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None


def _delete(path: Path) -> bool:
    if path.is_dir():  # a folder of other keys is not a blob
        return False
    try:
        path.unlink()
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return False
    # Emptied folders stay: removing them would race a concurrent put into the same folder.
    return True


def _list(folder: Path, start: Path, prefix: str) -> list[str]:
    keys = []
    for directory, _, files in os.walk(start):
        relative = Path(directory).relative_to(folder)
        for name in files:
            key = (relative / name).as_posix()
            if not name.startswith(_TEMP_PREFIX) and key.startswith(prefix):
                keys.append(key)
    return sorted(keys)
