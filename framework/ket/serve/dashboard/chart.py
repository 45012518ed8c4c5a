"""The Charts page's pictures: the per-minute counts (MinuteStore) gathered into the buckets of
a range (a minute each over the last hour, ten minutes each over the last day), and drawn as
SVG on the server. No script and no style attribute: the lines take their colours from the
stylesheet by class, so the page keeps the strict CSP and follows the dark scheme.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from ket.store.types import JobMinutes

# range -> (how far back, the width of a bucket, a label every this many buckets)
RANGES: dict[str, tuple[timedelta, timedelta, int]] = {
    "hour": (timedelta(hours=1), timedelta(minutes=1), 10),
    "day": (timedelta(days=1), timedelta(minutes=10), 18),
}
COUNTED = ("enqueued", "completed", "failed", "discarded", "cancelled")
LABELS = {
    "enqueued": "enqueued",
    "completed": "completed",
    "failed": "failed and retried",
    "discarded": "discarded",
    "cancelled": "cancelled",
    "available": "waiting",
    "oldest": "oldest waiting (seconds)",
}
# the drawing's own units: the SVG scales to the width of the page
WIDTH, HEIGHT = 960, 220
LEFT, RIGHT, TOP, BOTTOM = 48, 8, 10, 24


@dataclass(frozen=True, kw_only=True, slots=True)
class Bucket:
    """One bucket of the range: its counts (None: not counted yet, it ends after the counts'
    mark), and the last backlog sampled in it (None: none was)."""

    start: datetime
    counts: dict[str, int] | None
    available: int | None
    oldest_seconds: float | None


@dataclass(frozen=True, kw_only=True, slots=True)
class Line:
    """One series of a plot: its name (the CSS class `series-NAME` colours it), its label, and
    its path (`d`), which breaks where the series has no value."""

    name: str
    label: str
    path: str


@dataclass(frozen=True, kw_only=True, slots=True)
class Plot:
    """A chart as the template draws it: lines, the y axis's ticks (position, label), the x
    axis's (position, label), and the plotting area's bounds."""

    lines: tuple[Line, ...]
    y_ticks: tuple[tuple[float, str], ...]
    x_ticks: tuple[tuple[float, str], ...]
    width: int = WIDTH
    height: int = HEIGHT
    left: int = LEFT
    right: int = WIDTH - RIGHT
    top: int = TOP
    bottom: int = HEIGHT - BOTTOM


def window(range_name: str, now: datetime) -> tuple[datetime, timedelta, int]:
    """The first bucket's start, the bucket width and the number of buckets of `range_name`,
    ending with the bucket that holds `now`."""
    span, step, _ = RANGES[range_name]
    count = int(span / step)
    epoch = datetime(1970, 1, 1, tzinfo=now.tzinfo)
    current = epoch + step * ((now - epoch) // step)
    return current - step * (count - 1), step, count


def buckets(
    found: JobMinutes, queue: str | None, since: datetime, step: timedelta, count: int
) -> list[Bucket]:
    """The buckets from `since`, each with the counts of its minutes (of `queue`, or of every
    queue) and the latest backlog sampled in it (summed over the queues sampled that minute,
    the oldest the oldest of them)."""
    totals = [dict.fromkeys(COUNTED, 0) for _ in range(count)]
    samples: list[dict[datetime, tuple[int, int]]] = [{} for _ in range(count)]
    for minute in found.minutes:
        index = (minute.minute - since) // step
        if not 0 <= index < count or queue not in (None, minute.queue):
            continue
        for name in COUNTED:
            totals[index][name] += getattr(minute, name)
        if minute.available is not None:
            n, oldest = samples[index].get(minute.minute, (0, 0))
            samples[index][minute.minute] = (
                n + minute.available,
                max(oldest, minute.oldest_available_ms or 0),
            )
    result = []
    for index in range(count):
        start = since + step * index
        whole = found.counted_until is not None and start + step <= found.counted_until
        latest = samples[index][max(samples[index])] if samples[index] else None
        result.append(
            Bucket(
                start=start,
                counts=totals[index] if whole else None,
                available=None if latest is None else latest[0],
                oldest_seconds=None if latest is None else latest[1] / 1000,
            )
        )
    return result


def plot(
    rows: Sequence[Bucket],
    series: Sequence[tuple[str, Callable[[Bucket], float | None]]],
    label_every: int,
) -> Plot:
    """The lines of `series` (name, the value of a bucket or None) over `rows`, on one y axis
    from 0 to a round number at or above the largest value."""
    values = [[value(row) for row in rows] for _, value in series]
    top = _ceiling(max((v for line in values for v in line if v is not None), default=0))
    inner_w, inner_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(index: int) -> float:
        return LEFT + (inner_w * index / (len(rows) - 1) if len(rows) > 1 else 0)

    def y(value: float) -> float:
        return TOP + inner_h * (1 - value / top)

    lines = []
    for (name, _), line in zip(series, values, strict=True):
        path, pen = [], "M"
        for index, value in enumerate(line):
            if value is None:
                pen = "M"
                continue
            path.append(f"{pen}{x(index):.1f} {y(value):.1f}")
            pen = "L"
        lines.append(Line(name=name, label=LABELS[name], path=" ".join(path)))
    y_ticks = tuple((y(top * k / 4), _number(top * k / 4)) for k in range(5))
    x_ticks = tuple(
        (x(index), rows[index].start.strftime("%H:%M"))
        for index in range(0, len(rows), label_every)
    )
    return Plot(lines=tuple(lines), y_ticks=y_ticks, x_ticks=x_ticks)


def _ceiling(value: float) -> float:
    """Four steps of 1, 2 or 5 times a power of ten (at least 1) that reach `value`: the top
    of the y axis, whose ticks are then round numbers."""
    step = max(value / 4, 1)
    power = 10.0 ** math.floor(math.log10(step))
    nice = next(f * power for f in (1, 2, 5, 10) if f * power >= step)
    return 4 * nice


def _number(value: float) -> str:
    return f"{value:,.0f}" if value == int(value) else f"{value:,.1f}"
