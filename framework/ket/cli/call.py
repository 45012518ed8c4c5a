"""`ket call NAME JSON`: call a function as `ket serve` would, and print its result."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from pydantic import ValidationError

from ket.catalog import Catalog
from ket.cli.options import deployment_of
from ket.cli.output import clip, escape, json_text
from ket.cli.runtime import open_store, single_tenant
from ket.errors import KetError
from ket.secret import Redactor, open_payload, seal_payload
from ket.workspace import where_in_user_code

# Deeper input is refused before parsing: Python's JSON parser would recurse past its limit,
# and no function's input model nests anywhere near this.
MAX_INPUT_DEPTH = 100


def add_parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    parents: list[argparse.ArgumentParser],
) -> None:
    parser = commands.add_parser(
        "call", parents=parents, help="call a function and print its result", description=__doc__
    )
    parser.add_argument("name", help="the function, <module>.<function>")
    parser.add_argument("input", nargs="?", default="{}", help="its input as a JSON object")
    parser.set_defaults(run=run)


def parse_input(text: str) -> dict[str, Any]:
    """The JSON object given on the command line, or KetError naming what is wrong."""
    shown = repr(clip(text))
    depth = _depth(text)
    if depth > MAX_INPUT_DEPTH:
        raise KetError(f"input is nested {depth} levels deep, more than {MAX_INPUT_DEPTH}: {shown}")
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise KetError(
            f"input is not valid JSON ({error.msg} at column {error.colno}): {shown}"
        ) from None
    except (ValueError, RecursionError) as error:  # a number of more than 4,300 digits
        raise KetError(f"input is not valid JSON ({error}): {shown}") from None
    if not isinstance(value, dict):
        raise KetError(f"input must be a JSON object, got {shown}")
    return value


def _depth(text: str) -> int:
    """How deeply the brackets of JSON `text` nest (strings left out), without parsing it."""
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


def run(args: argparse.Namespace) -> int:
    catalog = Catalog.build(deployment_of(args))
    payload = parse_input(args.input)
    tenant, url = single_tenant(args)
    try:
        [result] = asyncio.run(call_on_tenant(catalog, tenant, url, [(args.name, payload)]))
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'input'}: {e['msg']}" for e in error.errors()
        )
        raise KetError(f"invalid input for {args.name}: {problems}") from None
    except KetError:
        raise
    except Exception as error:  # the function's own failure: say where, without a traceback
        from ket.runtime.outcome import describe

        hidden = redactor(catalog, [(args.name, payload)])
        raised = where_in_user_code(error) + describe(error, hidden)
        sys.stderr.write(f"ket: {escape(args.name)} raised {escape(clip(raised))}\n")
        return 1
    sys.stdout.write(json_text(result) + "\n")
    return 0


def redactor(catalog: Catalog, calls: list[tuple[str, dict[str, Any]]]) -> Redactor:
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


async def call_on_tenant(
    catalog: Catalog, tenant: str, url: str, calls: list[tuple[str, dict[str, Any]]]
) -> list[Any]:
    """Call functions in order against one tenant's database; their results."""
    from ket.runtime.call import call_function
    from ket.runtime.contexts import Contexts, default_sender, install_models

    store = await open_store(url)
    try:
        await install_models(store, catalog)
        contexts = Contexts(store=store, catalog=catalog, tenant=tenant, sender=default_sender())
        return [await call_function(catalog, contexts, name, payload) for name, payload in calls]
    finally:
        await store.close()
