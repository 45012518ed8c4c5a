"""Many tenant databases on one PostgreSQL server, served by `ket worker` processes (issues 12
and 26).

    python3 bench/tenants_bench.py                          # the example app, 100 tenants; 1, 4
    python3 bench/tenants_bench.py --tenants 1000 --json tenants.json
    python3 bench/tenants_bench.py --app bench --quiet-schedules   # issue 12's bench-only app
    python3 bench/tenants_bench.py --tenants 20 --workers 1 --min-seconds 100   # a quick look
    python3 bench/tenants_bench.py --drop                   # drop every ketbench_* database

The databases (`ketbench_ex_t0001` ..., a template and a registry; `ketbench_t0001` ... for the
bench app) are made once and reused: a later run creates only what is missing and truncates
ket's tables (tenants_setup.py). Each pass (one per `--workers` count) starts real `ket worker`
processes on the app's deployment (tenants_apps.py): by default the example app
(example_app.py: modules_example's `erp` deployment, whose handlers use `ctx.db` and `ctx.tx`;
its schedules every 15 minutes and daily), or with `--app bench` the bench-only app
(tenants_app.py: a no-op probe and backlog, schedules every 1 minute and every 30 s, or every
hour and daily at 03:00 UTC with `--quiet-schedules`). With the example app a `ket serve`
process runs beside the workers. A pass measures, in order:

1. connections: `pg_stat_activity`'s client backends every 0.5 s for the whole pass, told apart
   by `application_name` (each worker runs with PGAPPNAME=ketbench-w<i>, which libpq sends);
2. idle CPU (utime + stime over `--idle-seconds`) and VmRSS of each worker, VmHWM at the end;
   the window opens once every tenant had a second safety visit (`steady_after`): the first
   visits come within seconds of the start and the next ones a whole visit interval later (2 min
   at 1,000 tenants), so a window opened sooner would see no visits at all;
3. wake-up: `--probes` jobs, each into a random tenant through `open_async_client`, `--probe-gap`
   apart (150 ms: 200 probes span a whole 30 s schedule period, so every run meets one tick);
   latency = handler start - time.time() just before the enqueue call (the client, opened
   before it, is timed apart: what an application pays to open one at this many tenants);
   with the example app, then the other enqueue paths (`--path-probes` each: `open_client`,
   `ctx.jobs` from a running handler, a function called through `ket serve`; `--cli-probes`
   `ket jobs enqueue` processes), see tenants_measure.Prober for where each one's clock starts;
4. fairness: `--backlog` jobs enqueued in bulk into tenant t0001, then `--fairness-probes` into
   the others, compared with the idle median;
5. hand-over (2 workers or more): `kill -9` of one worker, then a probe into every tenant;
6. schedule ticks, read from every tenant's `ket_jobs` afterwards: each expected tick fired
   exactly once, and when in its interval it was enqueued (the sweep's spread); the ticks
   expected end before a hand-over's kill (a killed worker's tenants have no worker until
   its lease ends: their ticks then fire late, or once for two, as after any downtime);
7. the workers' logs: WARNING / ERROR lines, the most frequent kinds.

Nothing waits without a bound: a probe not started within `--probe-timeout` is lost, a client
that cannot connect (a full server) counts as failed, and the workers are always stopped.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
for folder in (REPO, HERE / "tenants", HERE / "compare"):
    sys.path.insert(0, str(folder))
# the workers import tenants_app or example_app from bench/tenants, and modules_example from the
# repository's root (executable.child_env adds bench/compare)
os.environ["PYTHONPATH"] = os.pathsep.join(
    [str(HERE / "tenants"), str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]
)

from database import admin_url  # noqa: E402
from executable import child_env, script  # noqa: E402
from procfs import load_average  # noqa: E402
from side import Command  # noqa: E402
from tenants_app import STARTS_ENV  # noqa: E402
from tenants_apps import BenchApp, bench_app, example_app, find_probe_input  # noqa: E402
from tenants_measure import (  # noqa: E402
    HARNESS_APP_NAME,
    Connections,
    LogSummary,
    Memory,
    Probe,
    Prober,
    ProbeStats,
    Sampler,
    Starts,
    Ticks,
    connections,
    cpu_now,
    memory_now,
    peak_now,
    probe_stats,
    read_logs,
    read_ticks,
    worker_app_name,
)
from tenants_setup import (  # noqa: E402
    Prepared,
    Server,
    drop_all,
    prepare,
    reset_tenants,
    tenant_names,
)
from worker import WorkerProcess  # noqa: E402

# the harness's own ket clients and reads are labelled too, so they never count as a worker's
os.environ["PGAPPNAME"] = HARNESS_APP_NAME

SERVE_APP_NAME = "ketbench-serve"  # PGAPPNAME of `ket serve`
WARM_UP_TIMEOUT_S = 60.0
SETTLE_MAX_S = 60.0
SETTLE_STEADY_S = 5.0
PROBE_GAP_S = 0.150  # 200 probes cover a 30 s period, whatever its tick bursts
FAIRNESS_GAP_S = 0.020  # the fairness probes all fall while the backlog drains
HAND_OVER_TIMEOUT_S = 45.0  # the default lease (30 s) and some
HAND_OVER_CONCURRENCY = 4


@dataclass(kw_only=True)
class PassResult:
    workers: int
    tenants: int
    load_before: float
    load_after: float = 0.0
    seconds: float = 0.0
    warm_up_s: float | None = None  # spawn to the first probe's start (tenant t0001)
    connections: Connections | None = None
    idle_cpu_pct: dict[str, float] = field(default_factory=dict)  # per worker, % of one core
    # connections the server accepted per second into the tenants' and the registry's databases
    # during the idle window (pg_stat_database.sessions): how often workers reconnect
    idle_sessions_per_s: float | None = None
    memory: dict[str, Memory] = field(default_factory=dict)
    wake_up: ProbeStats | None = None  # open_async_client
    paths: dict[str, ProbeStats] = field(default_factory=dict)  # the other enqueue paths
    serve_connections_max: int | None = None  # `ket serve`'s, with the example app
    fairness: ProbeStats | None = None
    backlog_enqueue_error: str | None = None
    backlog_done: int = 0  # backlog jobs completed by the end of the pass
    backlog_after_id: int = 0  # the backlog's jobs are those of the busy tenant after this id
    backlog_seconds: float | None = None  # from the backlog's enqueue to the end of the pass
    hand_over: ProbeStats | None = None
    hand_over_kill_to_last_start_s: float | None = None
    hand_over_killed_at: float | None = None  # time.time() of the kill
    ticks: list[Ticks] = field(default_factory=list)
    logs: LogSummary | None = None
    exits: dict[str, str] = field(default_factory=dict)  # workers that died by themselves
    notes: list[str] = field(default_factory=list)


async def run_pass(
    server: Server,
    tenants: list[str],
    workers: int,
    args: argparse.Namespace,
    folder: Path,
    app: BenchApp,
) -> PassResult:
    result = PassResult(workers=workers, tenants=len(tenants), load_before=load_average())
    rng = random.Random(args.seed + workers)
    workspace = folder / "workspace.py"
    workspace.write_text(app.workspace, encoding="utf-8")
    start_files = [folder / f"starts-p{workers}-w{i}.txt" for i in range(workers)]
    for path in start_files:
        path.unlink(missing_ok=True)
    procs = [
        WorkerProcess(
            Command(
                argv=[script("ket"), "worker", "--workspace", str(workspace)],
                env={
                    "KET_DATABASE_URL": server.template,
                    "KET_REGISTRY_URL": server.registry,
                    "PGAPPNAME": worker_app_name(i),
                    STARTS_ENV: str(start_files[i]),
                    **app.env,
                },
            ),
            folder,
            folder / f"worker-p{workers}-w{i}.log",
        )
        for i in range(workers)
    ]
    serve = (
        WorkerProcess(
            Command(
                argv=[
                    script("ket"),
                    "serve",
                    "--workspace",
                    str(workspace),
                    "--port",
                    "0",
                    "--max-connections",
                    str(args.serve_connections),
                ],
                env={
                    "KET_DATABASE_URL": server.template,
                    "KET_REGISTRY_URL": server.registry,
                    "PGAPPNAME": SERVE_APP_NAME,
                    **app.env,
                },
            ),
            folder,
            folder / f"serve-p{workers}.log",
        )
        if app.serve and args.serve_probes
        else None
    )
    pids: dict[int, int] = {}
    sampler = Sampler(server, pids)  # connected before any worker takes a slot
    starts = Starts(start_files)
    prober = Prober(server, starts, app)
    prober.cli = [script("ket"), "jobs", "enqueue", "--workspace", str(workspace), app.probe]
    prober.cli_env = {**child_env(app.env), "PGAPPNAME": HARNESS_APP_NAME}
    began = ended = time.time()
    try:
        for i, proc in enumerate(procs):
            proc.start()
            pids[i] = proc.pid
        sampler.start()
        if serve is not None:
            serve.start()
        await _warm_up(result, prober, tenants[0], began)
        await _settle(sampler, workers)
        steady = args.idle_after or steady_after(len(tenants), workers)
        await asyncio.sleep(max(0.0, began + steady - time.time()))
        await _idle(result, procs, args.idle_seconds, server)
        result.wake_up = await _series(prober, tenants, args.probes, args, rng, args.probe_gap)
        await _paths(result, prober, serve, tenants, args, rng, app)
        await _fairness(result, prober, tenants, args, rng, server, app)
        remaining = args.min_seconds - (time.time() - began)
        if remaining > 0:  # long enough for the schedules' ticks
            await asyncio.sleep(remaining)
        if workers >= 2:
            await _hand_over(result, procs[0], pids, prober, tenants, args.phase_seconds)
        for i, proc in enumerate(procs):
            if i in pids:
                result.memory[worker_app_name(i)].hwm_mb = peak_now(proc.pid)
        ended = time.time()
        result.backlog_done = _count_done(server, tenants[0], app.backlog, result.backlog_after_id)
        result.exits = _exits(procs)
    finally:
        ended = ended if ended > began else time.time()
        # a second Ctrl-C or SIGTERM must not orphan a worker: both are ignored meanwhile
        # (not held: WorkerProcess.stop holds and releases them itself)
        handlers = {n: signal.signal(n, signal.SIG_IGN) for n in (signal.SIGINT, signal.SIGTERM)}
        try:
            for proc in [*procs, *([serve] if serve is not None else [])]:
                with contextlib.suppress(Exception):
                    proc.stop()
        finally:
            for number, handler in handlers.items():
                signal.signal(number, handler)
        sampler.stop()
    result.seconds = time.time() - began
    result.connections = connections(sampler.samples, workers)
    if serve is not None:
        result.serve_connections_max = max(
            (s.by_app.get(SERVE_APP_NAME, 0) for s in sampler.samples if s.ok), default=0
        )
    if sampler.failures:
        result.notes.append(f"sampler: {sampler.failures[0]}")
    if result.backlog_seconds is not None:
        result.backlog_seconds = ended - result.backlog_seconds
    # the ticks of a killed worker's tenants fall due with no worker until its lease ends: they
    # fire late, or once for two when the next tick came first (SPEC 6: after downtime, the
    # next sweep fires once): the hand-over's measure, not the sweep's, so the count ends there
    killed = result.hand_over_killed_at
    expected = app.expected_ticks(began, ended if killed is None else killed)
    result.ticks = read_ticks(server, tenants, expected, began)
    result.logs = read_logs([proc.log for proc in procs])
    if serve is not None:
        serve_logs = read_logs([serve.log])
        if serve_logs.warnings or serve_logs.errors:
            result.notes.append(
                f"ket serve's log: {serve_logs.warnings} WARNING / {serve_logs.errors} ERROR: "
                + "; ".join(serve_logs.first[:3])
            )
    result.load_after = load_average()
    return result


async def _warm_up(result: PassResult, prober: Prober, tenant: str, began: float) -> None:
    """One probe into the first tenant shows the fleet is up (not counted as a wake-up)."""
    deadline = began + WARM_UP_TIMEOUT_S
    while time.time() < deadline:
        probe = await prober.send(tenant)
        if probe.error is None:
            await prober.wait([probe], max(0.0, deadline - time.time()))
            if probe.started is not None:
                result.warm_up_s = probe.started - began
            else:
                result.notes.append(f"warm-up probe into {tenant} not started in time")
            return
        await asyncio.sleep(1)
    result.notes.append(f"warm-up: could not enqueue into {tenant} within the time")


def steady_after(tenants: int, workers: int) -> float:
    """Seconds from the spawn until the workers visit their tenants at their steady pace: the
    first visits' spread, then the longest interval to the second (ket.runtime.visit)."""
    from ket.runtime.sweep import SWEEPS_PER_SECOND
    from ket.runtime.visit import visit_every

    spread = min(tenants / SWEEPS_PER_SECOND, 15.0)  # at most half the default 30 s lease
    return spread + 1.2 * visit_every(-(-tenants // workers))


async def _settle(sampler: Sampler, workers: int) -> None:
    """Until the workers' connection count has not changed for 5 s (at most 60 s)."""
    began = time.time()
    while time.time() - began < SETTLE_MAX_S:
        await asyncio.sleep(1)
        recent = [s for s in sampler.samples if s.at > time.time() - SETTLE_STEADY_S and s.ok]
        if len(recent) < SETTLE_STEADY_S / 0.5 - 2:
            continue
        totals = {sum(s.by_app.get(worker_app_name(i), 0) for i in range(workers)) for s in recent}
        if len(totals) == 1:
            return


async def _idle(
    result: PassResult, procs: list[WorkerProcess], seconds: float, server: Server
) -> None:
    before = {i: cpu_now(p.pid) for i, p in enumerate(procs)}
    sessions = _sessions(server)
    began = time.monotonic()
    await asyncio.sleep(seconds)
    elapsed = time.monotonic() - began
    if sessions is not None and (now := _sessions(server)) is not None:
        result.idle_sessions_per_s = (now - sessions) / elapsed
    for i, proc in enumerate(procs):
        name = worker_app_name(i)
        result.idle_cpu_pct[name] = 100 * (cpu_now(proc.pid) - before[i]) / elapsed
        result.memory[name] = Memory(rss_mb=memory_now(proc.pid), hwm_mb=float("nan"))


async def _paths(
    result: PassResult,
    prober: Prober,
    serve: WorkerProcess | None,
    tenants: list[str],
    args: argparse.Namespace,
    rng: random.Random,
    app: BenchApp,
) -> None:
    """The other enqueue paths, one series each (the example app only)."""
    if app.name != "example":
        return
    plan = [("open_client", "sync", args.path_probes), ("ctx.jobs", "ctx.jobs", args.path_probes)]
    if serve is not None:
        prober.serve_url = await _serve_url(serve, result)
        if prober.serve_url is not None:
            # its first request pays the process's first store and imports: not counted
            await prober.one(tenants[-1], args.probe_timeout, "serve")
            plan.append(("ket serve", "serve", args.serve_probes))
    plan.append(("ket jobs enqueue", "cli", args.cli_probes))
    for label, path, count in plan:
        # `--serve-tenants N`: ket serve's calls into the first N tenants only (before 63f9c7f
        # ket serve had no connection budget: calls into random tenants 150 ms apart held 69 at
        # 100 tenants, more than four workers leave of a 100-connection server)
        into = tenants[: args.serve_tenants] if path == "serve" and args.serve_tenants else tenants
        if count > 0:
            result.paths[label] = await _series(
                prober, into, count, args, rng, args.probe_gap, path
            )


async def _serve_url(serve: WorkerProcess, result: PassResult) -> str | None:
    """The address `ket serve` logged, once it serves (at most 60 s)."""
    import re

    deadline = time.time() + 60
    while time.time() < deadline:
        text = serve.log.read_text(errors="replace") if serve.log.exists() else ""
        found = re.search(r"serving the functions.* on (http://127\.0\.0\.1:\d+)", text)
        if found is not None:
            return found.group(1)
        try:
            serve.check_alive()
        except RuntimeError:
            break
        await asyncio.sleep(0.2)
    result.notes.append(f"ket serve did not start: {serve.tail(5)}")
    return None


async def _fairness(
    result: PassResult,
    prober: Prober,
    tenants: list[str],
    args: argparse.Namespace,
    rng: random.Random,
    server: Server,
    app: BenchApp,
) -> None:
    """A backlog in one tenant, then probes into the others while it drains."""
    busy, others = tenants[0], tenants[1:] or tenants
    result.backlog_after_id = _last_id(server, busy)
    try:
        client = await prober.client(busy)
        try:
            for start in range(0, args.backlog, 5_000):
                chunk = min(5_000, args.backlog - start)
                jobs = [(app.backlog, app.backlog_input())] * chunk
                await asyncio.wait_for(client.aenqueue_many(jobs), 60)
            result.backlog_seconds = time.time()  # made a duration at the end
        finally:
            await client.aclose()
    except Exception as error:
        result.backlog_enqueue_error = f"{type(error).__name__}: {error}".splitlines()[0]
    result.fairness = await _series(prober, others, args.fairness_probes, args, rng, FAIRNESS_GAP_S)


async def _series(
    prober: Prober,
    tenants: list[str],
    count: int,
    args: argparse.Namespace,
    rng: random.Random,
    gap: float,
    path: str = "async",
) -> ProbeStats:
    """`count` probes one after the other through `path`, each into a random tenant, `gap`
    seconds after the previous one started (or was given up); those not sent within
    `--phase-seconds` are counted unsent."""
    deadline = time.monotonic() + args.phase_seconds
    probes = []
    for _ in range(count):
        if time.monotonic() > deadline:
            break
        probes.append(await prober.one(rng.choice(tenants), args.probe_timeout, path))
        await asyncio.sleep(gap)
    return probe_stats(probes, args.probe_timeout, unsent=count - len(probes))


async def _hand_over(
    result: PassResult,
    victim: WorkerProcess,
    pids: dict[int, int],
    prober: Prober,
    tenants: list[str],
    phase_seconds: float,
) -> None:
    """kill -9 worker 0, then one probe into every tenant (4 at a time); each probe's latency,
    and the time from the kill to the last start."""
    result.memory[worker_app_name(0)].hwm_mb = peak_now(victim.pid)
    pids.pop(0, None)
    killed = result.hand_over_killed_at = time.time()
    os.kill(victim.pid, signal.SIGKILL)
    queue = list(tenants)
    probes: list[Probe] = []

    async def sender() -> None:
        while queue and time.monotonic() < deadline:
            probes.append(await prober.send(queue.pop()))

    deadline = time.monotonic() + phase_seconds
    await asyncio.gather(*(sender() for _ in range(HAND_OVER_CONCURRENCY)))
    await prober.wait(probes, HAND_OVER_TIMEOUT_S)
    result.hand_over = probe_stats(probes, HAND_OVER_TIMEOUT_S, unsent=len(queue))
    last = max((p.started for p in probes if p.started is not None), default=None)
    result.hand_over_kill_to_last_start_s = None if last is None else last - killed


def _exits(procs: list[WorkerProcess]) -> dict[str, str]:
    gone = {}
    for i, proc in enumerate(procs):
        if i == 0 and len(procs) >= 2:
            continue  # killed on purpose
        try:
            proc.check_alive()
        except RuntimeError as error:
            # the status, then the last lines of its log (a crash says why there)
            lines = [line for line in str(error).splitlines() if line.strip()]
            gone[worker_app_name(i)] = " | ".join([lines[0].rstrip(":"), *lines[-3:]])[:600]
    return gone


def _sessions(server: Server) -> int | None:
    """Sessions the server has started into the bench's databases (PostgreSQL 14 and later
    count them; None before)."""
    import psycopg

    try:
        with psycopg.connect(server.admin, autocommit=True) as admin:
            row = admin.execute(
                "SELECT sum(sessions)::bigint FROM pg_stat_database WHERE datname LIKE %s",
                (server.prefix.replace("_", "\\_") + "%",),
            ).fetchone()
    except psycopg.Error:
        return None
    return None if row is None or row[0] is None else int(row[0])


def _count_done(server: Server, tenant: str, backlog: str, after_id: int) -> int:
    import psycopg

    try:
        with psycopg.connect(server.tenant_url(tenant), autocommit=True) as connection:
            row = connection.execute(
                "SELECT count(*) FROM ket_jobs WHERE name = %s AND state = 'completed' AND id > %s",
                (backlog, after_id),
            ).fetchone()
    except psycopg.Error:
        return -1
    return int(row[0]) if row else 0


def _last_id(server: Server, tenant: str) -> int:
    import psycopg

    with psycopg.connect(server.tenant_url(tenant), autocommit=True) as connection:
        row = connection.execute("SELECT coalesce(max(id), 0) FROM ket_jobs").fetchone()
    return int(row[0]) if row else 0


# --- the table --------------------------------------------------------------------------------


def _f(value: float | None, digits: int = 1) -> str:
    if value is None or value != value:  # None or NaN
        return "-"
    return f"{value:,.{digits}f}"


def _rows(p: PassResult, backlog: int) -> list[tuple[str, str]]:
    c = p.connections
    rows = [
        ("tenants / worker processes", f"{p.tenants} / {p.workers}"),
        ("spawn to first probe started, s", _f(p.warm_up_s)),
    ]
    if c is not None:
        worst = max(c.per_worker.values(), key=lambda s: s.max, default=None)
        rows += [
            ("connections, all workers: max / median", f"{c.total.max:.0f} / {c.total.median:.0f}"),
            (
                "connections, per worker: max / median",
                "-" if worst is None else f"{worst.max:.0f} / {worst.median:.0f}",
            ),
            ("other clients on the server, max", str(c.others_max)),
            ("server's client backends, max (of max_connections)", str(c.server_max)),
        ]
    rss = [m.rss_mb for m in p.memory.values()]
    hwm = [m.hwm_mb for m in p.memory.values()]
    cpu = list(p.idle_cpu_pct.values())
    rows += [
        ("idle worker VmRSS, MB (max over workers)", _f(max(rss, default=None), 0)),
        ("worker VmHWM at the end, MB (max)", _f(max(hwm, default=None), 0)),
        ("idle worker CPU, % of a core (max)", _f(max(cpu, default=None), 2)),
        ("  connections opened per second meanwhile, all workers", _f(p.idle_sessions_per_s)),
    ]
    if p.serve_connections_max is not None:
        rows.append(("ket serve's connections, max", str(p.serve_connections_max)))
    if p.wake_up is not None:
        rows.append(("wake-up p50 / p95 / p99, ms: open_async_client", p.wake_up.line()))
        rows.append(
            ("  open_async_client before each probe: p50, ms", _f(p.wake_up.client_open_p50_ms))
        )
    for label, stats in p.paths.items():
        rows.append((f"wake-up p50 / p95 / p99, ms: {label}", stats.line()))
        if label == "open_client":
            rows.append(("  open_client before each probe: p50, ms", _f(stats.client_open_p50_ms)))
        if label == "ket serve":
            rows.append(("  the HTTP answer: p50, ms", _f(stats.client_open_p50_ms)))
        if label == "ket jobs enqueue":
            rows.append(
                ("  its start-up, spawn to enqueued_at: p50, ms", _f(stats.client_open_p50_ms))
            )
    if p.fairness is not None and p.wake_up is not None:
        rows.append(
            (
                f"others during a {backlog:,} backlog: p50 / p95 / p99, ms",
                p.fairness.line()
                if p.backlog_enqueue_error is None
                else f"backlog failed: {p.backlog_enqueue_error[:60]}",
            )
        )
        rows.append(
            ("  backlog p50 / idle p50", f"{_f(p.fairness.p50_ms)} / {_f(p.wake_up.p50_ms)}")
        )
        rows.append(
            (
                "  backlog jobs completed by the end",
                f"{p.backlog_done:,} in {_f(p.backlog_seconds, 0)} s",
            )
        )
    if p.hand_over is None:
        rows.append(("hand-over after kill -9: probe max / p50, ms", "- (one worker)"))
        rows.append(("  kill to the last probe's start, s", "-"))
    else:
        h = p.hand_over
        rows.append(
            (
                "hand-over after kill -9: probe max / p50, ms",
                f"{_f(h.max_ms)} / {_f(h.p50_ms)}" + h.trouble(),
            )
        )
        rows.append(("  kill to the last probe's start, s", _f(p.hand_over_kill_to_last_start_s)))
    for t in p.ticks:
        rows.append(
            (
                f"ticks {t.schedule}: once / expected",
                f"{t.fired_once} / {t.expected - t.caught_up}; {t.missing} missing, "
                f"{t.duplicates} dup, {t.caught_up} caught up by the next, "
                f"{t.skipped} skipped ({t.window})",
            )
        )
        rows.append(
            (
                f"  {t.schedule} enqueued at +s after its tick: p5 / p50 / p95; width",
                f"{_f(t.offset_p5_s)} / {_f(t.offset_p50_s)} / {_f(t.offset_p95_s)}; "
                f"{_f(t.sweep_width_median_s)}",
            )
        )
    if p.logs is not None:
        rows.append(("log lines WARNING / ERROR", f"{p.logs.warnings:,} / {p.logs.errors:,}"))
    rows.append(("load average before / after", f"{p.load_before:.2f} / {p.load_after:.2f}"))
    return rows


def table(passes: list[PassResult], backlog: int) -> str:
    columns = [dict(_rows(p, backlog)) for p in passes]
    labels = [label for label, _ in _rows(passes[0], backlog)]
    for extra in columns[1:]:
        labels += [label for label in extra if label not in labels]
    header = ["measure", *[f"{p.workers} worker{'s' if p.workers > 1 else ''}" for p in passes]]
    body = [[label, *[col.get(label, "") for col in columns]] for label in labels]
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]
    lines = [" | ".join(cell.ljust(w) for cell, w in zip(header, widths, strict=True))]
    lines.append("-|-".join("-" * w for w in widths))
    lines += [" | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in body]
    for p in passes:
        detail = []
        if p.logs is not None and p.logs.first:
            detail += ["  most frequent WARNING/ERROR kinds:", *[f"    {k}" for k in p.logs.first]]
        for name, stats in (
            ("wake-up", p.wake_up),
            *p.paths.items(),
            ("fairness", p.fairness),
        ):
            if stats is not None and stats.errors:
                detail += [
                    f"  {name} enqueue errors:",
                    *[f"    {n} x {e}" for e, n in stats.errors.items()],
                ]
        detail += [f"  worker {name} exited: {why}" for name, why in p.exits.items()]
        detail += [f"  {note}" for note in p.notes]
        if detail:
            lines += ["", f"{p.workers} worker(s):", *detail]
    return "\n".join(lines)


# --- the command ------------------------------------------------------------------------------


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--app",
        choices=("example", "bench"),
        default="example",
        help="the workers' app: the example app (default), or issue 12's bench-only app",
    )
    parser.add_argument("--tenants", type=int, default=100)
    parser.add_argument("--workers", default="1,4", help="worker counts, one pass each (1,4)")
    parser.add_argument("--probes", type=int, default=200, help="wake-up probes (200)")
    parser.add_argument(
        "--probe-gap",
        type=float,
        default=PROBE_GAP_S,
        help=f"seconds from one probe's start to the next probe ({PROBE_GAP_S:g})",
    )
    parser.add_argument(
        "--path-probes",
        type=int,
        default=100,
        help="example app: probes through open_client, ctx.jobs and ket serve, each (100)",
    )
    parser.add_argument(
        "--serve-probes", type=int, default=None, help="through ket serve (--path-probes)"
    )
    parser.add_argument(
        "--serve-tenants",
        type=int,
        default=0,
        help="ket serve's probes go into the first N tenants (0, the default: any tenant)",
    )
    parser.add_argument(
        "--serve-connections",
        type=int,
        default=4,
        help="ket serve's --max-connections (4: four workers at 20 and it fit 100 connections)",
    )
    parser.add_argument(
        "--cli-probes",
        type=int,
        default=10,
        help="example app: `ket jobs enqueue` processes, about a second each (10)",
    )
    parser.add_argument("--idle-seconds", type=float, default=30.0)
    parser.add_argument(
        "--idle-after",
        type=float,
        default=None,
        help="seconds from the spawn to the idle window (default: the first visits' spread and "
        "one visit interval); the example app's start jobs at 1,000 tenants take about 130 s",
    )
    parser.add_argument("--backlog", type=int, default=20_000)
    parser.add_argument("--fairness-probes", type=int, default=50)
    parser.add_argument("--probe-timeout", type=float, default=10.0, help="lost after (10 s)")
    parser.add_argument(
        "--min-seconds",
        type=float,
        default=150.0,
        help="a pass lasts at least this long, so that schedules tick (150)",
    )
    parser.add_argument(
        "--phase-seconds",
        type=float,
        default=120.0,
        help="probes of one measure not sent within this are counted unsent (120)",
    )
    parser.add_argument(
        "--quiet-schedules",
        action="store_true",
        help="schedules every hour and daily instead of every minute and 30 s (idle cost)",
    )
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument("--json", type=Path, metavar="PATH")
    parser.add_argument(
        "--keep-logs", action="store_true", help="keep the workers' logs (kept anyway if one died)"
    )
    parser.add_argument("--setup-only", action="store_true", help="make the databases, no pass")
    parser.add_argument("--drop", action="store_true", help="drop every ketbench_* database")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.serve_probes is None:
        args.serve_probes = args.path_probes
    # SIGTERM (`timeout`, say) unwinds like Ctrl-C, so the workers are stopped on the way out
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    if args.drop:
        dropped = drop_all(Server(admin=admin_url()))
        print(f"dropped {len(dropped)} databases: {', '.join(dropped) or 'none'}")
        return 0
    if args.quiet_schedules:  # the workers' app and the harness's tick count alike
        if args.app != "bench":
            raise SystemExit("--quiet-schedules is the bench app's (--app bench)")
        os.environ["KETBENCH_SCHEDULES"] = "quiet"
    app = example_app() if args.app == "example" else bench_app(args.quiet_schedules)
    server = Server(admin=admin_url(), prefix=app.prefix)
    # the harness's clients find the tenants where the workers do
    os.environ["KET_DATABASE_URL"] = server.template
    os.environ["KET_REGISTRY_URL"] = server.registry
    counts = [int(n) for n in args.workers.split(",") if n.strip()]
    tenants = tenant_names(args.tenants)
    prepared: Prepared = prepare(server, args.tenants, app.setup)
    find_probe_input(app, server.url(server.template_db))
    print(
        f"set-up: {prepared.created} tenant databases created, {prepared.reused} reused "
        f"({prepared.migrated} migrated), {prepared.seconds:.1f} s",
        flush=True,
    )
    if args.setup_only:
        return 0
    passes: list[PassResult] = []
    # the workspace, the start files and the workers' logs; kept when asked, or when a worker
    # died by itself (its log says why)
    folder = Path(tempfile.mkdtemp(prefix="ketbench-"))
    try:
        for i, workers in enumerate(counts):
            if i:
                reset_tenants(server, tenants, app.setup)
            print(f"pass: {args.tenants} tenants, {workers} worker(s) ...", flush=True)
            passes.append(asyncio.run(run_pass(server, tenants, workers, args, folder, app)))
            print(table(passes[-1:], args.backlog), flush=True)
    finally:
        if args.keep_logs or any(p.exits for p in passes):
            print(f"workers' logs kept in {folder}", flush=True)
        else:
            shutil.rmtree(folder, ignore_errors=True)
    print()
    print(table(passes, args.backlog))
    if args.json is not None:
        record = {
            "tenants": args.tenants,
            "setup": asdict(prepared),
            "args": {k: str(v) for k, v in vars(args).items()},
            "passes": [asdict(p) for p in passes],
        }
        args.json.write_text(json.dumps(record, indent=2, default=str), encoding="utf-8")
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
    sys.exit(130)
