"""SmtpSender against a tiny SMTP server on 127.0.0.1, built on socketserver for this test."""

from __future__ import annotations

import asyncio
import base64
import email
import email.policy
import socket
import socketserver
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from ket.transport import Address, Message, SmtpSender


@dataclass
class Session:
    """What one SMTP client said."""

    login: str | None = None
    sender: str | None = None
    recipients: list[str] = field(default_factory=list)
    data: bytes = b""


class _Handler(socketserver.StreamRequestHandler):
    timeout = 5  # a client that stalls cannot keep the test waiting

    def handle(self) -> None:
        session = Session()
        self.server.sessions.append(session)  # type: ignore[attr-defined]
        self._reply(b"220 test ESMTP")
        while line := self.rfile.readline():
            verb = line[:4].upper()
            if verb == b"EHLO":
                self._reply(b"250-test\r\n250 AUTH PLAIN")
            elif verb == b"AUTH":
                session.login = base64.b64decode(line.split()[2]).decode()
                self._reply(b"235 ok")
            elif verb == b"MAIL":
                session.sender = line.decode().split(":", 1)[1].strip().strip("<>")
                self._reply(b"250 ok")
            elif verb == b"RCPT":
                session.recipients.append(line.decode().split(":", 1)[1].strip().strip("<>"))
                self._reply(b"250 ok")
            elif verb == b"DATA":
                self._reply(b"354 go on")
                session.data = self._data()
                self._reply(b"250 queued")
            elif verb == b"QUIT":
                self._reply(b"221 bye")
                return
            else:
                self._reply(b"250 ok")

    def _data(self) -> bytes:
        lines = []
        while (line := self.rfile.readline()) not in (b".\r\n", b""):
            lines.append(line[1:] if line.startswith(b"..") else line)  # undo dot-stuffing
        return b"".join(lines)

    def _reply(self, text: bytes) -> None:
        self.wfile.write(text + b"\r\n")


@pytest.fixture
def smtp_server() -> Iterator[socketserver.ThreadingTCPServer]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    server.sessions = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


MESSAGE = Message(
    idempotency_key="sales.confirmation:o1",
    sender=Address(address="orders@example.com", name="Orders"),
    to=(Address(address="ann@example.com"), Address(address="bob@example.com", name="Bob")),
    subject="Order 1001",
    text="Your order 1001 is confirmed.\n.\nA line with only a dot, for dot-stuffing.",
)


def test_smtp_sender_logs_in_and_delivers_to_every_recipient(
    smtp_server: socketserver.ThreadingTCPServer,
) -> None:
    port = smtp_server.server_address[1]
    sender = SmtpSender(f"smtp://mailer:s%40cret@127.0.0.1:{port}?timeout=5")
    asyncio.run(sender.send(MESSAGE, tenant="acme"))

    [session] = smtp_server.sessions  # type: ignore[attr-defined]
    assert session.login == "\0mailer\0s@cret"
    assert session.sender == "orders@example.com"
    assert session.recipients == ["ann@example.com", "bob@example.com"]
    mail = email.message_from_bytes(session.data, policy=email.policy.default)
    assert mail["Subject"] == "Order 1001"
    assert mail["To"] == "ann@example.com, Bob <bob@example.com>"
    assert mail["Message-ID"] == MESSAGE.message_id("acme")
    assert mail.get_content().replace("\r\n", "\n") == MESSAGE.text + "\n"  # SMTP speaks CRLF


def test_smtp_sender_raises_when_the_server_is_unreachable() -> None:
    with socket.socket() as probe:  # a port nobody listens on once the probe is closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    sender = SmtpSender(f"smtp://127.0.0.1:{port}?timeout=2")
    with pytest.raises(OSError):
        asyncio.run(sender.send(MESSAGE, tenant="acme"))
