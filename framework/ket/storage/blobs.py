"""The one interface between `ctx.storage` and where blobs live: the BlobStore protocol.

`ctx.storage` checks the effect, the key (ket.storage.key) and the size cap before it calls a
BlobStore, so a backend receives only safe keys and blobs within the cap. The backend's part of
the contract, the same for every backend and tested on each:

- a call names its tenant, and reaches that tenant's blobs only: no key, prefix or listing of
  one tenant ever names, returns or changes another tenant's blob;
- `blob_put` is atomic: a reader sees the old blob or the new one, never part of one, and a put
  that fails leaves the old blob (or nothing) and no partial object or temporary file behind;
- `blob_list` returns the keys that start with `prefix`, sorted, and nothing that is not a key;
- I/O never blocks the event loop.
"""

from __future__ import annotations

from typing import Protocol


class BlobStore(Protocol):
    """Blobs of every tenant, each tenant in a space of its own."""

    async def blob_put(self, tenant: str, key: str, data: bytes) -> None:
        """Store `data` under `key`, atomically replacing any blob there."""
        ...

    async def blob_get(self, tenant: str, key: str) -> bytes | None:
        """The blob under `key`, or None."""
        ...

    async def blob_delete(self, tenant: str, key: str) -> bool:
        """Delete the blob under `key`; False if there was none."""
        ...

    async def blob_list(self, tenant: str, prefix: str) -> list[str]:
        """Every key of the tenant that starts with `prefix`, sorted."""
        ...
