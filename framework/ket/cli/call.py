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
from ket.cli.runtime import open_store, single_tenant
from ket.errors import KetError
from ket.runtime.call import call_function
from ket.runtime.contexts import Contexts, default_sender, install_models
from ket.workspace import where_in_user_code


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
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise KetError(
            f"input is not valid JSON ({error.msg} at column {error.colno}): {text}"
        ) from None
    if not isinstance(value, dict):
        raise KetError(f"input must be a JSON object, got {text}")
    return value


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
        sys.stderr.write(
            f"ket: {args.name} raised {where_in_user_code(error)}{type(error).__name__}: {error}\n"
        )
        return 1
    sys.stdout.write(json.dumps(result, indent=2, sort_keys=True, default=str) + "\n")
    return 0


async def call_on_tenant(
    catalog: Catalog, tenant: str, url: str, calls: list[tuple[str, dict[str, Any]]]
) -> list[Any]:
    """Call functions in order against one tenant's database; their results."""
    store = await open_store(url)
    try:
        await install_models(store, catalog)
        contexts = Contexts(store=store, catalog=catalog, tenant=tenant, sender=default_sender())
        return [await call_function(catalog, contexts, name, payload) for name, payload in calls]
    finally:
        await store.close()
