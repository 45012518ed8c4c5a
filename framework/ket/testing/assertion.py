"""What `assert_enqueued` and `refute_enqueued` compare: a job record against what a test expects.

A test names the job and any of its fields; `input` matches when every key it gives equals the
payload's value (a partial match, as Oban's `args`), compared as JSON, with secret fields opened
so a test writes the values it enqueued. Only the fields given are compared.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from ket.secret import SecretKeys, open_payload, redact_payload
from ket.store.types import JobRecord, JobState

ENQUEUED_STATES: tuple[JobState, ...] = ("available", "scheduled")


@dataclass(frozen=True, kw_only=True)
class Expected:
    """The job a test looks for; None (or no input) matches anything."""

    name: str
    input: Mapping[str, Any] | None = None
    queue: str | None = None
    unique_key: str | None = None
    run_at: datetime | None = None
    priority: int | None = None
    company: str | None = None
    tags: Sequence[str] | None = None

    @classmethod
    def of(cls, name: str, input: BaseModel | Mapping[str, Any] | None, **fields: Any) -> Expected:
        if isinstance(input, BaseModel):
            input = input.model_dump(mode="json", exclude_unset=True)
        elif input is not None and not isinstance(input, Mapping):
            raise TypeError(f"input must be a dict or a model instance, got {input!r}")
        plain = None if input is None else to_jsonable_python(dict(input))
        return cls(name=name, input=plain, **fields)

    def matches(self, record: JobRecord, keys: SecretKeys | None) -> bool:
        """Whether `record` is this job, with every field given."""
        if record.name != self.name:
            return False
        for field in ("queue", "unique_key", "priority", "company"):
            wanted = getattr(self, field)
            if wanted is not None and getattr(record, field) != wanted:
                return False
        if self.run_at is not None and record.run_at != self.run_at:
            return False
        if self.tags is not None and tuple(self.tags) != record.tags:
            return False
        if self.input is None:
            return True
        payload, _ = open_payload(record.payload, keys)
        return all(key in payload and payload[key] == value for key, value in self.input.items())

    def describe(self) -> str:
        given = {
            k: v
            for k, v in vars(self).items()
            if v is not None and k != "name" and not (k == "input" and not v)
        }
        shown = ", ".join(f"{k}={_show(v)}" for k, v in given.items())
        return f"{self.name}" + (f" with {shown}" if shown else "")


def found_text(records: Sequence[JobRecord]) -> str:
    """The jobs a failed assertion saw, one a line (secret fields shown as ***)."""
    if not records:
        return "  (none)"
    lines = []
    for record in records:
        payload = json.dumps(redact_payload(record.payload), sort_keys=True)
        lines.append(
            f"  job {record.id} {record.name} [{record.state}] run_at="
            f"{record.run_at.isoformat()} input={payload}"
            + (f" unique_key={record.unique_key!r}" if record.unique_key else "")
            + (f" tags={list(record.tags)}" if record.tags else "")
        )
    return "\n".join(lines)


def _show(value: Any) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    return json.dumps(value, sort_keys=True) if isinstance(value, dict) else repr(value)
