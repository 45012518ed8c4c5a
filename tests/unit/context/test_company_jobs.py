"""Jobs enqueued while working for a company are that company's: they inherit it, and only a
cross_company operation may enqueue for another."""

from __future__ import annotations

from typing import Any

from ket import define_deployment, define_function, define_job, define_module
from ket.testing import create_test_deployment


async def place(ctx: Any, input: Any) -> None:
    await ctx.jobs.enqueue("shop.bill", {"other": input.other})

    async def in_transaction(tx: Any) -> None:
        await tx.jobs.enqueue("shop.ship")

    await ctx.tx(in_transaction)


async def bill(ctx: Any, input: Any) -> None:
    if input.other:
        await ctx.jobs.enqueue("shop.ship", company=input.other)
    else:
        await ctx.jobs.enqueue("shop.ship", company=ctx.company)  # its own: allowed
        await ctx.jobs.enqueue("shop.ship")


async def ship(ctx: Any, input: Any) -> None:
    pass


async def fan_out(ctx: Any, input: Any) -> None:
    for company in ("north", "south"):
        await ctx.jobs.enqueue("shop.ship", company=company)


APP = define_deployment(
    name="shop",
    modules=[
        define_module(
            name="shop",
            functions={
                "place": define_function(
                    input={"other": "string?"},
                    effects=["enqueue:shop.bill", "enqueue:shop.ship"],
                    handler=place,
                ),
                "fan_out": define_function(
                    effects=["enqueue:shop.ship"], cross_company=True, handler=fan_out
                ),
            },
            jobs={
                "bill": define_job(
                    input={"other": "string?"},
                    effects=["enqueue:shop.ship"],
                    idempotent=True,
                    max_attempts=1,
                    handler=bill,
                ),
                "ship": define_job(idempotent=True, handler=ship),
            },
        )
    ],
)


def test_jobs_enqueued_for_a_company_inherit_it_down_the_chain() -> None:
    with create_test_deployment(APP) as e2e:
        e2e.client.call("shop.place", {}, company="north")
        assert e2e.drain_jobs() == 4  # bill, the transaction's ship, and bill's two ships
        assert {(job.name, job.company) for job in e2e.jobs()} == {
            ("shop.bill", "north"),
            ("shop.ship", "north"),
        }


def test_another_company_is_refused_without_cross_company() -> None:
    with create_test_deployment(APP) as e2e:
        e2e.client.call("shop.place", {"other": "south"}, company="north")
        assert e2e.drain_jobs() == 1  # the transaction's ship; bill is discarded
        [bill_job] = e2e.jobs(name="shop.bill")
        assert bill_job.state == "discarded"
        assert "may not enqueue for company 'south'" in bill_job.errors[0].error
        assert {job.company for job in e2e.jobs(name="shop.ship")} == {"north"}


def test_a_cross_company_operation_enqueues_for_each_company_it_names() -> None:
    with create_test_deployment(APP) as e2e:
        e2e.client.call("shop.fan_out")
        assert sorted(job.company or "" for job in e2e.jobs()) == ["north", "south"]


def test_work_for_no_company_stays_so_and_may_not_enqueue_for_one() -> None:
    with create_test_deployment(APP) as e2e:
        e2e.client.call("shop.place", {"other": None})
        assert {job.company for job in e2e.jobs()} == {None}
        performed = e2e.perform_job("shop.bill", {"other": "south"})
        assert performed.outcome == "discarded"
        assert "shop.bill may not enqueue for company 'south'" in (performed.error or "")
