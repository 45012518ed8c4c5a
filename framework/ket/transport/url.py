"""Choosing a sender from configuration: `KET_TRANSPORT_URL`, `dev:` by default."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from ket.errors import TransportError
from ket.project import ket_folder
from ket.transport.capture import CaptureSender
from ket.transport.dev import DevSender
from ket.transport.sender import Sender
from ket.transport.smtp import SmtpSender, redact

DEFAULT_TRANSPORT_URL = "dev:"
FORMS = "dev:, dev:<folder>, smtp://..., smtps://... or capture:"
# user:password@ in a URL that may not parse: what is hidden when it cannot be read
_CREDENTIALS = re.compile(r"(?<=//)[^/?#]*@")


def sender_from_url(url: str) -> Sender:
    """The sender a transport URL names::

    dev:                    .eml files under .ket/outbox/<tenant>/
    dev:/var/mail/outbox    .eml files under that folder, one subfolder per tenant
    smtp://user:pw@host:587?starttls=1, smtps://user:pw@host
    capture:                kept in memory (tests)
    """
    if not isinstance(url, str):
        raise TransportError(f"a transport URL must be a string, got {url!r}; expected {FORMS}")
    scheme, colon, rest = url.partition(":")
    scheme = scheme.lower()  # a URL's scheme is case-insensitive (RFC 3986), as elsewhere
    if colon and scheme == "dev":
        return DevSender(rest or ket_folder() / "outbox")  # the project's .ket/outbox
    if colon and scheme in ("smtp", "smtps"):
        _check_parsable(url)
        return SmtpSender(url)
    if colon and scheme == "capture" and not rest:
        return CaptureSender()
    raise TransportError(f"unknown transport URL {_hidden(url)!r}; expected {FORMS}")


def _check_parsable(url: str) -> None:
    """Refuse a URL that urllib cannot split (`smtp://u@[::1`), before anything parses it."""
    try:
        urlsplit(url)
    except ValueError as error:
        raise TransportError(
            f"malformed transport URL {_hidden(url)!r} ({error}); expected {FORMS}"
        ) from None


def _hidden(url: str) -> str:
    """The URL with its password hidden, even when it does not parse."""
    try:
        return redact(url)
    except ValueError:
        return _CREDENTIALS.sub("***@", url)
