"""Measures 1 and 2: enqueue one at a time, and in bulk, from one client opened beforehand."""

from __future__ import annotations

import time
from pathlib import Path

from database import connect, fresh_database
from side import Side


async def enqueue_single(side: Side, folder: Path, jobs: int) -> float:
    """jobs / wall seconds of a loop of single enqueue calls."""
    with fresh_database() as database, connect(database) as connection:
        side.install(database, folder)
        producer = await side.producer(database)
        try:
            began = time.perf_counter()
            for _ in range(jobs):
                await producer.enqueue_one()
            elapsed = time.perf_counter() - began
        finally:
            await producer.close()
        _check(side, side.queued(connection), jobs)
    return jobs / elapsed


async def enqueue_bulk(side: Side, folder: Path, jobs: int) -> float:
    """jobs / wall seconds of the library's one bulk call."""
    with fresh_database() as database, connect(database) as connection:
        side.install(database, folder)
        producer = await side.producer(database)
        try:
            began = time.perf_counter()
            await producer.enqueue_all(jobs)
            elapsed = time.perf_counter() - began
        finally:
            await producer.close()
        _check(side, side.queued(connection), jobs)
    return jobs / elapsed


def _check(side: Side, queued: int, jobs: int) -> None:
    if queued != jobs:
        raise RuntimeError(f"{side.name}: {queued} jobs queued, expected {jobs}")
