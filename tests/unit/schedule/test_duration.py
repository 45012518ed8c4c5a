"""The one duration grammar: `every` schedules, `run_in` and the CLI's durations read it."""

from __future__ import annotations

import pytest

from ket.schedule.duration import duration_seconds


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("5m", 300), ("2h", 7_200), ("1d", 86_400), ("0s", 0), ("015m", 900)],
)
def test_a_count_and_a_unit_is_a_number_of_seconds(text: str, seconds: int) -> None:
    assert duration_seconds(text) == seconds


@pytest.mark.parametrize("text", ["", "5", "m", "5M", "-5m", "1.5h", " 5m", "5m ", "5m\n", "1w"])
def test_anything_else_is_not_a_duration(text: str) -> None:
    assert duration_seconds(text) is None
