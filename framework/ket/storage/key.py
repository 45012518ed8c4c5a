"""The grammar of a storage key, the same for every backend.

A key is a relative POSIX path of plain segments (`invoices/2030/INV-1001.txt`). Whatever a
handler passes, a key that passes these checks names one blob inside its tenant's space and
nothing else: no `..` or `.` segment, no absolute path, no backslash, no control character or
NUL, no percent-escape (which a server or proxy decoding URLs could turn into `/` or `..`), no
name reserved for writes in progress, and nothing longer than the file systems and object stores
ket writes to accept.
"""

from __future__ import annotations

import re

from ket import folder

# Temporary files of unfinished writes (local backend); no key may name one.
TEMP_PREFIX = folder.TEMP_PREFIX
MAX_SEGMENT_BYTES = 255  # the usual file-name limit
MAX_KEY_LENGTH = 1_024
EXAMPLE = "use a relative path of plain names, e.g. 'invoices/INV-1001.txt'"
# C0 and C1 controls, DEL and the Unicode line separators: nothing a file name should show.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")  # a name no file system can encode
_PERCENT_ESCAPE = re.compile(r"%[0-9A-Fa-f]{2}")


def key_problem(key: object) -> str | None:
    """What makes `key` unsafe as a storage key, or None when it is safe."""
    if not isinstance(key, str):
        return f"a key must be a string, not {type(key).__name__}"
    if not key:
        return "it is empty"
    if len(key) > MAX_KEY_LENGTH:
        return f"it is longer than {MAX_KEY_LENGTH} characters"
    if key.startswith("/"):
        return "absolute paths are refused"
    if "\\" in key:
        return "backslashes are refused"
    for segment in key.split("/"):
        problem = _segment_problem(segment)
        if problem is not None:
            return problem
    return None


def _segment_problem(segment: str) -> str | None:
    if not segment:
        return "empty segments are refused"
    if segment in (".", ".."):
        return f"{segment!r} segments are refused"
    if segment.startswith(TEMP_PREFIX):
        return f"names starting with {TEMP_PREFIX!r} are reserved"
    if _CONTROL.search(segment):
        return "control characters are refused"
    if _SURROGATE.search(segment):
        return "lone surrogates are refused"
    if _PERCENT_ESCAPE.search(segment):
        return "percent-escapes such as '%2e' or '%2f' are refused"
    if len(segment.encode("utf-8")) > MAX_SEGMENT_BYTES:
        return f"a segment is longer than {MAX_SEGMENT_BYTES} bytes"
    return None
