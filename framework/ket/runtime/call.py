"""Calling a function as `ket serve` would: validated input, its context, sync or async handler.

`ket serve`, `ket call`, `ket dev --call` and the test helpers all run a function here, so its
input, effects, company scope and the redaction of what it raised are the same everywhere.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Mapping, Sequence
from concurrent.futures import Executor
from typing import Any

from pydantic import BaseModel, ValidationError

from ket.catalog import Catalog, OperationSpec, validate_input
from ket.context.blocking import Blocking
from ket.errors import JobRejected
from ket.runtime.contexts import Contexts
from ket.secret import Redactor, open_payload, seal_payload

# Deeper JSON input is refused before parsing: Python's JSON parser would recurse past its limit,
# and no function's input model nests anywhere near this.
MAX_INPUT_DEPTH = 100


async def call_function(
    catalog: Catalog,
    contexts: Contexts,
    name: str,
    input: BaseModel | Mapping[str, Any] | None,
    *,
    executor: Executor | None = None,
    company: str | None = None,
) -> Any:
    """Run function `name` with `input`, for `company`; returns its result (pydantic
    ValidationError on bad input, JobRejected for an unknown function, the handler's own
    exception otherwise)."""
    spec = function_named(catalog, name)
    payload = validate_input(spec, input)
    ctx = contexts.for_function(spec, company)
    if inspect.iscoroutinefunction(spec.handler):
        return await spec.handler(ctx, payload)
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(executor, spec.handler, Blocking(ctx, loop), payload)


def function_named(catalog: Catalog, name: str) -> OperationSpec:
    """The function `name`; JobRejected naming the functions there are, or, for a job, how to
    enqueue it instead (a job runs on a worker, never as a call)."""
    spec = catalog.functions.get(name)
    if spec is not None:
        return spec
    if name in catalog.jobs:
        raise JobRejected(
            f"{name!r} is a job, not a function: enqueue it with "
            f"`ket jobs enqueue {name} '{{...}}'`"
        )
    known = ", ".join(sorted(catalog.functions)) or "none"
    raise JobRejected(f"unknown function {name!r} in deployment {catalog.deployment!r} ({known})")


def redactor(catalog: Catalog, calls: Sequence[tuple[str, Mapping[str, Any]]]) -> Redactor:
    """What hides the calls' secret input values and applies the deployment's redact hook to
    the text of what a function raised, as the worker does for a job."""
    secrets: list[str] = []
    for name, payload in calls:
        spec = catalog.functions.get(name)
        if spec is not None and spec.secret:
            try:
                value = spec.input_model.model_validate(payload)
            except ValidationError:  # this call never ran: it holds nothing to hide
                continue
            secrets += open_payload(seal_payload(value, None, job=name), None)[1]
    return Redactor.of(secrets, catalog.redact)


def json_depth(text: str) -> int:
    """How deeply the brackets of JSON `text` nest (strings left out), without parsing it."""
    if text.count("[") + text.count("{") <= MAX_INPUT_DEPTH:  # C speed for the usual input
        return 0
    deepest = level = 0
    in_string = escaped = False
    for char in text:  # one pass: a regular expression for strings could backtrack
        if escaped:
            escaped = False
        elif in_string:
            escaped = char == "\\"
            in_string = char != '"'
        elif char == '"':
            in_string = True
        elif char in "[{":
            level += 1
            deepest = max(deepest, level)
        elif char in "]}":
            level -= 1
    return deepest
