"""Where each tenant's database is: configuration, not code.

`--database-url` / `KET_DATABASE_URL` may contain `{tenant}`; the default is an embedded SQLite
file per tenant under `.ket/`. The registry lists the tenants; an empty registry means a
single-tenant app whose one tenant is `default`. It is `KET_REGISTRY_URL`, else an existing
`.ket/registry.db`, else the database `ket_registry` on the tenants' PostgreSQL server, else
`.ket/registry.db`.

The control database is where the workers of a deployment meet (`ket_workers`): the registry's
database once a registry exists, else the single tenant's own database.

Every entry (the CLI, the worker's tenant refresh, `open_client`) resolves tenants here, so one
set of rules holds everywhere: names follow the tenant grammar (`ket.store.tenant`), `{tenant}`
stands only in the database name (`ket.connection.database_url`), an unknown tenant is an error
naming the registered ones, and tenants that resolve to one database are refused, all of them.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from ket.connection.database_file import ensure_sqlite_folder as ensure_sqlite_folder  # for the CLI
from ket.connection.database_file import sqlite_path
from ket.connection.database_url import (
    PLACEHOLDER,
    Identity,
    check_tenant_database,
    database_identity,
    parse_database_url,
    render_database_url,
    shown_url,
)
from ket.errors import KetError, StoreError
from ket.project import ket_folder
from ket.store.tenant import check_tenant_name

DEFAULT_TENANT = "default"
DEFAULT_DATABASE_URL = "sqlite:///.ket/{tenant}.db"
DEFAULT_REGISTRY_URL = "sqlite:///.ket/registry.db"
# the registry's database on the tenants' PostgreSQL server when KET_REGISTRY_URL is not set
REGISTRY_DATABASE = "ket_registry"
_MARKER = "ketxregistryxmarker"  # stands for {tenant} while a template is parsed


@dataclass(frozen=True, kw_only=True, slots=True)
class Tenancy:
    """The tenants to serve and their database URLs, and the registered ones refused, with why."""

    urls: dict[str, str] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)
    registered: tuple[str, ...] = ()

    def url_of(self, name: str) -> str:
        """The database of tenant `name`, one of these; StoreError saying why it is refused."""
        if name in self.refused:
            raise StoreError(f"tenant {name!r} cannot be used: {self.refused[name]}")
        return self.urls[name]


def database_template(given: str | None = None, environ: Mapping[str, str] | None = None) -> str:
    """The database URL template: the option, else KET_DATABASE_URL, else the embedded default
    (a file per tenant in the project's `.ket/`, see ket.project)."""
    environ = os.environ if environ is None else environ
    return given or environ.get("KET_DATABASE_URL") or _in_ket_folder(DEFAULT_DATABASE_URL)


def registry_url(given: str | None = None, environ: Mapping[str, str] | None = None) -> str:
    """Where the tenant registry is: KET_REGISTRY_URL; else the project's `.ket/registry.db`
    if it exists (a registry made before this default: its tenants stay where they are); else,
    when the tenant databases (the option `given`, else KET_DATABASE_URL) are on PostgreSQL,
    the database `ket_registry` on that server with the same user, password and options; else
    `.ket/registry.db`."""
    environ = os.environ if environ is None else environ
    configured = environ.get("KET_REGISTRY_URL")
    if configured:
        return configured
    embedded = _in_ket_folder(DEFAULT_REGISTRY_URL)
    beside = _beside(database_template(given, environ))
    if beside is None or _is_file(embedded):
        return embedded
    return beside


def registry_configured(environ: Mapping[str, str] | None = None) -> bool:
    """Whether KET_REGISTRY_URL names the registry (else ket chose it, and may create it)."""
    environ = os.environ if environ is None else environ
    return bool(environ.get("KET_REGISTRY_URL"))


def control_url(template: str, registry: str, *, registry_exists: bool) -> str:
    """The control database, where the workers record themselves (`ket_workers`): the
    registry's once it exists; before that the app has one tenant, `default`, and it is that
    tenant's database."""
    if registry_exists:
        return registry
    return tenant_database(template, DEFAULT_TENANT)


def single_tenant_database(template: str) -> str | None:
    """The database of `default` under `template` while no tenant is registered (the app's
    single tenant), or None if the template gives it none that may be used: then `default`
    never ran here, and has no jobs here."""
    try:
        return tenant_database(template, DEFAULT_TENANT)
    except StoreError:
        return None


def _beside(template: str) -> str | None:
    """The registry database on the server of a PostgreSQL `template`; None for SQLite.

    The template's text is kept but for its database name: rendered anew, a query such as
    `options=-c%20search_path%3Dx` would come back in a form libpq reads differently."""
    try:
        parsed = parse_database_url(template.replace(PLACEHOLDER, _MARKER))
    except StoreError:
        return None  # the commands that use the template name what is wrong with it
    if parsed.get_backend_name() not in ("postgresql", "postgres"):
        return None
    scheme, _, rest = template.partition("://")
    place, mark, query = rest.partition("?")
    userinfo, at, server = place.rpartition("@")  # a password may hold a `/`, a host cannot
    return f"{scheme}://{userinfo}{at}{server.partition('/')[0]}/{REGISTRY_DATABASE}{mark}{query}"


def _is_file(url: str) -> bool:
    path = sqlite_path(url)
    return path is not None and path.is_file()


def _in_ket_folder(default: str) -> str:
    """`default` (a `sqlite:///.ket/...` URL) with `.ket/` the project's."""
    folder = ket_folder().as_posix()
    return default.replace("sqlite:///.ket/", f"sqlite:///{folder}/", 1)


def tenant_database(template: str, tenant: str, *, tenants: int = 1) -> str:
    """The tenant's database URL; refuses a template that would put several tenants in one, a
    tenant name outside the grammar, and a database no tenant may use."""
    _check_template(template, tenants)
    url = render_database_url(template, tenant)
    check_tenant_database(url)
    return url


def resolve_tenants(
    registered: Mapping[str, str | None], template: str, *, only: str | None = None
) -> Tenancy:
    """Each tenant's database URL, the registered ones (or `default` while none is).

    `only` must be a registered tenant (or `default` with an empty registry): anything else
    raises KetError naming the registered ones. A tenant is refused rather than served when its
    name or database is not allowed, or when it resolves to another tenant's database.
    """
    names = tuple(sorted(registered))
    if only is not None:
        check_tenant_name(only)
        check_registered(only, names)
    urls, refused = _resolved(tuple(sorted(registered.items())), template)
    if only is None:
        return Tenancy(urls=dict(urls), refused=dict(refused), registered=names)
    return Tenancy(
        urls={only: urls[only]} if only in urls else {},
        refused={only: refused[only]} if only in refused else {},
        registered=names,
    )


@functools.lru_cache(maxsize=4)
def _resolved(
    registered: tuple[tuple[str, str | None], ...], template: str
) -> tuple[Mapping[str, str], Mapping[str, str]]:
    """Every tenant's URL, and the refused ones with why (a pure function of its arguments, kept
    for the next call: whether a tenant's database is another's takes every tenant's, some
    65 ms at 1,000 tenants, which a client opened for one tenant would pay each time)."""
    tenants = dict(registered) or {DEFAULT_TENANT: None}
    if any(url is None for url in tenants.values()):  # a bad template fails every tenant at once
        _check_template(template, len(tenants))
        render_database_url(template, DEFAULT_TENANT)
    urls: dict[str, str] = {}
    refused: dict[str, str] = {}
    for name, own in sorted(tenants.items()):
        try:
            urls[name] = _database(name, own, template, len(tenants))
        except KetError as error:
            refused[name] = error.message
    for group, url in _shared(urls):
        for name in group:
            del urls[name]
            refused[name] = (
                f"tenants {', '.join(group)} resolve to one database ({shown_url(url)}); "
                "none of them is served until each has its own"
            )
    return MappingProxyType(urls), MappingProxyType(refused)


def _check_template(template: str, tenants: int) -> None:
    if PLACEHOLDER not in template and tenants > 1:
        raise StoreError(
            f"database URL {shown_url(template)!r} has no {{tenant}}: every tenant would share "
            "one database; put {tenant} in it (e.g. postgresql://app@db/erp_{tenant})"
        )


def check_registered(name: str, registered: tuple[str, ...]) -> None:
    """KetError naming the registered tenants unless `name` is one (or `default`, if none is)."""
    if registered and name not in registered:
        raise KetError(f"tenant {name!r} is not registered (tenants: {', '.join(registered)})")
    if not registered and name != DEFAULT_TENANT:
        raise KetError(
            f"tenant {name!r} is not registered: no tenant is, so the app runs as the single "
            f"tenant {DEFAULT_TENANT!r} (add tenants with `ket tenants add`)"
        )


def _database(name: str, own: str | None, template: str, count: int) -> str:
    check_tenant_name(name)
    if own is None:
        return tenant_database(template, name, tenants=count)
    check_tenant_database(own)
    return own


def _shared(urls: Mapping[str, str]) -> list[tuple[list[str], str]]:
    """Groups of tenants whose URLs name one database, with one of those URLs."""
    groups: dict[Identity, list[str]] = {}
    for name, url in urls.items():
        groups.setdefault(database_identity(url), []).append(name)
    return [(names, urls[names[0]]) for names in groups.values() if len(names) > 1]
