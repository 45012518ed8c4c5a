"""What every part of the handler context shares: only its documented operations are in sight."""

from __future__ import annotations


class Part:
    """A part of the handler context (`ctx.db`, `ctx.jobs`, ...). Its state lives in
    name-mangled slots, the context's business; `dir()` lists its public operations alone."""

    __slots__ = ()

    def __dir__(self) -> list[str]:
        return sorted(name for name in dir(type(self)) if not name.startswith("_"))
