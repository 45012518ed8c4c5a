"""The seam between `ctx.transport` and the world: a Sender delivers one checked message."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from ket.transport.message import Message


@runtime_checkable
class Sender(Protocol):
    """Delivers messages. Raising means "not sent": the transport releases the message's key so
    a retry can send it. Idempotency is the transport's business, not the sender's."""

    async def send(self, message: Message, *, tenant: str) -> None:
        """Deliver `message` on behalf of `tenant`, or raise."""
        ...
