"""What bench/tenants_bench.py watches and reads: connections and memory sampled every 0.5 s,
handler start times, probes through each enqueue path, schedule ticks, the workers' logs."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import statistics
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from urllib import request

import psycopg
from procfs import cpu_seconds, peak_rss_bytes, rss_bytes
from tenants_apps import BenchApp
from tenants_setup import Server

from ket.client import AsyncClient, open_async_client, open_client

APP_NAME_PREFIX = "ketbench-w"  # PGAPPNAME of worker i is ketbench-w<i>: libpq tags its sessions
HARNESS_APP_NAME = "ketbench-harness"
SAMPLE_EVERY_S = 0.5


def worker_app_name(index: int) -> str:
    return f"{APP_NAME_PREFIX}{index}"


# --- connections and memory, sampled ------------------------------------------------------


@dataclass
class Sample:
    at: float
    by_app: dict[str, int]  # client backends by application_name (the sampler's own excluded)
    rss: dict[int, int]  # worker index -> VmRSS bytes (live workers only)
    ok: bool = True  # False: the sampler's query failed (by_app is then empty)


class Sampler:
    """A thread that counts `pg_stat_activity`'s client backends by `application_name` every
    0.5 s on one connection of its own (opened before any worker starts, so a full server cannot
    keep it out), and reads each worker's VmRSS."""

    def __init__(self, server: Server, pids: dict[int, int]) -> None:
        self._server = server
        self._pids = pids  # worker index -> pid; the harness removes a killed worker
        self.samples: list[Sample] = []
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._connection = psycopg.connect(
            server.admin, autocommit=True, application_name=HARNESS_APP_NAME
        )
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        with contextlib.suppress(psycopg.Error):
            self._connection.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            began = time.time()
            ok = True
            try:
                rows = self._connection.execute(
                    "SELECT coalesce(application_name, ''), count(*) FROM pg_stat_activity "
                    "WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() "
                    "GROUP BY 1"
                ).fetchall()
                by_app = {str(name): int(n) for name, n in rows}
            except psycopg.Error as error:
                self.failures.append(str(error).strip())
                self._reconnect()
                by_app, ok = {}, False
            rss = {}
            for index, pid in list(self._pids.items()):
                with contextlib.suppress(OSError, RuntimeError):
                    rss[index] = rss_bytes(pid)
            self.samples.append(Sample(at=began, by_app=by_app, rss=rss, ok=ok))
            self._stop.wait(max(0.0, SAMPLE_EVERY_S - (time.time() - began)))

    def _reconnect(self) -> None:
        with contextlib.suppress(psycopg.Error):
            self._connection.close()
        with contextlib.suppress(psycopg.Error):
            self._connection = psycopg.connect(
                self._server.admin, autocommit=True, application_name=HARNESS_APP_NAME
            )


@dataclass(frozen=True, kw_only=True)
class Spread:
    max: float
    median: float


def _spread(values: Sequence[float]) -> Spread:
    return Spread(max=max(values, default=0), median=statistics.median(values) if values else 0)


@dataclass(frozen=True, kw_only=True)
class Connections:
    samples: int
    total: Spread  # all the bench's workers together
    per_worker: dict[str, Spread]  # by worker (application_name)
    others_max: int  # client backends of anyone else on the server (not the bench's)
    server_max: int  # every client backend, the sampler's own included
    sampler_failures: int


def connections(samples: Sequence[Sample], workers: int) -> Connections:
    def ours(name: str) -> bool:
        return name.startswith(APP_NAME_PREFIX)

    taken = [s for s in samples if s.ok]
    names = [worker_app_name(i) for i in range(workers)]
    return Connections(
        samples=len(taken),
        total=_spread([sum(n for a, n in s.by_app.items() if ours(a)) for s in taken]),
        per_worker={a: _spread([s.by_app.get(a, 0) for s in taken]) for a in names},
        others_max=max(
            (sum(n for a, n in s.by_app.items() if not ours(a)) for s in taken), default=0
        ),
        server_max=max((sum(s.by_app.values()) + 1 for s in taken), default=0),
        sampler_failures=len(samples) - len(taken),
    )


@dataclass(kw_only=True)
class Memory:
    rss_mb: float  # VmRSS at the end of the idle window
    hwm_mb: float  # VmHWM at the end of the pass (before the worker is stopped)


def memory_now(pid: int) -> float:
    try:
        return rss_bytes(pid) / 2**20
    except (OSError, RuntimeError):
        return float("nan")


def peak_now(pid: int) -> float:
    try:
        return peak_rss_bytes(pid) / 2**20
    except (OSError, RuntimeError):
        return float("nan")


def cpu_now(pid: int) -> float:
    return cpu_seconds(pid)


# --- handler start times, and probes --------------------------------------------------------


class Starts:
    """The start times the workers' probe handlers wrote, by (tenant, job id); each worker
    writes a file of its own (see tenants_app.py). Lines `@chain <tenant> <job> <probe> <time>`
    (example_app.py) say which probe a chain job enqueued, and when it began to."""

    def __init__(self, paths: Sequence[Path]) -> None:
        self._offsets = {path: 0 for path in paths}
        self.starts: dict[tuple[str, int], float] = {}
        self.chains: dict[tuple[str, int], tuple[int, float]] = {}

    def read(self) -> dict[tuple[str, int], float]:
        for path, offset in self._offsets.items():
            try:
                with path.open("rb") as file:
                    file.seek(offset)
                    chunk = file.read()
            except FileNotFoundError:
                continue
            complete = chunk[: chunk.rfind(b"\n") + 1]
            self._offsets[path] = offset + len(complete)
            for line in complete.decode("ascii").splitlines():
                if line.startswith("@chain "):
                    _, tenant, parent, child, sent = line.split()
                    self.chains[(tenant, int(parent))] = (int(child), float(sent))
                    continue
                tenant, job_id, started = line.split()
                self.starts.setdefault((tenant, int(job_id)), float(started))
        return self.starts


@dataclass
class Probe:
    tenant: str
    sent: float = 0.0  # time.time() just before the enqueue call
    job_id: int | None = None
    started: float | None = None
    error: str | None = None  # the client could not open or the enqueue failed
    # how long opening the client took (not in the latency); for `ket jobs enqueue`, from the
    # command's spawn to its job's enqueued_at (its start-up)
    opened_s: float | None = None
    parent_id: int | None = None  # the chain job whose handler enqueues this probe (ctx.jobs)

    @property
    def latency(self) -> float | None:
        return None if self.started is None else self.started - self.sent


@dataclass(frozen=True, kw_only=True)
class ProbeStats:
    probes: int
    started: int  # within the timeout
    lost: int  # enqueued, not started within the timeout
    failed: int  # never enqueued: the client could not connect, or the enqueue failed
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    max_ms: float | None
    unsent: int = 0  # not sent: the measure's time limit (--phase-seconds) came first
    client_open_p50_ms: float | None = None  # what an application pays to open a client
    errors: dict[str, int] = field(default_factory=dict)  # distinct enqueue errors
    # the slowest probes that started: (tenant, when it was sent as UTC HH:MM:SS.mmm, ms),
    # so a tail can be set beside what else happened then (a tick at :00 or :30, say)
    slowest: list[tuple[str, str, float]] = field(default_factory=list)

    def line(self) -> str:
        def ms(value: float | None) -> str:
            return "-" if value is None else f"{value:.1f}"

        return f"{ms(self.p50_ms)} / {ms(self.p95_ms)} / {ms(self.p99_ms)}" + self.trouble()

    def trouble(self) -> str:
        """` (3 lost, 2 failed of 200)`, or nothing when every probe started."""
        counts = ((self.lost, "lost"), (self.failed, "failed"), (self.unsent, "unsent"))
        trouble = [f"{n} {what}" for n, what in counts if n]
        return f" ({', '.join(trouble)} of {self.probes + self.unsent})" if trouble else ""


def probe_stats(probes: Sequence[Probe], timeout: float, *, unsent: int = 0) -> ProbeStats:
    delays = sorted(p.latency for p in probes if p.latency is not None and p.latency <= timeout)
    failed = [p for p in probes if p.error is not None]

    def cut(q: int) -> float | None:
        if not delays:
            return None
        if len(delays) == 1:
            return delays[0] * 1000
        return statistics.quantiles(delays, n=100, method="inclusive")[q - 1] * 1000

    return ProbeStats(
        probes=len(probes),
        started=len(delays),
        lost=len(probes) - len(delays) - len(failed),
        failed=len(failed),
        p50_ms=cut(50),
        p95_ms=cut(95),
        p99_ms=cut(99),
        max_ms=delays[-1] * 1000 if delays else None,
        unsent=unsent,
        client_open_p50_ms=_median_ms([p.opened_s for p in probes if p.opened_s is not None]),
        errors=dict(Counter(_shape(p.error) for p in failed if p.error).most_common(5)),
        slowest=[
            (p.tenant, _clock(p.sent), round(latency * 1000, 1))
            for p, latency in sorted(
                ((p, p.latency) for p in probes if p.latency is not None),
                key=lambda pair: pair[1],
                reverse=True,
            )[:SLOWEST]
        ],
    )


SLOWEST = 5


def _median_ms(seconds: Sequence[float]) -> float | None:
    return statistics.median(seconds) * 1000 if seconds else None


def _clock(instant: float) -> str:
    return datetime.fromtimestamp(instant, UTC).strftime("%H:%M:%S.%f")[:-3]


class Prober:
    """Enqueues the app's probe job through one path, then waits for the handler's start.

    `send` (`open_async_client`) and `send_sync` (`open_client`): one client per enqueue,
    opened before the clock starts and closed after; the clock starts just before the enqueue
    call. `send_chain`: an async client enqueues the app's chain job; the clock is the chain
    handler's, taken just before its transaction that enqueues the probe (`ctx.jobs`).
    `send_serve`: an HTTP POST to `ket serve` calling `sales.place_order`, whose second
    transaction enqueues the probe; the clock is the probe's `enqueued_at`, the start of that
    transaction, as for `ctx.jobs` (the HTTP answer, the function's two transactions in a
    tenant the server may not have opened yet, is reported apart). `send_cli`: a
    `ket jobs enqueue` process; the clock is the job's `enqueued_at` (the command's start-up,
    about a second of imports, is reported apart)."""

    def __init__(self, server: Server, starts: Starts, app: BenchApp) -> None:
        self._server = server
        self._starts = starts
        self._app = app
        self.serve_url: str | None = None
        self.cli: list[str] = []  # `ket ... jobs enqueue` up to the job's name
        self.cli_env: dict[str, str] = {}

    async def client(self, tenant: str) -> AsyncClient:
        return await asyncio.wait_for(
            open_async_client(self._app.deployment, tenant=tenant), timeout=10
        )

    async def send(self, tenant: str) -> Probe:
        return await self._send_async(tenant, self._app.probe, self._app.probe_input)

    async def _send_async(self, tenant: str, job: str, payload: dict[str, object] | None) -> Probe:
        probe = Probe(tenant=tenant)
        try:
            opening = time.perf_counter()
            client = await self.client(tenant)
            probe.opened_s = time.perf_counter() - opening
        except Exception as error:  # a full server refuses: that is a measured outcome
            probe.error = _one_line(error)
            return probe
        try:
            probe.sent = time.time()
            inserted = await asyncio.wait_for(client.aenqueue(job, payload), timeout=10)
            probe.job_id = inserted.id
        except Exception as error:
            probe.error = _one_line(error)
        finally:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(client.aclose(), timeout=5)
        return probe

    async def send_sync(self, tenant: str) -> Probe:
        return await asyncio.to_thread(self._send_sync, tenant)

    def _send_sync(self, tenant: str) -> Probe:
        probe = Probe(tenant=tenant)
        try:
            opening = time.perf_counter()
            client = open_client(self._app.deployment, tenant=tenant)
            probe.opened_s = time.perf_counter() - opening
        except Exception as error:
            probe.error = _one_line(error)
            return probe
        try:
            probe.sent = time.time()
            probe.job_id = client.enqueue(self._app.probe, self._app.probe_input).id
        except Exception as error:
            probe.error = _one_line(error)
        finally:
            with contextlib.suppress(Exception):
                client.close()
        return probe

    async def send_chain(self, tenant: str) -> Probe:
        assert self._app.chain is not None
        probe = await self._send_async(tenant, self._app.chain, None)
        probe.parent_id, probe.job_id = probe.job_id, None  # the probe's id comes from the chain
        return probe

    async def send_serve(self, tenant: str) -> Probe:
        return await asyncio.to_thread(self._send_serve, tenant)

    def _send_serve(self, tenant: str) -> Probe:
        import example_app

        assert self.serve_url is not None
        probe = Probe(tenant=tenant)
        body = json.dumps({"number": f"serve-{time.time_ns()}", "email": "p@example.com"})
        call = request.Request(
            f"{self.serve_url}/functions/sales.place_order",
            data=body.encode(),
            headers={
                "Content-Type": "application/json",
                "Authorization": f"Bearer {example_app.TOKEN}",
                "X-Ket-Tenant": tenant,
            },
            method="POST",
        )
        probe.sent = time.time()
        try:
            with request.urlopen(call, timeout=10) as answer:
                result = json.loads(answer.read())
            probe.opened_s = time.time() - probe.sent  # the HTTP answer
            probe.job_id = int(result["confirmation_job"])
            probe.sent = self._enqueued_at(tenant, probe.job_id)
        except Exception as error:
            probe.error = _one_line(error)
        return probe

    async def send_cli(self, tenant: str) -> Probe:
        probe = Probe(tenant=tenant)
        spawned = time.time()
        payload = json.dumps(self._app.probe_input or {})
        try:
            process = await asyncio.create_subprocess_exec(
                *self.cli,
                payload,
                "--tenant",
                tenant,
                env=self.cli_env,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            out, err = await asyncio.wait_for(process.communicate(), timeout=60)
            found = re.search(rb"enqueued job (\d+)", out)
            if process.returncode != 0 or found is None:
                raise RuntimeError((err or out).decode(errors="replace").strip()[-300:])
            probe.job_id = int(found.group(1))
            probe.sent = await asyncio.to_thread(self._enqueued_at, tenant, probe.job_id)
            probe.opened_s = probe.sent - spawned
        except Exception as error:
            probe.error = _one_line(error)
        return probe

    def _enqueued_at(self, tenant: str, job_id: int) -> float:
        with psycopg.connect(
            self._server.tenant_url(tenant), autocommit=True, application_name=HARNESS_APP_NAME
        ) as connection:
            row = connection.execute(
                "SELECT extract(epoch FROM enqueued_at) FROM ket_jobs WHERE id = %s", (job_id,)
            ).fetchone()
        assert row is not None, (tenant, job_id)
        return float(row[0])

    async def wait(self, probes: Sequence[Probe], timeout: float) -> None:
        """Until every enqueued probe started, or `timeout` seconds after the last was sent."""
        pending = [
            p
            for p in probes
            if (p.job_id is not None or p.parent_id is not None) and p.started is None
        ]
        last = max((p.sent for p in pending), default=time.time())
        while pending:
            starts = self._starts.read()
            for p in pending:
                if p.job_id is None and p.parent_id is not None:
                    chained = self._starts.chains.get((p.tenant, p.parent_id))
                    if chained is not None:
                        p.job_id, p.sent = chained
                        last = max(last, p.sent)
                if p.job_id is not None:
                    p.started = starts.get((p.tenant, p.job_id))
            pending = [p for p in pending if p.started is None]
            if not pending or time.time() - last > timeout:
                return
            await asyncio.sleep(0.001)

    async def one(self, tenant: str, timeout: float, path: str = "async") -> Probe:
        senders = {
            "async": self.send,
            "sync": self.send_sync,
            "ctx.jobs": self.send_chain,
            "serve": self.send_serve,
            "cli": self.send_cli,
        }
        probe = await senders[path](tenant)
        await self.wait([probe], timeout)
        return probe


def _one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"


def _shape(message: str) -> str:
    """A message with its numbers and tenant names blanked, to count distinct kinds."""
    message = re.sub(r"\bt\d{4}\b", "t####", message)
    message = re.sub(r"ketbench_t\d+", "ketbench_t####", message)
    return re.sub(r"\d+", "#", message)[:200]


# --- schedule ticks ---------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Ticks:
    schedule: str
    interval_s: int
    window: str  # the ticks expected of every tenant, as UTC times
    expected: int  # tenants x ticks in the window
    fired_once: int
    missing: int
    # a tenant's first sweep fires only the latest tick due (the state is a day old): when a
    # tick came due while that sweep went round, the tenants swept after it fired that one and
    # skipped the one before, which the window expected of them too
    caught_up: int
    duplicates: int  # extra jobs for a (tenant, tick) already fired
    skipped: int  # sum of ticks_skipped over the fired jobs
    tenants_never_fired: int
    # offset of the enqueue within the interval: when in its interval each tick was enqueued
    offset_p5_s: float | None
    offset_p50_s: float | None
    offset_p95_s: float | None
    offset_max_s: float | None
    # per tick: the last tenant's enqueue minus the first one's; the median over ticks
    sweep_width_median_s: float | None
    histogram: dict[str, int] = field(default_factory=dict)  # offset bucket (5 s) -> jobs


def read_ticks(
    server: Server, tenants: Sequence[str], expected: dict[str, list[int]], began: float
) -> list[Ticks]:
    """Read every tenant's tick jobs; `expected`: each schedule's ticks every tenant should
    fire once (the app's `expected_ticks`)."""
    fired: dict[str, dict[str, list[tuple[float, float, int]]]] = {n: {} for n in expected}
    for tenant in tenants:
        with psycopg.connect(
            server.tenant_url(tenant), autocommit=True, application_name=HARNESS_APP_NAME
        ) as connection:
            rows = connection.execute(
                "SELECT name, extract(epoch FROM tick), extract(epoch FROM enqueued_at),"
                " coalesce(ticks_skipped, 0) FROM ket_jobs WHERE tick IS NOT NULL"
            ).fetchall()
        for name, tick, enqueued, skipped in rows:
            fired.setdefault(str(name), {}).setdefault(tenant, []).append(
                (float(tick), float(enqueued), int(skipped))
            )
    return [
        _ticks(name, window, fired.get(name, {}), tenants, began)
        for name, window in expected.items()
    ]


def _ticks(
    name: str,
    window: list[int],
    by_tenant: dict[str, list[tuple[float, float, int]]],
    tenants: Sequence[str],
    began: float,
) -> Ticks:
    """The offsets (enqueue - tick) count only ticks that fell due after the workers started:
    a tick due before (the example app's first sweep, on a day-old state) waited for them."""
    interval = window[1] - window[0] if len(window) > 1 else 0
    first, last = (window[0], window[-1]) if window else (0, 0)
    window_set = set(window)
    fired_once = missing = caught_up = duplicates = skipped = never = 0
    offsets: list[float] = []
    per_tick: dict[float, list[float]] = {}
    for tenant in tenants:
        jobs = by_tenant.get(tenant, [])
        never += not jobs
        counts = Counter(round(tick) for tick, _, _ in jobs)
        duplicates += sum(n - 1 for n in counts.values() if n > 1)
        fired_once += sum(1 for t in window if counts.get(t) == 1)
        # the ticks before this tenant's first one that a catch-up skipped
        first_fired = min((tick, skip) for tick, _, skip in jobs) if jobs else None
        for t in window:
            if t in counts:
                continue
            if first_fired is not None and t < first_fired[0] and first_fired[1] > 0:
                caught_up += 1
            else:
                missing += 1
        for tick, enqueued, skip in jobs:
            skipped += skip
            if round(tick) in window_set:
                if tick > began:
                    offsets.append(enqueued - tick)
                per_tick.setdefault(tick, []).append(enqueued)
    offsets.sort()

    def cut(q: int) -> float | None:
        if len(offsets) < 2:
            return offsets[0] if offsets else None
        return statistics.quantiles(offsets, n=100, method="inclusive")[q - 1]

    widths = [max(v) - min(v) for v in per_tick.values()]
    histogram = Counter(f"{int(o // 5) * 5:>3}-{int(o // 5) * 5 + 5}s" for o in offsets)
    stamp = "%H:%M:%S"
    shown = (
        f"{datetime.fromtimestamp(first, UTC).strftime(stamp)}-"
        f"{datetime.fromtimestamp(last, UTC).strftime(stamp)} UTC"
        if window
        else "none"
    )
    return Ticks(
        schedule=name,
        interval_s=interval,
        window=shown,
        expected=len(window) * len(tenants),
        fired_once=fired_once,
        missing=missing,
        caught_up=caught_up,
        duplicates=duplicates,
        skipped=skipped,
        tenants_never_fired=never,
        offset_p5_s=cut(5),
        offset_p50_s=cut(50),
        offset_p95_s=cut(95),
        offset_max_s=offsets[-1] if offsets else None,
        sweep_width_median_s=statistics.median(widths) if widths else None,
        histogram=dict(sorted(histogram.items())),
    )


# --- the workers' logs ------------------------------------------------------------------------

_LEVEL = re.compile(r"^\S+ \S+ (WARNING|ERROR|CRITICAL) (\S+): (.*)$")


@dataclass(frozen=True, kw_only=True)
class LogSummary:
    warnings: int
    errors: int
    lines: int
    first: list[str]  # the most frequent distinct kinds, with their counts


def read_logs(paths: Sequence[Path]) -> LogSummary:
    warnings = errors = lines = 0
    kinds: Counter[str] = Counter()
    for path in paths:
        if not path.exists():
            continue
        with path.open(encoding="utf-8", errors="replace") as file:
            for line in file:
                lines += 1
                match = _LEVEL.match(line.rstrip("\n"))
                if match is None:
                    continue
                level, logger, message = match.groups()
                if level == "WARNING":
                    warnings += 1
                else:
                    errors += 1
                kinds[f"{level} {logger}: {_shape(message)}"] += 1
    return LogSummary(
        warnings=warnings,
        errors=errors,
        lines=lines,
        first=[f"{n} x {kind}" for kind, n in kinds.most_common(6)],
    )
