"""Text from the database made safe to show: job names, queues, keys, error texts, payloads.

Any of them may hold control characters. Shown raw, an escape sequence reaches an operator's
terminal (it can rewrite the screen or the window title), a newline forges a line of output or
of a log, and a bidirectional override makes a name read as another ("Trojan source"), in a
terminal and in a browser alike. `escape` writes each of them as its escape; the CLI prints
through it, and the dashboard shows every job-derived string through it (after HTML escaping,
which is Jinja's).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

# C0 and C1 controls and DEL; the Unicode line and paragraph separators; the bidirectional
# overrides and isolates that reorder what a terminal shows ("Trojan source"); lone surrogates,
# which no terminal encoding can write.
_UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)
_UNSAFE_BUT_NEWLINE = re.compile(
    "[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
    "\ud800-\udfff]"
)
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def escape(text: str, *, keep_newlines: bool = False) -> str:
    """`text` with every control character written as its escape (`\\x1b`, `\\n`, `\\u2028`).

    Printable text, backslashes included, is left as it is; `keep_newlines` keeps line breaks
    for multi-line text whose lines the CLI built itself.
    """
    pattern = _UNSAFE_BUT_NEWLINE if keep_newlines else _UNSAFE
    if pattern.search(text) is None:
        return text
    return pattern.sub(_escaped, text)


def _escaped(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    return _NAMED.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def progress_text(progress: Mapping[str, Any] | None) -> str | None:
    """What a handler last reported with ctx.progress, as `30% reading the ledger` (not yet
    escaped); None when it reported nothing."""
    if not progress:
        return None
    fraction = progress.get("fraction")
    shown = f"{fraction:.0%}" if isinstance(fraction, int | float) else "?"
    note = progress.get("note")
    return f"{shown} {note}" if note else shown
