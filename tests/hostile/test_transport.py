"""Hostile messages: control characters in headers, caps, permanent and transient refusals.

Each job runs through the worker's per-job step on SQLite and on PostgreSQL and sends through the
real SMTP sender to a tiny SMTP server in this file, which records every byte it receives.
"""

from __future__ import annotations

import asyncio
import email
import email.policy
import socket
import socketserver
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ket import define_deployment, define_job, define_module
from ket.errors import MessageRejected, TransportError
from ket.transport import Address, DevSender, Message, MessageLimits, SmtpSender
from ket.transport.message import DEFAULT_MAX_MESSAGE_BYTES, parse_message
from tests.hostile.worker_step import START, WorkerStep

SUBJECTS = {
    "vt": "Order\x0b1001",
    "ff": "Order\x0c1001",
    "u2028": "Order\u20281001",
    "u2029": "Order\u20291001",
    "nul": "Order\x001001",
    "del": "Order\x7f1001",
    "nel": "Order\x851001",
    "tab": "Order\t1001",
    "crlf": "Order 1001\r\nBcc: eve@example.com",
}
# What each attack changes in an otherwise good message, keyed by the job input's `case`.
CASES: dict[str, dict[str, Any]] = {
    "good": {},
    **{f"subject_{name}": {"subject": subject} for name, subject in SUBJECTS.items()},
    "to_nul": {"to": [{"address": "ann@example.com\x00"}]},
    "to_u2028": {"to": [{"address": "ann@example.com\u2028"}]},
    "to_comment": {"to": [{"address": "ann(x)@example.com"}]},
    "to_two": {"to": [{"address": "ann@example.com, eve@example.com"}]},
    "from_name_lf": {"from": {"address": "orders@example.com", "name": "Orders\nBcc: eve@x.com"}},
    "to_name_vt": {"to": [{"address": "ann@example.com", "name": "Ann\x0b"}]},
    "key_nul": {"idempotency_key": "mail:o1\x00"},
    "subject_at_cap": {"subject": "é" * 998},
    "subject_over_cap": {"subject": "word " * 80_000},
    "two": {"to": [{"address": "ann@example.com"}, {"address": "gone@example.com"}]},
    "name_with_addresses": {
        "to": [{"address": "ann@example.com", "name": 'Eve <eve@example.com>, "Bob" bob@x.com'}]
    },
    "text_nul": {"text": "Confirmed.\x00"},
    "to_at_cap": {"to": [{"address": f"r{n}@example.com"} for n in range(100)]},
    "to_over_cap": {"to": [{"address": f"r{n}@example.com"} for n in range(101)]},
    "bytes_at_cap": {"text": "x" * (1_000 - len("Order 1001"))},
    "bytes_over_cap": {"text": "x" * (1_001 - len("Order 1001"))},
}


def message(case: str) -> dict[str, Any]:
    shape: dict[str, Any] = {
        "idempotency_key": f"mail:{case}",
        "from": {"address": "orders@example.com", "name": "Orders"},
        "to": [{"address": "ann@example.com", "name": "Ann"}],
        "subject": "Order 1001",
        "text": "Your order 1001 is confirmed.",
    }
    return shape | CASES[case]


async def send(ctx: Any, input: Any) -> None:
    await ctx.transport.send(message(input.case), signal=ctx.signal)


APP = define_deployment(
    name="shop",
    modules=[
        define_module(
            name="mail",
            jobs={
                "send": define_job(
                    input={"case": "string"},
                    effects=["transport:send"],
                    idempotent=True,
                    max_attempts=5,
                    handler=send,
                )
            },
        )
    ],
)


# -- a tiny SMTP server that records every byte and answers as the test says -----------------


class _Handler(socketserver.StreamRequestHandler):
    timeout = 5

    def handle(self) -> None:
        server: SmtpServer = self.server  # type: ignore[assignment]
        self._reply(b"220 test ESMTP")
        while line := self._line():
            verb = line[:4].upper()
            if verb == b"EHLO":
                self._reply(b"250 test")
            elif verb in (b"MAIL", b"RCPT"):
                address = line.decode().split(":", 1)[1].strip().strip("<>")
                reply = server.replies.get(f"{verb.decode()} {address}")
                self._reply(reply or server.replies.get(verb.decode(), b"250 ok"))
            elif verb == b"DATA":
                self._reply(b"354 go on")
                data = self._data()
                reply = server.replies.get("DATA", b"250 queued")
                if reply.startswith(b"250"):
                    server.delivered.append(data)
                self._reply(reply)
            elif verb == b"QUIT":
                self._reply(b"221 bye")
                return
            else:
                self._reply(b"250 ok")

    def _line(self) -> bytes:
        line = self.rfile.readline()
        self.server.wire.extend(line)  # type: ignore[attr-defined]
        return line

    def _data(self) -> bytes:
        lines = []
        while (line := self._line()) not in (b".\r\n", b""):
            lines.append(line[1:] if line.startswith(b"..") else line)
        return b"".join(lines)

    def _reply(self, text: bytes) -> None:
        self.wfile.write(text + b"\r\n")


class SmtpServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    replies: dict[str, bytes]
    wire: bytearray
    delivered: list[bytes]


@pytest.fixture
def smtp() -> Iterator[SmtpServer]:
    server = SmtpServer(("127.0.0.1", 0), _Handler)
    server.replies, server.wire, server.delivered = {}, bytearray(), []
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'acme.db'}"
    url: str = request.getfixturevalue("postgres_url")
    schema = request.getfixturevalue("postgres_schema")
    return f"{url}?options=-csearch_path%3D{schema}"


def worker(database_url: str, smtp: SmtpServer, tmp_path: Path) -> WorkerStep:
    port = smtp.server_address[1]
    return WorkerStep(
        APP,
        database_url=database_url,
        sender=SmtpSender(f"smtp://127.0.0.1:{port}?timeout=5"),
        storage_root=tmp_path / "storage",
    )


def outcome(database_url: str, smtp: SmtpServer, tmp_path: Path, case: str) -> tuple[Any, ...]:
    """Run a job sending `case` once: its outcome kind, its record, what the server received."""

    async def scenario() -> tuple[Any, ...]:
        async with worker(database_url, smtp, tmp_path) as step:
            job_id = await step.enqueue("mail.send", {"case": case})
            [kind] = await step.drain()
            return kind, await step.job(job_id)

    kind, job = asyncio.run(scenario())
    return kind, job, bytes(smtp.wire)


# -- control characters in headers -----------------------------------------------------------


@pytest.mark.parametrize("name", sorted(SUBJECTS))
def test_a_control_character_in_the_subject_discards_the_job_and_sends_nothing(
    database_url: str, smtp: SmtpServer, tmp_path: Path, name: str
) -> None:
    kind, job, wire = outcome(database_url, smtp, tmp_path, f"subject_{name}")
    assert kind == "discarded" and job.state == "discarded"
    assert job.attempt == 1  # not retried
    [error] = job.errors
    assert error.error.startswith(f"MessageRejected: message 'mail:subject_{name}': 'subject'")
    shown = repr(SUBJECTS[name])  # the value, escaped
    assert shown in error.error.replace("\\", "\\")
    assert "control characters and line breaks are refused" in error.error
    assert wire == b""  # no connection was even opened
    assert smtp.delivered == []


@pytest.mark.parametrize(
    ("case", "field"),
    [
        ("to_nul", "'to[0]' address 'ann@example.com\\x00'"),
        ("to_u2028", "'to[0]' address 'ann@example.com\\u2028'"),
        ("to_comment", "'to[0]' address 'ann(x)@example.com' is not valid: it is not a plain"),
        ("to_two", "'to[0]' address 'ann@example.com, eve@example.com' is not valid"),
        ("from_name_lf", "'from name' must be one line of text, got 'Orders\\nBcc"),
        ("to_name_vt", "'to[0] name' must be one line of text, got 'Ann\\x0b'"),
        ("text_nul", "'text' cannot be sent: it holds U+0000 at position 10"),
    ],
)
def test_a_bad_address_name_or_body_discards_the_job_naming_the_field(
    database_url: str, smtp: SmtpServer, tmp_path: Path, case: str, field: str
) -> None:
    kind, job, wire = outcome(database_url, smtp, tmp_path, case)
    assert (kind, job.state, job.attempt) == ("discarded", "discarded", 1)
    [error] = job.errors
    assert error.error.startswith(f"MessageRejected: message 'mail:{case}': ")
    assert field in error.error
    assert wire == b""


def test_a_nul_in_the_key_discards_the_job(
    database_url: str, smtp: SmtpServer, tmp_path: Path
) -> None:
    kind, job, wire = outcome(database_url, smtp, tmp_path, "key_nul")
    assert (kind, job.state) == ("discarded", "discarded")
    assert "'idempotency_key' must be one line of text, got 'mail:o1\\x00'" in job.errors[0].error
    assert wire == b""


def test_a_nul_in_a_hand_built_message_never_reaches_the_smtp_wire(smtp: SmtpServer) -> None:
    # parse_message is not the only way to make a Message: the sender checks again
    hand_built = Message(
        idempotency_key="mail:raw",
        sender=Address(address="orders@example.com"),
        to=(Address(address="ann@example.com"),),
        subject="Order\x001001",
        text="Your order.",
    )
    sender = SmtpSender(f"smtp://127.0.0.1:{smtp.server_address[1]}?timeout=5")
    subject = r"'subject' must be one line of text, got 'Order\\x001001'"
    with pytest.raises(MessageRejected, match=subject):
        asyncio.run(sender.send(hand_built, tenant="acme"))
    assert b"\x00" not in smtp.wire
    assert smtp.delivered == []


def test_a_good_message_goes_out_whole(database_url: str, smtp: SmtpServer, tmp_path: Path) -> None:
    kind, job, wire = outcome(database_url, smtp, tmp_path, "good")
    assert (kind, job.state) == ("completed", "completed")
    [data] = smtp.delivered
    mail = email.message_from_bytes(data, policy=email.policy.default)
    assert mail["Subject"] == "Order 1001"
    assert b"\x00" not in wire


# -- caps --------------------------------------------------------------------------------------


def test_recipients_at_the_default_cap_go_out_and_one_more_discards(
    database_url: str, smtp: SmtpServer, tmp_path: Path
) -> None:
    kind, job, wire = outcome(database_url, smtp, tmp_path, "to_at_cap")
    assert (kind, job.state) == ("completed", "completed")
    assert wire.count(b"rcpt TO:") == 100
    smtp.wire.clear()
    kind, job, wire = outcome(database_url, smtp, tmp_path, "to_over_cap")
    assert (kind, job.state, job.attempt) == ("discarded", "discarded", 1)
    assert (
        "'to' has 101 recipients, more than the cap of 100 (KET_TRANSPORT_MAX_RECIPIENTS)"
        in job.errors[0].error
    )
    assert wire == b""


def test_the_recipient_cap_is_configured_by_the_environment(
    database_url: str, smtp: SmtpServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KET_TRANSPORT_MAX_RECIPIENTS", "99")
    kind, job, wire = outcome(database_url, smtp, tmp_path, "to_at_cap")
    assert (kind, job.state) == ("discarded", "discarded")
    assert "'to' has 100 recipients, more than the cap of 99" in job.errors[0].error
    assert wire == b""


def test_the_size_cap_counts_subject_and_text_and_is_configured_by_the_environment(
    database_url: str, smtp: SmtpServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KET_TRANSPORT_MAX_BYTES", "1000")
    kind, job, _ = outcome(database_url, smtp, tmp_path, "bytes_at_cap")
    assert (kind, job.state) == ("completed", "completed")
    smtp.wire.clear()
    kind, job, wire = outcome(database_url, smtp, tmp_path, "bytes_over_cap")
    assert (kind, job.state, job.attempt) == ("discarded", "discarded", 1)
    assert (
        "message 'mail:bytes_over_cap' is 1001 bytes (subject, text and html in UTF-8), more "
        "than the cap of 1000 (KET_TRANSPORT_MAX_BYTES)"
    ) in job.errors[0].error
    assert wire == b""


def test_the_default_size_cap_is_10_mib() -> None:
    limits = MessageLimits()
    assert (limits.max_recipients, limits.max_bytes) == (100, 10 * 1024 * 1024)
    at_cap = message("good") | {"subject": "s", "text": "x" * (DEFAULT_MAX_MESSAGE_BYTES - 1)}
    assert parse_message(at_cap).text == at_cap["text"]
    with pytest.raises(MessageRejected, match="more than the cap of 10485760"):
        parse_message(at_cap | {"text": at_cap["text"] + "é"})  # two bytes in UTF-8


@pytest.mark.parametrize("value", ["0", "-1", "ten", "1e3", "٣"])
def test_a_bad_cap_in_the_environment_is_refused_naming_it(value: str) -> None:
    expected = f"KET_TRANSPORT_MAX_BYTES must be a positive whole number, got '{value}'"
    with pytest.raises(TransportError, match=expected):
        MessageLimits.from_environ({"KET_TRANSPORT_MAX_BYTES": value})


# -- the SMTP server's refusals: permanent discards, transient retries -------------------------


@pytest.mark.parametrize(
    ("verb", "reply", "named"),
    [
        ("RCPT", b"550 5.1.1 no such user", "every 'to' address for good: 'ann@example.com': 550"),
        ("MAIL", b"553 5.1.8 bad sender", "'from' address 'orders@example.com' for good: 553"),
        ("DATA", b"554 5.6.0 message content rejected", "refused it for good: 554"),
        ("DATA", b"552 5.3.4 message too big", "refused it for good: 552"),
    ],
)
def test_a_permanent_smtp_refusal_discards_the_job(
    database_url: str, smtp: SmtpServer, tmp_path: Path, verb: str, reply: bytes, named: str
) -> None:
    smtp.replies[verb] = reply
    kind, job, _ = outcome(database_url, smtp, tmp_path, "good")
    assert (kind, job.state, job.attempt) == ("discarded", "discarded", 1)
    assert job.errors[0].error.startswith("MessageRejected: message 'mail:good': the SMTP server")
    assert named in job.errors[0].error
    assert smtp.delivered == []


@pytest.mark.parametrize(
    ("verb", "reply"),
    [
        ("RCPT", b"450 4.2.0 mailbox busy"),
        ("DATA", b"451 4.3.0 try again later"),
        ("MAIL", b"530 5.7.0 authentication required"),  # the configuration's fault
    ],
)
def test_a_transient_smtp_refusal_retries_and_the_retry_sends_once(
    database_url: str, smtp: SmtpServer, tmp_path: Path, verb: str, reply: bytes
) -> None:
    smtp.replies[verb] = reply

    async def scenario() -> tuple[list[str], list[str], Any]:
        async with worker(database_url, smtp, tmp_path) as step:
            job_id = await step.enqueue("mail.send", {"case": "good"})
            first = await step.drain()
            smtp.replies.clear()
            step.clock.advance(hours=1)
            second = await step.drain()
            return first, second, await step.job(job_id)

    first, second, job = asyncio.run(scenario())
    assert (first, second) == (["failed"], ["completed"])
    assert job.state == "completed" and job.attempt == 2
    assert reply.decode()[:3] in job.errors[0].error
    assert len(smtp.delivered) == 1


def test_addresses_in_a_display_name_stay_a_name(
    database_url: str, smtp: SmtpServer, tmp_path: Path
) -> None:
    kind, job, wire = outcome(database_url, smtp, tmp_path, "name_with_addresses")
    assert (kind, job.state) == ("completed", "completed")
    assert wire.count(b"rcpt TO:") == 1 and b"rcpt TO:<ann@example.com>" in wire
    [data] = smtp.delivered
    mail = email.message_from_bytes(data, policy=email.policy.default)
    [to] = mail["To"].addresses
    assert (to.addr_spec, to.display_name) == (
        "ann@example.com",
        'Eve <eve@example.com>, "Bob" bob@x.com',
    )


def test_a_refused_connection_retries(database_url: str, tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port nobody listens on once the probe is closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]

    async def scenario() -> tuple[list[str], Any]:
        async with WorkerStep(
            APP,
            database_url=database_url,
            sender=SmtpSender(f"smtp://127.0.0.1:{port}?timeout=2"),
            storage_root=tmp_path / "storage",
        ) as step:
            job_id = await step.enqueue("mail.send", {"case": "good"})
            return await step.drain(), await step.job(job_id)

    kinds, job = asyncio.run(scenario())
    assert kinds == ["failed"] and job.state == "retryable"
    assert job.errors[0].error.startswith("ConnectionRefusedError")


def test_a_message_some_recipients_took_is_sent_and_the_others_are_named_in_a_warning(
    database_url: str, smtp: SmtpServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    smtp.replies["RCPT gone@example.com"] = b"550 5.1.1 no such user\x1b[2J"
    with caplog.at_level("WARNING", logger="ket.transport"):
        kind, job, _ = outcome(database_url, smtp, tmp_path, "two")
    assert (kind, job.state) == ("completed", "completed")  # a retry would send ann a duplicate
    assert len(smtp.delivered) == 1
    [warning] = [r.getMessage() for r in caplog.records if r.name == "ket.transport"]
    assert warning == (
        "message 'mail:two' went out, but the SMTP server refused some recipients: "
        "'gone@example.com': 550 '5.1.1 no such user\\x1b[2J'"
    )


def test_a_subject_longer_than_a_header_line_is_refused_at_once(
    database_url: str, smtp: SmtpServer, tmp_path: Path
) -> None:
    # the email package folds a long header in time that grows with the square of its length:
    # 400,000 characters took seconds, on the event loop, before the cap
    kind, job, _ = outcome(database_url, smtp, tmp_path, "subject_at_cap")
    assert (kind, job.state) == ("completed", "completed")
    started = time.process_time()  # CPU: a busy machine does not inflate it
    kind, job, _ = outcome(database_url, smtp, tmp_path, "subject_over_cap")
    assert time.process_time() - started < 2
    assert (kind, job.state, job.attempt) == ("discarded", "discarded", 1)
    assert "'subject' must be one line of text, got 'word word" in job.errors[0].error
    assert "it is 400000 characters long, more than 998 (RFC 5322)" in job.errors[0].error
    assert len(smtp.delivered) == 1


@pytest.mark.parametrize("kind", ["smtp", "dev"])
def test_the_email_is_built_off_the_event_loop(
    smtp: SmtpServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    threads: list[int] = []
    real = Message.to_email

    def to_email(self: Message, **options: Any) -> Any:
        threads.append(threading.get_ident())
        return real(self, **options)

    monkeypatch.setattr(Message, "to_email", to_email)
    sender = (
        SmtpSender(f"smtp://127.0.0.1:{smtp.server_address[1]}?timeout=5")
        if kind == "smtp"
        else DevSender(tmp_path / "outbox")
    )

    async def scenario() -> int:
        await sender.send(parse_message(message("good")), tenant="acme")
        return threading.get_ident()

    loop_thread = asyncio.run(scenario())
    assert len(threads) == 1 and threads[0] != loop_thread


def test_long_non_ascii_display_names_for_every_recipient_are_written_in_linear_time() -> None:
    # the email package's own folding took about 55 s for this message on Python 3.11
    name = "é " * 499
    hostile = message("good") | {
        "from": {"address": "orders@example.com", "name": name},
        "to": [{"address": f"r{n}@example.com", "name": name} for n in range(100)],
    }
    checked = parse_message(hostile)
    started = time.process_time()  # CPU: a busy machine does not inflate it
    data = checked.to_email(tenant="acme", date=START).as_bytes()
    assert time.process_time() - started < 1
    mail = email.message_from_bytes(data, policy=email.policy.default)
    assert [a.addr_spec for a in mail["To"].addresses] == [f"r{n}@example.com" for n in range(100)]
    assert max(len(line) for line in data.splitlines()) <= 78


def test_a_short_name_round_trips_exactly_and_quotes_what_needs_quoting() -> None:
    names = ["Ann", "Lee, Ann", 'Ann "the" Lee', "Hóa đơn — 注文 ✓", "back\\slash"]
    to = [{"address": f"r{n}@example.com", "name": name} for n, name in enumerate(names)]
    checked = parse_message(message("good") | {"to": to})
    mail = email.message_from_bytes(
        checked.to_email(tenant="acme", date=START).as_bytes(), policy=email.policy.default
    )
    assert [a.display_name for a in mail["To"].addresses] == names
