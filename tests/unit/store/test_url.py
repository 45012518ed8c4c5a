"""ket.connection.url reads, changes and renders database URLs exactly as SQLAlchemy does."""

from __future__ import annotations

import pytest
import sqlalchemy
from sqlalchemy.exc import ArgumentError

from ket.connection.url import DatabaseUrl, UrlSyntaxError, make_url, to_sqlalchemy

FORMS = [
    "postgresql://app@db/erp_acme",
    "postgresql+psycopg://app:s3cret@db:5433/erp",
    "postgres://app@/erp_acme?host=/var/run/postgresql",
    "postgresql://app@db.example/erp_beta?host=localhost&dbname=erp_acme",
    "postgresql://a%40b:p%2Fw%3Ad@[::1]:5432/d%20b?sslmode=require&options=-c%20x%3D1",
    "postgresql://app@/erp?host=h1:5432&host=h2:5433",
    "postgresql://app:@db/erp",
    "postgresql://@db/erp",
    "postgresql://db",
    "postgresql:///erp",
    "postgresql://app@db/erp?application_name=&connect_timeout=3",
    "sqlite:///.ket/acme.db",
    "sqlite:////tmp/x/acme.db?synchronous=normal",
    "sqlite+aiosqlite:///./.ket/../.ket/acme.db",
    "sqlite://",
    "sqlite:///:memory:",
    "sqlite:///file:acme.db?uri=true&mode=ro",
    "pg://a:99999/b",
    "postgresql://app:s3/cr@t@db:5432/erp",
    "postgresql://app@db/erp_ketxtenantxmarker?x=ketxtenantxmarker",
    "my_driver+x://u:p@h/d",
]
BROKEN = ["x", "", "postgresql//db", "://db", "postgresql://app@db:port/erp", "postgresql://h:/d"]


def _parts(url: DatabaseUrl | sqlalchemy.URL) -> tuple[object, ...]:
    query = {k: v if isinstance(v, str) else tuple(v) for k, v in url.query.items()}
    return (url.drivername, url.username, url.password, url.host, url.port, url.database, query)


@pytest.mark.parametrize("text", FORMS)
def test_a_url_is_read_and_rendered_as_sqlalchemy_does(text: str) -> None:
    ours, theirs = make_url(text), sqlalchemy.make_url(text)
    assert _parts(ours) == _parts(theirs)
    assert ours.get_backend_name() == theirs.get_backend_name()
    for hide in (True, False):
        assert ours.render_as_string(hide) == theirs.render_as_string(hide)
    assert str(ours) == str(theirs)  # the password hidden
    changed = ours.set(drivername="postgresql", query={"a": "1", "b": ["2", "3"]}, port=7)
    expected = theirs.set(drivername="postgresql", query={"a": "1", "b": ["2", "3"]}, port=7)
    assert changed.render_as_string(False) == expected.render_as_string(False)
    assert _parts(ours.difference_update_query(["synchronous", "host"])) == _parts(
        theirs.difference_update_query(["synchronous", "host"])
    )
    assert to_sqlalchemy(ours) == theirs
    assert make_url(theirs) == ours


@pytest.mark.parametrize("text", BROKEN)
def test_a_broken_url_fails_as_it_does_in_sqlalchemy(text: str) -> None:
    with pytest.raises((ArgumentError, ValueError)) as theirs:
        sqlalchemy.make_url(text)
    with pytest.raises(ValueError) as ours:
        make_url(text)
    assert isinstance(ours.value, UrlSyntaxError) == isinstance(theirs.value, ArgumentError)
    assert str(ours.value) == str(theirs.value)


@pytest.mark.parametrize(
    "text",
    [
        "postgresql://app@db/erp_acme",
        "postgresql+psycopg://app:s3cret@db:5433/erp?sslmode=require",
        "postgresql://app@/erp_acme?host=/var/run/postgresql",
        "postgresql://app@/erp?host=h1:5432&host=h2:5433",
        "postgresql://app@/erp?host=h1,h2&port=5432,5433",
        "postgresql://app@/erp?host=db.example:6432",
        "postgresql://a%40b:p%2Fw@[::1]:5432/d%20b?options=-c%20x%3D1",
    ],
)
def test_the_lane_connects_with_the_parameters_the_engine_uses(text: str) -> None:
    from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg

    from ket.connection.address import psycopg_params

    url = sqlalchemy.make_url(text).set(drivername="postgresql+psycopg")
    _, expected = PGDialect_psycopg().create_connect_args(url)  # type: ignore[no-untyped-call]
    assert psycopg_params(make_url(text)) == expected
