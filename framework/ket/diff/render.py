"""Render a diff for people (aligned text) and for machines (JSON)."""

from __future__ import annotations

import json
from collections.abc import Sequence

from ket.diff.change import SEVERITIES, Change, counts

_WIDTH = max(len(severity) for severity in SEVERITIES)


def render_text(changes: Sequence[Change]) -> str:
    """One line per change (`breaking  job sales.x: message`), then the summary line."""
    if not changes:
        return "no changes"
    lines = [f"{c.severity:<{_WIDTH}}  {c.subject}: {c.message}" for c in changes]
    return "\n".join([*lines, summary(changes)])


def render_json(changes: Sequence[Change]) -> str:
    """`{"changes": [...], "summary": {"breaking": n, "review": n, "safe": n}}`, keys sorted."""
    document = {"changes": [c.to_json() for c in changes], "summary": counts(changes)}
    return json.dumps(document, sort_keys=True, indent=2)


def summary(changes: Sequence[Change]) -> str:
    """`2 breaking, 1 review, 3 safe`."""
    return ", ".join(f"{n} {severity}" for severity, n in counts(changes).items())
