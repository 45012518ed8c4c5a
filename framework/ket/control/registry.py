"""The tenant registry: which tenants exist and, optionally, where each one's database is.

It lives in a database of its own (`KET_REGISTRY_URL`, default `.ket/registry.db`), which every
worker reads on each tenant refresh. It refuses a name outside the tenant grammar or reserved
(`ket.store.tenant`), a database URL no tenant may use (`ket.connection.database_url`), and a tenant
whose database is another registered tenant's. While it is empty the app runs as one tenant,
`default`; adding the first tenant may register `default` with it (`add`'s `carried`), so that
the jobs queued before are still served.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import (
    Column,
    Connection,
    MetaData,
    Table,
    Text,
    delete,
    insert,
    select,
)
from sqlalchemy.exc import IntegrityError

from ket.connection.database_url import (
    PLACEHOLDER,
    Identity,
    check_tenant_database,
    database_identity,
    render_database_url,
    shown_url,
)
from ket.connection.engine import create_sync_engine, sync_url
from ket.errors import StoreError
from ket.store.failure import translated
from ket.store.sql.column import Instant
from ket.store.sql.failure import database_error, hide_password
from ket.store.tenant import check_tenant_name

_metadata = MetaData()
tenants = Table(
    "ket_tenants",
    _metadata,
    Column("name", Text, primary_key=True),
    Column("database_url", Text),
    Column("created_at", Instant, nullable=False),
)


@dataclass(frozen=True, kw_only=True, slots=True)
class Tenant:
    """A registered tenant; `database_url` None means the deployment's URL template."""

    name: str
    database_url: str | None = None


class TenantRegistry:
    """Add, list and remove tenants (synchronous: used by the CLI and, in a thread, the worker).

    Every method raises StoreError (its cause the database's error) and nothing else. A
    connection the server dropped (a restart, say) fails the call that meets it; the pool
    replaces it, so the next call works.
    """

    def __init__(self, url: str) -> None:
        target = sync_url(url)
        with translated():
            self._engine = create_sync_engine(url)
        self.url = url
        shown = shown_url(target)
        try:
            _metadata.create_all(self._engine)
        except Exception as error:
            failure = database_error(error, self._engine)
            raise type(failure)(
                hide_password(
                    f"cannot open the tenant registry at {shown!r}: {failure.message}", target
                )
            ) from error

    def list(self) -> list[Tenant]:
        """Every registered tenant, by name."""
        with self._translated(), self._engine.begin() as connection:
            rows = connection.execute(select(tenants).order_by(tenants.c.name)).all()
        return [Tenant(name=row.name, database_url=row.database_url) for row in rows]

    def databases(self) -> dict[str, str | None]:
        """Tenant name -> its own database URL (None: the template's), by name."""
        return {tenant.name: tenant.database_url for tenant in self.list()}

    def add(
        self,
        name: str,
        database_url: str | None = None,
        *,
        template: str | None = None,
        carried: Tenant | None = None,
    ) -> tuple[Tenant, ...]:
        """Register a tenant; StoreError if it exists already or would share a database.

        `template` is the URL template of the tenants without a database of their own: with it,
        the new tenant's database is compared with every registered tenant's, not only with
        the databases given explicitly. `carried` is registered too, in the same transaction,
        when no tenant is registered yet: the app's single tenant so far, whose jobs would
        otherwise stop being served. Returns the tenants registered.
        """
        new = Tenant(name=name, database_url=database_url)
        try:
            with self._translated(), self._engine.begin() as connection:
                self._lock(connection)
                added = self._checked(connection, new, carried, template)
                now = datetime.now(UTC)
                rows = [
                    {"name": t.name, "database_url": t.database_url, "created_at": now}
                    for t in added
                ]
                connection.execute(insert(tenants), rows)
        except StoreError as error:
            if isinstance(error.__cause__, IntegrityError):
                raise StoreError(f"tenant {name!r} is already registered") from None
            raise
        return added

    def check_new(
        self,
        name: str,
        database_url: str | None = None,
        *,
        template: str | None = None,
        carried: Tenant | None = None,
    ) -> None:
        """What `add` would refuse, raised before anything is created (e.g. its database)."""
        new = Tenant(name=name, database_url=database_url)
        with self._translated(), self._engine.begin() as connection:
            self._checked(connection, new, carried, template)

    def remove(self, name: str) -> bool:
        """Unregister a tenant (its database is left alone); False if it was not registered."""
        with self._translated(), self._engine.begin() as connection:
            removed = connection.execute(delete(tenants).where(tenants.c.name == name)).rowcount
        return bool(removed)

    def close(self) -> None:
        """Close the registry's connections."""
        with self._translated():
            self._engine.dispose()

    def _checked(
        self, connection: Connection, new: Tenant, carried: Tenant | None, template: str | None
    ) -> tuple[Tenant, ...]:
        """The tenants to insert (`carried` first while the registry is empty, then `new`),
        each checked against the registered ones and the one before it."""
        rows = connection.execute(select(tenants.c.name, tenants.c.database_url)).all()
        registered = [Tenant(name=row.name, database_url=row.database_url) for row in rows]
        adding = (carried, new) if carried is not None and not registered else (new,)
        for tenant in adding:
            self._check_new(tenant, registered, template)
            registered.append(tenant)
        return adding

    def _check_new(self, new: Tenant, registered: Sequence[Tenant], template: str | None) -> None:
        name, own = new.name, new.database_url
        check_tenant_name(name)
        if own is not None:
            if PLACEHOLDER in own:
                raise StoreError(
                    f"tenant {name!r}: its own database URL {shown_url(own)!r} is used as given "
                    "and cannot contain {tenant}"
                )
            check_tenant_database(own)
        if any(tenant.name == name for tenant in registered):
            raise StoreError(f"tenant {name!r} is already registered")
        url = own
        if url is None and template is not None and PLACEHOLDER in template:
            url = render_database_url(template, name)
        if url is None:
            return
        mine = database_identity(url)
        if mine == database_identity(self.url):
            raise StoreError(
                f"tenant {name!r}: {shown_url(url)} is the tenant registry's own database; "
                "give the tenant a database of its own"
            )
        for tenant in registered:
            if _identity(tenant.database_url or _rendered(template, tenant.name)) == mine:
                raise StoreError(
                    f"tenant {name!r} would share its database ({shown_url(url)}) with tenant "
                    f"{tenant.name!r}; give each tenant a database of its own"
                )

    def _lock(self, connection: Connection) -> None:
        """Two adds at once must not both pass the check (SQLite's BEGIN IMMEDIATE does it)."""
        if connection.dialect.name == "postgresql":
            connection.exec_driver_sql("LOCK TABLE ket_tenants IN SHARE ROW EXCLUSIVE MODE")

    def _translated(self) -> AbstractContextManager[None]:
        return translated(lambda error: database_error(error, self._engine))


# Rows registered before the grammar, or by hand, may not render or parse: the worker refuses
# them with the reason, and they never stop another tenant from being added.


def _rendered(template: str | None, name: str) -> str | None:
    """The template's URL for a registered `name`; None if there is none."""
    if template is None or PLACEHOLDER not in template:
        return None
    try:
        return render_database_url(template, name)
    except StoreError:
        return None


def _identity(url: str | None) -> Identity | None:
    if url is None:
        return None
    try:
        return database_identity(url)
    except StoreError:
        return None
