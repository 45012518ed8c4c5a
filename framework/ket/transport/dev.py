"""DevSender: writes each message as a readable `.eml` file, for development (`dev:`).

One folder per tenant (`.ket/outbox/<tenant>/` by default); each file is named by the time it
was written and its idempotency key, so `ls` shows the outbox in order. Any mail client, or
`email.message_from_bytes`, opens the files.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from ket.transport.message import Message

DEFAULT_OUTBOX = Path(".ket") / "outbox"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_TENANT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")


class DevSender:
    """Delivers into `folder/<tenant>/<time>-<key>.eml`; nothing leaves the machine."""

    def __init__(
        self,
        folder: str | os.PathLike[str] = DEFAULT_OUTBOX,
        *,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.folder = Path(folder)
        self._clock = clock or (lambda: datetime.now(UTC))

    async def send(self, message: Message, *, tenant: str) -> None:
        """Write the message as an `.eml` file (atomically: readers never see half a file)."""
        if not _TENANT.fullmatch(tenant):
            raise ValueError(f"tenant {tenant!r} cannot name an outbox folder")
        now = self._clock().astimezone(UTC)
        data = message.to_email(tenant=tenant, date=now).as_bytes()
        path = self.folder / tenant / file_name(message.idempotency_key, now)
        await asyncio.to_thread(_write, path, data)

    def __repr__(self) -> str:
        return f"DevSender({str(self.folder)!r})"


def file_name(key: str, at: datetime) -> str:
    """`<UTC time>-<readable key>-<hash>.eml`: sorted by time, unique per key."""
    readable = _UNSAFE.sub("_", key).strip("._")[:80] or "message"
    digest = hashlib.sha256(key.encode()).hexdigest()[:8]
    return f"{at:%Y%m%dT%H%M%S.%fZ}-{readable}-{digest}.eml"


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=".ket-tmp-", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
