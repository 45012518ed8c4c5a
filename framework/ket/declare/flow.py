"""Flow control, as declared on a job or on a queue of the worker: how long a job may wait to
start (`expires_in`), how many of its attempts may run at once across the fleet
(`concurrency_limit`), how many may start in a period (`rate_limit`), and when an enqueue joins
an earlier job instead of writing one (`unique`: a window over a period and chosen states;
`debounce`: the pending job takes the new input and waits again).

A job's limit, window or debounce may be kept per key: one or more of its input fields, each
distinct combination of their values on its own. A queue's jobs have different inputs, so a
queue's limits take no key. The parsers here turn values as written into frozen values, or
raise DeclarationError naming the offending value; `ket check` reports those, and the runtime
reads only checked declarations.
"""

from __future__ import annotations

import datetime as dt
import decimal
import enum
import types
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import (
    AwareDatetime,
    BaseModel,
    FutureDate,
    FutureDatetime,
    NaiveDatetime,
    PastDate,
    PastDatetime,
)

from ket.errors import DeclarationError
from ket.schedule.duration import duration_seconds

# A limit is kept in a 32-bit integer column; anything near it is a typo, not a plan.
MAX_LIMIT = 2**31 - 1
# A job waits at most a year before it expires: beyond that the instant overflows nothing, but
# nobody means it.
MAX_EXPIRES_SECONDS = 365 * 86_400
# A rate counts the starts of one period: the longest period bounds what must be remembered.
MAX_PERIOD_SECONDS = 86_400
# The shorthand types a key field may have: values with one plain JSON text each. `json` is a
# structure, and a `secret`'s value would be kept in clear in the key.
KEY_TYPES = ("id", "string", "int", "number", "bool", "date", "datetime")
# The Python types a field of a pydantic input may have to be part of a key (pydantic's own
# date and time types are markers, not subclasses of datetime).
_KEY_CLASSES = (
    *(str, int, float, bool, dt.date, dt.time, uuid.UUID, decimal.Decimal, enum.Enum),
    *(AwareDatetime, NaiveDatetime, FutureDatetime, PastDatetime, FutureDate, PastDate),
)

Option = Literal["concurrency_limit", "rate_limit", "unique", "debounce"]
# The job states a uniqueness window may name (the store's, which declaring does not import;
# tests/unit/test_catalog.py keeps the two equal), and those it looks at unless it names its
# own: all but the two that mean the work was given up (a cancelled or discarded job does not
# stand for work done or to do).
JOB_STATES = (
    "available",
    "scheduled",
    "executing",
    "retryable",
    "completed",
    "discarded",
    "cancelled",
)
DEFAULT_UNIQUE_STATES = ("available", "scheduled", "executing", "retryable", "completed")
# A window or a debounce longer than a year is a typo, as an expiry is.
MAX_WINDOW_SECONDS = MAX_EXPIRES_SECONDS


@dataclass(frozen=True, kw_only=True)
class ConcurrencyLimit:
    """At most `limit` attempts running at once, fleet-wide, for each distinct value of the `key`
    input fields (for the job or queue as a whole when `key` is empty)."""

    limit: int
    key: tuple[str, ...] = ()

    def declared(self) -> int | dict[str, object]:
        """The value as a declaration writes it: the limit alone, or a dict with its key."""
        return {"limit": self.limit, "key": list(self.key)} if self.key else self.limit


@dataclass(frozen=True, kw_only=True)
class RateLimit:
    """At most `limit` attempts started per `period` (`seconds` long), fleet-wide, for each
    distinct value of the `key` input fields (for the job or queue as a whole when empty)."""

    limit: int
    period: str
    seconds: float
    key: tuple[str, ...] = ()

    @property
    def per_second(self) -> float:
        """The starts a second the limit allows on average."""
        return self.limit / self.seconds

    def declared(self) -> dict[str, object]:
        """The value as a declaration writes it."""
        written: dict[str, object] = {"limit": self.limit, "period": self.period}
        return written | ({"key": list(self.key)} if self.key else {})


@dataclass(frozen=True, kw_only=True)
class QueueLimits:
    """The limits of one queue of the worker, on all its jobs together (no key)."""

    concurrency_limit: ConcurrencyLimit | None = None
    rate_limit: RateLimit | None = None

    def declared(self) -> dict[str, object]:
        """The limits as a queue's entry writes them, without its `concurrency`."""
        written: dict[str, object] = {}
        if self.concurrency_limit is not None:
            written["concurrency_limit"] = self.concurrency_limit.declared()
        if self.rate_limit is not None:
            written["rate_limit"] = self.rate_limit.declared()
        return written


@dataclass(frozen=True, kw_only=True)
class UniqueWindow:
    """An enqueue joins the newest job of its name and key enqueued within the last `period`
    (`seconds` long) that is in one of `states`, and writes nothing; the key is the `key`
    fields' values (the job as a whole when empty), or the enqueue's `unique_key`."""

    period: str
    seconds: float
    key: tuple[str, ...] = ()
    states: tuple[str, ...] = DEFAULT_UNIQUE_STATES

    def declared(self) -> dict[str, object]:
        """The value as a declaration writes it (the default states left out)."""
        written: dict[str, object] = {"period": self.period}
        if self.key:
            written["key"] = list(self.key)
        if self.states != DEFAULT_UNIQUE_STATES:
            written["states"] = list(self.states)
        return written


@dataclass(frozen=True, kw_only=True)
class Debounce:
    """A job runs `period` (`seconds`) after the last enqueue of its key: an enqueue while a job
    of its name and key has not started gives that job its input and run time, no sooner than
    `max_wait` after that job's first enqueue when given."""

    period: str
    seconds: float
    key: tuple[str, ...] = ()
    max_wait: str | None = None
    max_wait_seconds: float | None = None

    def declared(self) -> dict[str, object]:
        """The value as a declaration writes it."""
        written: dict[str, object] = {"period": self.period}
        if self.key:
            written["key"] = list(self.key)
        if self.max_wait is not None:
            written["max_wait"] = self.max_wait
        return written


QUEUE_ENTRY_KEYS = ("concurrency", "concurrency_limit", "rate_limit")


def parse_expires_in(value: object) -> float:
    """Seconds from `expires_in` as written ('10m'), or DeclarationError naming the value."""
    seconds = _duration(value)
    if seconds is None:
        raise DeclarationError(
            f"expires_in must be a duration '<count><s|m|h|d>' such as '10m', got {value!r}"
        )
    if seconds > MAX_EXPIRES_SECONDS:
        raise DeclarationError(f"expires_in must be at most 365d, got {value!r}")
    return float(seconds)


def parse_concurrency_limit(value: object, *, keyed: bool = True) -> ConcurrencyLimit:
    """A concurrency limit from `N` or `{"limit": N, "key": [fields]}` (no key unless `keyed`),
    or DeclarationError naming the value."""
    if _is_int(value):
        return ConcurrencyLimit(limit=_limit("concurrency_limit", value))
    if not isinstance(value, Mapping):
        raise DeclarationError(
            "concurrency_limit must be a whole number such as 3, or a dict such as "
            f"{{'limit': 1, 'key': ['customer_id']}}, got {value!r}"
        )
    _keys("concurrency_limit", value, required=("limit",), optional=("key",), keyed=keyed)
    return ConcurrencyLimit(
        limit=_limit("concurrency_limit", value["limit"]),
        key=_key("concurrency_limit", value["key"]) if "key" in value else (),
    )


def parse_rate_limit(value: object, *, keyed: bool = True) -> RateLimit:
    """A rate limit from `{"limit": N, "period": "1s", "key": [fields]}` (`key` optional, and
    refused unless `keyed`), or DeclarationError naming the value."""
    if not isinstance(value, Mapping):
        raise DeclarationError(
            f"rate_limit must be a dict such as {{'limit': 20, 'period': '1s'}}, got {value!r}"
        )
    _keys("rate_limit", value, required=("limit", "period"), optional=("key",), keyed=keyed)
    period = value["period"]
    seconds = _duration(period)
    if seconds is None:
        raise DeclarationError(
            "rate_limit: period must be a duration '<count><s|m|h|d>' such as '1s' or '1m', "
            f"got {period!r}"
        )
    if seconds > MAX_PERIOD_SECONDS:
        raise DeclarationError(f"rate_limit: period must be at most 1d, got {period!r}")
    return RateLimit(
        limit=_limit("rate_limit", value["limit"]),
        period=period,
        seconds=float(seconds),
        key=_key("rate_limit", value["key"]) if "key" in value else (),
    )


def parse_unique(value: object) -> UniqueWindow:
    """A uniqueness window from `{"period": "1h", "key": [fields], "states": [states]}` (`key`
    and `states` optional), or DeclarationError naming the value."""
    if not isinstance(value, Mapping):
        raise DeclarationError(
            "unique must be a dict such as {'period': '1h', 'key': ['customer_id']}, "
            f"got {value!r}"
        )
    _keys("unique", value, required=("period",), optional=("key", "states"), keyed=True)
    period = value["period"]
    states = value.get("states", DEFAULT_UNIQUE_STATES)
    if (
        not isinstance(states, list | tuple)
        or not states
        or not all(isinstance(state, str) for state in states)
    ):
        raise DeclarationError(
            "unique: states must be a list of job states such as ['available', 'scheduled'], "
            f"got {states!r}"
        )
    unknown = [state for state in states if state not in JOB_STATES]
    if unknown:
        raise DeclarationError(
            f"unique: {unknown[0]!r} is not a job state; the states are {_listed(JOB_STATES)}"
        )
    repeated = sorted({state for state in states if states.count(state) > 1})
    if repeated:
        raise DeclarationError(f"unique: states names {repeated[0]!r} twice, got {list(states)!r}")
    return UniqueWindow(
        period=period,
        seconds=_window("unique", "period", period),
        key=_key("unique", value["key"]) if "key" in value else (),
        # in the states' own order, so that the order written is no change
        states=tuple(state for state in JOB_STATES if state in states),
    )


def parse_debounce(value: object) -> Debounce:
    """A debounce from `{"period": "30s", "key": [fields], "max_wait": "5m"}` (`key` and
    `max_wait` optional), or DeclarationError naming the value."""
    if not isinstance(value, Mapping):
        raise DeclarationError(
            "debounce must be a dict such as {'period': '30s', 'key': ['customer_id']}, "
            f"got {value!r}"
        )
    _keys("debounce", value, required=("period",), optional=("key", "max_wait"), keyed=True)
    period, max_wait = value["period"], value.get("max_wait")
    seconds = _window("debounce", "period", period)
    max_wait_seconds = None if max_wait is None else _window("debounce", "max_wait", max_wait)
    if max_wait_seconds is not None and max_wait_seconds < seconds:
        raise DeclarationError(
            f"debounce: max_wait must be at least the period ({period!r}), got {max_wait!r}"
        )
    return Debounce(
        period=period,
        seconds=seconds,
        key=_key("debounce", value["key"]) if "key" in value else (),
        max_wait=max_wait,
        max_wait_seconds=max_wait_seconds,
    )


def parse_queue_limits(entry: object) -> QueueLimits:
    """The limits of a queue given as a dict (`{"concurrency": 4, "concurrency_limit": 10,
    "rate_limit": {...}}`; its `concurrency` is the worker's to read), or DeclarationError."""
    if isinstance(entry, QueueLimits):
        return entry
    if not isinstance(entry, Mapping):
        raise DeclarationError(
            "a queue is its concurrency, or a dict such as {'concurrency': 4, "
            f"'concurrency_limit': 10}}, got {entry!r}"
        )
    unknown = [name for name in entry if name not in QUEUE_ENTRY_KEYS]
    if unknown:
        allowed = _listed(QUEUE_ENTRY_KEYS)
        raise DeclarationError(f"unknown key {unknown[0]!r}; a queue's keys are {allowed}")
    concurrency, rate = entry.get("concurrency_limit"), entry.get("rate_limit")
    return QueueLimits(
        concurrency_limit=(
            None if concurrency is None else parse_concurrency_limit(concurrency, keyed=False)
        ),
        rate_limit=None if rate is None else parse_rate_limit(rate, keyed=False),
    )


def declared_limit(value: object) -> object:
    """The `limit` of a concurrency or rate limit as written (the value itself when it is not
    a dict), to tell a limit of 0, which means a pause, from other mistakes."""
    return value.get("limit") if isinstance(value, Mapping) else value


@dataclass(frozen=True, kw_only=True)
class KeyProblem:
    """A key field that cannot be part of a key: missing from the input, or not a scalar."""

    field: str
    missing: bool
    message: str


def key_problems(
    option: Option, key: Sequence[str], model: type[BaseModel], spec: object
) -> list[KeyProblem]:
    """What keeps each field of `key` from keying a limit, window or debounce on an input
    compiled to `model` from `spec` (as written: a shorthand dict or the model class), one
    problem per field."""
    fields = model.model_fields
    problems: list[KeyProblem] = []
    for name in key:
        info = fields.get(name)
        if info is None:
            known = ", ".join(fields) or "none"
            message = f"{option} key field {name!r} is not a field of the input (fields: {known})"
            problems.append(KeyProblem(field=name, missing=True, message=message))
        elif not is_scalar(info.annotation):
            shown = _type_text(spec, name, info.annotation)
            message = f"{option} key field {name!r} is {shown}, not a scalar type"
            problems.append(KeyProblem(field=name, missing=False, message=message))
    return problems


def check_key(option: Option, key: Sequence[str], model: type[BaseModel], spec: object) -> None:
    """DeclarationError naming the first field of `key` that cannot be part of a key."""
    problems = key_problems(option, key, model, spec)
    if problems:
        raise DeclarationError(problems[0].message)


def is_scalar(annotation: object) -> bool:
    """Whether a field so annotated has one plain JSON value (a string, a number, a boolean),
    or null when it is optional: what a key can be made of."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return is_scalar(get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        present = [arg for arg in get_args(annotation) if arg is not type(None)]
        return bool(present) and all(is_scalar(arg) for arg in present)
    if origin is Literal:
        return all(isinstance(arg, str | int | bool) for arg in get_args(annotation))
    return isinstance(annotation, type) and issubclass(annotation, _KEY_CLASSES)


def _type_text(spec: object, name: str, annotation: object) -> str:
    """The field's type as the declaration wrote it: the shorthand, else the annotation."""
    if isinstance(spec, Mapping) and isinstance(spec.get(name), str):
        return str(spec[name])
    if isinstance(annotation, type):
        return annotation.__name__
    return repr(annotation).replace("typing.", "")


def _duration(value: object) -> int | None:
    # a duration counts from 1: no '0m', no '015m'
    if not isinstance(value, str) or value.startswith("0"):
        return None
    return duration_seconds(value)


def _window(option: Option, name: str, value: object) -> float:
    seconds = _duration(value)
    if seconds is None:
        raise DeclarationError(
            f"{option}: {name} must be a duration '<count><s|m|h|d>' such as '30s' or '1h', "
            f"got {value!r}"
        )
    if seconds > MAX_WINDOW_SECONDS:
        raise DeclarationError(f"{option}: {name} must be at most 365d, got {value!r}")
    return float(seconds)


def _limit(option: Option, value: object) -> int:
    if not _is_int(value) or not 1 <= value <= MAX_LIMIT:  # type: ignore[operator]
        raise DeclarationError(
            f"{option}: limit must be a whole number from 1 to {MAX_LIMIT}, got {value!r}"
        )
    return value  # type: ignore[return-value]


def _keys(
    option: Option,
    value: Mapping[Any, object],
    *,
    required: tuple[str, ...],
    optional: tuple[str, ...],
    keyed: bool,
) -> None:
    """Refuse a dict with an unknown key, a missing one, or a key where none is allowed."""
    if not keyed and "key" in value:
        raise DeclarationError(
            f"{option}: a queue's limit takes no key (the queue's jobs have different inputs), "
            f"got {dict(value)!r}"
        )
    allowed = (*required, *optional) if keyed else required
    unknown = [name for name in value if name not in allowed]
    if unknown:
        listed = _listed(allowed)
        raise DeclarationError(f"{option}: unknown key {unknown[0]!r}; its keys are {listed}")
    missing = [name for name in required if name not in value]
    if missing:
        verb = "is" if len(missing) == 1 else "are"
        raise DeclarationError(f"{option}: {_listed(missing)} {verb} required, got {dict(value)!r}")


def _listed(names: Sequence[str]) -> str:
    """`'a'`, `'a' and 'b'`, `'a', 'b' and 'c'`."""
    quoted = [repr(name) for name in names]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " and " + quoted[-1]


def _key(option: Option, value: object) -> tuple[str, ...]:
    if not isinstance(value, list | tuple) or not all(isinstance(f, str) for f in value):
        raise DeclarationError(
            f"{option}: key must be a list of input field names such as ['customer_id'], "
            f"got {value!r}"
        )
    if not value:
        raise DeclarationError(
            f"{option}: key must name at least one input field (leave it out to key the job "
            "as a whole), got []"
        )
    repeated = sorted({field for field in value if value.count(field) > 1})
    if repeated:
        raise DeclarationError(f"{option}: key names {repeated[0]!r} twice, got {list(value)!r}")
    return tuple(value)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
