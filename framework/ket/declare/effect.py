"""The effect grammar: what a function or job may touch.

read:<module>.<Model>      get / select rows of a model
write:<module>.<Model>     insert / update / delete rows (and read them)
enqueue:<module>.<job>     enqueue that job
storage:read | storage:write
transport:send
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from ket.errors import EffectSyntaxError

Verb = Literal["read", "write", "enqueue", "storage", "transport"]

MODULE_NAME = re.compile(r"[a-z][a-z0-9_]*")
OPERATION_NAME = re.compile(r"[a-z][a-z0-9_]*")
MODEL_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")

_FIXED = {"storage": ("read", "write"), "transport": ("send",)}
_TARGETED: dict[str, re.Pattern[str]] = {
    "read": MODEL_NAME,
    "write": MODEL_NAME,
    "enqueue": OPERATION_NAME,
}
GRAMMAR = (
    "read:<module>.<Model>, write:<module>.<Model>, enqueue:<module>.<job>, "
    "storage:read, storage:write or transport:send"
)


@dataclass(frozen=True, kw_only=True, order=True)
class Effect:
    """One declared effect, parsed."""

    verb: Verb
    target: str

    @property
    def text(self) -> str:
        return f"{self.verb}:{self.target}"

    @property
    def module(self) -> str | None:
        """The module a read/write/enqueue effect points into; None for storage and transport."""
        return self.target.split(".", 1)[0] if self.verb in _TARGETED else None

    @property
    def name(self) -> str | None:
        """The model or job a read/write/enqueue effect names; None for storage and transport."""
        return self.target.split(".", 1)[1] if self.verb in _TARGETED else None

    def __str__(self) -> str:
        return self.text


def parse_effect(text: object) -> Effect:
    """Parse one effect string, or raise EffectSyntaxError naming it."""
    if not isinstance(text, str):
        raise EffectSyntaxError(f"effect must be a string such as 'read:sales.Order', got {text!r}")
    verb, sep, target = text.partition(":")
    if not sep:
        raise EffectSyntaxError(f"effect {text!r} has no ':'; expected one of {GRAMMAR}")
    if verb in _FIXED:
        if target not in _FIXED[verb]:
            allowed = " or ".join(f"{verb}:{t}" for t in _FIXED[verb])
            raise EffectSyntaxError(f"effect {text!r} is not valid; expected {allowed}")
        return Effect(verb=verb, target=target)  # type: ignore[arg-type]
    pattern = _TARGETED.get(verb)
    if pattern is None:
        raise EffectSyntaxError(
            f"effect {text!r} has unknown kind {verb!r}; expected one of {GRAMMAR}"
        )
    module, dot, name = target.partition(".")
    what = "Model" if verb != "enqueue" else "job"
    if not dot or not MODULE_NAME.fullmatch(module) or not pattern.fullmatch(name):
        raise EffectSyntaxError(f"effect {text!r} must name its target as {verb}:<module>.<{what}>")
    return Effect(verb=verb, target=target)  # type: ignore[arg-type]
