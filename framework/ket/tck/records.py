"""Model rows (capability RecordStore): the tables behind `ctx.db`, on every store alike."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone
from typing import Any

import pytest

from ket.errors import StoreError
from ket.store.contract import Records, RecordStore, TransactionalStore
from ket.store.types import JobClaim, ModelTable, NewJob
from ket.tck.harness import Tck, tck_test

__all__ = [
    "test_records_delete_removes_matching_rows_and_counts_them",
    "test_records_in_a_committed_transaction_exist_with_its_jobs",
    "test_records_in_a_rolled_back_transaction_leave_no_rows_and_no_jobs",
    "test_records_insert_returns_a_fresh_id_and_get_returns_the_row",
    "test_records_install_refuses_bad_models_and_installs_none_of_the_batch",
    "test_records_install_twice_is_harmless",
    "test_records_install_with_a_new_field_adds_it_and_old_rows_read_none",
    "test_records_replicas_see_each_others_rows",
    "test_records_rows_are_copied_in_and_out",
    "test_records_select_filters_limits_and_returns_oldest_first",
    "test_records_types_round_trip",
    "test_records_unknown_model_or_field_is_refused_and_nothing_written",
    "test_records_update_sets_values_on_matching_rows_and_counts_them",
    "test_records_values_no_database_can_store_are_refused_naming_the_field",
    "test_records_wrong_types_are_refused_naming_the_field",
]

ORDER = ModelTable(
    name="kit.Order", fields={"number": "string", "status": "string", "nights": "int"}
)
TYPED = ModelTable(
    name="kit.Typed",
    fields={
        "ref": "id",
        "title": "string",
        "count": "int",
        "amount": "number",
        "paid": "bool",
        "at": "datetime",
        "day": "date",
        "data": "json",
        "note": "string?",
        "due": "datetime?",
    },
)
HANOI = timezone(timedelta(hours=7))


def records(t: Tck) -> RecordStore:
    """The store as a RecordStore, or the test is skipped visibly."""
    return t.require(RecordStore)  # type: ignore[type-abstract]


async def installed(t: Tck, *models: ModelTable) -> RecordStore:
    """The store with `models` (ORDER by default) installed."""
    store = records(t)
    await store.record_install(list(models or (ORDER,)))
    return store


def order(number: str, status: str = "pending", nights: int = 1) -> dict[str, Any]:
    return {"number": number, "status": status, "nights": nights}


async def numbers(store: Records, **where: Any) -> list[str]:
    """The `number` of every kit.Order matching `where`, in the order the store returns them."""
    return [row["number"] for row in await store.record_select("kit.Order", where)]


@tck_test
async def test_records_insert_returns_a_fresh_id_and_get_returns_the_row(t: Tck) -> None:
    store = await installed(t)
    first = await store.record_insert("kit.Order", order("1001", nights=3))
    second = await store.record_insert("kit.Order", order("1002"))
    assert isinstance(first, str) and first
    assert first != second
    assert await store.record_get("kit.Order", first) == {"id": first, **order("1001", nights=3)}
    assert await store.record_get("kit.Order", "no-such-id") is None


@tck_test
async def test_records_select_filters_limits_and_returns_oldest_first(t: Tck) -> None:
    store = await installed(t)
    statuses = ["pending", "confirmed", "pending", "pending", "confirmed"]
    ids = [
        await store.record_insert("kit.Order", order(str(n), status, nights=n))
        for n, status in enumerate(statuses)
    ]
    assert await numbers(store) == ["0", "1", "2", "3", "4"]
    assert await numbers(store, status="pending") == ["0", "2", "3"]
    assert await numbers(store, status="pending", nights=2) == ["2"]
    assert await numbers(store, id=ids[4]) == ["4"]
    assert await numbers(store, status="cancelled") == []
    limited = await store.record_select("kit.Order", {"status": "pending"}, limit=2)
    assert [row["number"] for row in limited] == ["0", "2"]
    assert await store.record_select("kit.Order", None, limit=0) == []
    assert len(await store.record_select("kit.Order", {}, limit=10)) == 5


@tck_test
async def test_records_update_sets_values_on_matching_rows_and_counts_them(t: Tck) -> None:
    store = await installed(t)
    first = await store.record_insert("kit.Order", order("1", "pending"))
    await store.record_insert("kit.Order", order("2", "pending"))
    await store.record_insert("kit.Order", order("3", "confirmed"))
    assert await store.record_update("kit.Order", {"status": "pending"}, {"status": "held"}) == 2
    assert await numbers(store, status="held") == ["1", "2"]
    assert await numbers(store, status="confirmed") == ["3"]
    assert await store.record_update("kit.Order", {"id": first}, {"nights": 7}) == 1
    assert await store.record_get("kit.Order", first) == {"id": first, **order("1", "held", 7)}
    assert await store.record_update("kit.Order", {"status": "gone"}, {"nights": 9}) == 0
    assert await store.record_update("kit.Order", {}, {"nights": 2}) == 3
    assert {row["nights"] for row in await store.record_select("kit.Order")} == {2}


@tck_test
async def test_records_delete_removes_matching_rows_and_counts_them(t: Tck) -> None:
    store = await installed(t)
    first = await store.record_insert("kit.Order", order("1", "pending"))
    await store.record_insert("kit.Order", order("2", "confirmed"))
    await store.record_insert("kit.Order", order("3", "pending"))
    assert await store.record_delete("kit.Order", {"status": "pending", "nights": 5}) == 0
    assert await store.record_delete("kit.Order", {"id": first}) == 1
    assert await store.record_get("kit.Order", first) is None
    assert await store.record_delete("kit.Order", {"status": "pending"}) == 1
    assert await numbers(store) == ["2"]
    assert await store.record_delete("kit.Order", {}) == 1
    assert await numbers(store) == []


@tck_test
async def test_records_types_round_trip(t: Tck) -> None:
    store = await installed(t, TYPED)
    at = datetime(2030, 1, 15, 19, 30, 15, 123_456, tzinfo=HANOI)
    data = {
        "lines": [{"sku": "A-1", "qty": 2, "price": 9.5}],
        "gift": False,
        "memo": None,
        "tags": ["x", "y"],
    }
    values = {
        "ref": "o-1",
        "title": "Zoë's order",
        "count": -3,
        "amount": 12.25,
        "paid": False,
        "at": at,
        "day": date(2030, 2, 28),
        "data": data,
    }
    full = await store.record_insert("kit.Typed", values)
    listed = await store.record_insert(
        "kit.Typed", {**values, "data": [1, "two", None], "note": "n", "due": at, "paid": True}
    )
    row = await store.record_get("kit.Typed", full)
    assert row == {"id": full, **values, "note": None, "due": None}
    assert row is not None
    assert row["at"].utcoffset() == timedelta(0), row["at"]
    assert row["at"] == at.astimezone(UTC)
    other = await store.record_get("kit.Typed", listed)
    assert other is not None
    assert (other["data"], other["paid"], other["note"], other["due"]) == (
        [1, "two", None],
        True,
        "n",
        at,
    )
    same_instant = at.astimezone(timezone(timedelta(hours=-5)))
    assert [r["id"] for r in await store.record_select("kit.Typed", {"at": same_instant})] == [
        full,
        listed,
    ]
    assert [r["id"] for r in await store.record_select("kit.Typed", {"note": None})] == [full]
    assert [r["id"] for r in await store.record_select("kit.Typed", {"paid": True})] == [listed]
    selected = await store.record_select("kit.Typed", {"day": date(2030, 2, 28), "count": -3})
    assert len(selected) == 2


@tck_test
async def test_records_wrong_types_are_refused_naming_the_field(t: Tck) -> None:
    store = await installed(t, ORDER, TYPED)
    with pytest.raises(StoreError, match="nights"):
        await store.record_insert("kit.Order", order("1", nights="many"))  # type: ignore[arg-type]
    with pytest.raises(StoreError, match=r"kit\.Typed\.at"):
        await store.record_insert(
            "kit.Typed",
            {
                "ref": "r",
                "title": "naive",
                "count": 1,
                "amount": 1.0,
                "paid": True,
                "at": datetime(2030, 1, 1, 12, 0),  # no timezone: refused
                "day": date(2030, 1, 1),
                "data": {},
            },
        )
    with pytest.raises(StoreError, match="number"):
        await store.record_insert("kit.Order", {"status": "pending", "nights": 1})  # missing
    first = await store.record_insert("kit.Order", order("1"))
    with pytest.raises(StoreError, match="nights"):
        await store.record_update("kit.Order", {"id": first}, {"nights": [1]})
    with pytest.raises(StoreError, match="nights"):
        await store.record_select("kit.Order", {"nights": "lots"})
    # values that plainly mean the field's type are taken, as job input is
    second = await store.record_insert("kit.Order", order("2", nights="4"))  # type: ignore[arg-type]
    assert await store.record_get("kit.Order", second) == {"id": second, **order("2", nights=4)}
    assert await numbers(store) == ["1", "2"]
    assert await store.record_get("kit.Order", first) == {"id": first, **order("1")}


@tck_test
async def test_records_values_no_database_can_store_are_refused_naming_the_field(t: Tck) -> None:
    """NUL and lone surrogates (PostgreSQL stores neither), ints past 64 bits, NaN in JSON."""
    store = await installed(t, ORDER, TYPED)
    kept = await store.record_insert("kit.Order", order("1"))
    for bad in ("nul\x00inside", "lone \ud800"):
        with pytest.raises(StoreError, match="status"):
            await store.record_insert("kit.Order", order("2", status=bad))
        with pytest.raises(StoreError, match="status"):
            await store.record_update("kit.Order", {"id": kept}, {"status": bad})
        with pytest.raises(StoreError, match="status"):
            await store.record_select("kit.Order", {"status": bad})
        with pytest.raises(StoreError, match="id"):
            await store.record_get("kit.Order", bad)
    for nights in (2**63, -(2**63) - 1):
        with pytest.raises(StoreError, match="nights"):
            await store.record_insert("kit.Order", order("3", nights=nights))
    for data in ({"note": "\x00"}, {"ratio": float("nan")}, [float("inf")], {"\x00": 1}):
        with pytest.raises(StoreError, match="data"):
            await store.record_update("kit.Typed", {}, {"data": data})
    assert await store.record_select("kit.Order") == [{"id": kept, **order("1")}]
    assert await store.record_select("kit.Typed") == []
    # the edges themselves are stored: the largest int, and a JSON number past 64 bits
    assert await store.record_update("kit.Order", {"id": kept}, {"nights": 2**63 - 1}) == 1
    assert (await store.record_get("kit.Order", kept) or {}).get("nights") == 2**63 - 1
    typed = {
        "ref": "r",
        "title": "t",
        "count": 1,
        "amount": 1.0,
        "paid": True,
        "at": datetime(2030, 1, 1, tzinfo=UTC),
        "day": date(2030, 1, 1),
        "data": {"big": 2**70},
    }
    row_id = await store.record_insert("kit.Typed", typed)
    assert (await store.record_get("kit.Typed", row_id) or {}).get("data") == {"big": 2**70}


@tck_test
async def test_records_unknown_model_or_field_is_refused_and_nothing_written(t: Tck) -> None:
    store = await installed(t, ORDER, TYPED)
    kept = await store.record_insert("kit.Order", order("1"))
    with pytest.raises(StoreError, match=r"kit\.Nope"):
        await store.record_insert("kit.Nope", order("2"))
    with pytest.raises(StoreError, match=r"kit\.Nope"):
        await store.record_select("kit.Nope")
    with pytest.raises(StoreError, match="colour"):
        await store.record_insert("kit.Order", {**order("3"), "colour": "red"})
    with pytest.raises(StoreError, match="colour"):
        await store.record_select("kit.Order", {"colour": "red"})
    with pytest.raises(StoreError, match="colour"):
        await store.record_update("kit.Order", {"id": kept}, {"colour": "red", "nights": 9})
    with pytest.raises(StoreError, match="colour"):
        await store.record_delete("kit.Order", {"colour": "red"})
    with pytest.raises(StoreError, match="id"):
        await store.record_insert("kit.Order", {**order("4"), "id": "mine"})
    with pytest.raises(StoreError, match="id"):
        await store.record_update("kit.Order", {"id": kept}, {"id": "mine"})
    with pytest.raises(StoreError, match="data"):  # json is not compared: no filter on it
        await store.record_select("kit.Typed", {"data": {}})
    assert await store.record_select("kit.Order") == [{"id": kept, **order("1")}]
    assert await store.record_select("kit.Typed") == []


@tck_test
async def test_records_install_refuses_bad_models_and_installs_none_of_the_batch(t: Tck) -> None:
    store = records(t)
    good = ModelTable(name="kit.Good", fields={"name": "string"})
    bad = [
        ModelTable(name="Order", fields={}),  # no module
        ModelTable(name="kit.Order", fields={"id": "string"}),  # id is the store's
        ModelTable(name="kit.Order", fields={"number": "text"}),  # unknown type
        ModelTable(name="kit.Order", fields={"9lives": "int"}),  # not an identifier
    ]
    for model in bad:
        with pytest.raises(StoreError):
            await store.record_install([good, model])
    with pytest.raises(StoreError, match=r"kit\.Good"):
        await store.record_insert("kit.Good", {"name": "x"})


@tck_test
async def test_records_install_twice_is_harmless(t: Tck) -> None:
    store = await installed(t, ORDER, TYPED)
    first = await store.record_insert("kit.Order", order("1"))
    await store.record_install([ORDER, TYPED])
    second = await store.record_insert("kit.Order", order("2"))
    assert await store.record_select("kit.Order") == [
        {"id": first, **order("1")},
        {"id": second, **order("2")},
    ]


@tck_test
async def test_records_install_with_a_new_field_adds_it_and_old_rows_read_none(t: Tck) -> None:
    store = await installed(t)
    old = await store.record_insert("kit.Order", order("1"))
    grown = ModelTable(name="kit.Order", fields={**ORDER.fields, "note": "string?", "rank": "int"})
    await store.record_install([grown])
    assert await store.record_get("kit.Order", old) == {
        "id": old,
        **order("1"),
        "note": None,
        "rank": None,
    }
    new = await store.record_insert("kit.Order", {**order("2"), "note": "vip", "rank": 1})
    with pytest.raises(StoreError, match="rank"):  # required for new rows
        await store.record_insert("kit.Order", order("3"))
    assert await numbers(store, rank=None) == ["1"]
    assert await numbers(store, note="vip") == ["2"]
    assert await store.record_update("kit.Order", {"id": old}, {"rank": 2}) == 1
    assert [(r["id"], r["rank"]) for r in await store.record_select("kit.Order")] == [
        (old, 2),
        (new, 1),
    ]


@tck_test
async def test_records_in_a_committed_transaction_exist_with_its_jobs(t: Tck) -> None:
    store = await installed(t)
    if not isinstance(store, TransactionalStore):
        pytest.skip(f"store {type(store).__name__} lacks capability TransactionalStore")
    kept = await store.record_insert("kit.Order", order("1"))
    async with store.transaction() as tx:
        if not isinstance(tx, Records):
            pytest.skip(f"transactions of {type(store).__name__} keep no model rows (Records)")
        added = await tx.record_insert("kit.Order", order("2"))
        assert await tx.record_get("kit.Order", added) == {"id": added, **order("2")}
        assert await tx.record_update("kit.Order", {"id": kept}, {"status": "confirmed"}) == 1
        [job] = await tx.job_insert([NewJob(name="kit.after_commit")])
    assert await store.record_select("kit.Order") == [
        {"id": kept, **order("1", "confirmed")},
        {"id": added, **order("2")},
    ]
    claimed = await t.store.job_claim(
        JobClaim(queue="default", limit=10, worker_id="worker-1", lease_seconds=30)
    )
    assert [c.id for c in claimed] == [job.id]


class _Boom(Exception):
    """The caller's own failure inside the transaction."""


@tck_test
async def test_records_in_a_rolled_back_transaction_leave_no_rows_and_no_jobs(t: Tck) -> None:
    store = await installed(t)
    if not isinstance(store, TransactionalStore):
        pytest.skip(f"store {type(store).__name__} lacks capability TransactionalStore")
    first = await store.record_insert("kit.Order", order("1"))
    second = await store.record_insert("kit.Order", order("2"))
    third = await store.record_insert("kit.Order", order("3"))
    before = await store.record_select("kit.Order")
    with pytest.raises(_Boom):
        async with store.transaction() as tx:
            if not isinstance(tx, Records):
                pytest.skip(f"transactions of {type(store).__name__} keep no model rows (Records)")
            await tx.record_insert("kit.Order", order("4"))
            assert await tx.record_update("kit.Order", {"id": first}, {"nights": 9}) == 1
            assert await tx.record_delete("kit.Order", {"id": second}) == 1
            await tx.record_update("kit.Order", {"id": first}, {"status": "confirmed"})
            await tx.job_insert([NewJob(name="kit.never")])
            raise _Boom()
    assert await store.record_select("kit.Order") == before
    assert [row["id"] for row in before] == [first, second, third]
    claimed = await t.store.job_claim(
        JobClaim(queue="default", limit=10, worker_id="worker-1", lease_seconds=30)
    )
    assert claimed == []


@tck_test
async def test_records_replicas_see_each_others_rows(t: Tck) -> None:
    store = await installed(t)
    replica = await t.replica()
    assert isinstance(replica, RecordStore)
    await replica.record_install([ORDER])
    written = await store.record_insert("kit.Order", order("1"))
    assert await replica.record_get("kit.Order", written) == {"id": written, **order("1")}
    assert await replica.record_update("kit.Order", {"id": written}, {"nights": 4}) == 1
    theirs = await replica.record_insert("kit.Order", order("2"))
    assert await store.record_select("kit.Order") == [
        {"id": written, **order("1", nights=4)},
        {"id": theirs, **order("2")},
    ]


@tck_test
async def test_records_rows_are_copied_in_and_out(t: Tck) -> None:
    store = await installed(t, TYPED)
    data: dict[str, Any] = {"lines": [1, 2]}
    values = {
        "ref": "r",
        "title": "t",
        "count": 1,
        "amount": 1.5,
        "paid": True,
        "at": datetime(2030, 1, 1, tzinfo=UTC),
        "day": date(2030, 1, 1),
        "data": data,
    }
    record_id = await store.record_insert("kit.Typed", values)
    data["lines"].append(3)
    values["title"] = "changed"
    row = await store.record_get("kit.Typed", record_id)
    assert row is not None
    row["data"]["lines"].append(4)
    row["title"] = "mine"
    again = await store.record_get("kit.Typed", record_id)
    assert again is not None
    assert (again["title"], again["data"]) == ("t", {"lines": [1, 2]})
