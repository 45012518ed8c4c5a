"""A small hotel deployment for the context tests, and the kinds of store they run on."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from ket import define_deployment, define_job, define_model, define_module
from ket.catalog import Catalog, OperationSpec
from ket.store.memory import MemoryStore
from ket.store.sql import SqlStore


def _handler(ctx: Any, input: Any) -> None: ...


hotel = define_module(
    name="hotel",
    models={
        "Booking": define_model({"room": "string", "status": "string", "nights": "int"}),
        "DayClose": define_model({"business_date": "date", "nights": "int"}),
    },
    jobs={
        "catch_up": define_job(idempotent=True, effects=["read:hotel.Booking"], handler=_handler),
        "close_day": define_job(
            idempotent=True,
            effects=["read:hotel.Booking", "write:hotel.DayClose", "enqueue:hotel.notify"],
            handler=_handler,
        ),
        "notify": define_job(idempotent=True, input={"note": "string"}, handler=_handler),
    },
)
DEPLOYMENT = define_deployment(name="hotel", modules=[hotel], worker={"queues": {"default": 1}})
CATALOG = Catalog.build(DEPLOYMENT)
MODELS = CATALOG.models

Store = MemoryStore | SqlStore
Scenario = Callable[[Store], Awaitable[None]]


def operation(name: str) -> OperationSpec:
    """The catalog's spec of job `name` (its effects are what ctx.db and ctx.tx check)."""
    return CATALOG.job(name)
