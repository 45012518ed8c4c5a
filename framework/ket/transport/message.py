"""An outbound message: its shape, checked once before anything is claimed or sent::

{
    "idempotency_key": "sales.confirmation:o1",          # required, unique within a tenant
    "from": {"address": "orders@example.com", "name": "Orders"},
    "to": [{"address": "ann@example.com"}],               # at least one; `name` optional
    "subject": "Order 1001",
    "text": "Your order 1001 is confirmed.",
    "html": "<p>Your order 1001 is confirmed.</p>",       # optional
}
"""

from __future__ import annotations

import hashlib
import reprlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from email.headerregistry import Address as EmailAddress
from email.message import EmailMessage
from email.utils import format_datetime
from typing import Any

from ket.errors import MessageRejected
from ket.store.validate import MAX_KEY_LENGTH

FIELDS = ("idempotency_key", "from", "to", "subject", "text", "html")


@dataclass(frozen=True, kw_only=True)
class Address:
    """A mailbox: `address` (checked as an RFC 5322 addr-spec) and an optional display name."""

    address: str
    name: str | None = None

    def as_dict(self) -> dict[str, str]:
        return {"address": self.address} | ({"name": self.name} if self.name is not None else {})

    def header(self) -> EmailAddress:
        return EmailAddress(display_name=self.name or "", addr_spec=self.address)


@dataclass(frozen=True, kw_only=True)
class Message:
    """A checked outbound message; `sender` is the message's `from`."""

    idempotency_key: str
    sender: Address
    to: tuple[Address, ...]
    subject: str
    text: str
    html: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The message in the shape it was given (`from`, `to`, ...)."""
        shape: dict[str, Any] = {
            "idempotency_key": self.idempotency_key,
            "from": self.sender.as_dict(),
            "to": [address.as_dict() for address in self.to],
            "subject": self.subject,
            "text": self.text,
        }
        if self.html is not None:
            shape["html"] = self.html
        return shape

    def message_id(self, tenant: str) -> str:
        """A Message-ID derived from the tenant and the key: every resend carries the same one,
        so a receiving system that drops duplicates by Message-ID drops a crash's resend."""
        digest = hashlib.sha256(f"{tenant}\0{self.idempotency_key}".encode()).hexdigest()[:40]
        return f"<{digest}.ket@{self.sender.header().domain}>"

    def to_email(self, *, tenant: str, date: datetime) -> EmailMessage:
        """The message as a MIME email (plain text, plus an HTML alternative when given)."""
        email = EmailMessage()
        email["From"] = self.sender.header()
        email["To"] = [address.header() for address in self.to]
        email["Subject"] = self.subject
        email["Date"] = format_datetime(date)
        email["Message-ID"] = self.message_id(tenant)
        email.set_content(self.text)
        if self.html is not None:
            email.add_alternative(self.html, subtype="html")
        return email


def parse_message(message: object) -> Message:
    """The checked message, or MessageRejected naming the message and the field at fault."""
    if not isinstance(message, Mapping):
        raise MessageRejected(f"a message must be a mapping, got {message!r}")
    key = message.get("idempotency_key")
    if not isinstance(key, str) or not key.strip() or len(key) > MAX_KEY_LENGTH:
        raise MessageRejected(
            f"message {_label(message)} needs an idempotency_key: a non-empty string of at most "
            f"{MAX_KEY_LENGTH} characters derived from stable business identity (e.g. "
            f"'sales.confirmation:<order id>'), got {key!r}"
        )
    label = repr(key)
    unknown = sorted(str(name) for name in message if name not in FIELDS)
    if unknown:
        raise MessageRejected(f"message {label} has unknown fields {unknown}; expected {FIELDS}")
    recipients = message.get("to")
    if not isinstance(recipients, list | tuple) or not recipients:
        raise MessageRejected(
            f"message {label}: 'to' must be a non-empty list of {{address, name?}}, "
            f"got {recipients!r}"
        )
    html = message.get("html")
    return Message(
        idempotency_key=key,
        sender=_address(label, "from", message.get("from")),
        to=tuple(_address(label, f"to[{n}]", item) for n, item in enumerate(recipients)),
        subject=_text(label, "subject", message.get("subject"), header=True),
        text=_text(label, "text", message.get("text")),
        html=None if html is None else _text(label, "html", html),
    )


def _address(label: str, field: str, value: object) -> Address:
    if not isinstance(value, Mapping) or set(value) - {"address", "name"}:
        raise MessageRejected(
            f"message {label}: {field!r} must be {{address, name?}}, got {value!r}"
        )
    address, name = value.get("address"), value.get("name")
    if not isinstance(address, str) or (name is not None and not isinstance(name, str)):
        raise MessageRejected(
            f"message {label}: {field!r} needs a string address and an optional string name, "
            f"got {value!r}"
        )
    checked = Address(address=address, name=name)
    try:
        parsed = checked.header()
    except Exception as error:  # the email package raises several kinds for a bad address
        raise MessageRejected(
            f"message {label}: {field!r} address {address!r} is not valid ({error})"
        ) from None
    if not parsed.username or not parsed.domain:
        raise MessageRejected(f"message {label}: {field!r} address {address!r} is not valid")
    return checked


def _text(label: str, field: str, value: object, *, header: bool = False) -> str:
    if not isinstance(value, str):
        raise MessageRejected(f"message {label}: {field!r} must be a string, got {value!r}")
    if header and ("\r" in value or "\n" in value):
        raise MessageRejected(f"message {label}: {field!r} must be one line, got {value!r}")
    return value


def _label(message: Mapping[str, Any]) -> str:
    """How to name a message that has no usable key: by its subject, if it has one."""
    subject = message.get("subject")
    return f"with subject {subject!r}" if isinstance(subject, str) else reprlib.repr(dict(message))
