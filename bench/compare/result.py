"""What one pass of one library measured (the JSON written by --json is a list of these)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, kw_only=True)
class Drain:
    """A backlog processed by the worker CLI; times read from the library's own table."""

    jobs: int
    settings: str
    rate: float  # jobs / (last completion - first claim)
    seconds: float
    worker_cpu_ms_per_job: float
    postgres_cpu_ms_per_job: float
    worker_peak_rss_mb: float
    spawn_to_first_completion_s: float


@dataclass(frozen=True, kw_only=True)
class Latency:
    """Idle enqueue-to-start: handler start - time just before the enqueue call."""

    probes: int
    p50_ms: float
    p95_ms: float
    p99_ms: float
    samples_ms: list[float]


@dataclass(frozen=True, kw_only=True)
class Pass:
    """Every measure of one library in one round, with the load average around it."""

    library: str
    round: int
    load_before: float
    load_after: float
    enqueue_single: float  # jobs/s
    enqueue_bulk: float  # jobs/s
    drain_default: Drain
    drain_best: Drain
    latency: Latency
    # ket only (PgQueuer has no SQLite): sqlite_latency.py, the probes from the harness process
    sqlite_latency: Latency | None = None
    # jobs/s one at a time from concurrent producers in one process, by their number ("8")
    enqueue_concurrent: dict[str, float] = field(default_factory=dict)
