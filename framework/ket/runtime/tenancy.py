"""Where each tenant's database is: configuration, not code.

`--database-url` / `KET_DATABASE_URL` may contain `{tenant}`; the default is an embedded SQLite
file per tenant under `.ket/`. The registry lists the tenants; an empty registry means a
single-tenant app whose one tenant is `default`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from ket.errors import StoreError

DEFAULT_TENANT = "default"
DEFAULT_DATABASE_URL = "sqlite:///.ket/{tenant}.db"
DEFAULT_REGISTRY_URL = "sqlite:///.ket/registry.db"


def database_template(given: str | None = None, environ: Mapping[str, str] | None = None) -> str:
    """The database URL template: the option, else KET_DATABASE_URL, else the embedded default."""
    environ = os.environ if environ is None else environ
    return given or environ.get("KET_DATABASE_URL") or DEFAULT_DATABASE_URL


def registry_url(environ: Mapping[str, str] | None = None) -> str:
    """Where the tenant registry is: KET_REGISTRY_URL, else `.ket/registry.db`."""
    environ = os.environ if environ is None else environ
    return environ.get("KET_REGISTRY_URL") or DEFAULT_REGISTRY_URL


def tenant_database(template: str, tenant: str, *, tenants: int = 1) -> str:
    """The tenant's database URL; refuses a template that would put several tenants in one."""
    if "{tenant}" not in template and tenants > 1:
        raise StoreError(
            f"database URL {template!r} has no {{tenant}}: every tenant would share one "
            "database; put {tenant} in it (e.g. postgresql://app@db/erp_{tenant})"
        )
    url = template.replace("{tenant}", tenant)
    ensure_sqlite_folder(url)
    return url


def ensure_sqlite_folder(url: str) -> None:
    """Create the folder of an embedded SQLite database (e.g. `.ket/`) if it is missing."""
    prefix = "sqlite:///"
    if url.startswith(prefix) and url[len(prefix) :] not in ("", ":memory:"):
        Path(url[len(prefix) :]).expanduser().parent.mkdir(parents=True, exist_ok=True)
