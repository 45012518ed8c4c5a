"""The registry of checks and the function that runs them."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ket.check.message import CheckMessage
from ket.declare.deployment import DeploymentDecl


@dataclass(frozen=True, kw_only=True)
class CheckContext:
    """What every check sees: the deployment and the default timezone of schedules."""

    deployment: DeploymentDecl
    timezone: str | None


Check = Callable[[CheckContext], list[CheckMessage]]

_CHECKS: list[tuple[str, Check]] = []


def register(tag: str) -> Callable[[Check], Check]:
    """Register a check under a tag (`ket check --tag TAG` runs only those)."""

    def add(check: Check) -> Check:
        _CHECKS.append((tag, check))
        return check

    return add


def tags() -> list[str]:
    """Every registered tag."""
    return sorted({tag for tag, _ in _CHECKS})


def run_checks(
    deployment: DeploymentDecl, *, timezone: str | None = None, only: Iterable[str] | None = None
) -> list[CheckMessage]:
    """Run the registered checks (or those tagged `only`) and return the findings in file order."""
    wanted = set(only) if only is not None else None
    context = CheckContext(deployment=deployment, timezone=timezone)
    found: list[CheckMessage] = []
    for tag, check in _CHECKS:
        if wanted is None or tag in wanted:
            found.extend(check(context))
    return sorted(found, key=lambda m: (m.source.file, m.source.line, m.id, m.obj, m.msg))
