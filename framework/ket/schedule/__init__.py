"""Pure tick math for job schedules: parsing, ticks, skipped counts and fingerprints (no I/O)."""

from ket.schedule.every import Every
from ket.schedule.instant import tick_key
from ket.schedule.parse import Schedule, parse_schedule
from ket.schedule.wallclock import WallClock

__all__ = ["Every", "Schedule", "WallClock", "parse_schedule", "tick_key"]
