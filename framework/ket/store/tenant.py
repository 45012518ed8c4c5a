"""Tenant names: one grammar for the client, the CLI, the registry and the test helpers.

A name becomes part of a database name (`erp_{tenant}`), a SQLite file name (`.ket/{tenant}.db`)
and folder names (`.ket/storage/{tenant}/`, `.ket/outbox/{tenant}/`), so it is kept to what is
safe in all of them: lowercase letters, digits, `_` and `-`, starting with a letter, at most 63
characters (PostgreSQL's identifier limit). Names that ket or PostgreSQL use themselves are
reserved, so that no tenant can land on the registry, a server's maintenance database or one of
ket's folders.
"""

from __future__ import annotations

import re

from ket.errors import StoreError

TENANT_PATTERN = r"[a-z][a-z0-9_-]{0,62}"
TENANT_NAME = re.compile(TENANT_PATTERN)
RESERVED_TENANT_NAMES = frozenset(
    {
        "registry",  # .ket/registry.db, the tenant registry
        "storage",  # .ket/storage/, blobs
        "outbox",  # .ket/outbox/, the dev transport's messages
        "postgres",  # PostgreSQL's maintenance database, through which ket creates databases
        "template0",
        "template1",
    }
)


def check_tenant_name(name: object) -> str:
    """`name` if it follows the tenant grammar and is not reserved, else StoreError naming it."""
    if not isinstance(name, str) or not TENANT_NAME.fullmatch(name):
        raise StoreError(
            f"tenant name {name!r} must match {TENANT_PATTERN} (1-63 lowercase letters, digits, "
            "'_' or '-', starting with a letter)"
        )
    if name in RESERVED_TENANT_NAMES:
        raise StoreError(
            f"tenant name {name!r} is reserved (ket or the database server uses it); "
            f"reserved: {', '.join(sorted(RESERVED_TENANT_NAMES))}"
        )
    return name
