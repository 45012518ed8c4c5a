"""define_function: an operation called synchronously (by `ket serve`, `ket call`, or tests)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ket.declare.operation import Handler, OperationDecl, effect_tuple
from ket.declare.source import caller


@dataclass(frozen=True, kw_only=True)
class FunctionDecl(OperationDecl):
    """A declared function."""


def define_function(
    *,
    handler: Handler,
    input: object = None,
    effects: Iterable[str] | None = None,
    cross_company: bool = False,
) -> FunctionDecl:
    """Declare a function: `handler(ctx, input) -> result`, sync or async.

    Example::

        define_function(
            input={"order_id": "id"},
            effects=["write:sales.Order", "enqueue:sales.send_confirmation"],
            handler=confirm_order,
        )
    """
    source = caller()
    return FunctionDecl(
        handler=handler,
        input=input,
        effects=effect_tuple(effects, source),
        cross_company=cross_company,
        source=source,
    )
