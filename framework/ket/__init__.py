"""ket: declarative, manifest-driven durable background jobs.

Declare jobs next to your code, check and diff the compiled manifest in CI, run them with a
multi-tenant worker::

    from ket import define_module, define_job

    sales = define_module(name="sales", jobs={
        "send_confirmation": define_job(queue="mail", idempotent=True, handler=send),
    })
"""

from typing import TYPE_CHECKING, Any

from ket.declare import (
    define_deployment,
    define_function,
    define_job,
    define_model,
    define_module,
)
from ket.errors import Aborted, Discard, EffectError, Retry, Snooze

if TYPE_CHECKING:
    from ket.client import open_async_client, open_client
    from ket.runtime.events import hooks

__all__ = [
    "Aborted",
    "Discard",
    "EffectError",
    "Retry",
    "Snooze",
    "define_deployment",
    "define_function",
    "define_job",
    "define_model",
    "define_module",
    "hooks",
    "open_async_client",
    "open_client",
]


def __getattr__(name: str) -> Any:
    # The client brings the SQL store and SQLAlchemy (most of ket's start-up time and memory):
    # it is imported on first use, so declaring, `ket check` and `ket diff` never load it.
    if name in ("open_client", "open_async_client"):
        from ket import client

        return getattr(client, name)
    if name == "hooks":  # imported on first use too: declaring never loads the runtime
        from ket.runtime.events import process_hooks

        return process_hooks()
    raise AttributeError(f"module 'ket' has no attribute {name!r}")
