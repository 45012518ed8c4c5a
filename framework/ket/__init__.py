"""ket: declarative, manifest-driven durable background jobs.

Declare jobs next to your code, check and diff the compiled manifest in CI, run them with a
multi-tenant worker::

    from ket import define_module, define_job

    sales = define_module(name="sales", jobs={
        "send_confirmation": define_job(queue="mail", idempotent=True, handler=send),
    })
"""

from ket.client import open_async_client, open_client
from ket.declare import (
    define_deployment,
    define_function,
    define_job,
    define_model,
    define_module,
)
from ket.errors import Aborted, Discard, EffectError, Retry

__all__ = [
    "Aborted",
    "Discard",
    "EffectError",
    "Retry",
    "define_deployment",
    "define_function",
    "define_job",
    "define_model",
    "define_module",
    "open_async_client",
    "open_client",
]
