"""The two apps bench/tenants_bench.py can run (`--app`): what its workers load, which job the
probes enqueue, the backlog's job, the schedules' expected ticks, and the databases' set-up.

- `example`: the example app (modules_example, the `erp` deployment; example_app.py). The
  probes are `sales.send_confirmation` (a `ctx.db` read and a `ctx.transport` send), enqueued
  through every path: `open_client`, `open_async_client`, `ctx.jobs` (`benchx.chain`), a
  function called over HTTP by `ket serve` (`sales.place_order`: two `ctx.tx` transactions), and
  `ket jobs enqueue`. Schedules: the example's own (every 15 minutes, daily).
- `bench`: the bench-only app of issue 12 (tenants_app.py): a no-op probe, a no-op backlog, two
  no-op schedules every minute and every 30 s (`--quiet-schedules`: hourly and daily). Only the
  `open_async_client` path.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from tenants_setup import PREFIX, BenchSetup

from ket.declare.deployment import DeploymentDecl

TICKS_SETTLE_S = 35  # the first sweeps are done by then; a tick needs as long to be swept


@dataclass(kw_only=True)
class BenchApp:
    name: str
    prefix: str  # its databases: <prefix>t0001 ..., <prefix>registry, <prefix>template
    workspace: str  # the workers' workspace file
    deployment: DeploymentDecl  # as the harness's clients see it
    probe: str  # the job the probes enqueue (its handler writes its start first)
    backlog: str
    chain: str | None  # a job whose handler enqueues a probe with ctx.jobs
    serve: bool  # whether `ket serve` can call a function that enqueues a probe
    setup: BenchSetup
    # (began, ended) -> schedule job -> the ticks (Unix seconds) every tenant should fire once
    expected_ticks: Callable[[float, float], dict[str, list[int]]]
    env: dict[str, str] = field(default_factory=dict)  # for the workers and `ket serve`
    probe_input: dict[str, Any] | None = None  # set once the databases exist

    def backlog_input(self) -> dict[str, Any] | None:
        return self.probe_input if self.backlog == self.probe else None


def bench_app(quiet: bool) -> BenchApp:
    import tenants_app

    def expected(began: float, ended: float) -> dict[str, list[int]]:
        out = {}
        for name, interval in tenants_app.schedules().items():
            first = (int(began + TICKS_SETTLE_S) // interval + 1) * interval
            last = (int(ended - TICKS_SETTLE_S) // interval) * interval
            out[name] = list(range(first, last + 1, interval))
        return out

    return BenchApp(
        name="bench",
        prefix=PREFIX,
        workspace="from tenants_app import bench\n",
        deployment=tenants_app.deployment(),
        probe=tenants_app.PROBE,
        backlog=tenants_app.BACKLOG,
        chain=None,
        serve=False,
        setup=BenchSetup(deployment=tenants_app.deployment),
        expected_ticks=expected,
        env={tenants_app.SCHEDULES_ENV: "quiet" if quiet else ""},
    )


def example_app() -> BenchApp:
    import example_app as app

    def expected(began: float, ended: float) -> dict[str, list[int]]:
        """The tick each tenant's first sweep fires (the state is a day old: the latest tick
        due by then), and every tick after it that a sweep had time to fire."""
        out = {}
        for name, schedule in app.schedules().items():
            tick = schedule.tick_at(_at(began + TICKS_SETTLE_S))
            ticks = []
            while tick.timestamp() <= ended - TICKS_SETTLE_S:
                ticks.append(round(tick.timestamp()))
                tick = schedule.next_tick(tick)
            out[name] = ticks
        return out

    return BenchApp(
        name="example",
        prefix=f"{PREFIX}ex_",
        workspace="from example_app import example\n",
        deployment=app.example,
        probe=app.PROBE,
        backlog=app.BACKLOG,
        chain=app.CHAIN,
        serve=True,
        setup=BenchSetup(
            deployment=app.deployment, seed=app.seed, after_reset=app.schedules_reset()
        ),
        expected_ticks=expected,
        env={"ERP_API_TOKEN": app.TOKEN, "ERP_API_TENANTS": "*"},
    )


def find_probe_input(bench: BenchApp, template_url: str) -> None:
    if bench.name == "example":
        import example_app as app

        bench.probe_input = {"order_id": asyncio.run(app.probe_order(template_url))}


def _at(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)
