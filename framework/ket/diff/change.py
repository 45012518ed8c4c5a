"""The diff as data: one typed Change per difference, in a fixed order."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

Severity = Literal["breaking", "review", "safe"]
SEVERITIES: tuple[Severity, ...] = ("breaking", "review", "safe")


@dataclass(frozen=True, kw_only=True)
class Change:
    """One classified difference between two manifests."""

    severity: Severity
    kind: str
    subject: str
    message: str
    old: object = None
    new: object = None

    def to_json(self) -> dict[str, object]:
        """The change as a JSON object."""
        return {
            "severity": self.severity,
            "kind": self.kind,
            "subject": self.subject,
            "message": self.message,
            "old": self.old,
            "new": self.new,
        }


def ordered(changes: Iterable[Change]) -> list[Change]:
    """Breaking first, then review, then safe; within a severity by subject, then kind."""
    # The message breaks the remaining ties (two fields of one job gaining the same kind of
    # change), so the order never depends on dict iteration.
    return sorted(
        changes, key=lambda c: (SEVERITIES.index(c.severity), c.subject, c.kind, c.message)
    )


def has_breaking(changes: Sequence[Change]) -> bool:
    """Whether any change is breaking (what `ket diff --exit-code` fails on)."""
    return any(change.severity == "breaking" for change in changes)


def counts(changes: Sequence[Change]) -> dict[Severity, int]:
    """How many changes of each severity, every severity present."""
    return {severity: sum(c.severity == severity for c in changes) for severity in SEVERITIES}
