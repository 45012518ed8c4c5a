"""`ctx.storage`: the tenant's blobs, within declared effects, wherever KET_STORAGE_URL keeps them.

This part checks what is the same on every backend: the effect, the key (ket.storage.key: one
tenant's keys can never name another tenant's blobs), the size cap. Then it hands the call to the
BlobStore (ket.storage): files under `.ket/storage/<tenant>/` by default, or an S3-compatible
bucket. Every backend writes atomically (a reader sees the old blob or the new one, never half
of one) and never blocks the event loop.
"""

from __future__ import annotations

import builtins
import os
from collections.abc import Mapping

from ket.catalog import OperationSpec
from ket.context.part import Part
from ket.errors import BlobRejected, EffectError, KetError, StorageKeyError
from ket.storage import BlobStore, LocalBlobs, default_storage_root, key_problem
from ket.storage.key import EXAMPLE

DEFAULT_MAX_BLOB_BYTES = 100 * 1024 * 1024
MAX_BLOB_BYTES_VARIABLE = "KET_STORAGE_MAX_BYTES"


class Storage(Part):
    """Blobs of one tenant: `put` and `delete` need `storage:write`, `get` and `list` need
    `storage:read`::

        await ctx.storage.put("invoices/INV-1001.txt", "Invoice INV-1001\\n")
        data = await ctx.storage.get("invoices/INV-1001.txt")   # bytes, or None
        keys = await ctx.storage.list("invoices/")               # sorted keys
    """

    __ket_api__ = True
    # The backend and the operation are the context's business, not the handler's: kept in
    # mangled slots, off the documented surface (see __dir__).
    __slots__ = ("__blobs", "__max_bytes", "__operation", "__tenant")

    def __init__(
        self,
        operation: OperationSpec,
        tenant: str,
        *,
        blobs: BlobStore | None = None,  # None: files under the project's .ket/storage
        max_blob_bytes: int = DEFAULT_MAX_BLOB_BYTES,
    ) -> None:
        if key_problem(tenant) or "/" in tenant or tenant.startswith("."):
            raise ValueError(f"tenant {tenant!r} cannot name a storage folder")
        if isinstance(max_blob_bytes, bool) or not isinstance(max_blob_bytes, int):
            raise TypeError(f"max_blob_bytes must be an integer, got {max_blob_bytes!r}")
        if max_blob_bytes < 1:
            raise ValueError(f"max_blob_bytes must be positive, got {max_blob_bytes!r}")
        self.__operation = operation
        self.__blobs = blobs if blobs is not None else LocalBlobs(default_storage_root())
        self.__tenant = tenant
        self.__max_bytes = max_blob_bytes

    async def put(self, key: str, data: bytes | str) -> None:
        """Store `data` (text is stored as UTF-8) under `key`, replacing any blob there."""
        self.__allow("write")
        self.__check(key)
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
        await self.__blobs.blob_put(self.__tenant, key, blob)

    async def get(self, key: str) -> bytes | None:
        """The blob stored under `key`, or None."""
        self.__allow("read")
        self.__check(key)
        return await self.__blobs.blob_get(self.__tenant, key)

    async def delete(self, key: str) -> bool:
        """Delete the blob under `key`; False if there was none."""
        self.__allow("write")
        self.__check(key)
        return await self.__blobs.blob_delete(self.__tenant, key)

    async def list(self, prefix: str = "") -> builtins.list[str]:
        """Every key that starts with `prefix`, sorted."""
        self.__allow("read")
        if not isinstance(prefix, str) or prefix.startswith("/") or "\\" in prefix:
            raise StorageKeyError(f"storage prefix {prefix!r} is not allowed; {EXAMPLE}")
        start, _, _ = prefix.rpartition("/")
        if start:
            self.__check(start, what="prefix")
        return await self.__blobs.blob_list(self.__tenant, prefix)

    def __allow(self, access: str) -> None:
        operation = self.__operation
        if not operation.allows("storage", access):
            raise EffectError(
                f"{operation.name} may not {access} storage: declare the effect 'storage:{access}'"
            )

    def __check(self, key: str, *, what: str = "key") -> None:
        problem = key_problem(key)
        if problem is not None:
            raise StorageKeyError(f"storage {what} {key!r} is not allowed: {problem}; {EXAMPLE}")

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
