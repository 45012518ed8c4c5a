"""A database URL's parts, read the way SQLAlchemy reads them, without importing SQLAlchemy.

A worker on PostgreSQL needs SQLAlchemy only for what it does not run (model rows, a caller's
transaction, operator commands), so the URLs it reads on every tenant refresh are parsed here:
the same pattern as SQLAlchemy's `make_url` (RFC 1738 with `+` in the scheme, `[...]` for IPv6
hosts, percent-decoded user, password and database, repeated query parameters as tuples), the
same errors, and the same rendering. `to_sqlalchemy` hands the parts to SQLAlchemy where an
engine is made; a test compares both readings over many forms.

The method names are SQLAlchemy's (`get_backend_name`, `set`, `render_as_string`,
`difference_update_query`), so code that reads a URL works with either.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, quote, quote_plus, unquote

if TYPE_CHECKING:
    from typing import TypeAlias

    from sqlalchemy import URL

    UrlLike: TypeAlias = "str | DatabaseUrl | URL"  # what ket's functions accept as a URL

QueryValue = str | tuple[str, ...]

# SQLAlchemy's own pattern (sqlalchemy.engine.url._parse_url), so that both read a URL alike
_PATTERN = re.compile(
    r"""
        (?P<name>[\w\+]+)://
        (?:
            (?P<username>[^:/]*)
            (?::(?P<password>[^@]*))?
        @)?
        (?:
            (?:
                \[(?P<ipv6host>[^/\?]+)\] |
                (?P<ipv4host>[^/:\?]+)
            )?
            (?::(?P<port>[^/\?]*))?
        )?
        (?:/(?P<database>[^\?]*))?
        (?:\?(?P<query>.*))?
    """,
    re.X,
)


class UrlSyntaxError(ValueError):
    """The text is not a URL at all (SQLAlchemy's ArgumentError for the same text)."""


@dataclass(frozen=True, eq=True)
class DatabaseUrl:
    """The parts of a database URL; `query` maps a name to its value (a tuple when repeated)."""

    drivername: str
    username: str | None = None
    password: str | None = None
    host: str | None = None
    port: int | None = None
    database: str | None = None
    query: Mapping[str, QueryValue] = field(default_factory=dict)

    def get_backend_name(self) -> str:
        """The backend: the scheme before any `+driver`."""
        return self.drivername.split("+")[0]

    def set(self, **changes: Any) -> DatabaseUrl:
        """A copy with these parts changed (`query` replaced whole); None keeps a part."""
        kept = {name: value for name, value in changes.items() if value is not None}
        if "port" in kept:
            kept["port"] = int(kept["port"])
        if "query" in kept:
            kept["query"] = _query(kept["query"].items())
        return dataclasses.replace(self, **kept)

    def difference_update_query(self, names: Iterable[str]) -> DatabaseUrl:
        """A copy without these query parameters."""
        dropped = set(names)
        return dataclasses.replace(
            self, query={k: v for k, v in self.query.items() if k not in dropped}
        )

    def render_as_string(self, hide_password: bool = True) -> str:
        """The URL as text, the password as *** unless `hide_password` is False."""
        text = self.drivername + "://"
        if self.username is not None:
            text += quote(self.username, safe=" +")
            if self.password is not None:
                text += ":" + ("***" if hide_password else quote(self.password, safe=" +"))
            text += "@"
        if self.host is not None:
            text += f"[{self.host}]" if ":" in self.host else self.host
        if self.port is not None:
            text += ":" + str(self.port)
        if self.database is not None:
            text += "/" + quote(self.database, safe=" +/")
        if self.query:
            text += "?" + "&".join(
                f"{quote_plus(key)}={quote_plus(value)}"
                for key in sorted(self.query)
                for value in _values(self.query[key])
            )
        return text

    def __str__(self) -> str:
        return self.render_as_string()

    __repr__ = __str__  # never the password


def is_postgres(url: str) -> bool:
    """Whether the text of a database URL names PostgreSQL (`postgresql://`, `postgres://`,
    `postgresql+psycopg://`), in any case: a URL's scheme is case-insensitive (RFC 3986)."""
    return url[:8].lower() == "postgres"


def is_sqlite(url: str) -> bool:
    """Whether the text of a database URL names SQLite, in any case."""
    return url[:6].lower() == "sqlite"


def make_url(value: UrlLike | object) -> DatabaseUrl:
    """`value` (text, a DatabaseUrl or a SQLAlchemy URL) as a DatabaseUrl.

    UrlSyntaxError when it is no URL; ValueError when its port is not a number.
    """
    if isinstance(value, DatabaseUrl):
        return value
    if isinstance(value, str):
        return _parse(value)
    if _is_sqlalchemy_url(value):
        given: Any = value
        return DatabaseUrl(
            drivername=given.drivername,
            username=given.username,
            password=None if given.password is None else str(given.password),
            host=given.host,
            port=given.port,
            database=given.database,
            query=_query(given.query.items()),
        )
    raise UrlSyntaxError(f"Expected string or URL object, got {value!r}")


def to_sqlalchemy(url: DatabaseUrl) -> URL:
    """The same URL as SQLAlchemy's type (imports SQLAlchemy)."""
    from sqlalchemy import URL

    return URL.create(
        url.drivername,
        username=url.username,
        password=url.password,
        host=url.host,
        port=url.port,
        database=url.database,
        query=dict(url.query),
    )


def _parse(text: str) -> DatabaseUrl:
    match = _PATTERN.match(text)
    if match is None:
        raise UrlSyntaxError("Could not parse SQLAlchemy URL from given URL string")
    parts = match.groupdict()
    pairs = parse_qsl(parts["query"]) if parts["query"] is not None else []
    grouped: dict[str, list[str]] = {}
    for key, value in pairs:
        grouped.setdefault(key, []).append(value)
    return DatabaseUrl(
        drivername=parts["name"],
        username=_unquoted(parts["username"]),
        password=_unquoted(parts["password"]),
        host=parts["ipv4host"] or parts["ipv6host"],
        port=None if parts["port"] is None else int(parts["port"]),
        database=_unquoted(parts["database"]),
        query=_query((k, v[0] if len(v) == 1 else v) for k, v in grouped.items()),
    )


def _query(items: Iterable[tuple[str, Any]]) -> dict[str, QueryValue]:
    return {key: value if isinstance(value, str) else tuple(value) for key, value in items}


def _values(value: QueryValue) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else value


def _unquoted(part: str | None) -> str | None:
    return None if part is None else unquote(part)


def _is_sqlalchemy_url(value: object) -> bool:
    return type(value).__module__.startswith("sqlalchemy.") and hasattr(value, "drivername")
