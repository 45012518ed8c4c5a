"""`ctx.step`: durable steps, so that a job's retry resumes after its last finished step.

    charge = await ctx.step("charge", payments.charge, input.order_id, input.amount)

A step that finishes is recorded with its value (the JSON form of what `fn` returned) under the
attempt's fence, before the handler goes on; a later attempt of the same job gets the recorded
value back without calling `fn`. A step of an attempt that lost its job records nothing: the
call raises Aborted and the attempt ends. An async `fn` is awaited; a plain one runs in a thread.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Callable
from typing import Any

from pydantic_core import PydanticSerializationError, to_jsonable_python

from ket.context.signal import AbortSignal
from ket.errors import Aborted
from ket.limits import MAX_NAME_LENGTH, MAX_STEP_BYTES
from ket.store.contract import StepStore
from ket.store.types import ClaimedJob, StepRecord


class Steps:
    """The durable steps of one attempt: those recorded by earlier attempts, read once."""

    def __init__(self, store: StepStore | None, job: ClaimedJob, signal: AbortSignal) -> None:
        # no store (a job run without a row: the test helpers' perform_job): steps run, and
        # nothing is recorded
        self._store = store if job.id > 0 else None
        self._job = job
        self._signal = signal
        self._recorded: dict[str, str] | None = None
        self._ran: set[str] = set()

    async def run(self, name: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """The value of step `name`: recorded by an earlier attempt, or `fn(*args, **kwargs)`'s,
        recorded now. Each step of an attempt has a name of its own."""
        self._signal.throw_if_aborted()
        if not isinstance(name, str) or not 1 <= len(name) <= MAX_NAME_LENGTH:
            raise ValueError(
                f"ctx.step: a step's name is 1 to {MAX_NAME_LENGTH} characters, got {name!r:.80}"
            )
        if name in self._ran:
            raise ValueError(
                f"ctx.step: step {name!r} ran already in this attempt; give each step its own "
                "name (in a loop: f'charge-{i}')"
            )
        self._ran.add(name)
        recorded = await self._read()
        if name in recorded:
            return json.loads(recorded[name])
        if inspect.iscoroutinefunction(fn):
            value = await fn(*args, **kwargs)
        else:
            value = await asyncio.to_thread(fn, *args, **kwargs)
            if inspect.isawaitable(value):
                value = await value
        text = _encoded(name, value)
        self._signal.throw_if_aborted()
        if self._store is not None:
            step = StepRecord(id=self._job.id, fence=self._job.fence, name=name, value=text)
            if not await self._store.job_step_record(step):
                self._signal.abort("lease lost")
                raise Aborted("lease lost")
        recorded[name] = text
        return json.loads(text)

    async def _read(self) -> dict[str, str]:
        if self._recorded is None:
            store = self._store
            self._recorded = {} if store is None else await store.job_steps(self._job.id)
        return self._recorded


def _encoded(name: str, value: object) -> str:
    """`value` as compact JSON text, or TypeError or ValueError naming the step."""
    try:
        text = json.dumps(
            to_jsonable_python(value), separators=(",", ":"), ensure_ascii=False, allow_nan=False
        )
    except (PydanticSerializationError, TypeError, ValueError) as error:
        raise TypeError(
            f"ctx.step: step {name!r} returned {type(value).__name__}, which is not JSON ({error})"
        ) from None
    size = len(text.encode())
    if size > MAX_STEP_BYTES:
        raise ValueError(
            f"ctx.step: step {name!r} returned {size} bytes of JSON, over the limit of "
            f"{MAX_STEP_BYTES}: keep large data in ctx.storage and return its key"
        )
    return text
