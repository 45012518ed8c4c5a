"""Mailboxes and header text, checked strictly before a message goes anywhere.

Python 3.11's `email.utils.parseaddr` has no strict mode, and `email.headerregistry` is lenient
by design: it drops comments (`a(x)@example.com` parses as `a@example.com`) and silently strips
a trailing U+2028. So an address is parsed with `headerregistry` and then held to more: it must
be what it parses as (no comments, nothing dropped), ASCII (RFC 5321 without SMTPUTF8, which
not every relay offers: an internationalized domain is written in its `xn--` form), with a
domain of hostname labels or an IP literal, and within the RFC 5321 lengths. The
`email-validator` package would add a dependency and, by default, DNS lookups; these few rules
are all a sender needs.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from email.header import Header
from email.headerregistry import Address as EmailAddress
from email.utils import formataddr

# What no header may hold: C0 and C1 controls and DEL (NUL, tab, CR, LF, VT, FF among them),
# the Unicode line and paragraph separators (with the controls, every boundary
# `str.splitlines()` knows), and lone surrogates (no encoding can write them).
_FORBIDDEN = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
# RFC 5322's line length: no header value needs more, and the email package's folding of a
# longer one takes time that grows with the square of its length (seconds at 400 KB).
MAX_HEADER_LENGTH = 998
MAX_ADDRESS_LENGTH = 254  # RFC 5321's path limit, less the angle brackets
MAX_LOCAL_PART_LENGTH = 64
MAX_DOMAIN_LENGTH = 253
# A display name written as a quoted string rather than as encoded words, when it is ASCII.
_QUOTED_NAME_LENGTH = 60


@dataclass(frozen=True, kw_only=True)
class Address:
    """A mailbox: `address` (checked as an RFC 5322 addr-spec) and an optional display name."""

    address: str
    name: str | None = None

    def as_dict(self) -> dict[str, str]:
        return {"address": self.address} | ({"name": self.name} if self.name is not None else {})

    def header(self) -> EmailAddress:
        return EmailAddress(display_name=self.name or "", addr_spec=self.address)

    def mailbox(self) -> str:
        """The mailbox as header text: `Name <address>`, the name quoted or, when it is not
        short ASCII, written as RFC 2047 encoded words folded within 76 columns.

        Not the email package's own folding: it takes time that grows fast with a name's length
        (34 ms for one name of 78 characters alternating "é " on Python 3.11, so seconds for a
        message to 100 such recipients); the legacy encoder used here is linear."""
        name = self.name or ""
        if not name:
            return self.address
        if name.isascii() and len(name) <= _QUOTED_NAME_LENGTH:
            return formataddr((name, self.address))
        # header_name: the first line leaves room for "From: " (and "To: "), so no line of the
        # header passes 78 columns
        encoded = Header(name, "utf-8", header_name="From").encode(maxlinelen=76)
        return f"{encoded}\n <{self.address}>"


def text_problem(value: str) -> str | None:
    """Why `value` cannot stand in a header (its length, or the first character at fault), or
    None."""
    if len(value) > MAX_HEADER_LENGTH:
        return f"it is {len(value)} characters long, more than {MAX_HEADER_LENGTH} (RFC 5322)"
    found = _FORBIDDEN.search(value)
    if found is None:
        return None
    return (
        f"control characters and line breaks are refused "
        f"(U+{ord(found.group()):04X} at position {found.start()})"
    )


def address_problem(address: str) -> str | None:
    """Why `address` is not a plain ASCII addr-spec a relay will take, or None."""
    problem = text_problem(address)
    if problem is not None:
        return problem
    if not address.isascii():
        return "non-ASCII addresses are refused (write an internationalized domain as xn--...)"
    if len(address) > MAX_ADDRESS_LENGTH:
        return f"it is longer than {MAX_ADDRESS_LENGTH} characters"
    try:
        parsed = EmailAddress(addr_spec=address)
    except Exception as error:  # the email package raises several kinds for a bad address
        return f"it does not parse ({error})"
    if parsed.addr_spec != address:
        return f"it is not a plain addr-spec (it parses as {parsed.addr_spec!r})"
    if not parsed.username or not parsed.domain:
        return "it needs a local part and a domain"
    if len(address.rpartition("@")[0]) > MAX_LOCAL_PART_LENGTH:
        return f"its local part is longer than {MAX_LOCAL_PART_LENGTH} characters"
    return _domain_problem(parsed.domain)


def _domain_problem(domain: str) -> str | None:
    if domain.startswith("[") and domain.endswith("]"):
        literal = domain[1:-1]
        try:
            if literal[:5].lower() == "ipv6:":
                ipaddress.IPv6Address(literal[5:])
            else:
                ipaddress.IPv4Address(literal)
        except ValueError:
            return f"its domain literal {domain!r} is not an IP address"
        return None
    if len(domain) > MAX_DOMAIN_LENGTH:
        return f"its domain is longer than {MAX_DOMAIN_LENGTH} characters"
    if not all(_LABEL.fullmatch(label) for label in domain.split(".")):
        return (
            f"its domain {domain!r} is not a host name (labels of letters, digits and inner "
            "hyphens, separated by dots)"
        )
    return None
