"""Which database a store's URL names and how to reach it, without SQLAlchemy.

The PostgreSQL lane and listener connect with psycopg alone, so what they need from a URL (its
checks, its psycopg parameters, the TCP keepalives) lives here; engine.py builds SQLAlchemy's
engines on the same answers.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from ket import process
from ket.connection.database_url import parse_database_url, shown_url
from ket.connection.url import DatabaseUrl
from ket.errors import StoreError

if TYPE_CHECKING:
    from ket.connection.url import UrlLike

SQLITE_BUSY_TIMEOUT_S = 30.0
# SQLite's own levels of PRAGMA synchronous, chosen with ?synchronous= on a sqlite URL
SQLITE_SYNCHRONOUS = ("off", "normal", "full", "extra")
DEFAULT_SQLITE_SYNCHRONOUS = "full"
SYNCHRONOUS = "synchronous"
BACKENDS = ("postgresql", "sqlite")

# Pooled PostgreSQL connections must fail, not hang, when the network under them goes (a dropped
# route, a server gone without a reset): a statement would otherwise wait for TCP's own
# retransmission limit, about 15 minutes. libpq's keepalives notice a silent peer while waiting
# for an answer, tcp_user_timeout a request that is never acknowledged.
POSTGRES_CONNECT_ARGS: Mapping[str, Any] = MappingProxyType(
    {
        "connect_timeout": 10,
        "keepalives": 1,
        "keepalives_idle": 10,
        "keepalives_interval": 5,
        "keepalives_count": 3,
        "tcp_user_timeout": 30_000,
    }
)


class ConnectionName:
    """The name the process's PostgreSQL connections go by (a part of the process:
    ket.process); None: unnamed."""

    def __init__(self) -> None:
        self.name: str | None = None


def name_connections(name: str | None) -> None:
    """Name the PostgreSQL connections this process opens from now on: `application_name`,
    which `pg_stat_activity` shows (`ket worker vm:4242:a1b2c3`); None stops naming them. A
    URL's own `?application_name=` wins, and so does PGAPPNAME in the environment."""
    named = name if name is not None and not os.environ.get("PGAPPNAME") else None
    # PostgreSQL keeps 63 bytes
    process.current().part(ConnectionName).name = named[:63] if named else None


def connect_args() -> dict[str, Any]:
    """POSTGRES_CONNECT_ARGS, with the process's connection name (`name_connections`) as the
    application_name when it has one."""
    name = process.current().part(ConnectionName).name
    return (
        {**POSTGRES_CONNECT_ARGS, "application_name": name} if name else {**POSTGRES_CONNECT_ARGS}
    )


def server_of(url: UrlLike) -> str | None:
    """The PostgreSQL server a URL reaches, as `host:port` (the key of its connection budget):
    its host, or the socket folder of `?host=`, and its port (5432 when none is given); None
    for SQLite."""
    parsed = parse_url(url)
    if parsed.get_backend_name() != "postgresql":
        return None
    host = parsed.host or parsed.query.get("host") or "localhost"
    port = parsed.port or parsed.query.get("port") or 5432
    if not isinstance(host, str):  # several hosts: the first, as libpq tries it first
        host = host[0]
    if not isinstance(port, int | str):
        port = port[0]
    return f"{host}:{port}"


def parse_url(url: UrlLike) -> DatabaseUrl:
    """A database URL ket can store jobs in, or StoreError naming it (never its password)."""
    parsed = parse_database_url(url)
    if parsed.drivername != parsed.drivername.lower():  # a scheme is case-insensitive
        parsed = parsed.set(drivername=parsed.drivername.lower())
    backend = parsed.get_backend_name()
    if backend == "postgres":
        parsed = parsed.set(drivername="postgresql")
        backend = "postgresql"
    if backend not in BACKENDS:
        raise StoreError(
            f"ket stores jobs in postgresql or sqlite databases, not {backend!r} "
            f"(from {shown_url(parsed)!r})"
        )
    if backend == "sqlite" and parsed.database in (None, "", ":memory:"):
        raise StoreError(
            "an in-memory SQLite database is private to one connection; give a file path, "
            "e.g. sqlite:///.ket/default.db, or use the memory store"
        )
    if backend == "sqlite":
        sqlite_synchronous(parsed)
    return parsed


def sqlite_synchronous(url: UrlLike) -> str:
    """The `?synchronous=` level of a SQLite URL (default full), or StoreError naming a bad one."""
    parsed = parse_database_url(url)
    value = parsed.query.get(SYNCHRONOUS, DEFAULT_SQLITE_SYNCHRONOUS)
    if isinstance(value, str) and value.lower() in SQLITE_SYNCHRONOUS:
        return value.lower()
    given = value if isinstance(value, str) else "&".join(value)
    raise StoreError(
        f"synchronous must be one of {', '.join(SQLITE_SYNCHRONOUS)}, got {given!r} "
        f"(from {shown_url(parsed)!r})"
    )


def libpq_dsn(url: UrlLike) -> str:
    """A plain `postgresql://` URL for a raw psycopg connection (the listener)."""
    return parse_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def postgres_connect_args(url: UrlLike, given: dict[str, Any] | None = None) -> dict[str, Any]:
    """The keepalives and timeouts of POSTGRES_CONNECT_ARGS, then `given`; the URL's own
    parameters (e.g. ?connect_timeout=3) win over the defaults."""
    query = parse_database_url(url).query
    defaults = {k: v for k, v in connect_args().items() if k not in query}
    return {**defaults, **(given or {})}


def psycopg_params(url: DatabaseUrl) -> dict[str, Any]:
    """psycopg's connection parameters for `url`, as SQLAlchemy's psycopg dialect makes them
    (`create_connect_args`), so that the lane and the engine reach one database alike."""
    params: dict[str, Any] = {}
    for name, value in (
        ("user", url.username),
        ("password", url.password),
        ("host", url.host),
        ("port", url.port),
        ("dbname", url.database),
    ):
        if value is not None:
            params[name] = value
    params.update(url.query)
    hosts, ports = _multihost(url)
    if hosts is not None:
        params["host"] = ",".join(host or "" for host in hosts)
        joined = ",".join(str(port) if port else "" for port in ports or ())
        if joined:
            params["port"] = joined
    return params


def _multihost(url: DatabaseUrl) -> tuple[tuple[str, ...] | None, tuple[int | None, ...] | None]:
    """The hosts and ports of `?host=h1:p1&host=h2:p2` (or `?host=h1,h2&port=p1,p2`), as
    SQLAlchemy's PostgreSQL dialect splits them; StoreError where it would refuse them."""
    query = url.query
    hosts: tuple[str, ...] | None = None
    texts: tuple[str | None, ...] | None = None
    integrated = False
    given = query.get("host")
    if isinstance(given, tuple):
        integrated = True
        split = [token.split(":", 1) if ":" in token else [token, None] for token in given]
        hosts = tuple(str(part[0]) for part in split)
        texts = tuple(part[1] for part in split)
    elif isinstance(given, str):
        hosts = tuple(given.split(","))
        if "port" not in query and len(hosts) == 1 and ":" in hosts[0]:
            match = re.match(r"^([a-zA-Z0-9\-\.]*)(?:\:(\d*))?$", hosts[0])
            if match:
                integrated = True
                hosts, texts = (match.group(1),), (match.group(2) or None,)
    if "port" in query:
        if integrated:
            raise StoreError(
                f"{shown_url(url)!r} mixes host=h1:p1 with port=...; use "
                "host=h1,h2&port=p1,p2 or host=h1:p1&host=h2:p2"
            )
        port = query["port"]
        texts = port if isinstance(port, tuple) else tuple(port.split(","))
    if not texts:
        return hosts, None
    try:
        ports = tuple(int(text) if text else None for text in texts)
    except ValueError:
        raise StoreError(f"{shown_url(url)!r} has a port that is not a number") from None
    return hosts, ports
