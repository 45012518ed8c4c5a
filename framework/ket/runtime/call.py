"""Calling a function as `ket serve` would: validated input, its context, sync or async handler."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Mapping
from concurrent.futures import Executor
from typing import Any

from pydantic import BaseModel

from ket.catalog import Catalog, validate_input
from ket.context.blocking import Blocking
from ket.errors import JobRejected
from ket.runtime.contexts import Contexts


async def call_function(
    catalog: Catalog,
    contexts: Contexts,
    name: str,
    input: BaseModel | Mapping[str, Any] | None,
    *,
    executor: Executor | None = None,
    company: str | None = None,
) -> Any:
    """Run function `name` with `input`; returns its result (pydantic ValidationError on bad
    input, JobRejected for an unknown function, the handler's own exception otherwise)."""
    spec = catalog.functions.get(name)
    if spec is None:
        known = ", ".join(sorted(catalog.functions)) or "none"
        raise JobRejected(
            f"unknown function {name!r} in deployment {catalog.deployment!r} ({known})"
        )
    payload = validate_input(spec, input)
    ctx = contexts.for_function(spec, company)
    if inspect.iscoroutinefunction(spec.handler):
        return await spec.handler(ctx, payload)
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(executor, spec.handler, Blocking(ctx, loop), payload)
