"""Choosing a sender from `KET_TRANSPORT_URL`, and reading SMTP URLs."""

from __future__ import annotations

from pathlib import Path

import pytest

from ket.errors import TransportError
from ket.transport import CaptureSender, DevSender, SmtpSender, sender_from_url
from ket.transport.dev import DEFAULT_OUTBOX
from ket.transport.smtp import parse_smtp_url, redact


def test_dev_defaults_to_the_outbox_under_dot_ket() -> None:
    sender = sender_from_url("dev:")
    assert isinstance(sender, DevSender)
    assert sender.folder == DEFAULT_OUTBOX == Path(".ket/outbox")


def test_dev_with_a_folder_writes_there() -> None:
    sender = sender_from_url("dev:/var/mail/outbox")
    assert isinstance(sender, DevSender)
    assert sender.folder == Path("/var/mail/outbox")


def test_capture_keeps_messages_in_memory() -> None:
    assert isinstance(sender_from_url("capture:"), CaptureSender)


def test_smtp_with_starttls_and_login() -> None:
    sender = sender_from_url("smtp://mailer:s%40cret@mail.example.com:587?starttls=1&timeout=5")
    assert isinstance(sender, SmtpSender)
    s = sender.settings
    assert (s.host, s.port, s.tls, s.starttls) == ("mail.example.com", 587, False, True)
    assert (s.user, s.password, s.timeout) == ("mailer", "s@cret", 5.0)
    assert "s%40cret" not in repr(sender)


def test_smtps_defaults_to_port_465_and_plain_smtp_to_25() -> None:
    tls = parse_smtp_url("smtps://u:p@mail.example.com")
    plain = parse_smtp_url("smtp://localhost")
    assert (tls.port, tls.tls, tls.starttls, tls.timeout) == (465, True, False, 30.0)
    assert (plain.port, plain.tls, plain.user, plain.password) == (25, False, None, None)


@pytest.mark.parametrize(
    "url",
    ["", "http://mail.example.com", "sendgrid:KEY", "capture:extra", "devnull", "smtpx://h"],
)
def test_an_unknown_url_is_an_error_naming_it(url: str) -> None:
    with pytest.raises(TransportError) as raised:
        sender_from_url(url)
    assert f"unknown transport URL {url!r}" in str(raised.value)
    assert "dev:, dev:<folder>, smtp://..., smtps://... or capture:" in str(raised.value)


def test_errors_never_show_the_password() -> None:
    with pytest.raises(TransportError) as raised:
        sender_from_url("smtpx://mailer:hunter2@mail.example.com")
    assert "hunter2" not in str(raised.value)
    assert "mailer:***@mail.example.com" in str(raised.value)
    assert redact("smtp://u:pw@h:25") == "smtp://u:***@h:25"
    assert redact("smtp://h:25") == "smtp://h:25"


@pytest.mark.parametrize(
    ("url", "complaint"),
    [
        ("smtp://", "names no host"),
        ("smtp://h:notaport", "invalid port"),
        ("smtp://h?tls=1", "unknown options ['tls']"),
        ("smtp://h?starttls=yes", "starttls must be 0 or 1"),
        ("smtps://h?starttls=1", "smtps is TLS already"),
        ("smtp://h?timeout=0", "timeout must be a positive number"),
        ("smtp://h?timeout=soon", "timeout must be a positive number"),
    ],
)
def test_a_bad_smtp_url_is_refused_clearly(url: str, complaint: str) -> None:
    with pytest.raises(TransportError) as raised:
        sender_from_url(url)
    assert complaint in str(raised.value)


@pytest.mark.parametrize(
    ("url", "kind"),
    [("DEV:", DevSender), ("Capture:", CaptureSender), ("SMTP://mail.example.com", SmtpSender)],
)
def test_a_scheme_in_any_case_names_the_same_sender(url: str, kind: type) -> None:
    # as KET_STORAGE_URL's and a database URL's: a URL's scheme is case-insensitive (RFC 3986)
    assert isinstance(sender_from_url(url), kind)
