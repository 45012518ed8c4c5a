"""Which tenant a request is for: the `X-Ket-Tenant` header or the host, checked against the
registry.

The registered tenants are read as the worker reads them (`resolve_tenants`: one set of rules
everywhere) when the server starts, then every `tenant_refresh_ms`; a name the list does not
hold makes one early read at most once a second, so a tenant added a moment ago is served
without a flood of unknown names costing a registry read each.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import time
from collections.abc import Awaitable, Callable, Mapping

from ket.errors import KetError
from ket.runtime.tenancy import Tenancy, resolve_tenants
from ket.serve.refusal import Refusal
from ket.store.tenant import check_tenant_name

TENANT_HEADER = "x-ket-tenant"
EARLY_READ_SECONDS = 1.0

ListTenants = Callable[[], Awaitable[dict[str, str | None]]]


class TenantLookup:
    """The tenants this server serves, and the tenant of each request."""

    name = "tenant refresh"  # as a service of the supervisor

    def __init__(
        self,
        *,
        list_tenants: ListTenants,
        template: str,
        refresh_seconds: float,
        only: str | None = None,
        host_pattern: re.Pattern[str] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._list = list_tenants
        self._template = template
        self._only = only
        self._host = host_pattern
        self._clock = clock
        self.interval = refresh_seconds
        self.tenancy = Tenancy()
        self._read_at: float | None = None  # never: the app runs without its start-up
        self._reading: asyncio.Lock | None = None

    async def tick(self) -> None:
        """Read the registry again (raises, keeping the current list, when it cannot)."""
        await self.refresh()

    async def refresh(self) -> None:
        self._read_at = self._clock()
        registered = await self._list()
        self.tenancy = resolve_tenants(registered, self._template, only=self._only)

    async def name_of(self, headers: Mapping[str, str], named: str | None = None) -> str:
        """The tenant the request names (the only one, if it names none); Refusal (400) when
        it names none of several, a name outside the tenant grammar, or two names. `named` is
        a tenant the request's path names (the dashboard's), which the header and the host,
        when they name one, must agree with."""
        if self._read_at is None:  # the app runs without its start-up
            await self._read_early()
        return self._named(headers, named)

    async def url_of(self, name: str) -> str:
        """The database URL of tenant `name`; Refusal (404, 503) when it is not served."""
        if name not in self.tenancy.urls and name not in self.tenancy.refused:
            await self._read_early()
        if name in self.tenancy.refused:
            raise Refusal(503, "tenant_unavailable", f"tenant {name!r} cannot be served now")
        url = self.tenancy.urls.get(name)
        if url is None:
            raise Refusal(404, "unknown_tenant", f"no tenant {name!r} is served here")
        return url

    def _named(self, headers: Mapping[str, str], named: str | None) -> str:
        sources = [
            ("the path", named),
            ("the X-Ket-Tenant header", headers.get(TENANT_HEADER)),
            ("the host", self._from_host(headers.get("host", ""))),
        ]
        given = [(where, name) for where, name in sources if name is not None]
        for (first, one), (second, other) in itertools.pairwise(given):
            if one != other:
                raise Refusal(
                    400, "tenant_mismatch", f"{first} names {one!r} but {second} names {other!r}"
                )
        name = given[0][1] if given else None
        if name is None:
            return self._only_tenant()
        try:
            return check_tenant_name(name)
        except KetError as error:
            raise Refusal(400, "bad_tenant", error.message) from None

    def _from_host(self, host: str) -> str | None:
        if self._host is None or not host:
            return None
        bare = host.rsplit(":", 1)[0] if not host.endswith("]") else host
        match = self._host.fullmatch(bare.lower())
        return match.group("tenant") if match else None

    def _only_tenant(self) -> str:
        served = [*self.tenancy.urls, *self.tenancy.refused]
        if len(served) == 1:
            return served[0]
        raise Refusal(
            400,
            "tenant_required",
            "this server serves several tenants: name one with the X-Ket-Tenant header",
        )

    def _read_lately(self) -> bool:
        return self._read_at is not None and self._clock() - self._read_at < EARLY_READ_SECONDS

    async def _read_early(self) -> None:
        if self._read_lately():
            return
        if self._reading is None:
            self._reading = asyncio.Lock()
        async with self._reading:
            if self._read_lately():  # another request read it meanwhile
                return
            try:
                await self.refresh()
            except Exception:  # the periodic refresh logs a registry that cannot be read
                return
