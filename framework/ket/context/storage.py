"""`ctx.storage`: the tenant's blobs, as files under `<root>/<tenant>/`, within declared effects.

Keys are relative POSIX paths of plain segments (`invoices/INV-1001.txt`); one tenant's keys
can never name another tenant's files, and no symbolic link below the root is ever followed
(ket.folder), so a planted link cannot lead there either. Writes are atomic (a temporary file
renamed over the key), so a reader sees the old blob or the new one, never half of one; blobs are
0600 files in 0700 folders, and none is larger than the size cap. File I/O runs in a worker
thread, off the event loop.
"""

from __future__ import annotations

import asyncio
import builtins
import os
import re
from collections.abc import Mapping
from pathlib import Path

from ket import folder
from ket.catalog import OperationSpec
from ket.context.part import Part
from ket.errors import BlobRejected, EffectError, KetError, StorageKeyError

DEFAULT_STORAGE_ROOT = Path(".ket") / "storage"
DEFAULT_MAX_BLOB_BYTES = 100 * 1024 * 1024
MAX_BLOB_BYTES_VARIABLE = "KET_STORAGE_MAX_BYTES"
# Temporary files of unfinished writes; no key may name one, and listings skip them.
_TEMP_PREFIX = folder.TEMP_PREFIX
_MAX_SEGMENT_BYTES = 255  # the usual file-name limit
_MAX_KEY_LENGTH = 1_024
_EXAMPLE = "use a relative path of plain names, e.g. 'invoices/INV-1001.txt'"
# C0 and C1 controls, DEL and the Unicode line separators: nothing a file name should show.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")  # a name no file system can encode
_NO_LINKS = "ket never follows links in storage"


class Storage(Part):
    """Blobs of one tenant: `put` and `delete` need `storage:write`, `get` and `list` need
    `storage:read`::

        await ctx.storage.put("invoices/INV-1001.txt", "Invoice INV-1001\\n")
        data = await ctx.storage.get("invoices/INV-1001.txt")   # bytes, or None
        keys = await ctx.storage.list("invoices/")               # sorted keys
    """

    __ket_api__ = True
    # The folder and the operation are the context's business, not the handler's: kept in
    # mangled slots, off the documented surface (see __dir__).
    __slots__ = ("__max_bytes", "__operation", "__root", "__tenant")

    def __init__(
        self,
        operation: OperationSpec,
        tenant: str,
        *,
        root: str | os.PathLike[str] = DEFAULT_STORAGE_ROOT,
        max_blob_bytes: int = DEFAULT_MAX_BLOB_BYTES,
    ) -> None:
        if key_problem(tenant) or "/" in tenant or tenant.startswith("."):
            raise ValueError(f"tenant {tenant!r} cannot name a storage folder")
        if isinstance(max_blob_bytes, bool) or not isinstance(max_blob_bytes, int):
            raise TypeError(f"max_blob_bytes must be an integer, got {max_blob_bytes!r}")
        if max_blob_bytes < 1:
            raise ValueError(f"max_blob_bytes must be positive, got {max_blob_bytes!r}")
        self.__operation = operation
        self.__root = Path(root)
        self.__tenant = tenant
        self.__max_bytes = max_blob_bytes

    async def put(self, key: str, data: bytes | str) -> None:
        """Store `data` (text is stored as UTF-8) under `key`, replacing any blob there."""
        self.__allow("write")
        parts = self.__parts(key)
        if isinstance(data, str):
            blob = data.encode("utf-8")
        elif isinstance(data, bytes | bytearray | memoryview):
            blob = bytes(data)
        else:
            raise TypeError(f"storage data must be bytes or str, got {type(data).__name__}")
        if len(blob) > self.__max_bytes:
            raise BlobRejected(
                f"storage key {key!r}: the blob is {len(blob)} bytes, more than the cap of "
                f"{self.__max_bytes} ({MAX_BLOB_BYTES_VARIABLE}); nothing was written"
            )
        await asyncio.to_thread(_write, self.__root, self.__tenant, parts, key, blob)

    async def get(self, key: str) -> bytes | None:
        """The blob stored under `key`, or None."""
        self.__allow("read")
        parts = self.__parts(key)
        return await asyncio.to_thread(_read, self.__root, self.__tenant, parts, key)

    async def delete(self, key: str) -> bool:
        """Delete the blob under `key`; False if there was none."""
        self.__allow("write")
        parts = self.__parts(key)
        return await asyncio.to_thread(_delete, self.__root, self.__tenant, parts, key)

    async def list(self, prefix: str = "") -> builtins.list[str]:
        """Every key that starts with `prefix`, sorted."""
        self.__allow("read")
        if not isinstance(prefix, str) or prefix.startswith("/") or "\\" in prefix:
            raise StorageKeyError(f"storage prefix {prefix!r} is not allowed; {_EXAMPLE}")
        start, _, _ = prefix.rpartition("/")
        parts = self.__parts(start, what="prefix") if start else []
        return await asyncio.to_thread(_list, self.__root, self.__tenant, parts, prefix)

    def __allow(self, access: str) -> None:
        operation = self.__operation
        if not operation.allows("storage", access):
            raise EffectError(
                f"{operation.name} may not {access} storage: declare the effect 'storage:{access}'"
            )

    def __parts(self, key: str, *, what: str = "key") -> builtins.list[str]:
        problem = key_problem(key)
        if problem is not None:
            raise StorageKeyError(f"storage {what} {key!r} is not allowed: {problem}; {_EXAMPLE}")
        return key.split("/")

    def __repr__(self) -> str:
        return f"Storage(tenant={self.__tenant!r})"


def max_blob_bytes_from(environ: Mapping[str, str] = os.environ) -> int:
    """The blob size cap KET_STORAGE_MAX_BYTES sets (a whole number of bytes), else 100 MiB."""
    given = environ.get(MAX_BLOB_BYTES_VARIABLE)
    if given is None or given == "":
        return DEFAULT_MAX_BLOB_BYTES
    if not given.isascii() or not given.strip().isdigit() or int(given) < 1:
        raise KetError(
            f"{MAX_BLOB_BYTES_VARIABLE} must be a positive whole number of bytes, got {given!r}"
        )
    return int(given)


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
    if _CONTROL.search(segment):
        return "control characters are refused"
    if _SURROGATE.search(segment):
        return "lone surrogates are refused"
    if len(segment.encode("utf-8")) > _MAX_SEGMENT_BYTES:
        return f"a segment is longer than {_MAX_SEGMENT_BYTES} bytes"
    return None


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
