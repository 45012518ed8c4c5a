"""The store's statement handles and their generated PostgreSQL text (ket.store.sql.statement,
ket.store.sql.generation, ket.store.sql.postgres_text)."""

from __future__ import annotations

import dataclasses

import pytest

from ket.store.sql import generation, statement
from ket.store.sql.insert import InsertSql, insert_sql
from ket.store.sql.ledger import LedgerStatements
from ket.store.sql.ledger import statements as ledger_statements
from ket.store.sql.postgres_text import TEXT
from ket.store.sql.query import Statements, statements
from ket.store.sql.vacuum import VacuumStatements
from ket.store.sql.vacuum import statements as vacuum_statements


def test_the_checked_in_postgres_text_is_current() -> None:
    # after changing or adding a statement: python3 -m ket.store.sql.generation --write
    assert generation.render() == generation.TARGET.read_text(encoding="utf-8"), (
        "postgres_text.py is stale: run `python3 -m ket.store.sql.generation --write`"
    )


@pytest.mark.parametrize(
    ("group", "kind", "built"),
    [
        ("query", Statements, statements("postgresql")),
        ("insert", InsertSql, insert_sql("postgresql")),
        ("ledger", LedgerStatements, ledger_statements("postgresql")),
        ("vacuum", VacuumStatements, vacuum_statements("postgresql")),
    ],
)
def test_every_statement_of_a_group_has_a_handle(group: str, kind: type, built: object) -> None:
    names: set[str] = set()
    for field in dataclasses.fields(kind):
        value = getattr(built, field.name)
        if isinstance(value, dict):
            names.update(f"{field.name}.{key}" for key in value)
        else:
            names.add(field.name)
    assert {s.name for s in statement.ALL if s.group == group} == names


def test_every_handle_postgresql_runs_has_its_text_and_no_other_has() -> None:
    assert set(TEXT) == {s.key for s in statement.ALL if s.postgres}


@pytest.mark.parametrize("handle", statement.ALL, ids=lambda s: s.key)
def test_every_handle_resolves_to_a_statement_on_each_side(handle: statement.Statement) -> None:
    postgres_only = {
        statement.NOTIFY,
        statement.LOOK,
        statement.LIMITED_CLAIM,
        statement.INSERT_UNNESTED,
        statement.INSERT_TICKED,
        statement.INSERT_WINDOW_LOCK,
    }
    if handle.postgres:
        assert statement.built(handle, "postgresql") is not None
    if handle not in postgres_only and handle.group != "vacuum":
        assert statement.built(handle, "sqlite") is not None


def test_a_list_parameter_has_one_text_on_postgresql() -> None:
    # = ANY(array): prepared once, whatever the number of ids (no expanding IN)
    lists = (
        "query.prunable",
        "query.prune_jobs",
        "query.prune_errors",
        "query.schedule_states",
        "query.cancel_now",
        "query.request_cancel",
        "query.make_available",
        "query.active_holders",
    )
    for key in lists:
        assert "ANY" in TEXT[key].text and "POSTCOMPILE" not in TEXT[key].text
