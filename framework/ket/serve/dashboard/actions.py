"""What changes something: signing in and out, retrying and cancelling, pausing and resuming
a queue, pausing, resuming and running a schedule now.

Every one is a POST (a GET changes nothing), refused when it says it comes from another site,
and, but for signing in, carries the CSRF token its page was rendered with. Retry and cancel
need `jobs:write` in the tenant the path names, a queue's pause and resume `queues:write`, a
schedule's `schedules:write`; they run through the same operations as `ket jobs retry/cancel`,
`ket queues pause/resume` and `ket schedules pause/resume/run-now` (ket.operate) and leave the
same audit entry, with the principal's subject and source `dashboard`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ket.errors import KetError
from ket.operate import (
    Actor,
    apply_bulk,
    cancel_job,
    count_bulk,
    pause_schedule,
    retry_job,
    run_schedule_now,
    scheduled_job,
    selection_of,
)
from ket.operate.action import change_text
from ket.serve.dashboard import form
from ket.serve.dashboard.guard import forwarded_scheme, same_site
from ket.serve.dashboard.pages import Pages, job_id_of, queryable, queues_of
from ket.serve.dashboard.session import SESSION_SECONDS
from ket.serve.dashboard.view import COOKIE, QUEUES, READ, SCHEDULES, WRITE, Dashboard, Visit
from ket.serve.operator import checked_queue, set_paused
from ket.serve.refusal import Refusal
from ket.store.contract import BulkStore
from ket.store.tenant import check_tenant_name
from ket.store.types import CANCEL_STATES, RETRY_STATES, BulkCount, JobFilter

SOURCE = "dashboard"
_STATES = {"retry": RETRY_STATES, "cancel": CANCEL_STATES}
# what a stored token may be: what a header could carry, and no more than a header would
_TOKEN_CHARACTERS = frozenset(map(chr, range(0x21, 0x7F)))
MAX_TOKEN = 4_096


class Actions:
    """The POST endpoints of a dashboard (and the bulk confirmation, a GET that counts)."""

    def __init__(self, dashboard: Dashboard, pages: Pages) -> None:
        self.d = dashboard
        self.pages = pages

    async def sign_in(self, request: Request) -> Response:
        """Open a session for the principal the deployment's authenticator answers for the
        form's token in its tenant, holding `jobs:read`, and name it in the dashboard's cookie
        (never the token itself); 401, 403 or 429 otherwise."""
        same_site(request)
        values = await form.read_form(request)
        token = values.get("token", "").strip()
        if not token or len(token) > MAX_TOKEN or not set(token) <= _TOKEN_CHARACTERS:
            raise Refusal(401, "unauthenticated", "give the token you were given to sign in")
        tenant = values.get("tenant", "").strip() or None
        if tenant is not None:
            try:
                tenant = check_tenant_name(tenant)
            except KetError as error:
                raise Refusal(400, "bad_tenant", error.message) from None
        caller = await self.d.gate.admit(request, READ, tenant=tenant, token=token)
        store = await self.d.stores.store(caller.tenant, caller.url)
        session = await self.d.sessions.open(store, caller.tenant, caller.principal)
        back = values.get("next", "")
        home = self.d.tenant_path(caller.tenant)
        target = back if _within(back, home) else home + "/jobs"
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(
            COOKIE,
            session,
            max_age=SESSION_SECONDS,
            path=self.d.path,
            httponly=True,
            samesite="strict",
            secure=forwarded_scheme(request) == "https",
        )
        return response

    async def sign_out(self, request: Request) -> Response:
        """End the session on every server (a copy of its cookie no longer admits anyone) and
        forget the cookie."""
        visit = await self._posted(request, READ)
        if visit.session:
            await self.d.sessions.close(visit.store, visit.session)
        response = RedirectResponse(self.d.path + "/", status_code=303)
        response.delete_cookie(COOKIE, path=self.d.path, httponly=True, samesite="strict")
        return response

    async def retry(self, request: Request) -> Response:
        return await self._one(request, "retry")

    async def cancel(self, request: Request) -> Response:
        return await self._one(request, "cancel")

    async def _one(self, request: Request, action: Literal["retry", "cancel"]) -> Response:
        visit = await self._posted(request, WRITE)
        job_id = job_id_of(request)
        actor = Actor(subject=visit.caller.principal.subject, source=SOURCE)
        act = retry_job if action == "retry" else cancel_job
        change = await act(visit.store, job_id, actor, tenant=visit.tenant)
        if change.previous is None:
            raise Refusal(404, "unknown_job", f"no job {job_id} in tenant {visit.tenant}")
        if not change.changed:  # the page again, saying why
            reason = change_text(change)
            return await self.pages.job_page(request, visit, job_id, refused=reason, status=409)
        notice = {"available": "retried", "cancelled": "cancelled"}.get(
            change.state or "", "cancel_requested"
        )
        where = self.d.tenant_path(visit.tenant, f"/jobs/{job_id}?notice={notice}")
        return RedirectResponse(where, status_code=303)

    async def confirm_cancel(self, request: Request) -> Response:
        """The question before a job's cancel (asking changes nothing); the job's page, saying
        why, when it cannot be cancelled."""
        visit = await self.d.admit(request, WRITE)
        job_id = job_id_of(request)
        record = await queryable(visit).job_get(job_id)
        if record is None:
            raise Refusal(404, "unknown_job", f"no job {job_id} in tenant {visit.tenant}")
        if record.state not in CANCEL_STATES or record.cancel_requested:
            reason = f"job {job_id} is {record.state}" + (
                ", and its cancel is requested already" if record.cancel_requested else ""
            )
            return await self.pages.job_page(request, visit, job_id, refused=reason, status=409)
        return self.d.render(request, "cancel.html", {"nav": "jobs", "job": record}, visit=visit)

    async def pause(self, request: Request) -> Response:
        return await self._queue(request, paused=True)

    async def resume(self, request: Request) -> Response:
        return await self._queue(request, paused=False)

    async def _queue(self, request: Request, *, paused: bool) -> Response:
        """Pause or resume the queue the path names, then the Queues page saying what came of
        it (pausing a paused queue changes nothing, not even who paused it)."""
        visit = await self._posted(request, QUEUES)
        named = request.path_params["queue"]
        queue = await checked_queue(visit.store, self.d.catalog, named, paused=paused)
        changed = await set_paused(visit.store, queue, visit.caller, source=SOURCE, paused=paused)
        word = "paused" if paused else "resumed"
        notice = word if changed else f"already_{word}"
        return RedirectResponse(self.d.tenant_path(visit.tenant, f"/queues?notice={notice}"), 303)

    async def pause_schedule(self, request: Request) -> Response:
        return await self._schedule(request, paused=True)

    async def resume_schedule(self, request: Request) -> Response:
        return await self._schedule(request, paused=False)

    async def _schedule(self, request: Request, *, paused: bool) -> Response:
        """Pause or resume the schedule of the job the path names, then the Schedules page
        saying what came of it."""
        visit = await self._posted(request, SCHEDULES)
        name = self._scheduled(request)
        actor = Actor(subject=visit.caller.principal.subject, source=SOURCE)
        changed = await pause_schedule(
            visit.store, self.d.catalog, name, actor, tenant=visit.tenant, paused=paused
        )
        word = "schedule_paused" if paused else "schedule_resumed"
        notice = word if changed else f"{word}_already"
        return RedirectResponse(
            self.d.tenant_path(visit.tenant, f"/schedules?notice={notice}"), 303
        )

    async def run_schedule(self, request: Request) -> Response:
        """Fire the schedule of the job the path names once, now, then the page of the job it
        enqueued."""
        visit = await self._posted(request, SCHEDULES)
        name = self._scheduled(request)
        actor = Actor(subject=visit.caller.principal.subject, source=SOURCE)
        inserted = await run_schedule_now(
            visit.store, self.d.catalog, name, actor, tenant=visit.tenant
        )
        where = f"/jobs/{inserted.id}?notice=schedule_run"
        return RedirectResponse(self.d.tenant_path(visit.tenant, where), 303)

    def _scheduled(self, request: Request) -> str:
        """The scheduled job the path names; Refusal (404) naming the scheduled jobs."""
        try:
            return scheduled_job(self.d.catalog, request.path_params["job"]).name
        except KetError as error:
            raise Refusal(404, "unknown_schedule", error.message) from None

    async def confirm(self, request: Request) -> Response:
        """How many jobs a bulk action would change, the first of them, and the form that
        does it (counting changes nothing)."""
        action = _action(request)
        visit = await self.d.admit(request, WRITE)
        ids = form.ticked(request.query_params.getlist("id"))
        chosen, job_filter = await self._selection(visit, action, request.query_params, ids)
        counted = await count_bulk(visit.store, job_filter)
        context = {
            "nav": "jobs",
            "action": action,
            "chosen": chosen,
            "counted": counted,
            "states": _STATES[action],
            "ids": ids,
        }
        return self.d.render(request, "confirm.html", context, visit=visit)

    async def apply(self, request: Request) -> Response:
        """Do a confirmed bulk action on the jobs the confirmation counted, no others."""
        action = _action(request)
        visit = await self._posted(request, WRITE)
        values: dict[str, str] = request.state.form
        ids = form.ticked(values.get("ids", "").split(","))
        chosen, job_filter = await self._selection(visit, action, values, ids)
        through = form.number(values, "through_id", default=0, low=1, high=form.MAX_ID)
        count = form.number(values, "count", default=0, low=1, high=form.MAX_ID)
        counted = BulkCount(count=count, sample=(), last_id=through)
        actor = Actor(subject=visit.caller.principal.subject, source=SOURCE)
        outcome = await apply_bulk(visit.store, job_filter, counted, actor, tenant=visit.tenant)
        query = chosen.query(notice=action, changed=outcome.changed, skipped=len(outcome.skipped))
        return RedirectResponse(self.d.tenant_path(visit.tenant, "/jobs" + query), 303)

    async def _posted(self, request: Request, permission: str) -> Visit:
        """The visit of a POST from the dashboard's own page: same site, admitted, and its
        CSRF token good for this principal in this tenant."""
        same_site(request)
        visit = await self.d.admit(request, permission)
        values = await form.read_form(request)
        subject = visit.caller.principal.subject
        self.d.csrf.check(values.get("csrf", ""), visit.tenant, subject, visit.session)
        request.state.form = values
        return visit

    async def _selection(
        self,
        visit: Visit,
        action: Literal["retry", "cancel"],
        values: Mapping[str, str],
        ids: tuple[int, ...] = (),
    ) -> tuple[form.JobSelection, JobFilter]:
        """The filters `values` give, from the allowlists (the states `action` applies to),
        narrowed to the ticked `ids` when there are some."""
        if not isinstance(visit.store, BulkStore):
            raise Refusal(501, "not_bulk", "this tenant's store cannot act on jobs by filter")
        stats = await queryable(visit).job_stats()
        chosen = form.selection(
            values,
            queues=queues_of(self.d, stats),
            jobs=self.d.catalog.jobs,
            states=_STATES[action],
        )
        job_filter = await selection_of(visit.store, action, **chosen.filters(), ids=ids)
        return chosen, job_filter


def _action(request: Request) -> Literal["retry", "cancel"]:
    action = request.path_params["action"]
    if action == "retry":
        return "retry"
    if action == "cancel":
        return "cancel"
    raise Refusal(404, "not_found", "the dashboard has no such action")


def _within(path: str, home: str) -> bool:
    """Whether `path` is a page of this tenant's dashboard (a sign-in goes back there only)."""
    return (
        path.startswith(home + "/")
        and all(c.isalnum() or c in "/_-.?=&%" for c in path)
        and "//" not in path
        and ".." not in path
    )
