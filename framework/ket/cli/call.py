"""`ket call NAME JSON`: call a function as `ket serve` would, and print its result."""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from ket.catalog import Catalog, validate_input
from ket.cli.options import deployment_of
from ket.cli.output import clip, escape, print_json
from ket.cli.runtime import open_store, open_tenant_store, single_tenant
from ket.errors import KetError
from ket.runtime.call import (
    MAX_INPUT_DEPTH,
    call_function,
    function_named,
    json_depth,
    redactor,
)
from ket.runtime.events import Event, Hooks
from ket.storage import BlobStore
from ket.workspace import where_in_user_code

if TYPE_CHECKING:
    from ket.runtime.contexts import Contexts


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
    """The JSON object given on the command line, or KetError naming what is wrong.

    The error names a position or a kind, never the text: input ket cannot read may hold a
    secret it cannot tell apart (as `ket serve` names what is wrong with a body).
    """
    depth = json_depth(text)
    if depth > MAX_INPUT_DEPTH:
        raise KetError(f"input is nested {depth} levels deep, more than {MAX_INPUT_DEPTH}")
    try:
        value = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except _NotANumber as error:
        line, column = _position(text, error.token)
        raise KetError(
            f"input is not valid JSON ({error.why}: line {line} column {column}); "
            "hint: give a finite number, a string or null"
        ) from None
    except json.JSONDecodeError as error:
        raise KetError(
            f"input is not valid JSON ({error.msg}: line {error.lineno} column {error.colno})"
        ) from None
    except (ValueError, RecursionError) as error:  # a number of more than 4,300 digits
        raise KetError(f"input is not valid JSON ({error})") from None
    if not isinstance(value, dict):
        raise KetError(f"input must be a JSON object, got {_json_kind(value)}")
    return value


class _NotANumber(ValueError):
    """A number JSON has no place for: NaN, Infinity, or one overflowing a float."""

    def __init__(self, token: str, why: str) -> None:
        super().__init__(why)
        self.token, self.why = token, why


def _refuse_constant(token: str) -> Any:
    # Python's json reads NaN, Infinity and -Infinity; JSON has none of them, and
    # printing them back would print non-JSON
    raise _NotANumber(token, f"{token} is not a JSON number")


def _finite_float(token: str) -> float:
    number = float(token)
    if math.isinf(number):  # named by its kind only: the numeral is the input's own text
        raise _NotANumber(token, "a number too large for a float overflows to infinity")
    return number


def _position(text: str, token: str) -> tuple[int, int]:
    """Line and column (from 1) of the first `token` outside strings in `text`, JSON that
    json.loads read up to it (so the first such token is the one it refused)."""
    index, in_string = 0, False
    while index < len(text):
        char = text[index]
        if in_string:
            index += 2 if char == "\\" else 1
            in_string = char != '"'
            continue
        if char == '"':
            in_string = True
        elif char.isalnum() or char in "+-.":
            end = index
            while end < len(text) and (text[end].isalnum() or text[end] in "+-."):
                end += 1
            if text[index:end] == token:
                break
            index = end
            continue
        index += 1
    line = text.count("\n", 0, index) + 1
    return line, index - (text.rfind("\n", 0, index) + 1) + 1


def _json_kind(value: object) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "true" if value else "false"
    return "null" if value is None else "a number"


def run(args: argparse.Namespace) -> int:
    from ket.runtime.contexts import default_blobs

    catalog = Catalog.build(deployment_of(args))
    payload = parse_input(args.input)
    tenant, url = single_tenant(args)
    # an unknown name or input the function refuses is bad input (2), found before it runs
    validate_call(catalog, args.name, payload)
    blobs = default_blobs()  # a bad KET_STORAGE_URL stops here, naming it
    enqueued: list[Event] = []
    try:
        result = asyncio.run(
            _call(
                catalog,
                tenant,
                url,
                (args.name, payload),
                blobs,
                args.company,
                enqueued,
                args.database_url,
            )
        )
    except FunctionFailed as failure:  # it ran and raised: say where, without a traceback
        from ket.runtime.outcome import describe

        error = failure.error
        hidden = redactor(catalog, [(args.name, payload)])
        raised = clip(where_in_user_code(error) + describe(error, hidden))
        sys.stderr.write(
            f"ket: {escape(args.name)} raised {escape(raised + _left_queued(enqueued))}\n"
        )
        return 1
    print_json(result)
    return 0


def validate_call(catalog: Catalog, name: str, payload: dict[str, Any]) -> None:
    """KetError when `name` is no function or `payload` does not fit its input."""
    try:
        validate_input(function_named(catalog, name), payload)
    except ValidationError as error:
        raise invalid_input(name, error) from None


def invalid_input(name: str, error: ValidationError) -> KetError:
    """The one line for input that function or job `name` refused: each field and why."""
    problems = "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or 'input'}: {e['msg']}" for e in error.errors()
    )
    return KetError(f"invalid input for {name}: {problems}")


class FunctionFailed(Exception):
    """The function ran and raised `error` (anything else went wrong around it)."""

    def __init__(self, error: Exception) -> None:
        super().__init__(type(error).__name__)  # its message may not even be readable
        self.error = error


async def _call(
    catalog: Catalog,
    tenant: str,
    url: str,
    call: tuple[str, dict[str, Any]],
    blobs: BlobStore,
    company: str | None,
    enqueued: list[Event],
    database_url: str | None,
) -> Any:
    """Call one function; the new jobs it enqueued and committed are added to `enqueued` as
    they are (a failure after them leaves them queued: the caller says so)."""
    hooks = Hooks()
    hooks.subscribe(
        lambda event: enqueued.append(event) if event.detail != "coalesced" else None,
        ["enqueued"],
    )
    async with tenant_contexts(
        catalog, tenant, url, blobs, hooks=hooks, hint=True, database_url=database_url
    ) as contexts:
        try:
            return await call_function(catalog, contexts, call[0], call[1], company=company)
        except Exception as error:
            raise FunctionFailed(error) from error


def _left_queued(enqueued: list[Event], shown: int = 5) -> str:
    """`; before failing it enqueued job 12 (sales.send), which stays queued: cancel it ...`,
    naming the first `shown` jobs; "" when there are none."""
    if not enqueued:
        return ""
    jobs = [f"job {e.job_id} ({e.name})" for e in enqueued[:shown]]
    cancels = [f"'ket jobs cancel {e.job_id}'" for e in enqueued[:shown]]
    if len(enqueued) > shown:
        jobs.append(f"{len(enqueued) - shown} more ('ket jobs list' shows them)")
    one = len(enqueued) == 1
    return (
        f"; before failing it enqueued {_and(jobs)}, which {'stays' if one else 'stay'} queued: "
        f"cancel {'it' if one else 'them'} with {_and(cancels)} if {'it' if one else 'they'} "
        "should not run"
    )


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


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
    async with tenant_contexts(catalog, tenant, url, blobs) as contexts:
        return [
            await call_function(catalog, contexts, name, payload, company=company)
            for name, payload in calls
        ]


@asynccontextmanager
async def tenant_contexts(
    catalog: Catalog,
    tenant: str,
    url: str,
    blobs: BlobStore | None = None,
    *,
    hooks: Hooks | None = None,
    hint: bool = False,
    database_url: str | None = None,
) -> AsyncIterator[Contexts]:
    """The contexts functions run in against one tenant's database (its store open, the
    deployment's models installed), reporting to `hooks`; the store closed after. With `hint`
    the store has the tenant's part in the control channel (`database_url`: the
    --database-url option), so the jobs a function enqueues wake the workers of other
    processes (`ket dev` runs its worker in the process: woken there)."""
    from ket.runtime.contexts import Contexts, default_sender, install_models

    if hint:
        store = await open_tenant_store(database_url, tenant, url)
    else:
        store = await open_store(url)
    try:
        await install_models(store, catalog)
        yield Contexts(
            store=store,
            catalog=catalog,
            tenant=tenant,
            sender=default_sender(),
            blobs=blobs,
            hooks=hooks,
        )
    finally:
        await store.close()
