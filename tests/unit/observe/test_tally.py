"""The lock-free tallies behind the event metrics: a value on a bound falls in that bound's
bucket, one past every bound only in +Inf; buckets come out cumulative, sums in seconds."""

from __future__ import annotations

from bisect import bisect_left

import pytest

from ket.observe.tally import CounterTally, HistogramTally


def observe(tally: HistogramTally, values: tuple[str, ...], value: float) -> None:
    cell = tally.cell(values)
    cell[bisect_left(tally.bounds, value)] += 1
    cell[-1] += value


def test_histogram_buckets_are_cumulative_with_prometheus_le_semantics() -> None:
    tally = HistogramTally("h_seconds", "h", ["queue"], [0.005, 1], per_second=1000)
    for milliseconds in (5.0, 5.1, 1000.0, 2000.0):
        observe(tally, ("mail",), milliseconds)
    [sample_set] = [tally.family()]
    found = {(s.name, s.labels.get("le")): s.value for s in sample_set.samples}
    assert found == {
        ("h_seconds_bucket", "0.005"): 1,  # 5 ms is <= 5 ms
        ("h_seconds_bucket", "1.0"): 3,
        ("h_seconds_bucket", "+Inf"): 4,
        ("h_seconds_count", None): 4,
        ("h_seconds_sum", None): pytest.approx(3.0101),
    }


def test_a_counter_cell_is_shared_by_its_label_values() -> None:
    tally = CounterTally("c", "c", ["queue"])
    tally.cell(("mail",))[0] += 2
    tally.cell(("mail",))[0] += 1
    tally.cell(("default",))[0] += 1
    found = {s.labels["queue"]: s.value for s in tally.family().samples}
    assert found == {"mail": 3, "default": 1}


def test_histogram_bounds_must_ascend() -> None:
    with pytest.raises(ValueError, match=r"bounds must ascend without repeats, got \[1, 0.5\]"):
        HistogramTally("h", "h", [], [1, 0.5])
