"""What every page of the dashboard shares: who asks, for which tenant, and how pages render.

`Dashboard.admit` is the first line of every endpoint: the tenant its path names, the
principal (the sign-in session the dashboard's cookie names, dashboard/session.py; else the one
the deployment's authenticator returns for the request's own headers, such as `Authorization`
or a single sign-on proxy's), and the permission the page needs (`jobs:read`; `jobs:write` to
retry and cancel, `queues:write` to pause and resume a queue, `schedules:write` to pause,
resume or run a schedule now). Pages render from Jinja
templates with autoescaping on; every string that comes from a job goes through `visible` as
well, which writes control characters and bidirectional overrides as escapes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from ket.catalog import Catalog
from ket.display import escape
from ket.serve.dashboard.guard import PAGE_CSS, Csrf, dashboard_key
from ket.serve.dashboard.session import Sessions
from ket.serve.gate import Caller, Gate
from ket.serve.principal import FLEET_READ, JOBS_READ, JOBS_WRITE, QUEUES_WRITE, SCHEDULES_WRITE
from ket.serve.stores import TenantStores
from ket.serve.tenant import TenantLookup
from ket.store.contract import JobStore
from ket.store.roster import SeenWorker

READ = JOBS_READ
WRITE = JOBS_WRITE
QUEUES = QUEUES_WRITE
SCHEDULES = SCHEDULES_WRITE
FLEET = FLEET_READ
COOKIE = "ket_dashboard"
STATIC_FILES = ("dashboard.css", "dashboard.js")

ListWorkers = Callable[[], Awaitable[list[SeenWorker]]]


@dataclass(frozen=True, kw_only=True)
class Visit:
    """An admitted request: the caller, the tenant's store, and what its pages need."""

    caller: Caller
    store: JobStore
    can_write: bool
    csrf: str
    session: str = ""  # the sign-in session's key ("" when the request's headers admitted it)
    can_pause: bool = False  # may pause and resume queues
    can_schedule: bool = False  # may pause, resume and run schedules now
    can_fleet: bool = False  # may see every tenant's counts (the Fleet page)

    @property
    def tenant(self) -> str:
        """The tenant the visit is for."""
        return self.caller.tenant


class Dashboard:
    """The dashboard's shared parts: where it is mounted, the gate, the tenants' stores, the
    templates, the CSRF tokens."""

    def __init__(
        self,
        *,
        path: str,
        catalog: Catalog,
        gate: Gate,
        tenants: TenantLookup,
        stores: TenantStores,
        list_workers: ListWorkers | None,
        key: bytes | None = None,
    ) -> None:
        self.path = path
        self.catalog = catalog
        self.gate = gate
        self.tenants = tenants
        self.stores = stores
        self.list_workers = list_workers
        key = dashboard_key() if key is None else key
        self.csrf = Csrf(key)
        self.sessions = Sessions(key)
        self.static = {name: _static(name) for name in STATIC_FILES}
        self.versions = {
            name: hashlib.sha256(body).hexdigest()[:12] for name, body in self.static.items()
        }
        self.templates = _environment()

    async def admit(self, request: Request, permission: str = READ) -> Visit:
        """The visit of `request` to the tenant its path names; Refusal (400, 401, 403, 404,
        503) otherwise."""
        tenant = request.path_params.get("tenant")
        signed_in = await self._signed_in(request, tenant)
        if signed_in is not None:
            caller, store, session = signed_in
            self.gate.require(caller, permission)
        else:  # the request's own headers (a bearer token, a sign-on proxy's), if any
            caller = await self.gate.admit(request, permission, tenant=tenant)
            store = await self.stores.store(caller.tenant, caller.url)
            session = ""
        subject = caller.principal.subject
        return Visit(
            caller=caller,
            store=store,
            can_write=caller.principal.allows(WRITE),
            csrf=self.csrf.issue(caller.tenant, subject, session),
            session=session,
            can_pause=caller.principal.allows(QUEUES),
            can_schedule=caller.principal.allows(SCHEDULES),
            can_fleet=caller.principal.allows(FLEET),
        )

    async def _signed_in(
        self, request: Request, tenant: str | None
    ) -> tuple[Caller, JobStore, str] | None:
        """The caller, store and session key of the sign-in session the cookie names for the
        tenant of `request`, if it is live; else None. A cookie whose MAC is not this server's
        (forged, altered, expired, or another tenant's) is no session, and no database is asked
        about it."""
        value = request.cookies.get(COOKIE)
        if not value:
            return None
        name = await self.tenants.name_of(request.headers, tenant)
        secret = self.sessions.secret_of(name, value)
        if secret is None:
            return None
        url = await self.tenants.url_of(name)  # the cookie is proof of an earlier sign-in
        store = await self.stores.store(name, url)
        found = await self.sessions.find(store, secret)
        if found is None:
            return None
        return Caller(tenant=name, url=url, principal=found.principal), store, found.key

    def tenant_path(self, tenant: str, rest: str = "") -> str:
        """The path of a tenant's page, e.g. `/dashboard/t/acme/jobs`."""
        return f"{self.path}/t/{tenant}{rest}"

    def render(
        self,
        request: Request,
        template: str,
        context: Mapping[str, Any],
        *,
        visit: Visit | None = None,
        status: int = 200,
        headers: Mapping[str, str] | None = None,
    ) -> Response:
        """The page `template` with `context`, and the tenant's navigation when `visit`."""
        values: dict[str, Any] = {
            "base": self.path,
            "visit": None,
            "page_css": PAGE_CSS,
            **context,
        }
        if visit is not None:
            prefix = self.tenant_path(visit.tenant)
            values.update(
                visit=visit,
                tenant=visit.tenant,
                prefix=prefix,
                subject=visit.caller.principal.subject,
                several=len(self.tenants.tenancy.urls) > 1,
                css=f"{prefix}/static/dashboard.css?v={self.versions['dashboard.css']}",
                js=f"{prefix}/static/dashboard.js?v={self.versions['dashboard.js']}",
            )
        body = self.templates.get_template(template).render(values)
        return HTMLResponse(body, status_code=status, headers=dict(headers or {}))


def visible(value: object) -> str:
    """A value from a job as text to show: control characters written as escapes."""
    return escape("" if value is None else str(value))


def visible_lines(value: object) -> str:
    """Multi-line text from a job (a traceback, a payload): line breaks kept."""
    return escape("" if value is None else str(value), keep_newlines=True)


def when(value: datetime | None) -> str:
    """An instant as `2026-12-03 16:01:53Z` (UTC, to the second)."""
    if value is None:
        return "-"
    return value.strftime("%Y-%m-%d %H:%M:%SZ")


def relative(value: datetime | None, now: datetime) -> str:
    """An instant as a distance from `now`: `4.2s ago`, `in 3m 05s`."""
    if value is None:
        return "-"
    seconds = (now - value).total_seconds()
    return f"{age(seconds)} ago" if seconds >= 0 else f"in {age(-seconds)}"


def first_line(value: object, limit: int = 120) -> str:
    """The first line of a text, cut at `limit` characters (an error message in a list)."""
    line = ("" if value is None else str(value)).strip().split("\n", 1)[0]
    return line if len(line) <= limit else line[: limit - 1] + "\u2026"


def age(seconds: float | None) -> str:
    """A duration as an operator reads it: `4.2s`, `3m 05s`, `2h 03m`, `4d 02h`."""
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f}s"
    whole = int(seconds)
    if whole < 3_600:
        return f"{whole // 60}m {whole % 60:02d}s"
    if whole < 86_400:
        return f"{whole // 3_600}h {whole % 3_600 // 60:02d}m"
    return f"{whole // 86_400}d {whole % 86_400 // 3_600:02d}h"


# where a frame is not the app's: an installed package, the standard library, ket itself
_LIBRARY = ("site-packages", "dist-packages", "/lib/python", "\\lib\\python", "<frozen ")
_KET = str(Path(__file__).resolve().parents[2])  # the ket package's folder, as installed here


@dataclass(frozen=True, slots=True)
class TracebackPart:
    """A run of a traceback's lines: the app's frames (`library` False, shown), the frames of
    ket, the standard library and installed packages (`library` True, folded), or the lines
    before and after the frames (the header, the exception: `frames` 0)."""

    lines: str
    library: bool
    frames: int


def traceback_parts(text: str) -> list[TracebackPart]:
    """`text` (a Python traceback) in runs of app and library frames, in order; a text that is
    no traceback is one part, shown whole."""
    lines = text.splitlines()
    parts: list[TracebackPart] = []
    run: list[str] = []
    kind: bool | None = None  # the current run: app frames, library frames, or neither
    frames = 0

    def close() -> None:
        nonlocal run, frames
        if run:
            parts.append(TracebackPart("\n".join(run), bool(kind), frames))
        run, frames = [], 0

    for line in lines:
        stripped = line.lstrip()
        if stripped.startswith('File "'):
            path = stripped[6:].split('"', 1)[0]
            library = any(mark in path for mark in _LIBRARY) or path.startswith(_KET)
            if kind is not library:
                close()
                kind = library
            run.append(line)
            frames += 1
        elif kind is not None and line.startswith("    "):  # a frame's source line
            run.append(line)
        else:
            if kind is not None:
                close()
                kind = None
            run.append(line)
    close()
    return parts


def pretty_json(value: Any) -> str:
    """JSON for people: indented, keys sorted, letters as they are."""
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


def json_line(value: Any) -> str:
    """JSON on one line, keys sorted."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def _environment() -> jinja2.Environment:
    environment = jinja2.Environment(
        loader=jinja2.PackageLoader("ket.serve.dashboard", "templates"),
        autoescape=True,  # every template, whatever its name
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    environment.filters.update(
        visible=visible,
        visible_lines=visible_lines,
        when=when,
        age=age,
        pretty_json=pretty_json,
        json_line=json_line,
        traceback_parts=traceback_parts,
        relative=relative,
        first_line=first_line,
        iso=lambda value: "" if value is None else value.isoformat(),
    )
    return environment


def _static(name: str) -> bytes:
    return resources.files("ket.serve.dashboard").joinpath("static", name).read_bytes()
