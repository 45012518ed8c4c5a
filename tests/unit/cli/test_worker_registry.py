"""The worker's reads of the tenant registry go before the work that waits for a spent budget."""

from __future__ import annotations

import asyncio

from ket.cli.worker import read_tenants
from ket.connection import budget


class Registry:
    url = "postgresql://root@127.0.0.1:5432/ket_registry"  # never reached: databases() answers

    def __init__(self, order: list[str]) -> None:
        self.order = order

    def databases(self) -> dict[str, str | None]:
        self.order.append("registry")
        return {"acme": None}


def test_a_registry_read_goes_before_work_that_waits_for_a_spent_budget() -> None:
    """Behind a thousand tenants' sweeps, a refresh that waited its turn left a worker serving
    tenants its peers had taken."""
    order: list[str] = []

    async def run() -> dict[str, str | None]:
        spent = budget.ConnectionBudget(3)
        budget.install(spent)
        try:
            gates = [asyncio.Event() for _ in range(3)]

            async def hold(gate: asyncio.Event) -> None:
                async with spent.held():
                    await gate.wait()

            holders = [asyncio.ensure_future(hold(gate)) for gate in gates]
            await asyncio.sleep(0.01)

            async def sweep(n: int) -> None:
                async with spent.held():
                    order.append(f"sweep {n}")

            herd = [asyncio.ensure_future(sweep(n)) for n in range(5)]
            await asyncio.sleep(0.01)  # the herd waits first
            read = asyncio.ensure_future(read_tenants(Registry(order)))
            await asyncio.sleep(0.01)
            gates[0].set()  # one connection's room comes free
            tenants = await asyncio.wait_for(read, 5)
            for gate in gates[1:]:
                gate.set()
            await asyncio.wait_for(asyncio.gather(*holders, *herd), 5)
            return tenants
        finally:
            budget.install(None)

    assert asyncio.run(run()) == {"acme": None}
    assert order[0] == "registry", order
    assert len(order) == 6
