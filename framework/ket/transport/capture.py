"""CaptureSender: keeps every message in memory, for tests (`e2e.transport.sent`)."""

from __future__ import annotations

from typing import Any

from ket.transport.message import Message


class CaptureSender:
    """Sends nothing; `sent` holds each message as a dict, in the order sent::

    sender = CaptureSender()
    ...
    assert sender.sent[0]["subject"] == "Order 1001"
    """

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self._tenants: list[str] = []

    async def send(self, message: Message, *, tenant: str) -> None:
        """Record the message."""
        self.sent.append(message.as_dict())
        self._tenants.append(tenant)

    def sent_by(self, tenant: str) -> list[dict[str, Any]]:
        """The messages sent on behalf of `tenant`."""
        return [m for m, t in zip(self.sent, self._tenants, strict=True) if t == tenant]

    def clear(self) -> None:
        """Forget every message recorded so far."""
        self.sent.clear()
        self._tenants.clear()

    def __repr__(self) -> str:
        return f"CaptureSender({len(self.sent)} sent)"
