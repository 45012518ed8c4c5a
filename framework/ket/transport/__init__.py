"""Outbound messages: their shape, and the senders that deliver them.

`ctx.transport` (ket.context.transport) checks effects and idempotency keys, then hands each
message to one Sender: DevSender (`.eml` files), SmtpSender (an SMTP server) or CaptureSender
(tests), chosen by `sender_from_url(KET_TRANSPORT_URL)`.
"""

from ket.transport.address import Address
from ket.transport.capture import CaptureSender
from ket.transport.dev import DevSender
from ket.transport.message import Message, MessageLimits, parse_message
from ket.transport.sender import Sender
from ket.transport.smtp import SmtpSender
from ket.transport.url import DEFAULT_TRANSPORT_URL, sender_from_url

__all__ = [
    "DEFAULT_TRANSPORT_URL",
    "Address",
    "CaptureSender",
    "DevSender",
    "Message",
    "MessageLimits",
    "Sender",
    "SmtpSender",
    "parse_message",
    "sender_from_url",
]
