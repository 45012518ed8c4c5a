"""ctx.step: a retry resumes after the last finished step; each step's effect happens once."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from pydantic import BaseModel

from ket import define_deployment, define_job, define_module
from ket.testing import create_test_deployment

effects: Counter[str] = Counter()
failures = {"mail": 1}


class Charge(BaseModel):
    id: str
    amount: float


async def charge(order_id: str, amount: float) -> Charge:
    effects["charge"] += 1
    return Charge(id=f"ch_{order_id}", amount=amount)


def reserve(order_id: str) -> dict[str, Any]:  # a plain step: run in a thread
    effects["reserve"] += 1
    return {"order": order_id, "lines": 2}


async def mail(charged: dict[str, Any]) -> bool:
    effects["mail"] += 1
    if failures["mail"] > 0:
        failures["mail"] -= 1
        raise ConnectionError("mail server down")
    return True


async def order(ctx: Any, input: Any) -> None:
    reserved = await ctx.step("reserve", reserve, input.order_id)
    charged = await ctx.step("charge", charge, input.order_id, amount=12.5)
    assert reserved == {"order": input.order_id, "lines": 2}
    await ctx.step("mail", mail, charged)


def plain_order(ctx: Any, input: Any) -> None:  # a plain handler: ctx.step without await
    ctx.step("reserve", reserve, input.order_id)
    ctx.step("mail", mail, {"id": "x"})


async def twice(ctx: Any, input: Any) -> None:
    await ctx.step("charge", charge, "o", amount=1.0)
    await ctx.step("charge", charge, "o", amount=1.0)


async def not_json(ctx: Any, input: Any) -> None:
    await ctx.step("when", lambda: object())


ORDER = {"order_id": "id"}
APP = define_deployment(
    name="main",
    modules=[
        define_module(
            name="shop",
            jobs={
                "order": define_job(idempotent=True, input=ORDER, handler=order),
                "plain_order": define_job(idempotent=True, input=ORDER, handler=plain_order),
                "twice": define_job(idempotent=True, max_attempts=1, handler=twice),
                "not_json": define_job(idempotent=True, max_attempts=1, handler=not_json),
            },
        )
    ],
)


@pytest.fixture(autouse=True)
def fresh() -> None:
    effects.clear()
    failures["mail"] = 1


def test_a_retry_resumes_after_the_last_finished_step() -> None:
    with create_test_deployment(APP) as e2e:
        job_id = e2e.enqueue("shop.order", {"order_id": "o1"}).id
        assert e2e.drain_jobs() == 0  # the mail step failed: retryable
        assert e2e.job(job_id).state == "retryable"
        e2e.clock.advance(hours=1)
        assert e2e.drain_jobs() == 1
        assert e2e.job(job_id).state == "completed"
        # reserved and charged once; the mail step ran in both attempts (it failed the first)
        assert effects == Counter({"reserve": 1, "charge": 1, "mail": 2})


def test_a_plain_handler_takes_its_steps_without_await() -> None:
    with create_test_deployment(APP) as e2e:
        e2e.enqueue("shop.plain_order", {"order_id": "o2"})
        assert e2e.drain_jobs() == 0
        e2e.clock.advance(hours=1)
        assert e2e.drain_jobs() == 1
        assert effects == Counter({"reserve": 1, "mail": 2})


def test_a_step_name_taken_twice_in_an_attempt_fails_it_saying_so() -> None:
    with create_test_deployment(APP) as e2e:
        job_id = e2e.enqueue("shop.twice").id
        assert e2e.drain_jobs() == 0
        [error] = e2e.job(job_id).errors
        assert "ctx.step: step 'charge' ran already in this attempt" in error.error
        assert effects == Counter({"charge": 1})


def test_a_step_whose_value_is_not_json_fails_naming_it() -> None:
    with create_test_deployment(APP) as e2e:
        job_id = e2e.enqueue("shop.not_json").id
        assert e2e.drain_jobs() == 0
        [error] = e2e.job(job_id).errors
        assert error.error.startswith("TypeError: ctx.step: step 'when' returned object")


def test_perform_job_runs_every_step_and_records_none() -> None:
    with create_test_deployment(APP) as e2e:
        failures["mail"] = 0
        assert e2e.perform_job("shop.order", {"order_id": "o3"}).outcome == "completed"
        assert e2e.perform_job("shop.order", {"order_id": "o3"}).outcome == "completed"
        assert effects == Counter({"reserve": 2, "charge": 2, "mail": 2})
