"""Measures 1 and 2: enqueue one at a time, and in bulk, from one client opened beforehand; and
one at a time from concurrent producers in one process (a web app's requests), each producer a
task that awaits its enqueue before the next, as a request handler does."""

from __future__ import annotations

import asyncio
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


async def enqueue_concurrent(side: Side, folder: Path, jobs: int, producers: int) -> float:
    """jobs / wall seconds of `producers` tasks enqueueing one at a time through one client
    (ket's, with its own pool; PgQueuer's over a pool of `producers` connections)."""
    with fresh_database() as database, connect(database) as connection:
        side.install(database, folder)
        producer = await side.producer(database, concurrency=producers)
        shares = [jobs // producers + (n < jobs % producers) for n in range(producers)]

        async def produce(share: int) -> None:
            for _ in range(share):
                await producer.enqueue_one()

        try:
            began = time.perf_counter()
            await asyncio.gather(*(produce(share) for share in shares))
            elapsed = time.perf_counter() - began
        finally:
            await producer.close()
        _check(side, side.queued(connection), jobs)
    return jobs / elapsed


def _check(side: Side, queued: int, jobs: int) -> None:
    if queued != jobs:
        raise RuntimeError(f"{side.name}: {queued} jobs queued, expected {jobs}")
