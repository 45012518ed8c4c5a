"""The dashboard's query strings and forms, read through allowlists.

Every filter, page number and page size a request gives is checked against what the dashboard
offers (the job states, the deployment's queues and job names, the queues the store holds, a
few page sizes); anything else is refused (400) naming the value, never passed on. A form body
is read up to FORM_BYTES, urlencoded only.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TypedDict
from urllib.parse import parse_qsl, urlencode

from starlette.requests import ClientDisconnect, Request

from ket.errors import KetError
from ket.serve.refusal import Refusal
from ket.store.types import JOB_STATES, JobState
from ket.store.validate import check_tags

FORM_BYTES = 16_384
PAGE_SIZES = (20, 50, 100)
MAX_PAGE = 100_000
MAX_ID = 2**63 - 1


class Filters(TypedDict):
    """The filters a selection gives a listing and a bulk action alike."""

    states: tuple[JobState, ...]
    queues: tuple[str, ...]
    names: tuple[str, ...]
    tags: tuple[str, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class JobSelection:
    """A listing's or a bulk action's filters: one state, queue, job name and tag at most."""

    state: JobState | None = None
    queue: str | None = None
    job: str | None = None
    tag: str | None = None

    def query(self, **more: object) -> str:
        """The selection (and `more`) as a query string, `?` included; empty when nothing."""
        pairs: dict[str, object] = {
            "state": self.state,
            "queue": self.queue,
            "job": self.job,
            "tag": self.tag,
        }
        pairs.update(more)
        given = {k: str(v) for k, v in pairs.items() if v is not None}
        return "?" + urlencode(given) if given else ""

    def is_empty(self) -> bool:
        """Whether no filter is chosen."""
        return self.state is None and self.queue is None and self.job is None and self.tag is None

    def filters(self) -> Filters:
        """The selection as the store's filters take it (JobQuery, JobFilter): the page lists
        exactly the jobs its bulk action acts on."""
        return {
            "states": () if self.state is None else (self.state,),
            "queues": () if self.queue is None else (self.queue,),
            "names": () if self.job is None else (self.job,),
            "tags": () if self.tag is None else (self.tag,),
        }


def selection(
    values: Mapping[str, str],
    *,
    queues: Collection[str],
    jobs: Collection[str],
    states: Collection[str] = JOB_STATES,
) -> JobSelection:
    """The filters of `values` (a query or a form), each from its allowlist."""
    state = one_of(values, "state", states)
    return JobSelection(
        state=next((s for s in JOB_STATES if s == state), None),
        queue=one_of(values, "queue", queues),
        job=one_of(values, "job", jobs),
        tag=tag_of(values),
    )


def tag_of(values: Mapping[str, str]) -> str | None:
    """`values["tag"]`: a tag as an enqueue takes it (1 to MAX_TAG_LENGTH characters, no control
    character); None when absent or empty; else 400."""
    given = values.get("tag", "").strip()
    if given == "":
        return None
    try:
        check_tags([given], "tag")
    except KetError as error:
        raise Refusal(400, "bad_filter", error.message) from None
    return given


def one_of(values: Mapping[str, str], name: str, allowed: Collection[str]) -> str | None:
    """`values[name]` when it is one of `allowed`; None when absent or empty; else 400."""
    given = values.get(name, "")
    if given == "":
        return None
    if given not in allowed:
        shown = given if len(given) <= 60 else given[:60] + "..."
        raise Refusal(400, "bad_filter", f"{name} {shown!r} is not one the dashboard offers")
    return given


def number(values: Mapping[str, str], name: str, *, default: int, low: int, high: int) -> int:
    """`values[name]` as a whole number from `low` to `high` (ASCII digits); else 400."""
    given = values.get(name, "")
    if given == "":
        return default
    if not (given.isascii() and given.isdigit() and len(given) <= 19):
        raise Refusal(400, "bad_number", f"{name} must be a whole number, got {given[:30]!r}")
    value = int(given)
    if not low <= value <= high:
        raise Refusal(400, "bad_number", f"{name} must be from {low} to {high}, got {value}")
    return value


def ticked(given: Sequence[str]) -> tuple[int, ...]:
    """The job ids ticked on a jobs page (each a whole number, at most a page's worth); 400
    otherwise."""
    ids = [value.strip() for value in given if value.strip()]
    if len(ids) > max(PAGE_SIZES):
        raise Refusal(400, "bad_filter", f"at most {max(PAGE_SIZES)} jobs may be ticked at once")
    return tuple(
        dict.fromkeys(number({"id": value}, "id", default=0, low=1, high=MAX_ID) for value in ids)
    )


def page_size(values: Mapping[str, str]) -> int:
    """The page size, one of PAGE_SIZES (50 when none is given)."""
    given = number(values, "size", default=50, low=1, high=max(PAGE_SIZES))
    if given not in PAGE_SIZES:
        raise Refusal(400, "bad_number", f"size must be one of {PAGE_SIZES}, got {given}")
    return given


async def read_form(request: Request) -> dict[str, str]:
    """The urlencoded form of a POST, at most FORM_BYTES; Refusal (413, 415, 400) otherwise.
    A field given twice keeps its first value."""
    kind = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        raise Refusal(415, "unsupported_media_type", "send the form urlencoded")
    body = bytearray()
    try:
        async for chunk in request.stream():
            body += chunk
            if len(body) > FORM_BYTES:
                raise Refusal(413, "body_too_large", f"the form is larger than {FORM_BYTES} bytes")
    except ClientDisconnect:
        raise Refusal(400, "disconnected", "the client went away mid-form") from None
    try:
        text = bytes(body).decode("utf-8")
        pairs = parse_qsl(text, keep_blank_values=True, strict_parsing=False, max_num_fields=50)
    except (UnicodeDecodeError, ValueError):
        raise Refusal(400, "bad_form", "the form is not valid urlencoded UTF-8") from None
    form: dict[str, str] = {}
    for key, value in pairs:
        form.setdefault(key, value)
    return form
