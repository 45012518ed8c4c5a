"""Flow control as declared: expiry, concurrency and rate limits parsed, keys held to the input."""

from __future__ import annotations

import datetime as dt
import enum
import uuid
from typing import Any, Literal

import pytest
from pydantic import BaseModel, SecretStr

from ket.declare.flow import (
    MAX_LIMIT,
    ConcurrencyLimit,
    KeyProblem,
    QueueLimits,
    RateLimit,
    check_key,
    declared_limit,
    is_scalar,
    key_problems,
    parse_concurrency_limit,
    parse_expires_in,
    parse_queue_limits,
    parse_rate_limit,
)
from ket.declare.input import build_input_model
from ket.errors import DeclarationError


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("1s", 1.0), ("90s", 90.0), ("10m", 600.0), ("2h", 7200.0), ("365d", 31_536_000.0)],
)
def test_expires_in_is_a_duration_in_seconds(text: str, seconds: float) -> None:
    assert parse_expires_in(text) == seconds


@pytest.mark.parametrize("value", ["0m", "010m", "10 minutes", "1.5h", "-1m", "", "10", 600, None])
def test_expires_in_that_is_no_duration_is_refused_naming_it(value: object) -> None:
    with pytest.raises(DeclarationError) as refused:
        parse_expires_in(value)
    assert refused.value.message == (
        f"expires_in must be a duration '<count><s|m|h|d>' such as '10m', got {value!r}"
    )


def test_expires_in_past_a_year_is_refused() -> None:
    with pytest.raises(DeclarationError) as refused:
        parse_expires_in("366d")
    assert refused.value.message == "expires_in must be at most 365d, got '366d'"


def test_a_concurrency_limit_is_a_number_or_a_dict_with_a_key() -> None:
    assert parse_concurrency_limit(3) == ConcurrencyLimit(limit=3)
    assert parse_concurrency_limit({"limit": 3}) == ConcurrencyLimit(limit=3)
    assert parse_concurrency_limit({"limit": 1, "key": ["customer_id", "partner"]}) == (
        ConcurrencyLimit(limit=1, key=("customer_id", "partner"))
    )


def test_key_fields_keep_their_declared_order() -> None:
    assert parse_concurrency_limit({"limit": 1, "key": ["b", "a"]}).key == ("b", "a")
    assert parse_rate_limit({"limit": 1, "period": "1s", "key": ("b", "a")}).key == ("b", "a")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (0, "concurrency_limit: limit must be a whole number from 1 to 2147483647, got 0"),
        (-2, "concurrency_limit: limit must be a whole number from 1 to 2147483647, got -2"),
        (
            MAX_LIMIT + 1,
            "concurrency_limit: limit must be a whole number from 1 to 2147483647, got 2147483648",
        ),
        (
            {"limit": True},
            "concurrency_limit: limit must be a whole number from 1 to 2147483647, got True",
        ),
        (
            "3",
            "concurrency_limit must be a whole number such as 3, or a dict such as "
            "{'limit': 1, 'key': ['customer_id']}, got '3'",
        ),
        (
            True,
            "concurrency_limit must be a whole number such as 3, or a dict such as "
            "{'limit': 1, 'key': ['customer_id']}, got True",
        ),
        (
            {"key": ["a"]},
            "concurrency_limit: 'limit' is required, got {'key': ['a']}",
        ),
        (
            {"limit": 1, "keys": ["a"]},
            "concurrency_limit: unknown key 'keys'; its keys are 'limit' and 'key'",
        ),
        (
            {"limit": 1, "key": "customer_id"},
            "concurrency_limit: key must be a list of input field names such as "
            "['customer_id'], got 'customer_id'",
        ),
        (
            {"limit": 1, "key": []},
            "concurrency_limit: key must name at least one input field (leave it out to key "
            "the job as a whole), got []",
        ),
        (
            {"limit": 1, "key": ["a", "b", "a"]},
            "concurrency_limit: key names 'a' twice, got ['a', 'b', 'a']",
        ),
    ],
    ids=[
        "zero",
        "negative",
        "past-the-column",
        "bool-in-dict",
        "text",
        "bool",
        "no-limit",
        "unknown-key",
        "key-text",
        "key-empty",
        "key-repeated",
    ],
)
def test_a_malformed_concurrency_limit_is_refused_naming_it(value: object, message: str) -> None:
    with pytest.raises(DeclarationError) as refused:
        parse_concurrency_limit(value)
    assert refused.value.message == message


def test_a_rate_limit_has_a_limit_a_period_and_maybe_a_key() -> None:
    assert parse_rate_limit({"limit": 20, "period": "1s"}) == RateLimit(
        limit=20, period="1s", seconds=1.0
    )
    assert parse_rate_limit({"limit": 10, "period": "1m", "key": ["partner"]}) == RateLimit(
        limit=10, period="1m", seconds=60.0, key=("partner",)
    )
    assert parse_rate_limit({"limit": 1000, "period": "1d"}).per_second == 1000 / 86_400


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (20, "rate_limit must be a dict such as {'limit': 20, 'period': '1s'}, got 20"),
        (
            {"limit": 20},
            "rate_limit: 'period' is required, got {'limit': 20}",
        ),
        ({}, "rate_limit: 'limit' and 'period' are required, got {}"),
        (
            {"limit": 0, "period": "1s"},
            "rate_limit: limit must be a whole number from 1 to 2147483647, got 0",
        ),
        (
            {"limit": 20, "period": "0s"},
            "rate_limit: period must be a duration '<count><s|m|h|d>' such as '1s' or '1m', "
            "got '0s'",
        ),
        (
            {"limit": 20, "period": 1},
            "rate_limit: period must be a duration '<count><s|m|h|d>' such as '1s' or '1m', got 1",
        ),
        ({"limit": 20, "period": "2d"}, "rate_limit: period must be at most 1d, got '2d'"),
        (
            {"limit": 20, "period": "1s", "burst": 5},
            "rate_limit: unknown key 'burst'; its keys are 'limit', 'period' and 'key'",
        ),
    ],
    ids=[
        "number",
        "no-period",
        "empty",
        "zero",
        "zero-period",
        "period-number",
        "period-over-a-day",
        "unknown-key",
    ],
)
def test_a_malformed_rate_limit_is_refused_naming_it(value: object, message: str) -> None:
    with pytest.raises(DeclarationError) as refused:
        parse_rate_limit(value)
    assert refused.value.message == message


def test_a_queue_entry_gives_its_limits_without_its_concurrency() -> None:
    entry = {
        "concurrency": 4,
        "concurrency_limit": 10,
        "rate_limit": {"limit": 100, "period": "1m"},
    }
    limits = parse_queue_limits(entry)
    assert limits == QueueLimits(
        concurrency_limit=ConcurrencyLimit(limit=10),
        rate_limit=RateLimit(limit=100, period="1m", seconds=60.0),
    )
    assert limits.declared() == {
        "concurrency_limit": 10,
        "rate_limit": {"limit": 100, "period": "1m"},
    }
    assert parse_queue_limits(limits.declared()) == limits
    assert parse_queue_limits({"concurrency_limit": {"limit": 2}}) == QueueLimits(
        concurrency_limit=ConcurrencyLimit(limit=2)
    )


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            {"concurrency": 4, "concurrency_limit": {"limit": 1, "key": ["customer_id"]}},
            "concurrency_limit: a queue's limit takes no key (the queue's jobs have different "
            "inputs), got {'limit': 1, 'key': ['customer_id']}",
        ),
        (
            {"concurrency": 4, "rate_limit": {"limit": 1, "period": "1s", "key": ["a"]}},
            "rate_limit: a queue's limit takes no key (the queue's jobs have different inputs), "
            "got {'limit': 1, 'period': '1s', 'key': ['a']}",
        ),
        (
            {"concurrency": 4, "concurency_limit": 3},
            "unknown key 'concurency_limit'; a queue's keys are 'concurrency', "
            "'concurrency_limit' and 'rate_limit'",
        ),
        (
            {"concurrency": 4, "concurrency_limit": 0},
            "concurrency_limit: limit must be a whole number from 1 to 2147483647, got 0",
        ),
        (
            {"concurrency": 4, "rate_limit": {"limit": 3, "period": "1w"}},
            "rate_limit: period must be a duration '<count><s|m|h|d>' such as '1s' or '1m', "
            "got '1w'",
        ),
    ],
    ids=["keyed-concurrency", "keyed-rate", "unknown-key", "zero", "bad-period"],
)
def test_a_malformed_queue_entry_is_refused_naming_it(entry: object, message: str) -> None:
    with pytest.raises(DeclarationError) as refused:
        parse_queue_limits(entry)
    assert refused.value.message == message


def test_declared_limit_reads_the_limit_as_written() -> None:
    assert [declared_limit(v) for v in (0, {"limit": 0}, {"key": ["a"]}, "x")] == [0, 0, None, "x"]


def test_declared_forms_are_what_a_declaration_writes() -> None:
    assert ConcurrencyLimit(limit=3).declared() == 3
    assert ConcurrencyLimit(limit=1, key=("a", "b")).declared() == {"limit": 1, "key": ["a", "b"]}
    assert RateLimit(limit=2, period="1m", seconds=60.0, key=("a",)).declared() == {
        "limit": 2,
        "period": "1m",
        "key": ["a"],
    }
    assert QueueLimits().declared() == {}


SHORTHAND = {
    "customer_id": "id",
    "partner": "string",
    "count": "int",
    "amount": "number",
    "urgent": "bool",
    "day": "date",
    "at": "datetime",
    "region": "string?",
    "lines": "json",
    "token": "secret",
}


def test_shorthand_scalars_may_key_a_limit_and_json_or_secret_may_not() -> None:
    model = build_input_model(SHORTHAND, "sales.sync")
    scalars = ["customer_id", "partner", "count", "amount", "urgent", "day", "at", "region"]
    assert key_problems("concurrency_limit", scalars, model, SHORTHAND) == []
    assert key_problems("rate_limit", ["lines", "token", "nope"], model, SHORTHAND) == [
        KeyProblem(
            field="lines",
            missing=False,
            message="rate_limit key field 'lines' is json, not a scalar type",
        ),
        KeyProblem(
            field="token",
            missing=False,
            message="rate_limit key field 'token' is secret, not a scalar type",
        ),
        KeyProblem(
            field="nope",
            missing=True,
            message="rate_limit key field 'nope' is not a field of the input (fields: "
            "customer_id, partner, count, amount, urgent, day, at, region, lines, token)",
        ),
    ]


class Colour(enum.Enum):
    RED = "red"


class PartnerInput(BaseModel):
    customer_id: uuid.UUID
    partner: Literal["acme", "globex"]
    colour: Colour
    day: dt.date | None = None
    tags: list[str] = []
    extra: dict[str, Any] = {}
    token: SecretStr = SecretStr("")


def test_the_fields_of_a_pydantic_input_key_a_limit_when_scalar() -> None:
    fields = ["customer_id", "partner", "colour", "day"]
    assert key_problems("concurrency_limit", fields, PartnerInput, PartnerInput) == []
    messages = [
        p.message
        for p in key_problems(
            "concurrency_limit", ["tags", "extra", "token"], PartnerInput, PartnerInput
        )
    ]
    assert messages == [
        "concurrency_limit key field 'tags' is list[str], not a scalar type",
        "concurrency_limit key field 'extra' is dict[str, Any], not a scalar type",
        "concurrency_limit key field 'token' is SecretStr, not a scalar type",
    ]


def test_an_input_without_fields_names_none() -> None:
    model = build_input_model(None, "sales.sync")
    with pytest.raises(DeclarationError) as refused:
        check_key("rate_limit", ["partner"], model, None)
    assert refused.value.message == (
        "rate_limit key field 'partner' is not a field of the input (fields: none)"
    )


@pytest.mark.parametrize(
    ("annotation", "scalar"),
    [
        (str, True),
        (bool, True),
        (int | None, True),
        (Literal["a", 1], True),
        (type(None), False),
        (list[int], False),
        (int | list[int], False),
        (Any, False),
        (bytes, False),
    ],
)
def test_is_scalar(annotation: object, scalar: bool) -> None:
    assert is_scalar(annotation) is scalar
