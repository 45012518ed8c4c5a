"""The summary table: per measure, each library's median (min-max) and the ratio of medians."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from result import Pass


@dataclass(frozen=True, kw_only=True)
class Row:
    label: str
    value: Callable[[Pass], float | None]  # None: the library has no such measure
    digits: int  # decimals shown
    higher_is_better: bool


def rows(jobs: int) -> list[Row]:
    n = f"{jobs:,}"
    return [
        Row(
            label="enqueue one at a time, jobs/s",
            value=lambda p: p.enqueue_single,
            digits=0,
            higher_is_better=True,
        ),
        Row(
            label="enqueue one at a time, 8 producers, jobs/s",
            value=lambda p: p.enqueue_concurrent.get("8"),
            digits=0,
            higher_is_better=True,
        ),
        Row(
            label="enqueue one at a time, 32 producers, jobs/s",
            value=lambda p: p.enqueue_concurrent.get("32"),
            digits=0,
            higher_is_better=True,
        ),
        Row(
            label=f"enqueue {n} in bulk, jobs/s",
            value=lambda p: p.enqueue_bulk,
            digits=0,
            higher_is_better=True,
        ),
        Row(
            label=f"process {n} backlog, default settings, jobs/s",
            value=lambda p: p.drain_default.rate,
            digits=0,
            higher_is_better=True,
        ),
        Row(
            label=f"process {n} backlog, best settings, jobs/s",
            value=lambda p: p.drain_best.rate,
            digits=0,
            higher_is_better=True,
        ),
        Row(
            label="idle enqueue-to-start p50, ms",
            value=lambda p: p.latency.p50_ms,
            digits=1,
            higher_is_better=False,
        ),
        Row(
            label="idle enqueue-to-start p95, ms",
            value=lambda p: p.latency.p95_ms,
            digits=1,
            higher_is_better=False,
        ),
        Row(
            label="idle enqueue-to-start p99, ms",
            value=lambda p: p.latency.p99_ms,
            digits=1,
            higher_is_better=False,
        ),
        Row(
            label="worker CPU per job, default, ms",
            value=lambda p: p.drain_default.worker_cpu_ms_per_job,
            digits=3,
            higher_is_better=False,
        ),
        Row(
            label="worker CPU per job, best, ms",
            value=lambda p: p.drain_best.worker_cpu_ms_per_job,
            digits=3,
            higher_is_better=False,
        ),
        Row(
            label="PostgreSQL CPU per job, default, ms (upper bound)",
            value=lambda p: p.drain_default.postgres_cpu_ms_per_job,
            digits=3,
            higher_is_better=False,
        ),
        Row(
            label="PostgreSQL CPU per job, best, ms (upper bound)",
            value=lambda p: p.drain_best.postgres_cpu_ms_per_job,
            digits=3,
            higher_is_better=False,
        ),
        Row(
            label="worker peak RSS (default drain), MB",
            value=lambda p: p.drain_default.worker_peak_rss_mb,
            digits=0,
            higher_is_better=False,
        ),
        Row(
            label="spawn to first completed job (default drain), s",
            value=lambda p: p.drain_default.spawn_to_first_completion_s,
            digits=2,
            higher_is_better=False,
        ),
        Row(
            label="embedded SQLite, enqueue from another process, p50, ms",
            value=lambda p: p.sqlite_latency.p50_ms if p.sqlite_latency else None,
            digits=1,
            higher_is_better=False,
        ),
        Row(
            label="embedded SQLite, enqueue from another process, p95, ms",
            value=lambda p: p.sqlite_latency.p95_ms if p.sqlite_latency else None,
            digits=1,
            higher_is_better=False,
        ),
        Row(
            label="embedded SQLite, enqueue from another process, p99, ms",
            value=lambda p: p.sqlite_latency.p99_ms if p.sqlite_latency else None,
            digits=1,
            higher_is_better=False,
        ),
    ]


def _cell(values: Sequence[float], digits: int) -> str:
    if not values:
        return "-"
    median = f"{statistics.median(values):,.{digits}f}"
    if len(values) == 1:
        return median
    return f"{median} ({min(values):,.{digits}f}-{max(values):,.{digits}f})"


def table(passes: Sequence[Pass], libraries: Sequence[str], jobs: int) -> str:
    """A Markdown table, one row per measure, the ratio of medians of the first two libraries."""
    first, second = libraries
    lines = [
        f"| measure | {first} | {second} | {first} / {second} | better |",
        "| --- | ---: | ---: | ---: | :---: |",
    ]
    for row in rows(jobs):
        mine = _values(row, passes, first)
        theirs = _values(row, passes, second)
        ratio = (
            f"{statistics.median(mine) / statistics.median(theirs):.2f}x"
            if mine and theirs
            else "-"
        )
        better = "higher" if row.higher_is_better else "lower"
        lines.append(
            f"| {row.label} | {_cell(mine, row.digits)} | {_cell(theirs, row.digits)} "
            f"| {ratio} | {better} |"
        )
    return "\n".join(lines)


def _values(row: Row, passes: Sequence[Pass], library: str) -> list[float]:
    found = (row.value(p) for p in passes if p.library == library)
    return [value for value in found if value is not None]


def loads(passes: Sequence[Pass]) -> str:
    """The 1-minute load average before and after each pass, in run order."""
    return ", ".join(
        f"r{p.round} {p.library} {p.load_before:.2f}→{p.load_after:.2f}" for p in passes
    )


def limit_line(passes: Sequence[Pass], limits: Sequence[dict[str, float]], library: str) -> str:
    """The pgbench limit by clients (median of the rounds), and `library`'s enqueue one at a
    time (1, 8 and 32 producers) as a share of it."""
    medians = {c: statistics.median(limit[c] for limit in limits) for c in limits[0]}
    mine = [p for p in passes if p.library == library]
    rates = {
        "1": statistics.median(p.enqueue_single for p in mine),
        **{
            c: statistics.median(p.enqueue_concurrent[c] for p in mine) for c in medians if c != "1"
        },
    }
    return "pgbench limit, one-row INSERT commits/s on this server: " + "; ".join(
        f"{c} client{'s' if c != '1' else ''} {medians[c]:,.0f} "
        f"({library} {rates[c] / medians[c]:.0%})"
        for c in medians
    )
