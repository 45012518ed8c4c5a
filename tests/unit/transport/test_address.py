"""Strict addresses and header text: what a relay takes, and nothing a header could be forged
with."""

from __future__ import annotations

import pytest

from ket.transport.address import address_problem, text_problem


@pytest.mark.parametrize(
    "address",
    [
        "ann@example.com",
        "ann.lee+orders@mail.example.co.uk",
        '"ann lee"@example.com',
        "ann@localhost",
        "ann@[192.0.2.1]",
        "ann@[IPv6:2001:db8::1]",
        "ann@xn--bcher-kva.example",
        "o'brien@example.com",
    ],
)
def test_plain_ascii_addresses_pass(address: str) -> None:
    assert address_problem(address) is None


@pytest.mark.parametrize(
    ("address", "problem"),
    [
        ("ann@example.com\x00", "U+0000 at position 15"),
        ("ann@example.com\x0b", "U+000B at position 15"),
        ("ann@example.com\u2028", "U+2028 at position 15"),
        ("ann@example.com\u0085", "U+0085 at position 15"),
        ("ann@example.com\r\nBcc: eve@example.com", "U+000D at position 15"),
        ("ann@bücher.example", "non-ASCII addresses are refused"),
        ("änn@example.com", "non-ASCII addresses are refused"),
        ("ann(comment)@example.com", "not a plain addr-spec (it parses as 'ann@example.com')"),
        ("ann@example.com, eve@example.com", "it does not parse"),
        ("Ann <ann@example.com>", "it does not parse"),
        ("ann", "it does not parse"),
        ("ann@", "it does not parse"),
        ("@example.com", "it does not parse"),
        ("ann@example..com", "it does not parse"),
        ("ann@-example.com", "its domain '-example.com' is not a host name"),
        ("ann@ex_ample.com", "its domain 'ex_ample.com' is not a host name"),
        ("ann@[999.0.0.1]", "its domain literal '[999.0.0.1]' is not an IP address"),
        ("ann@[::1]", "its domain literal '[::1]' is not an IP address"),
        ("a" * 65 + "@example.com", "its local part is longer than 64 characters"),
        ("ann@" + "a" * 251 + ".com", "it is longer than 254 characters"),
    ],
)
def test_anything_else_is_refused_saying_why(address: str, problem: str) -> None:
    found = address_problem(address)
    assert found is not None and problem in found


@pytest.mark.parametrize(
    "text",
    [
        *(chr(c) for c in range(0x20)),
        "\x7f",
        *(chr(c) for c in range(0x80, 0xA0)),
        "\u2028",
        "\u2029",
        "\ud800",
    ],
)
def test_header_text_refuses_every_control_character_and_line_break(text: str) -> None:
    assert text_problem(f"Order {text} 1001") == (
        f"control characters and line breaks are refused (U+{ord(text):04X} at position 6)"
    )


def test_header_text_refuses_every_line_boundary_python_knows() -> None:
    breaks = {c for c in map(chr, range(0x10000)) if len(f"a{c}b".splitlines()) > 1}
    assert breaks and all(text_problem(c) is not None for c in breaks)


def test_ordinary_unicode_header_text_passes() -> None:
    assert text_problem("Hóa đơn 1001 — 注文 ✓") is None
