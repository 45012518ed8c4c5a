"""Database URLs as ket reads, renders and shows them.

    render_database_url("postgresql://app@db/erp_{tenant}", "acme")  # postgresql://app@db/erp_acme

A URL template may hold `{tenant}` only in its database name (for SQLite, in the file name under
its folder): a tenant name can never pick a host, a port, a user or a query parameter, nor climb
out of the folder. The rendered URL is parsed and checked against the template again.

Two URLs name one database when `database_identity` says so: driver-independent (backend, host,
port, database; for SQLite the resolved file path), taking into account the query parameters
through which libpq overrides the host, port or database.

Every URL ket prints or logs goes through `shown_url`, which hides its password.
"""

from __future__ import annotations

import os
import re
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from ket.connection.url import DatabaseUrl, UrlSyntaxError, make_url
from ket.errors import StoreError
from ket.store.tenant import check_tenant_name

if TYPE_CHECKING:
    from ket.connection.url import UrlLike

PLACEHOLDER = "{tenant}"
_MARKER = "ketxtenantxmarker"  # stands for {tenant} while a template is parsed
_SECRET_PARAMETERS = frozenset({"password", "sslpassword"})
# the value of one in text that does not parse: a query's, or libpq's key=value form (quoted)
_SECRET_PARAMETER_VALUE = re.compile(r"(?i)\b((?:ssl)?password\s*=\s*)('[^']*'|[^&\s]*)")
# libpq's connection parameters that a URL's query may use to reach another server or database
_HOST_PARAMETERS = ("host", "hostaddr")
# PostgreSQL's own databases: a tenant's jobs never go there
_SYSTEM_DATABASES = frozenset({"postgres", "template0", "template1"})
_POSTGRES_NAME_BYTES = 63  # longer names are truncated by the server, so two could become one
_LOCAL_HOSTS = frozenset({"", "localhost", "127.0.0.1", "::1"})
_ONLY_IN_DATABASE = (
    "{tenant} may stand only in the database name (for SQLite, the file name), "
    "e.g. postgresql://app@db/erp_{tenant} or sqlite:///.ket/{tenant}.db"
)

Identity = tuple[str, ...]


def shown_url(url: UrlLike) -> str:
    """The URL as ket prints or logs it: the password (in the URL or its query) as ***."""
    try:
        parsed = make_url(url)
    except (ValueError, TypeError):  # UrlSyntaxError included
        return _masked_text(str(url))
    query = {k: ("***" if k.lower() in _SECRET_PARAMETERS else v) for k, v in parsed.query.items()}
    shown = parsed.set(query=query).render_as_string(hide_password=True)
    # as given, not as the rendering quotes them in a query
    return shown.replace("=%2A%2A%2A", "=***").replace("%7Btenant%7D", PLACEHOLDER)


def parse_database_url(url: UrlLike, *, template: str | None = None) -> DatabaseUrl:
    """The parsed URL, or StoreError naming it (password hidden) and what is wrong; `template`
    is the text to name instead (the template the URL was rendered from)."""
    named = f"not a database URL: {shown_url(template or url)!r}"
    try:
        parsed = make_url(url)
    except UrlSyntaxError:
        raise StoreError(named) from None
    except (ValueError, TypeError) as error:  # e.g. a port that is not a number
        reason = str(error).replace(_MARKER, PLACEHOLDER)
        raise StoreError(f"{named} ({reason})") from None
    if parsed.port is not None and not 0 < parsed.port < 65536:
        raise StoreError(f"{named} (port {parsed.port} is not 1-65535)")
    return parsed


def render_database_url(template: str, tenant: str) -> str:
    """`template` with `{tenant}` replaced by the (checked) tenant name, checked once rendered."""
    check_tenant_name(tenant)
    if PLACEHOLDER not in template:
        parse_database_url(template)
        return template
    pattern = parse_database_url(template.replace(PLACEHOLDER, _MARKER), template=template)
    _check_template(template, pattern)
    rendered = template.replace(PLACEHOLDER, tenant)
    parsed = parse_database_url(rendered)
    expected = pattern.set(database=(pattern.database or "").replace(_MARKER, tenant))
    if parsed != expected:
        raise StoreError(
            f"database URL template {shown_url(template)!r} gives {shown_url(rendered)!r} for "
            f"tenant {tenant!r}, which is not the database the template names"
        )
    return rendered


def check_tenant_database(url: UrlLike) -> DatabaseUrl:
    """The parsed URL if a tenant's jobs may live there, else StoreError naming it.

    Refused: a `dbname` parameter (it would override the path), PostgreSQL's own databases, and
    names longer than PostgreSQL keeps (it would cut them, so two tenants could share one).
    """
    parsed = parse_database_url(url)
    if _backend(parsed) != "postgresql":
        return parsed
    if "dbname" in parsed.query:
        raise StoreError(
            f"database URL {shown_url(url)!r} has a dbname parameter; name the database in "
            "the URL's path (postgresql://app@db/erp_acme), where ket looks for it"
        )
    name = _effective_database(parsed)
    if name in _SYSTEM_DATABASES:
        raise StoreError(
            f"database URL {shown_url(url)!r} names PostgreSQL's own database {name!r}; "
            "give each tenant a database of its own"
        )
    if len(name.encode()) > _POSTGRES_NAME_BYTES:
        raise StoreError(
            f"database name {name!r} in {shown_url(url)!r} is longer than PostgreSQL's "
            f"{_POSTGRES_NAME_BYTES} bytes; choose a shorter template or tenant name"
        )
    return parsed


def database_identity(url: UrlLike) -> Identity:
    """What two URLs naming one database have in common, whatever their driver or spelling."""
    parsed = parse_database_url(url)
    backend = _backend(parsed)
    if backend == "sqlite":
        return (backend, os.path.realpath(parsed.database or ""))
    query = parsed.query
    host = next((_one(query[k]) for k in _HOST_PARAMETERS if k in query), parsed.host or "")
    host = host.lower().strip("[]")
    if host in _LOCAL_HOSTS or host.startswith("/"):
        host = "localhost"  # one machine's server, over TCP or its Unix socket
    port = _one(query["port"]) if "port" in query else str(parsed.port or 5432)
    service = _one(query["service"]) if "service" in query else ""
    return (backend, host, port, service, _effective_database(parsed))


def _check_template(template: str, pattern: DatabaseUrl) -> None:
    database = pattern.database or ""
    elsewhere = [
        part
        for part, value in (
            ("driver", pattern.drivername),
            ("user", pattern.username),
            ("password", pattern.password),
            ("host", pattern.host),
            ("query", str(dict(pattern.query))),
        )
        if value is not None and _MARKER in str(value)
    ]
    if _backend(pattern) == "sqlite" and _MARKER in str(PurePosixPath(database).parent):
        elsewhere.append("folder")
    if elsewhere or _MARKER not in database:
        where = ", ".join(elsewhere) or "nowhere in the database name"
        raise StoreError(
            f"database URL template {shown_url(template)!r} has {{tenant}} in its {where}: "
            f"{_ONLY_IN_DATABASE}"
        )


def _backend(parsed: DatabaseUrl) -> str:
    backend = parsed.get_backend_name().lower()  # a scheme is case-insensitive
    return "postgresql" if backend == "postgres" else backend


def _effective_database(parsed: DatabaseUrl) -> str:
    """The database libpq connects to: `?dbname=` wins over the path; then the user's name."""
    query = parsed.query
    if "dbname" in query:
        return _one(query["dbname"])
    user = _one(query["user"]) if "user" in query else parsed.username
    return parsed.database or user or ""


def _one(value: str | tuple[str, ...]) -> str:
    # a repeated parameter: libpq keeps the last
    return value[-1] if isinstance(value, tuple) else value


def _masked_text(text: str) -> str:
    """A URL that does not parse, as given but for its password: between `user:` and the last
    `@` (after `://`, or from the start where `://` is missing), and the value of a password
    parameter (in a query, or libpq's `key=value` form)."""
    text = _SECRET_PARAMETER_VALUE.sub(r"\1***", text)
    _, separator, rest = text.partition("://")
    start = len(text) - len(rest) if separator else 0
    userinfo, at, place = text[start:].rpartition("@")
    user, colon, _ = userinfo.partition(":")
    if not (at and colon):
        return text
    return f"{text[:start]}{user}:***@{place}"
