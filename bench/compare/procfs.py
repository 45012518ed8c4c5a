"""What the harness reads from /proc: CPU time, peak memory, the load average."""

from __future__ import annotations

import os
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")
_PROC = Path("/proc")


def cpu_seconds(pid: int) -> float:
    """utime + stime of one process, in seconds (0 once it is gone)."""
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    # the command name (field 2) is in parentheses and may hold spaces: split after it
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def postgres_cpu_seconds() -> float:
    """utime + stime of every process named `postgres` (every database's backends, so an upper
    bound of what one benchmark's database costs; a backend that exits takes its time with it)."""
    total = 0.0
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            name = (entry / "comm").read_text().strip()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        if name == "postgres":
            total += cpu_seconds(int(entry.name))
    return total


def peak_rss_bytes(pid: int) -> int:
    """VmHWM: the process's peak resident set size so far."""
    for line in (_PROC / str(pid) / "status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmHWM in /proc/{pid}/status")


def rss_bytes(pid: int) -> int:
    """VmRSS: the process's resident set size now."""
    for line in (_PROC / str(pid) / "status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS in /proc/{pid}/status")


def load_average() -> float:
    """The 1-minute load average."""
    return float((_PROC / "loadavg").read_text().split()[0])
