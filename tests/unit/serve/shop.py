"""The deployment the server's tests serve: functions of every kind, and tokens for principals."""

from __future__ import annotations

import asyncio
import time
from datetime import date
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field

from ket import define_deployment, define_function, define_model, define_module
from ket.declare.deployment import DeploymentDecl
from ket.serve import AuthRequest, Principal

# token -> the principal it stands for; "acme-only" is valid for tenant acme alone
TOKENS = {
    "admin": Principal(subject="admin", company="north", permissions={"call:*"}),
    "south": Principal(subject="south-clerk", company="south", permissions={"call:shop.*"}),
    "robot": Principal(subject="robot", permissions={"call:*"}),
    "echoer": Principal(subject="echoer", permissions={"call:shop.echo"}),
    "nobody": Principal(subject="nobody"),
}


async def authenticate(request: AuthRequest) -> Principal | None:
    token = request.bearer_token()
    if token == "acme-only":
        return TOKENS["admin"] if request.tenant == "acme" else None
    return TOKENS.get(token or "")


def authenticate_plainly(request: AuthRequest) -> Principal | None:
    """A plain (sync) authenticator: it runs off the event loop."""
    return TOKENS.get(request.bearer_token() or "")


async def echo(ctx: Any, input: Any) -> dict[str, Any]:
    """Answer the input back."""
    return {"text": input.text, "count": input.count}


def where(ctx: Any, input: Any) -> dict[str, Any]:
    """A plain handler: the tenant and company it runs for."""
    return {"tenant": ctx.tenant, "company": ctx.company}


async def add_note(ctx: Any, input: Any) -> str:
    note_id: str = await ctx.db.insert("shop.Note", {"text": input.text})
    return note_id


async def add_note_to_api(ctx: Any, input: Any) -> str:
    note_id: str = await ctx.db.insert("api.Note", {"text": input.text})
    return note_id


async def notes(ctx: Any, input: Any) -> list[str]:
    return sorted(row["text"] for row in await ctx.db.select("shop.Note"))


async def pay(ctx: Any, input: Any) -> None:
    raise RuntimeError(f"card {input.card.get_secret_value()} was declined")


async def nap(ctx: Any, input: Any) -> str:
    await asyncio.sleep(input.seconds)
    return "rested"


def block(ctx: Any, input: Any) -> str:
    time.sleep(input.seconds)
    return "rested"


async def nan(ctx: Any, input: Any) -> float:
    return float("nan")


shop = define_module(
    name="shop",
    models={"Note": define_model({"text": "string", "company": "string?"})},
    functions={
        "echo": define_function(input={"text": "string", "count": "int?"}, handler=echo),
        "where": define_function(handler=where),
        "add_note": define_function(
            input={"text": "string"}, effects=["write:shop.Note"], handler=add_note
        ),
        "notes": define_function(effects=["read:shop.Note"], handler=notes),
        "all_notes": define_function(effects=["read:shop.Note"], cross_company=True, handler=notes),
        "pay": define_function(input={"card": "secret"}, handler=pay),
        "nap": define_function(input={"seconds": "number"}, handler=nap),
        "block": define_function(input={"seconds": "number"}, handler=block),
        "nan": define_function(handler=nan),
    },
)


def deployment(**serve: Any) -> DeploymentDecl:
    """The shop deployment, `serve` as given (default: the token authenticator)."""
    return define_deployment(
        name="shop", modules=[shop], serve={"authenticate": authenticate, **serve}
    )


class Size(StrEnum):
    SMALL = "small"
    LARGE = "large"


class Line(BaseModel):
    sku: str = Field(min_length=1, max_length=20)
    quantity: int = Field(ge=1, le=99)


class Basket(BaseModel):
    """A pydantic input: nested models, an enum, a date, a list."""

    lines: list[Line] = Field(min_length=1, max_length=5)
    size: Size = Size.SMALL
    deliver_on: date | None = None


async def count(ctx: Any, input: Basket) -> dict[str, Any]:
    """Count the items of a basket."""
    return {"items": sum(line.quantity for line in input.lines), "size": input.size.value}


class NoteText(BaseModel):
    """A note's text, as a careful app declares it: no NUL, which no database stores (without
    the pattern the published schema would promise what the store refuses: a 422
    value_rejected, tested in test_company.py)."""

    text: str = Field(pattern=r"^[^\x00]*$")


# what the schemathesis test serves: every function answers anything valid with 2xx
api = define_module(
    name="api",
    models={"Note": define_model({"text": "string", "company": "string?"})},
    functions={
        "echo": define_function(input={"text": "string", "count": "int?"}, handler=echo),
        "where": define_function(handler=where),
        "add_note": define_function(
            input=NoteText, effects=["write:api.Note"], handler=add_note_to_api
        ),
        "count": define_function(input=Basket, handler=count),
    },
)
