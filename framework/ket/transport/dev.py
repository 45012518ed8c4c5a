"""DevSender: writes each message as a readable `.eml` file, for development (`dev:`).

One folder per tenant (`.ket/outbox/<tenant>/` by default); each file is named by the time it
was written and its idempotency key, so `ls` shows the outbox in order. Any mail client, or
`email.message_from_bytes`, opens the files. Files are 0600 in folders 0700, and a symbolic link
planted in place of a tenant's folder is refused, never written through (ket.folder).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from ket import folder as private
from ket.errors import TransportError
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
        name = file_name(message.idempotency_key, now)
        # building the MIME email takes time in proportion to the message: off the event loop
        await asyncio.to_thread(_write, self.folder, tenant, name, message, now)

    def __repr__(self) -> str:
        return f"DevSender({str(self.folder)!r})"


def file_name(key: str, at: datetime) -> str:
    """`<UTC time>-<readable key>-<hash>.eml`: sorted by time, unique per key."""
    readable = _UNSAFE.sub("_", key).strip("._")[:80] or "message"
    digest = hashlib.sha256(key.encode()).hexdigest()[:8]
    return f"{at:%Y%m%dT%H%M%S.%fZ}-{readable}-{digest}.eml"


def _write(outbox: Path, tenant: str, name: str, message: Message, now: datetime) -> None:
    data = message.to_email(tenant=tenant, date=now).as_bytes()
    try:
        with private.opened(outbox, [tenant], create=True) as where:
            assert where is not None  # created
            private.write(where, name, data, 1)
    except private.Refused as refused:
        place = f"outbox file {name!r}" if refused.depth else f"the outbox of tenant {tenant!r}"
        raise TransportError(
            f"{place} under {str(outbox)!r} is a {refused.kind}; ket never follows links in the "
            "outbox"
        ) from None
