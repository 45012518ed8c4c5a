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
from ket.runtime.call import MAX_INPUT_DEPTH, call_function, json_depth, redactor
from ket.storage import BlobStore
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
    parser.add_argument(
        "--company",
        type=_company,
        metavar="ID",
        help="call it for this company, as ket serve does for its principal's "
        "(cross_company rules apply)",
    )
    parser.set_defaults(run=run)


def _company(text: str) -> str:
    """A company id: 1 to 500 characters without NUL or surrounding spaces."""
    if not text or len(text) > 500 or "\x00" in text or text != text.strip():
        raise argparse.ArgumentTypeError(
            f"a company must be 1 to 500 characters without NUL or surrounding spaces, "
            f"got {clip(text, 60)!r}"
        )
    return text


def parse_input(text: str) -> dict[str, Any]:
    """The JSON object given on the command line, or KetError naming what is wrong."""
    shown = repr(clip(text))
    depth = json_depth(text)
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


def run(args: argparse.Namespace) -> int:
    from ket.runtime.contexts import default_blobs

    catalog = Catalog.build(deployment_of(args))
    payload = parse_input(args.input)
    tenant, url = single_tenant(args)
    blobs = default_blobs()  # a bad KET_STORAGE_URL stops here, naming it
    try:
        [result] = asyncio.run(
            call_on_tenant(
                catalog, tenant, url, [(args.name, payload)], blobs, company=args.company
            )
        )
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


async def call_on_tenant(
    catalog: Catalog,
    tenant: str,
    url: str,
    calls: list[tuple[str, dict[str, Any]]],
    blobs: BlobStore | None = None,
    *,
    company: str | None = None,
) -> list[Any]:
    """Call functions in order against one tenant's database, for `company`; their results.
    `blobs` is where ctx.storage keeps blobs (None: what KET_STORAGE_URL names)."""
    from ket.runtime.contexts import Contexts, default_sender, install_models

    store = await open_store(url)
    try:
        await install_models(store, catalog)
        contexts = Contexts(
            store=store, catalog=catalog, tenant=tenant, sender=default_sender(), blobs=blobs
        )
        return [
            await call_function(catalog, contexts, name, payload, company=company)
            for name, payload in calls
        ]
    finally:
        await store.close()
