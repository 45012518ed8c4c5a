"""Results: what a handler returns is validated against its job's output, kept with the job
when it completes (secret fields sealed), and a value that does not fit fails the attempt."""

from __future__ import annotations

from typing import Any

import pytest
from cryptography.fernet import Fernet
from pydantic import BaseModel, SecretStr

from ket import define_deployment, define_job, define_module
from ket.limits import MAX_RESULT_BYTES
from ket.testing import create_test_deployment


class Charge(BaseModel):
    charged: float
    receipt: str
    card_token: SecretStr | None = None


async def charge(ctx: Any, input: Any) -> Charge:
    return Charge(
        charged=input.amount, receipt=f"r-{input.order_id}", card_token=SecretStr("tok_42")
    )


def reserve(ctx: Any, input: Any) -> dict[str, Any]:  # a plain handler returning a dict
    return {"reserved": input.quantity, "warehouse": "north"}


async def wrong(ctx: Any, input: Any) -> dict[str, Any]:
    return {"reserved": "many"}


async def huge(ctx: Any, input: Any) -> dict[str, Any]:
    return {"reserved": 1, "warehouse": "x" * MAX_RESULT_BYTES}


async def nothing_kept(ctx: Any, input: Any) -> dict[str, Any]:
    return {"ignored": True}  # its job declares no output


RESERVED = {"reserved": "int", "warehouse": "string"}
APP = define_deployment(
    name="main",
    modules=[
        define_module(
            name="shop",
            jobs={
                "charge": define_job(
                    idempotent=True,
                    input={"order_id": "id", "amount": "number"},
                    output=Charge,
                    handler=charge,
                ),
                "reserve": define_job(
                    idempotent=True, input={"quantity": "int"}, output=RESERVED, handler=reserve
                ),
                "wrong": define_job(
                    idempotent=True, max_attempts=1, output=RESERVED, handler=wrong
                ),
                "huge": define_job(idempotent=True, max_attempts=1, output=RESERVED, handler=huge),
                "plain": define_job(idempotent=True, handler=nothing_kept),
            },
        )
    ],
)


def test_a_completed_job_keeps_what_its_handler_returned() -> None:
    with create_test_deployment(APP) as e2e:
        job_id = e2e.enqueue("shop.reserve", {"quantity": 3}).id
        assert e2e.drain_jobs() == 1
        job = e2e.job(job_id)
        assert (job.state, job.result) == ("completed", {"reserved": 3, "warehouse": "north"})


def test_secret_fields_of_a_result_are_sealed_as_an_input_s_are(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KET_SECRET_KEYS", Fernet.generate_key().decode())
    with create_test_deployment(APP) as e2e:
        job_id = e2e.enqueue("shop.charge", {"order_id": "o1", "amount": 12.5}).id
        assert e2e.drain_jobs() == 1
        result = e2e.job(job_id).result
        assert result is not None
        assert (result["charged"], result["receipt"]) == (12.5, "r-o1")
        assert list(result["card_token"]) == ["$sealed"]
        assert "tok_42" not in str(result)


def test_a_value_that_is_not_the_output_fails_the_attempt_and_names_the_field() -> None:
    with create_test_deployment(APP) as e2e:
        job_id = e2e.enqueue("shop.wrong").id
        assert e2e.drain_jobs() == 0
        job = e2e.job(job_id)
        assert (job.state, job.result) == ("discarded", None)
        [error] = job.errors
        assert error.error.startswith(
            "ResultRejected: shop.wrong returned a value that is not its output: reserved:"
        ), error.error
        assert "warehouse: Field required" in error.error


def test_a_result_over_the_limit_fails_the_attempt_and_says_where_large_data_goes() -> None:
    with create_test_deployment(APP) as e2e:
        job_id = e2e.enqueue("shop.huge").id
        assert e2e.drain_jobs() == 0
        [error] = e2e.job(job_id).errors
        assert f"over the limit of {MAX_RESULT_BYTES}" in error.error
        assert "keep large data in ctx.storage and return its key" in error.error


def test_a_job_that_declares_no_output_keeps_nothing_it_returns() -> None:
    with create_test_deployment(APP) as e2e:
        job_id = e2e.enqueue("shop.plain").id
        assert e2e.drain_jobs() == 1
        assert e2e.job(job_id).result is None


def test_perform_job_gives_the_result_the_worker_would_keep() -> None:
    with create_test_deployment(APP) as e2e:
        performed = e2e.perform_job("shop.reserve", {"quantity": 2})
        assert (performed.outcome, performed.result) == (
            "completed",
            {"reserved": 2, "warehouse": "north"},
        )
