"""`ctx.db`: model rows within the running operation's declared effects, on memory and SQLite."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import date

import pytest

from ket.context.blocking import Blocking
from ket.context.db import Database, records_of
from ket.errors import EffectError, StoreError
from ket.store.memory import MemoryStore
from tests.unit.context.hotel import MODELS, Scenario, Store, operation

Run = Callable[[Scenario], None]


def db_for(store: Store, job: str) -> Database:
    return Database(store, operation(job), MODELS)


def test_a_read_effect_allows_get_and_select(on_each_store: Run) -> None:
    async def scenario(store: Store) -> None:
        booking = await store.record_insert(
            "hotel.Booking", {"room": "101", "status": "pending", "nights": 2}
        )
        db = db_for(store, "hotel.catch_up")
        row = {"id": booking, "room": "101", "status": "pending", "nights": 2}
        assert await db.get("hotel.Booking", booking) == row
        assert await db.select("hotel.Booking", where={"status": "pending"}) == [row]
        assert await db.select("hotel.Booking", where={"status": "done"}, limit=1) == []

    on_each_store(scenario)


def test_a_read_effect_refuses_every_write_naming_the_write_effect(on_each_store: Run) -> None:
    async def scenario(store: Store) -> None:
        booking = await store.record_insert(
            "hotel.Booking", {"room": "101", "status": "pending", "nights": 2}
        )
        db = db_for(store, "hotel.catch_up")
        message = (
            "hotel.catch_up may not write hotel.Booking: declare the effect 'write:hotel.Booking'"
        )
        with pytest.raises(EffectError) as inserting:
            await db.insert("hotel.Booking", {"room": "102", "status": "new", "nights": 1})
        with pytest.raises(EffectError) as updating:
            await db.update("hotel.Booking", {"id": booking}, {"status": "checked_in"})
        with pytest.raises(EffectError) as deleting:
            await db.delete("hotel.Booking", {"id": booking})
        assert [str(e.value) for e in (inserting, updating, deleting)] == [message] * 3
        assert await store.record_select("hotel.Booking") == [
            {"id": booking, "room": "101", "status": "pending", "nights": 2}
        ]

    on_each_store(scenario)


def test_an_undeclared_read_is_refused_naming_the_read_effect(on_each_store: Run) -> None:
    async def scenario(store: Store) -> None:
        db = db_for(store, "hotel.catch_up")
        with pytest.raises(EffectError) as selecting:
            await db.select("hotel.DayClose")
        with pytest.raises(EffectError) as getting:
            await db.get("hotel.DayClose", "some-id")
        message = (
            "hotel.catch_up may not read hotel.DayClose: declare the effect 'read:hotel.DayClose'"
        )
        assert [str(selecting.value), str(getting.value)] == [message, message]

    on_each_store(scenario)


def test_a_write_effect_allows_reading_and_every_write(on_each_store: Run) -> None:
    async def scenario(store: Store) -> None:
        db = db_for(store, "hotel.close_day")
        first = await db.insert("hotel.DayClose", {"business_date": "2030-01-15", "nights": 4})
        second = await db.insert(
            "hotel.DayClose", {"business_date": date(2030, 1, 16), "nights": 1}
        )
        assert await db.get("hotel.DayClose", first) == {
            "id": first,
            "business_date": date(2030, 1, 15),
            "nights": 4,
        }
        assert await db.update("hotel.DayClose", {"id": second}, {"nights": 2}) == 1
        assert [r["nights"] for r in await db.select("hotel.DayClose")] == [4, 2]
        assert await db.delete("hotel.DayClose", {"business_date": date(2030, 1, 15)}) == 1
        assert [r["id"] for r in await db.select("hotel.DayClose")] == [second]

    on_each_store(scenario)


def test_an_unknown_model_is_a_store_error_naming_it_and_the_known_ones(on_each_store: Run) -> None:
    async def scenario(store: Store) -> None:
        db = db_for(store, "hotel.close_day")
        with pytest.raises(StoreError) as raised:
            await db.select("hotel.Bookings")
        assert str(raised.value) == (
            "hotel.close_day: unknown model 'hotel.Bookings' "
            "(the deployment's models: hotel.Booking, hotel.DayClose)"
        )

    on_each_store(scenario)


def test_a_wrong_value_type_is_a_store_error_naming_the_field(on_each_store: Run) -> None:
    async def scenario(store: Store) -> None:
        db = db_for(store, "hotel.close_day")
        with pytest.raises(StoreError, match=r"hotel\.DayClose\.nights"):
            await db.insert("hotel.DayClose", {"business_date": "2030-01-15", "nights": "four"})
        assert await db.select("hotel.DayClose") == []

    on_each_store(scenario)


def test_a_store_without_model_rows_refuses_db_use_with_a_store_error() -> None:
    class JobsOnly:
        """Any store that is not a RecordStore."""

    db = Database(records_of(JobsOnly()), operation("hotel.catch_up"), MODELS)
    with pytest.raises(StoreError) as raised:
        asyncio.run(db.select("hotel.Booking"))
    assert str(raised.value) == "store JobsOnly keeps no model rows (it is not a RecordStore)"


def test_a_plain_handler_calls_the_database_without_await() -> None:
    async def main() -> None:
        store = MemoryStore()
        await store.record_install(list(MODELS.values()))
        loop = asyncio.get_running_loop()
        plain = Blocking(db_for(store, "hotel.close_day"), loop)

        def handler() -> list[int]:
            plain.insert("hotel.DayClose", {"business_date": "2030-01-15", "nights": 3})
            with pytest.raises(EffectError, match=r"write:hotel\.Booking"):
                plain.insert("hotel.Booking", {"room": "1", "status": "x", "nights": 1})
            return [row["nights"] for row in plain.select("hotel.DayClose")]

        assert await loop.run_in_executor(None, handler) == [3]

    asyncio.run(main())
