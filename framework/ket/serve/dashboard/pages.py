"""The dashboard's pages (GET only, none changes anything): jobs by state, queue and name;
one job; queues, paused or not; schedules; workers; the audit log; with several tenants, which
one."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ket.display import progress_text
from ket.errors import KetError, StoreError, StoreUnavailable
from ket.limits import MAX_KEY_LENGTH
from ket.operate import queue_pauses, schedule_rows
from ket.operate.fleet import SORTS, fleet_rows, sorted_rows
from ket.secret import redact_payload
from ket.serve.dashboard import chart, form
from ket.serve.dashboard.attempt import attempts
from ket.serve.dashboard.view import FLEET, Dashboard, Visit
from ket.serve.refusal import Refusal
from ket.store.contract import AuditLog, MinuteStore, QueryableStore, QueueControl
from ket.store.roster import SHORT_HASH, SeenWorker, manifest_counts, unserved_queues
from ket.store.tenant import check_tenant_name
from ket.store.types import (
    CANCEL_STATES,
    JOB_STATES,
    RETRY_STATES,
    AuditQuery,
    JobQuery,
    JobState,
    JobStats,
    MinuteQuery,
    QueuePause,
)

TRAIL = 50  # a job's audit entries shown on its page, newest first
# the Charts page counts before it reads when the last count is older than this (seconds): the
# workers count once a minute, an idle tenant's only every ten
COUNT_ON_VIEW = 30.0

# the notices a page shows after an action, by the code its redirect carries
NOTICES = {
    "retried": "Retried: the job is available now.",
    "cancelled": "Cancelled.",
    "cancel_requested": "Cancel requested: its worker aborts it at its next heartbeat.",
    "retry": "Retried {changed} jobs; {skipped} left as they were.",
    "cancel": "Cancelled {changed} jobs; {skipped} left as they were.",
    "paused": "Paused: no worker claims the queue's jobs until it is resumed (running jobs "
    "finish).",
    "resumed": "Resumed: the workers claim the queue's jobs again.",
    "already_paused": "Nothing changed: the queue was already paused.",
    "already_resumed": "Nothing changed: the queue was not paused.",
    "schedule_paused": "Paused: the schedule fires no tick until it is resumed (the ticks it "
    "passes are counted as skipped).",
    "schedule_resumed": "Resumed: the schedule fires its ticks again.",
    "schedule_paused_already": "Nothing changed: the schedule was already paused.",
    "schedule_resumed_already": "Nothing changed: the schedule was not paused.",
    "schedule_run": "Fired now: this job is the schedule's run; its own ticks go on as before.",
}


class Pages:
    """The GET endpoints of a dashboard."""

    def __init__(self, dashboard: Dashboard) -> None:
        self.d = dashboard

    async def root(self, request: Request) -> Response:
        """The tenant's jobs when the request names one tenant (or one is served); else the
        sign-in form, which asks for the tenant (`?tenant=NAME` goes to its jobs). The authenticator
        decides per tenant and is asked about the one named only: asking it about every
        tenant served made each request to this page hundreds of calls of it."""
        d = self.d
        served = d.tenants.tenancy.urls
        named = request.headers.get("x-ket-tenant") is not None or len(served) <= 1
        if named or d.catalog.serve.tenant_host is not None:
            visit = await d.admit(request)
            return RedirectResponse(d.tenant_path(visit.tenant, "/jobs"), status_code=303)
        asked = request.query_params.get("tenant")
        if asked is not None:
            try:
                tenant = check_tenant_name(asked.strip())
            except KetError as error:
                raise Refusal(400, "invalid_tenant", str(error)) from None
            return RedirectResponse(d.tenant_path(tenant, "/jobs"), status_code=303)
        # signing in is per tenant: the sign-in form, which asks for the tenant too
        raise Refusal(401, "unauthenticated", "name the tenant and sign in")

    async def tenant_home(self, request: Request) -> Response:
        visit = await self.d.admit(request)
        return RedirectResponse(self.d.tenant_path(visit.tenant, "/jobs"), status_code=303)

    async def jobs(self, request: Request) -> Response:
        visit = await self.d.admit(request)
        store = queryable(visit)
        found_id, key = _found(request)
        if found_id is not None:  # "find": a job's id goes to its page, when it exists
            if await store.job_get(found_id) is not None:
                return RedirectResponse(
                    self.d.tenant_path(visit.tenant, f"/jobs/{found_id}"), status_code=303
                )
            raise Refusal(404, "unknown_job", f"no job {found_id} in tenant {visit.tenant}")
        stats = await store.job_stats()
        chosen = form.selection(
            request.query_params, queues=queues_of(self.d, stats), jobs=self.d.catalog.jobs
        )
        size = form.page_size(request.query_params)
        page = form.number(request.query_params, "page", default=1, low=1, high=form.MAX_PAGE)
        query = JobQuery(
            **chosen.filters(), unique_key=key, limit=size + 1, offset=(page - 1) * size
        )
        found = await store.job_list(query)
        counts = {
            state: sum(
                n
                for (s, queue), n in stats.counts.items()
                if s == state and chosen.queue in (None, queue)
            )
            for state in JOB_STATES
        }
        here = self.d.tenant_path(visit.tenant, "/jobs")
        state_links: list[tuple[JobState | None, str, int]] = [
            (None, here + replace(chosen, state=None).query(), sum(counts.values()))
        ]
        state_links += [
            (state, here + replace(chosen, state=state).query(), counts[state])
            for state in JOB_STATES
        ]

        def link(number: int) -> str:
            return here + chosen.query(size=None if size == 50 else size, page=number)

        context = {
            "nav": "jobs",
            "state_links": state_links,
            "link": link,
            "chosen": chosen,
            "records": found[:size],
            "page": page,
            "size": size,
            "has_next": len(found) > size,
            "counts": counts,
            "queues": sorted(queues_of(self.d, stats)),
            "job_names": sorted(self.d.catalog.jobs),
            "states": JOB_STATES,
            "notice": _notice(request),
            "retry_states": RETRY_STATES,
            "cancel_states": CANCEL_STATES,
            "now": await visit.store.now(),
            "sizes": form.PAGE_SIZES,
            "key": key,
        }
        return self.d.render(request, "jobs.html", context, visit=visit)

    async def job(self, request: Request) -> Response:
        visit = await self.d.admit(request)
        return await self.job_page(request, visit, job_id_of(request))

    async def job_page(
        self, request: Request, visit: Visit, job_id: int, *, refused: str = "", status: int = 200
    ) -> Response:
        """One job's page (also the answer to an action it refused, with the reason)."""
        record = await queryable(visit).job_get(job_id)
        if record is None:
            raise Refusal(404, "unknown_job", f"no job {job_id} in tenant {visit.tenant}")
        now = await visit.store.now()
        lease_age = None
        lease_left = None
        if record.state == "executing" and record.attempted_at is not None:
            lease_age = (now - record.attempted_at).total_seconds()
            if record.lease_until is not None:
                lease_left = (record.lease_until - now).total_seconds()
        trail = None
        if isinstance(visit.store, AuditLog):
            trail = await visit.store.audit_list(AuditQuery(job_id=job_id, limit=TRAIL))
        context = {
            "nav": "jobs",
            "job": record,
            "attempts": attempts(record, now),
            "trail": trail,
            "payload": redact_payload(record.payload),
            "result": None if record.result is None else redact_payload(record.result),
            "progress": progress_text(record.progress),
            "lease_age": lease_age,
            "lease_left": lease_left,
            "can_retry": record.state in RETRY_STATES,
            "can_cancel": record.state in CANCEL_STATES and not record.cancel_requested,
            "notice": _notice(request),
            "refused": refused,
        }
        return self.d.render(request, "job.html", context, visit=visit, status=status)

    async def queues(self, request: Request) -> Response:
        visit = await self.d.admit(request)
        # with the limits: the due jobs each holds back are counted apart
        stats = await queryable(visit).job_stats(self.d.catalog.claim_limits or None)
        pauses, problem = await _pauses(visit)
        declared = self.d.catalog.worker.queues
        rows = []
        # a paused queue the deployment no longer declares is shown too, to be resumed
        for queue in sorted(queues_of(self.d, stats) | set(pauses)):
            ages = stats.queue_ages.get(queue)
            rows.append(
                {
                    "name": queue,
                    "concurrency": declared.get(queue),
                    "pause": pauses.get(queue),
                    "counts": {s: stats.counts.get((s, queue), 0) for s in JOB_STATES},
                    "oldest_available": ages.oldest_available_age if ages else None,
                    "oldest_lease": ages.oldest_lease_age if ages else None,
                    "limited": stats.limited.get(queue),  # None: the queue has no limits
                    "expired": stats.expired.get(queue, 0),
                }
            )
        context = {
            "nav": "queues",
            "rows": rows,
            "stats": stats,
            "states": JOB_STATES,
            "paused": [row for row in rows if row["pause"] is not None],
            "can_pause": visit.can_pause and not problem,
            "problem": problem,
            "notice": _notice(request),
        }
        return self.d.render(request, "queues.html", context, visit=visit)

    async def charts(self, request: Request) -> Response:
        """Jobs per minute over the last hour or day, of one queue or all, and the backlog: from
        the per-minute counts (MinuteStore), counted first if the last count is older than
        COUNT_ON_VIEW seconds (a tenant no worker counted lately, being idle)."""
        visit = await self.d.admit(request)
        store = visit.store
        if not isinstance(store, MinuteStore):
            raise Refusal(501, "no_charts", "this tenant's store keeps no per-minute counts")
        range_name = form.one_of(request.query_params, "range", tuple(chart.RANGES)) or "hour"
        await store.minute_record(COUNT_ON_VIEW)
        now = await store.now()
        since, step, count = chart.window(range_name, now)
        found = await store.minute_list(MinuteQuery(since=since))
        # the deployment's queues and those counted in the range: no job stats (a count of the
        # whole jobs table) at every refresh of the page just to name them
        queues = sorted(set(self.d.catalog.worker.queues) | {m.queue for m in found.minutes})
        queue = form.one_of(request.query_params, "queue", tuple(queues))
        rows = chart.buckets(found, queue, since, step, count)
        every = chart.RANGES[range_name][2]
        here = self.d.tenant_path(visit.tenant, "/charts")
        counted = [row for row in rows if row.counts is not None]
        context = {
            "nav": "charts",
            "range": range_name,
            "queue": queue,
            "queues": queues,
            "step_minutes": int(step.total_seconds() // 60),
            "rows": rows,
            "totals": {n: sum(r.counts[n] for r in counted if r.counts) for n in chart.COUNTED},
            "labels": chart.LABELS,
            "counted_until": found.counted_until,
            "range_link": lambda name: (
                f"{here}?range={name}" + (f"&queue={quote(queue)}" if queue else "")
            ),
            "throughput": chart.plot(
                rows,
                [(n, _count_of(n)) for n in chart.COUNTED],
                every,
            ),
            "backlog": chart.plot(rows, [("available", _available)], every),
            "waited": chart.plot(rows, [("oldest", _oldest)], every),
        }
        return self.d.render(request, "charts.html", context, visit=visit)

    async def schedules(self, request: Request) -> Response:
        visit = await self.d.admit(request)
        rows = await schedule_rows(visit.store, self.d.catalog)
        context = {"nav": "schedules", "rows": rows, "notice": _notice(request)}
        return self.d.render(request, "schedules.html", context, visit=visit)

    async def fleet(self, request: Request) -> Response:
        """Every tenant the server serves, a row each (operate/fleet.py), the sickest first by
        the column chosen: for a principal holding `fleet:read` in the tenant of the path."""
        visit = await self.d.admit(request, FLEET)
        by = form.one_of(request.query_params, "sort", SORTS) or "discarded"
        seen: list[SeenWorker] = []
        problem = ""
        if self.d.list_workers is not None:
            try:
                seen = await self.d.list_workers()
            except KetError as error:
                problem = f"cannot read the workers: {error.message}"
        stores = self.d.stores
        rows = await fleet_rows(dict(self.d.tenants.tenancy.urls), stores.store, seen)
        here = self.d.tenant_path(visit.tenant, "/fleet")
        context = {
            "nav": "fleet",
            "rows": sorted_rows(rows, by),
            "by": by,
            "sort_link": lambda key: f"{here}?sort={key}",
            "problem": problem,
            "states": ("available", "scheduled", "executing", "retryable", "discarded"),
        }
        return self.d.render(request, "fleet.html", context, visit=visit)

    async def workers(self, request: Request) -> Response:
        visit = await self.d.admit(request)
        problem = ""
        workers = []
        if self.d.list_workers is None:
            problem = "this server was started without a view of the control database"
        else:
            try:
                seen = await self.d.list_workers()
            except KetError as error:
                problem = f"cannot read the workers: {error.message}"
            else:
                # a worker serving other tenants only is theirs to see, not this tenant's
                workers = [
                    w for w in seen if w.info.tenants is None or visit.tenant in w.info.tenants
                ]
        live = manifest_counts(workers)
        # with no worker at all the page says so: every queue waiting goes without saying
        declared = self.d.catalog.worker.queues
        unserved = unserved_queues(declared, workers, tenant=visit.tenant) if workers else []
        context = {
            "nav": "workers",
            "workers": workers,
            "problem": problem,
            "manifests": live,
            "unserved": unserved,
            "short": SHORT_HASH,
        }
        return self.d.render(request, "workers.html", context, visit=visit)

    async def audit(self, request: Request) -> Response:
        visit = await self.d.admit(request)
        if not isinstance(visit.store, AuditLog):
            raise Refusal(501, "no_audit_log", "this tenant's store keeps no audit log")
        size = form.page_size(request.query_params)
        page = form.number(request.query_params, "page", default=1, low=1, high=form.MAX_PAGE)
        found = await visit.store.audit_list(AuditQuery(limit=size + 1, offset=(page - 1) * size))
        here = self.d.tenant_path(visit.tenant, "/audit")

        def link(number: int) -> str:
            return here + form.JobSelection().query(size=None if size == 50 else size, page=number)

        context = {
            "nav": "audit",
            "link": link,
            "records": found[:size],
            "page": page,
            "size": size,
            "has_next": len(found) > size,
        }
        return self.d.render(request, "audit.html", context, visit=visit)

    async def static(self, request: Request) -> Response:
        await self.d.admit(request)
        name = request.path_params["name"]
        body = self.d.static.get(name)
        if body is None:
            raise Refusal(404, "not_found", "no such file")
        kind = "text/css" if name.endswith(".css") else "text/javascript"
        fingerprinted = request.query_params.get("v") == self.d.versions[name]
        cache = "private, max-age=31536000, immutable" if fingerprinted else "no-cache"
        return Response(body, media_type=kind, headers={"cache-control": cache})

    async def unknown(self, request: Request) -> Response:
        """Any other path under the dashboard: refused as the pages are, then 404."""
        await self.d.admit(request)
        raise Refusal(404, "not_found", "the dashboard has no such page")


async def _pauses(visit: Visit) -> tuple[Mapping[str, QueuePause], str]:
    """The tenant's paused queues, and what kept them from being read ("" when nothing did):
    a store that cannot pause queues, or a database not migrated to the pauses yet."""
    if not isinstance(visit.store, QueueControl):
        return {}, "this tenant's store cannot pause queues"
    try:
        return await queue_pauses(visit.store), ""
    except StoreUnavailable:
        raise  # the page's 503, as any page's
    except StoreError as error:
        return {}, f"cannot read which queues are paused: {error.message}"


def _count_of(name: str) -> Callable[[chart.Bucket], float | None]:
    def value(row: chart.Bucket) -> float | None:
        return None if row.counts is None else row.counts[name]

    return value


def _available(row: chart.Bucket) -> float | None:
    return row.available


def _oldest(row: chart.Bucket) -> float | None:
    return row.oldest_seconds


def queryable(visit: Visit) -> QueryableStore:
    """The visit's store as a QueryableStore; Refusal (501) for a store that is not one."""
    store = visit.store
    if not isinstance(store, QueryableStore):
        raise Refusal(501, "not_queryable", "this tenant's store cannot list jobs")
    return store


def queues_of(dashboard: Dashboard, stats: JobStats) -> set[str]:
    """The queues a filter may name: the deployment's, and any the tenant's jobs use."""
    return set(dashboard.catalog.worker.queues) | {queue for _, queue in stats.counts}


def _found(request: Request) -> tuple[int | None, str | None]:
    """What the jobs page's "find" field asks for: a job id (`12` or `#12`), else a unique key
    (the jobs enqueued with it); (None, None) when it is empty. Refusal (400) for an id out of
    range or a key no enqueue could have given."""
    given = request.query_params.get("find", "").strip()
    if given == "":
        return None, None
    number = given.removeprefix("#")
    if number.isascii() and number.isdigit():
        return form.number({"find": number}, "find", default=0, low=1, high=form.MAX_ID), None
    if len(given) > MAX_KEY_LENGTH or not given.isprintable():
        raise Refusal(400, "bad_filter", f"no job id or unique key is {given[:60]!r}")
    return None, given


def job_id_of(request: Request) -> int:
    """The job id the path names; Refusal (400) for anything but a whole number in range."""
    return form.number(request.path_params, "id", default=0, low=1, high=form.MAX_ID)


def _notice(request: Request) -> str:
    """The notice a redirect after an action asked for, from NOTICES only."""
    code = request.query_params.get("notice", "")
    text = NOTICES.get(code)
    if text is None:
        return ""
    counts = {
        key: form.number(request.query_params, key, default=0, low=0, high=form.MAX_ID)
        for key in ("changed", "skipped")
    }
    return text.format(**counts)
