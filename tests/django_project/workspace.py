"""The ket side of the Django project: a job that confirms an order, run by a real `ket worker`.

Its handler reads and updates the shop's table with psycopg (the worker is no Django process):
it fails when the order is not there, so a completed job shows that the order it names was
committed before the job ran.
"""

from __future__ import annotations

import os
from typing import Any

import psycopg

from ket import define_deployment, define_job, define_module


def confirm(ctx: Any, input: Any) -> None:
    with psycopg.connect(os.environ["KET_TEST_SHOP_URL"]) as connection:
        updated = connection.execute(
            "UPDATE shop_order SET status = 'confirmed' WHERE id = %s", (int(input.order_id),)
        ).rowcount
    if updated != 1:
        raise RuntimeError(f"order {input.order_id} is not there")


shop = define_module(
    name="shop",
    jobs={"confirm": define_job(input={"order_id": "id"}, idempotent=True, handler=confirm)},
)
# a poll this slow shows that a job starts because of a wake-up, not a poll
main = define_deployment(
    name="main",
    modules=[shop],
    worker={"queues": {"default": 2}, "poll_min_ms": 30_000, "poll_max_ms": 30_000},
)
