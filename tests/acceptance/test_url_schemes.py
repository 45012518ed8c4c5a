"""A URL's scheme is case-insensitive (RFC 3986) wherever ket reads one (issue 27, item 10):
`KET_STORAGE_URL` took `FILE:///...` but a database URL refused `POSTGRESQL://...` and a
transport URL `SMTP://...`. A tenant database named with its scheme in capitals is migrated,
takes jobs and is served like any other, on SQLite and on PostgreSQL."""

from __future__ import annotations

import json

from ket.connection.database_url import database_identity
from tests.acceptance.conftest import Project, run_ket

APP = """
from ket import define_deployment, define_job, define_module

async def ping(ctx, input):
    pass

app = define_module(name="app", jobs={"ping": define_job(idempotent=True, handler=ping)})
main = define_deployment(name="main", modules=[app])
"""


def test_a_database_url_with_its_scheme_in_capitals_is_the_same_database(
    project: Project, tenant_database: str
) -> None:
    scheme, rest = tenant_database.split(":", 1)
    shouted = scheme.upper() + ":" + rest
    assert database_identity(shouted) == database_identity(tenant_database)
    root = project({"app/workspace.py": APP})
    env = {"KET_DATABASE_URL": shouted}
    migrated = run_ket("migrate", cwd=root, env=env)
    assert migrated.code == 0, migrated.err
    enqueued = run_ket("jobs", "enqueue", "app.ping", cwd=root, env=env)
    assert enqueued.code == 0, enqueued.err
    burst = run_ket("worker", "--burst", cwd=root, env=env)
    assert burst.code == 0, burst.err
    listed = run_ket(
        "jobs", "list", "--format", "json", cwd=root, env={"KET_DATABASE_URL": tenant_database}
    )
    assert [job["state"] for job in json.loads(listed.out)] == ["completed"]
