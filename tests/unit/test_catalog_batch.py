"""A bulk enqueue's jobs of one name are made together (Catalog.new_jobs, which enqueue_many
uses): the same jobs as one at a time, and the same refusal of the first bad input."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from ket import define_deployment, define_job, define_module
from ket.catalog import Catalog
from ket.client import _jobs
from ket.errors import JobRejected


async def handler(ctx: Any, input: Any) -> None:
    return None


shop = define_module(
    name="shop",
    jobs={
        "charge": define_job(
            input={"order_id": "string", "customer_id": "string", "amount": "int", "note": "json?"},
            idempotent=True,
            handler=handler,
            concurrency_limit={"limit": 1, "key": ["customer_id"]},
            rate_limit={"limit": 20, "period": "1s", "key": ["customer_id"]},
            expires_in="10m",
            tags=["billing"],
        ),
        "mail": define_job(input={"to": "string"}, idempotent=True, handler=handler),
        "token": define_job(
            input={"api_key": "secret", "n": "int"}, idempotent=True, handler=handler
        ),
    },
)
CATALOG = Catalog.build(define_deployment(name="shop", modules=[shop]))


def _order(n: int) -> dict[str, Any]:
    return {"order_id": f"o-{n}", "customer_id": f"c-{n % 3}", "amount": n, "note": {"n": [n]}}


def test_jobs_made_together_are_the_jobs_made_one_at_a_time() -> None:
    inputs = [_order(n) for n in range(7)]
    together = CATALOG.new_jobs("shop.charge", inputs)
    assert together == [CATALOG.new_job("shop.charge", value) for value in inputs]
    assert together[4].concurrency_key == 'shop.charge|["c-1"]'  # keys from each own input
    assert together[4].expires_in_seconds == 600 and together[4].tags == ("billing",)


def test_a_bad_input_among_many_is_refused_as_it_would_be_alone() -> None:
    inputs = [_order(1), {**_order(2), "amount": "lots"}, _order(3)]
    with pytest.raises(ValidationError) as together:
        CATALOG.new_jobs("shop.charge", inputs)
    with pytest.raises(ValidationError) as alone:
        CATALOG.new_job("shop.charge", inputs[1])
    assert together.value.errors() == alone.value.errors()
    envelope = {"order_id": "o", "customer_id": "c", "amount": 1, "note": {"$secret": "x"}}
    with pytest.raises(JobRejected, match=r"note"):
        CATALOG.new_jobs("shop.charge", [_order(1), envelope])


def test_secret_inputs_and_mixed_items_keep_their_own_path_and_order() -> None:
    sealed = CATALOG.new_jobs("shop.token", [{"api_key": "k1", "n": 1}, {"api_key": "k2", "n": 2}])
    assert [job.payload["api_key"] for job in sealed] == [{"$secret": "k1"}, {"$secret": "k2"}]
    items: list[Any] = [
        ("shop.mail", {"to": "a@x"}),
        ("shop.mail", {"to": "b@x"}),
        ("shop.charge", _order(1), {"priority": 5}),
        ("shop.mail", {"to": "c@x"}),
        ("shop.charge", _order(2)),
        ("shop.charge", _order(3)),
    ]
    jobs = _jobs(CATALOG, items)
    assert [(job.name, job.priority) for job in jobs] == [
        ("shop.mail", 0),
        ("shop.mail", 0),
        ("shop.charge", 5),
        ("shop.mail", 0),
        ("shop.charge", 0),
        ("shop.charge", 0),
    ]
    assert [job.payload.get("to", job.payload.get("order_id")) for job in jobs] == [
        "a@x",
        "b@x",
        "o-1",
        "c@x",
        "o-2",
        "o-3",
    ]
