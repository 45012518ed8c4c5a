"""SmtpSender: delivers through an SMTP server with the standard library, off the event loop.

    smtp://user:password@mail.example.com:587?starttls=1    plain connection upgraded with STARTTLS
    smtps://user:password@mail.example.com                   TLS from the first byte (port 465)
    smtp://localhost:1025                                    no TLS, no login (a local relay)

`timeout=<seconds>` in the query bounds every network step (default 30). User and password
are percent-decoded, so a password with '@' or ':' is written `%40` / `%3A`.

A permanent refusal of the message itself (a 5xx reply of PERMANENT_CODES to MAIL FROM, to every
RCPT TO, or to DATA) is MessageRejected: resending cannot help, so the job is discarded. Every
other failure (no connection, a timeout, a 4xx reply, a refused login) propagates as it is, and
the job retries.
"""

from __future__ import annotations

import asyncio
import logging
import smtplib
import ssl
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import parse_qs, unquote, urlsplit

from ket.errors import MessageRejected, TransportError
from ket.transport.message import Message

log = logging.getLogger("ket.transport")

DEFAULT_TIMEOUT_SECONDS = 30.0
# 5xx replies that refuse the message itself: syntax of an address (501), mailbox unavailable,
# not local, storage exceeded or too big, name not allowed (550-553), transaction failed (554),
# parameters refused (555), domain accepts no mail (556). Other 5xx replies (authentication
# required 530, command unknown 500/502, bad sequence 503) are the connection's or the
# configuration's fault and retry.
PERMANENT_CODES = frozenset({501, 550, 551, 552, 553, 554, 555, 556})
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
        """Deliver the message; MessageRejected when the server refuses it for good, and other
        SMTP errors and timeouts as they are (the message was not sent: a retry may send it)."""
        # building the MIME email takes time in proportion to the message (up to the size cap):
        # off the event loop, with the sending
        await asyncio.to_thread(self._deliver, message, tenant)

    def _deliver(self, message: Message, tenant: str) -> None:
        email = message.to_email(tenant=tenant, date=datetime.now(UTC))
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
            try:
                refused = smtp.send_message(email, message.sender.address, recipients)
            except (smtplib.SMTPSenderRefused, smtplib.SMTPDataError) as error:
                rejected = _permanent(message, error)
                if rejected is None:
                    raise
                raise rejected from error
            except smtplib.SMTPRecipientsRefused as error:
                rejected = _all_refused(message, error)
                if rejected is None:
                    raise
                raise rejected from error
        if refused:  # the others took it: a retry would send them a duplicate
            log.warning(
                "message %r went out, but the SMTP server refused some recipients: %s",
                message.idempotency_key,
                _replies(refused),
            )

    def __repr__(self) -> str:
        return f"SmtpSender({self._url!r})"


def _permanent(
    message: Message, error: smtplib.SMTPSenderRefused | smtplib.SMTPDataError
) -> MessageRejected | None:
    """MessageRejected for a permanent refusal of the sender or of the data; else None."""
    if error.smtp_code not in PERMANENT_CODES:
        return None
    label = repr(message.idempotency_key)
    reply = _reply(error.smtp_code, error.smtp_error)
    if isinstance(error, smtplib.SMTPSenderRefused):
        return MessageRejected(
            f"message {label}: the SMTP server refused 'from' address "
            f"{message.sender.address!r} for good: {reply}"
        )
    return MessageRejected(f"message {label}: the SMTP server refused it for good: {reply}")


def _all_refused(message: Message, error: smtplib.SMTPRecipientsRefused) -> MessageRejected | None:
    """MessageRejected when every recipient was refused for good; else None (a retry may do)."""
    codes = [code for code, _ in error.recipients.values()]
    if not all(code in PERMANENT_CODES for code in codes):
        return None
    return MessageRejected(
        f"message {message.idempotency_key!r}: the SMTP server refused every 'to' address "
        f"for good: {_replies(error.recipients)}"
    )


def _replies(refused: dict[str, tuple[int, bytes]]) -> str:
    return "; ".join(f"{address!r}: {_reply(*reply)}" for address, reply in refused.items())


def _reply(code: int, text: bytes | str) -> str:
    """A server's reply, escaped: it comes from outside and ends up in logs and job errors."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return f"{code} {text[:500]!r}"


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
