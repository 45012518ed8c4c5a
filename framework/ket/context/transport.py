"""`ctx.transport`: outbound messages; a repeated idempotency key is not sent twice in a tenant.

A send claims the message's key in the tenant's sent ledger, delivers it through the configured
sender, then confirms the key. A key that is sent, or claimed by a send in flight, is not sent
again (`send` returns False). A send that fails releases its key, so a retry sends it. A send
whose outcome is unknown (a crash, or an abort or cancel the sender did not finish within
`abort_grace_seconds`) keeps its claim until it is `stale_after_seconds` old; only a send after
that may deliver the message again, so each such crash costs at most one duplicate. A message
that went out is confirmed even if the attempt is cancelled meanwhile (its timeout's grace ended
while the confirm waited for a connection): the confirm goes on, and a failure of it is logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Mapping
from typing import Any

from ket.catalog import OperationSpec
from ket.context.part import Part
from ket.context.signal import AbortSignal
from ket.errors import Aborted, EffectError, Retry
from ket.store.contract import SentLedger
from ket.transport.message import DEFAULT_LIMITS, Message, MessageLimits, parse_message
from ket.transport.sender import Sender

log = logging.getLogger("ket.transport")

# Longer than any sender needs (the SMTP sender times out after 30 s per step), so a claim only
# goes stale when its sender is gone.
STALE_AFTER_SECONDS = 15 * 60.0
# How long a send aborted midway may still finish, so that its key is confirmed or released
# rather than left claimed; shorter than the worker's grace before it cancels the handler.
ABORT_GRACE_SECONDS = 1.0


class Transport(Part):
    """Send messages as the running operation; needs the effect `transport:send`::

    await ctx.transport.send(
        {
            "idempotency_key": f"sales.confirmation:{order['id']}",
            "from": {"address": "orders@example.com", "name": "Orders"},
            "to": [{"address": order["email"]}],
            "subject": f"Order {order['number']}",
            "text": f"Your order {order['number']} is confirmed.",
        },
        signal=ctx.signal,
    )
    """

    __ket_api__ = True
    # the sender and the ledger are the context's business: mangled slots, off the documented
    # surface (see __dir__)
    __slots__ = (
        "__abort_grace",
        "__ledger",
        "__limits",
        "__operation",
        "__sender",
        "__stale_after",
        "__tenant",
    )

    def __init__(
        self,
        sender: Sender,
        ledger: SentLedger,
        operation: OperationSpec,
        tenant: str,
        *,
        stale_after_seconds: float = STALE_AFTER_SECONDS,
        abort_grace_seconds: float = ABORT_GRACE_SECONDS,
        limits: MessageLimits = DEFAULT_LIMITS,
    ) -> None:
        self.__sender = sender
        self.__ledger = ledger
        self.__operation = operation
        self.__tenant = tenant
        self.__stale_after = stale_after_seconds
        self.__abort_grace = abort_grace_seconds
        self.__limits = limits

    async def send(self, message: Mapping[str, Any], *, signal: AbortSignal | None = None) -> bool:
        """Send `message` unless its key was sent (or is being sent); True if sent now.

        Raises EffectError without `transport:send`; MessageRejected for a message without an
        `idempotency_key`, of the wrong shape, with a control character in a header or over the
        limits, or refused for good by the SMTP server (the job is then discarded, not retried);
        Aborted when `signal` is aborted first; and whatever else the sender raised when it
        failed (the key is then free for a retry).
        """
        operation = self.__operation
        if not operation.allows("transport", "send"):
            raise EffectError(
                f"{operation.name} may not send messages: declare the effect 'transport:send'"
            )
        checked = parse_message(message, self.__limits)
        key = checked.idempotency_key
        if signal is not None:
            signal.throw_if_aborted()
        if not await self.__ledger.message_claim(key, stale_after_seconds=self.__stale_after):
            if await self.__ledger.message_sent(key):
                return False  # sent before: never twice
            # Another attempt holds the key: it is sending now, or it crashed mid-send. Come
            # back when its claim goes stale rather than finish without the message going out.
            raise Retry(
                in_seconds=self.__stale_after,
                reason=f"message {key!r} is being sent by another attempt; retrying when "
                "its claim goes stale",
            )
        if signal is not None and signal.aborted:  # aborted while claiming: nothing went out
            await self.__release(key)
            signal.throw_if_aborted()
        await self.__deliver(checked, signal)
        await self.__confirm(key)
        return True

    async def __confirm(self, key: str) -> None:
        """Confirm `key`, whose message went out. A cancel of the attempt does not stop it:
        left claimed, the key would keep a retry waiting until the claim goes stale, and that
        retry would then send the message again."""
        confirming = asyncio.ensure_future(self.__ledger.message_confirm(key))
        try:
            await asyncio.shield(confirming)
        except asyncio.CancelledError:
            confirming.add_done_callback(functools.partial(_confirmed_late, key, self.__tenant))
            raise

    async def __deliver(self, message: Message, signal: AbortSignal | None) -> None:
        """Send; release the key if the sender failed, keep it if the outcome is unknown."""
        sending = asyncio.ensure_future(self.__sender.send(message, tenant=self.__tenant))
        finished = False
        try:
            if signal is None:
                await asyncio.wait([sending])
            else:
                await _until_aborted(sending, signal)
                if not sending.done():  # aborted mid-send: a moment to learn how it ended
                    await asyncio.wait([sending], timeout=self.__abort_grace)
            finished = sending.done()
        finally:
            if not sending.done():
                # The message may be out already (a sender's thread cannot be stopped), so the
                # claim stays: no resend until it goes stale.
                sending.cancel()
        if not finished:
            assert signal is not None and signal.reason is not None
            raise Aborted(signal.reason)
        if sending.cancelled() or sending.exception() is not None:
            await self.__release(message.idempotency_key)
        sending.result()  # the sender's error, if any

    async def __release(self, key: str) -> None:
        # The sender's error (or Aborted) is the one to report; a claim left behind by a failed
        # release only delays a resend until it goes stale.
        with contextlib.suppress(Exception):
            await self.__ledger.message_release(key)

    def __repr__(self) -> str:
        return f"Transport({self.__sender!r}, tenant={self.__tenant!r})"


def _confirmed_late(key: str, tenant: str, confirming: asyncio.Future[None]) -> None:
    """The outcome of a confirm its attempt stopped waiting for: logged when it failed."""
    failure: BaseException | None = (
        asyncio.CancelledError() if confirming.cancelled() else confirming.exception()
    )
    if failure is not None:
        log.warning(
            "message %r of tenant %s went out, but its key could not be confirmed (%s): "
            "a retry sends it again once the claim is stale",
            key,
            tenant,
            str(failure) or type(failure).__name__,
        )


async def _until_aborted(work: asyncio.Future[Any], signal: AbortSignal) -> None:
    """Wait until `work` is done or `signal` is aborted, whichever comes first."""
    aborted: asyncio.Future[Any] = asyncio.ensure_future(signal.wait())
    try:
        await asyncio.wait([work, aborted], return_when=asyncio.FIRST_COMPLETED)
    finally:
        aborted.cancel()
