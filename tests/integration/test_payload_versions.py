"""Payload versions across a deploy: rows queued by the old deployment run under the new one.

The old and the new deployment are two declarations of the same job over one tenant database
(SQLite and PostgreSQL), as two releases of an app would be.
"""

from __future__ import annotations

from typing import Any

import pytest

from ket import define_deployment, define_job, define_module
from ket.declare.deployment import DeploymentDecl
from ket.testing import create_test_deployment

seen: list[tuple[str, str]] = []


def send(ctx: Any, input: Any) -> None:
    seen.append((input.order_id, input.currency))


def send_v1(ctx: Any, input: Any) -> None:
    seen.append((input.order_id, "-"))


def add_currency(payload: dict[str, Any]) -> dict[str, Any]:
    if payload["order_id"] == "broken":
        raise ValueError("cannot upgrade order broken")
    return {**payload, "currency": "EUR"}


def _release(version: int, **options: Any) -> DeploymentDecl:
    if version == 1:
        job = define_job(idempotent=True, input={"order_id": "string"}, handler=send_v1)
    else:
        job = define_job(
            idempotent=True,
            input={"order_id": "string", "currency": "string"},
            input_version=version,
            handler=send,
            **options,
        )
    module = define_module(name="sales", jobs={"send": job})
    return define_deployment(name="main", modules=[module])


V1 = _release(1)
V2 = _release(2, upgrade={1: add_currency})


@pytest.fixture(autouse=True)
def fresh_log() -> None:
    seen.clear()


def test_a_version_1_payload_is_upgraded_and_run_after_the_deploy_to_version_2(
    tenant_database: str,
) -> None:
    with create_test_deployment(V1, database_url=tenant_database, worker=False) as old:
        first = old.enqueue("sales.send", {"order_id": "o1"}).id
    with create_test_deployment(V2, database_url=tenant_database) as new:
        second = new.enqueue("sales.send", {"order_id": "o2", "currency": "NOK"}).id
        assert new.drain_jobs() == 2
        assert sorted(seen) == [("o1", "EUR"), ("o2", "NOK")]
        assert {j.id: (j.state, j.attempt) for j in new.jobs()} == {
            first: ("completed", 1),
            second: ("completed", 1),
        }


def test_an_upgrade_that_raises_fails_the_attempt_with_its_error_in_the_history(
    tenant_database: str,
) -> None:
    with create_test_deployment(V1, database_url=tenant_database, worker=False) as old:
        old.enqueue("sales.send", {"order_id": "broken"})
    with create_test_deployment(V2, database_url=tenant_database) as new:
        assert new.drain_jobs() == 0
        [job] = new.jobs()
        assert (job.state, job.attempt) == ("retryable", 1)
        assert job.errors[0].error == "ValueError: cannot upgrade order broken"
        assert "add_currency" in (job.errors[0].traceback or "")
        assert seen == []


def test_a_version_no_upgrade_reaches_is_discarded_naming_the_version(
    tenant_database: str,
) -> None:
    with create_test_deployment(V1, database_url=tenant_database, worker=False) as old:
        old.enqueue("sales.send", {"order_id": "o1"})
    v3 = _release(3, upgrade={2: add_currency})  # version 1 rows were meant to be drained
    with create_test_deployment(v3, database_url=tenant_database) as new:
        assert new.drain_jobs() == 0
        [job] = new.jobs()
        assert job.state == "discarded"
        assert job.errors[-1].error == (
            "its payload is of input version 1 and sales.send has no upgrade from version 1 "
            "(upgrades from: 2)"
        )


def test_a_payload_from_a_newer_deployment_waits_for_it_without_spending_an_attempt(
    tenant_database: str,
) -> None:
    with create_test_deployment(V2, database_url=tenant_database, worker=False) as new:
        job_id = new.enqueue("sales.send", {"order_id": "o1", "currency": "NOK"}).id
    with create_test_deployment(V1, database_url=tenant_database) as old:  # an old replica
        assert old.drain_jobs() == 0
        [job] = old.jobs()
        assert (job.state, job.attempt, job.errors) == ("scheduled", 0, ())
        old.clock.advance(seconds=61)
        assert old.drain_jobs() == 0  # still too new for it: handed back again
    with create_test_deployment(V2, database_url=tenant_database) as new:
        new.clock.advance(seconds=125)  # each test deployment's clock starts now
        assert new.drain_jobs() == 1
        assert seen == [("o1", "NOK")]
        assert [(j.id, j.state, j.attempt) for j in new.jobs()] == [(job_id, "completed", 1)]
