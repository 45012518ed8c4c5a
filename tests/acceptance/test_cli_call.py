"""`ket call` as a user runs it: a job named instead of a function is pointed at `ket jobs
enqueue`, and a function that fails after enqueueing says which jobs it left queued."""

from __future__ import annotations

from pathlib import Path

from tests.acceptance.conftest import Project, run_ket

WORKSPACE = """
from ket import define_deployment, define_function, define_job, define_module

async def flaky(ctx, input):
    pass

async def charge(ctx, input):
    await ctx.jobs.enqueue("ops.flaky", {"note": "receipt"})
    await ctx.jobs.enqueue("ops.flaky", {"note": "audit"})
    raise ValueError(f"card {input.card.get_secret_value()} declined")

async def overreach(ctx, input):
    await ctx.jobs.enqueue("ops.flaky", {"note": "first"})
    await ctx.jobs.enqueue("ops.undeclared")

async def fails(ctx, input):
    raise LookupError("no such order")

async def committed(ctx, input):
    async def write(tx):
        await tx.jobs.enqueue("ops.flaky", {"note": "in a transaction"})
    await ctx.tx(write)
    raise RuntimeError("failed after the commit")

ops = define_module(
    name="ops",
    jobs={
        "flaky": define_job(idempotent=True, input={"note": "string"}, handler=flaky),
        "undeclared": define_job(idempotent=True, handler=flaky),
    },
    functions={
        "charge": define_function(
            input={"card": "secret"}, effects=["enqueue:ops.flaky"], handler=charge
        ),
        "overreach": define_function(effects=["enqueue:ops.flaky"], handler=overreach),
        "fails": define_function(handler=fails),
        "committed": define_function(effects=["enqueue:ops.flaky"], handler=committed),
    },
)
main = define_deployment(name="main", modules=[ops])
"""


def _migrated(project: Project) -> Path:
    root = project({"app/workspace.py": WORKSPACE})
    done = run_ket("migrate", cwd=root)
    assert done.code == 0, done.err
    return root


def test_calling_a_job_says_it_is_a_job_and_how_to_enqueue_it(project: Project) -> None:
    root = _migrated(project)
    result = run_ket("call", "ops.flaky", "{}", cwd=root)
    assert result.code == 2, result
    assert result.err == (
        "ket: error: 'ops.flaky' is a job, not a function: enqueue it with "
        "`ket jobs enqueue ops.flaky '{...}'`\n"
    )
    unknown = run_ket("call", "ops.nope", "{}", cwd=root)
    assert (unknown.code, "unknown function 'ops.nope'" in unknown.err) == (2, True), unknown


def test_a_function_failing_after_enqueueing_names_the_jobs_it_left_queued(
    project: Project,
) -> None:
    root = _migrated(project)
    result = run_ket("call", "ops.charge", '{"card": "4242-1111"}', cwd=root)
    assert (result.code, result.out) == (1, ""), result
    assert "4242-1111" not in result.err
    assert result.err == (
        "ket: ops.charge raised app/workspace.py:10: ValueError: card *** declined; "
        "before failing it enqueued job 1 (ops.flaky) and job 2 (ops.flaky), which stay "
        "queued: cancel them with 'ket jobs cancel 1' and 'ket jobs cancel 2' if they should "
        "not run\n"
    )
    listed = run_ket("jobs", "list", cwd=root)
    assert [line.split()[:2] for line in listed.out.splitlines()[1:]] == [
        ["2", "available"],
        ["1", "available"],
    ]


def test_a_ket_error_raised_by_the_function_is_its_failure_not_bad_input(
    project: Project,
) -> None:
    root = _migrated(project)
    result = run_ket("call", "ops.overreach", cwd=root)
    assert result.code == 1, result
    assert result.err.startswith("ket: ops.overreach raised app/workspace.py:14: EffectError: ")
    assert result.err.endswith(
        "; before failing it enqueued job 1 (ops.flaky), which stays queued: cancel it with "
        "'ket jobs cancel 1' if it should not run\n"
    )


def test_a_function_failing_before_any_enqueue_reads_as_before(project: Project) -> None:
    root = _migrated(project)
    result = run_ket("call", "ops.fails", cwd=root)
    assert (result.code, result.err) == (
        1,
        "ket: ops.fails raised app/workspace.py:17: LookupError: no such order\n",
    )
    invalid = run_ket("call", "ops.charge", '{"card": 5}', cwd=root)
    assert invalid.code == 2 and invalid.err.startswith("ket: error: invalid input"), invalid


def test_a_job_enqueued_in_a_committed_transaction_is_named_too(project: Project) -> None:
    root = _migrated(project)
    result = run_ket("call", "ops.committed", cwd=root)
    assert (result.code, result.err) == (
        1,
        "ket: ops.committed raised app/workspace.py:23: RuntimeError: failed after the commit; "
        "before failing it enqueued job 1 (ops.flaky), which stays queued: cancel it with "
        "'ket jobs cancel 1' if it should not run\n",
    )
