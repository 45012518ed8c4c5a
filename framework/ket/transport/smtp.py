"""SmtpSender: delivers through an SMTP server with the standard library, off the event loop.

    smtp://user:password@mail.example.com:587?starttls=1    plain connection upgraded with STARTTLS
    smtps://user:password@mail.example.com                   TLS from the first byte (port 465)
    smtp://localhost:1025                                    no TLS, no login (a local relay)

`timeout=<seconds>` in the query bounds every network step (default 30). User and password
are percent-decoded, so a password with '@' or ':' is written `%40` / `%3A`.
"""

from __future__ import annotations

import asyncio
import smtplib
import ssl
from dataclasses import dataclass
from datetime import UTC, datetime
from email.message import EmailMessage
from urllib.parse import parse_qs, unquote, urlsplit

from ket.errors import TransportError
from ket.transport.message import Message

DEFAULT_TIMEOUT_SECONDS = 30.0
_PORTS = {"smtp": 25, "smtps": 465}
_OPTIONS = {"starttls", "timeout"}


@dataclass(frozen=True, kw_only=True)
class SmtpSettings:
    """Where and how to connect, parsed from an `smtp://` or `smtps://` URL."""

    host: str
    port: int
    tls: bool  # TLS from the first byte (smtps)
    starttls: bool
    user: str | None
    password: str | None
    timeout: float


class SmtpSender:
    """Sends each message in one SMTP session, in a worker thread (smtplib blocks)."""

    def __init__(self, url: str) -> None:
        self.settings = parse_smtp_url(url)
        self._url = redact(url)

    async def send(self, message: Message, *, tenant: str) -> None:
        """Deliver the message; SMTP errors and timeouts propagate (the message was not sent)."""
        email = message.to_email(tenant=tenant, date=datetime.now(UTC))
        await asyncio.to_thread(self._deliver, email, message)

    def _deliver(self, email: EmailMessage, message: Message) -> None:
        s = self.settings
        context = ssl.create_default_context()
        smtp = (
            smtplib.SMTP_SSL(s.host, s.port, timeout=s.timeout, context=context)
            if s.tls
            else smtplib.SMTP(s.host, s.port, timeout=s.timeout)
        )
        with smtp:
            if s.starttls:
                smtp.starttls(context=context)
            if s.user is not None:
                smtp.login(s.user, s.password or "")
            recipients = [address.address for address in message.to]
            smtp.send_message(email, message.sender.address, recipients)

    def __repr__(self) -> str:
        return f"SmtpSender({self._url!r})"


def parse_smtp_url(url: str) -> SmtpSettings:
    """The settings of an `smtp://` or `smtps://` URL, or TransportError naming it (redacted)."""
    parts = urlsplit(url)
    if parts.scheme not in _PORTS:
        raise TransportError(f"not an SMTP URL: {redact(url)!r}; expected smtp:// or smtps://")
    try:
        port = parts.port or _PORTS[parts.scheme]
    except ValueError:
        raise TransportError(f"SMTP URL {redact(url)!r} has an invalid port") from None
    if not parts.hostname:
        raise TransportError(f"SMTP URL {redact(url)!r} names no host")
    options = {name: values[-1] for name, values in parse_qs(parts.query).items()}
    unknown = sorted(set(options) - _OPTIONS)
    if unknown:
        raise TransportError(
            f"SMTP URL {redact(url)!r} has unknown options {unknown}; known: {sorted(_OPTIONS)}"
        )
    starttls = options.get("starttls", "0")
    if starttls not in ("0", "1"):
        raise TransportError(f"SMTP URL {redact(url)!r}: starttls must be 0 or 1")
    if starttls == "1" and parts.scheme == "smtps":
        raise TransportError(f"SMTP URL {redact(url)!r}: smtps is TLS already; drop starttls=1")
    return SmtpSettings(
        host=parts.hostname,
        port=port,
        tls=parts.scheme == "smtps",
        starttls=starttls == "1",
        user=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password else None,
        timeout=_timeout(url, options.get("timeout")),
    )


def redact(url: str) -> str:
    """The URL with its password replaced by `***`, fit for errors and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return parts._replace(netloc=netloc).geturl()


def _timeout(url: str, given: str | None) -> float:
    if given is None:
        return DEFAULT_TIMEOUT_SECONDS
    try:
        seconds = float(given)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds < float("inf"):
        raise TransportError(
            f"SMTP URL {redact(url)!r}: timeout must be a positive number of seconds, got {given!r}"
        )
    return seconds
