"""`ket call NAME JSON`: call a function as `ket serve` would, and print its result."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import traceback
from pathlib import Path
from typing import Any

from pydantic import ValidationError

import ket
from ket.catalog import Catalog
from ket.cli.options import deployment_of
from ket.cli.runtime import open_store, tenant_urls
from ket.errors import KetError
from ket.runtime.call import call_function
from ket.runtime.contexts import Contexts, default_sender
from ket.store.contract import RecordStore


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
    urls = tenant_urls(args)
    if len(urls) > 1:
        raise KetError(
            f"this app has several tenants ({', '.join(urls)}); choose one with --tenant"
        )
    [(tenant, url)] = urls.items()
    try:
        result = asyncio.run(_call(catalog, tenant, url, args.name, payload))
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'input'}: {e['msg']}" for e in error.errors()
        )
        raise KetError(f"invalid input for {args.name}: {problems}") from None
    except KetError:
        raise
    except Exception as error:  # the function's own failure: say where, without a traceback
        sys.stderr.write(
            f"ket: {args.name} raised {_where(error)}{type(error).__name__}: {error}\n"
        )
        return 1
    sys.stdout.write(json.dumps(result, indent=2, sort_keys=True, default=str) + "\n")
    return 0


def _where(error: BaseException) -> str:
    package = str(Path(ket.__file__).resolve().parent)
    frames = [
        f for f in traceback.extract_tb(error.__traceback__) if not f.filename.startswith(package)
    ]
    if not frames:
        return ""
    frame = frames[-1]
    try:
        shown = str(Path(frame.filename).resolve().relative_to(Path.cwd()))
    except ValueError:
        shown = frame.filename
    return f"at {shown}:{frame.lineno}: "


async def _call(catalog: Catalog, tenant: str, url: str, name: str, payload: dict[str, Any]) -> Any:
    store = await open_store(url)
    try:
        if isinstance(store, RecordStore) and catalog.models:
            await store.record_install(list(catalog.models.values()))
        contexts = Contexts(store=store, catalog=catalog, tenant=tenant, sender=default_sender())
        return await call_function(catalog, contexts, name, payload)
    finally:
        await store.close()
