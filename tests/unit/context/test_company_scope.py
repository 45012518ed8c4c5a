"""Company-scoped models (a `company` field): an operation without cross_company sees only its own
company's rows, and one that runs for no company may not touch them at all."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ket.catalog import OperationSpec
from ket.context.db import Database
from ket.declare.effect import Effect
from ket.declare.input import build_input_model
from ket.errors import EffectError
from ket.store.memory import MemoryStore
from ket.store.types import ModelTable

MODELS = {
    "hotel.Booking": ModelTable(name="hotel.Booking", fields={"company": "id", "room": "string"})
}


def operation(cross_company: bool = False) -> OperationSpec:
    return OperationSpec(
        name="hotel.job",
        handler=lambda ctx, input: None,
        input_model=build_input_model(None, "hotel.job"),
        effects=frozenset({Effect(verb="write", target="hotel.Booking")}),
        cross_company=cross_company,
    )


def run(scenario: Any) -> None:
    async def main() -> None:
        store = MemoryStore()
        await store.record_install(list(MODELS.values()))
        ids = {
            company: await store.record_insert(
                "hotel.Booking", {"company": company, "room": f"{company}-1"}
            )
            for company in ("north", "south")
        }
        await scenario(store, ids)
        await store.close()

    asyncio.run(main())


def test_a_company_job_sees_and_changes_only_its_company_rows() -> None:
    async def scenario(store: MemoryStore, ids: dict[str, str]) -> None:
        db = Database(store, operation(), MODELS, company="north")
        assert [r["room"] for r in await db.select("hotel.Booking")] == ["north-1"]
        assert await db.get("hotel.Booking", ids["south"]) is None
        assert (await db.get("hotel.Booking", ids["north"]) or {})["room"] == "north-1"
        assert await db.update("hotel.Booking", {}, {"room": "renamed"}) == 1
        assert await db.delete("hotel.Booking", {"id": ids["south"]}) == 0
        new = await db.insert("hotel.Booking", {"room": "north-2"})
        assert (await store.record_get("hotel.Booking", new) or {})["company"] == "north"
        rooms = sorted(r["room"] for r in await store.record_select("hotel.Booking"))
        assert rooms == ["north-2", "renamed", "south-1"]

    run(scenario)


def test_reaching_into_another_company_is_an_effect_error() -> None:
    async def scenario(store: MemoryStore, ids: dict[str, str]) -> None:
        db = Database(store, operation(), MODELS, company="north")
        with pytest.raises(EffectError) as reading:
            await db.select("hotel.Booking", {"company": "south"})
        assert str(reading.value) == (
            "hotel.job runs for company 'north' and may not read hotel.Booking rows of "
            "company 'south': declare cross_company=True"
        )
        with pytest.raises(EffectError):
            await db.insert("hotel.Booking", {"company": "south", "room": "x"})
        with pytest.raises(EffectError):
            await db.update("hotel.Booking", {"id": ids["north"]}, {"company": "south"})

    run(scenario)


def test_an_operation_for_no_company_may_not_read_across_companies() -> None:
    async def scenario(store: MemoryStore, ids: dict[str, str]) -> None:
        db = Database(store, operation(), MODELS, company=None)
        with pytest.raises(EffectError) as reading:
            await db.select("hotel.Booking")
        assert str(reading.value) == (
            "hotel.job may not read hotel.Booking across companies: it runs for no company; "
            "declare cross_company=True, or enqueue it with company=..."
        )

    run(scenario)


def test_cross_company_operations_see_every_company() -> None:
    async def scenario(store: MemoryStore, ids: dict[str, str]) -> None:
        for company in (None, "north"):
            db = Database(store, operation(cross_company=True), MODELS, company=company)
            assert len(await db.select("hotel.Booking")) == 2
            assert await db.get("hotel.Booking", ids["south"]) is not None

    run(scenario)
