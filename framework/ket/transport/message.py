"""An outbound message: its shape, checked once before anything is claimed or sent::

{
    "idempotency_key": "sales.confirmation:o1",          # required, unique within a tenant
    "from": {"address": "orders@example.com", "name": "Orders"},
    "to": [{"address": "ann@example.com"}],               # at least one; `name` optional
    "subject": "Order 1001",
    "text": "Your order 1001 is confirmed.",
    "html": "<p>Your order 1001 is confirmed.</p>",       # optional
}

Header text (the key, subject, addresses and names) holds no control character or line break,
bodies hold no NUL, and a message stays within its MessageLimits. A message refused here is
refused for good: MessageRejected, which discards the job that sent it rather than retrying.
"""

from __future__ import annotations

import hashlib
import os
import re
import reprlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from email.message import EmailMessage
from email.policy import default as default_policy
from email.utils import format_datetime
from typing import Any

from ket.errors import MessageRejected, TransportError
from ket.limits import MAX_KEY_LENGTH
from ket.transport.address import Address, address_problem, text_problem

FIELDS = ("idempotency_key", "from", "to", "subject", "text", "html")
DEFAULT_MAX_RECIPIENTS = 100
DEFAULT_MAX_MESSAGE_BYTES = 10 * 1024 * 1024
RECIPIENTS_VARIABLE = "KET_TRANSPORT_MAX_RECIPIENTS"
BYTES_VARIABLE = "KET_TRANSPORT_MAX_BYTES"
# What no body can carry: NUL (RFC 5322 bodies exclude it) and lone surrogates (unencodable).
_BODY_FORBIDDEN = re.compile(r"[\x00\ud800-\udfff]")
_SHOWN = 300  # characters of an offending value quoted in an error
# From and To are written as raw header text (Address.mailbox): never refolded on the way out.
_POLICY = default_policy.clone(refold_source="none")


@dataclass(frozen=True, kw_only=True)
class MessageLimits:
    """Caps on one message: `max_recipients` addresses in `to`, `max_bytes` of subject, text
    and html together (UTF-8). Set by KET_TRANSPORT_MAX_RECIPIENTS and KET_TRANSPORT_MAX_BYTES."""

    max_recipients: int = DEFAULT_MAX_RECIPIENTS
    max_bytes: int = DEFAULT_MAX_MESSAGE_BYTES

    def __post_init__(self) -> None:
        for name in ("max_recipients", "max_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise TransportError(f"{name} must be a positive integer, got {value!r}")

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] = os.environ) -> MessageLimits:
        """The limits the environment sets, the defaults for those it does not."""
        return cls(
            max_recipients=_positive(environ, RECIPIENTS_VARIABLE, DEFAULT_MAX_RECIPIENTS),
            max_bytes=_positive(environ, BYTES_VARIABLE, DEFAULT_MAX_MESSAGE_BYTES),
        )


DEFAULT_LIMITS = MessageLimits()


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
        """The message as a MIME email (plain text, plus an HTML alternative when given).

        Its headers and bodies are checked again here, so that a Message built by hand rather
        than by parse_message can no more put a control character or a NUL on the wire."""
        label = repr(self.idempotency_key)
        headers = [("subject", self.subject), ("from", self.sender.address)]
        headers += [(f"to[{n}]", a.address) for n, a in enumerate(self.to)]
        headers += [("from name", self.sender.name or "")]
        headers += [(f"to[{n}] name", a.name or "") for n, a in enumerate(self.to)]
        for field, value in headers:
            _header(label, field, value)
        _body(label, "text", self.text)
        if self.html is not None:
            _body(label, "html", self.html)
        try:
            return self._email(tenant, date)
        except Exception as error:  # the same message fails the same way every time
            raise MessageRejected(
                f"message {label} cannot be written as an email: {type(error).__name__}: {error}"
            ) from None

    def _email(self, tenant: str, date: datetime) -> EmailMessage:
        email = EmailMessage(policy=_POLICY)
        email.set_raw("From", self.sender.mailbox())
        email.set_raw("To", ",\n ".join(address.mailbox() for address in self.to))
        email["Subject"] = self.subject
        email["Date"] = format_datetime(date)
        email["Message-ID"] = self.message_id(tenant)
        email.set_content(self.text)
        if self.html is not None:
            email.add_alternative(self.html, subtype="html")
        return email


def parse_message(message: object, limits: MessageLimits = DEFAULT_LIMITS) -> Message:
    """The checked message, or MessageRejected naming the message, the field and its value."""
    if not isinstance(message, Mapping):
        raise MessageRejected(f"a message must be a mapping, got {_shown(message)}")
    key = message.get("idempotency_key")
    if not isinstance(key, str) or not key.strip() or len(key) > MAX_KEY_LENGTH:
        raise MessageRejected(
            f"message {_label(message)} needs an idempotency_key: a non-empty string of at most "
            f"{MAX_KEY_LENGTH} characters derived from stable business identity (e.g. "
            f"'sales.confirmation:<order id>'), got {_shown(key)}"
        )
    label = repr(key)
    _header(label, "idempotency_key", key)
    unknown = sorted(str(name) for name in message if name not in FIELDS)
    if unknown:
        raise MessageRejected(
            f"message {label} has unknown fields {_shown(unknown)}; expected {FIELDS}"
        )
    recipients = message.get("to")
    if not isinstance(recipients, list | tuple) or not recipients:
        raise MessageRejected(
            f"message {label}: 'to' must be a non-empty list of {{address, name?}}, "
            f"got {_shown(recipients)}"
        )
    if len(recipients) > limits.max_recipients:
        raise MessageRejected(
            f"message {label}: 'to' has {len(recipients)} recipients, more than the cap of "
            f"{limits.max_recipients} ({RECIPIENTS_VARIABLE})"
        )
    html = message.get("html")
    checked = Message(
        idempotency_key=key,
        sender=_address(label, "from", message.get("from")),
        to=tuple(_address(label, f"to[{n}]", item) for n, item in enumerate(recipients)),
        subject=_header(label, "subject", _string(label, "subject", message.get("subject"))),
        text=_body(label, "text", message.get("text")),
        html=None if html is None else _body(label, "html", html),
    )
    size = sum(len(part.encode()) for part in (checked.subject, checked.text, checked.html or ""))
    if size > limits.max_bytes:
        raise MessageRejected(
            f"message {label} is {size} bytes (subject, text and html in UTF-8), more than the "
            f"cap of {limits.max_bytes} ({BYTES_VARIABLE})"
        )
    return checked


def _address(label: str, field: str, value: object) -> Address:
    if not isinstance(value, Mapping) or set(value) - {"address", "name"}:
        raise MessageRejected(
            f"message {label}: {field!r} must be {{address, name?}}, got {_shown(value)}"
        )
    address, name = value.get("address"), value.get("name")
    if not isinstance(address, str) or (name is not None and not isinstance(name, str)):
        raise MessageRejected(
            f"message {label}: {field!r} needs a string address and an optional string name, "
            f"got {_shown(value)}"
        )
    problem = address_problem(address)
    if problem is not None:
        raise MessageRejected(
            f"message {label}: {field!r} address {address!r} is not valid: {problem}"
        )
    if name is not None:
        _header(label, f"{field} name", name)
    return Address(address=address, name=name)


def _string(label: str, field: str, value: object) -> str:
    if not isinstance(value, str):
        raise MessageRejected(f"message {label}: {field!r} must be a string, got {_shown(value)}")
    return value


def _header(label: str, field: str, value: str) -> str:
    problem = text_problem(value)
    if problem is not None:
        raise MessageRejected(
            f"message {label}: {field!r} must be one line of text, got {_shown(value)}: {problem}"
        )
    return value


def _body(label: str, field: str, value: object) -> str:
    text = _string(label, field, value)
    found = _BODY_FORBIDDEN.search(text)
    if found is not None:
        raise MessageRejected(
            f"message {label}: {field!r} cannot be sent: it holds "
            f"U+{ord(found.group()):04X} at position {found.start()} (NUL and lone surrogates "
            "cannot be written in a mail body)"
        )
    return text


def _positive(environ: Mapping[str, str], variable: str, default: int) -> int:
    given = environ.get(variable)
    if given is None or given == "":
        return default
    if not given.isascii() or not given.strip().isdigit() or int(given) < 1:
        raise TransportError(f"{variable} must be a positive whole number, got {given!r}")
    return int(given)


def _label(message: Mapping[str, Any]) -> str:
    """How to name a message that has no usable key: by its subject, if it has one."""
    subject = message.get("subject")
    return f"with subject {_shown(subject)}" if isinstance(subject, str) else _shown(message)


def _shown(value: object) -> str:
    """`value` for an error: a string escaped in full up to a length, anything else abridged."""
    if not isinstance(value, str):
        return reprlib.repr(value)
    text = repr(value)
    return text if len(text) <= _SHOWN else f"{text[:_SHOWN]}... ({len(value)} characters)"
