"""ket's pytest plugin as an app's test suite uses it: run through pytester, on a small app."""

from __future__ import annotations

import textwrap

import psycopg
import pytest

APP = """
from ket import Discard, define_deployment, define_job, define_module


def send(ctx, input):
    if input.to == "nobody":
        raise Discard("no address")
    if input.to == "flaky":
        raise RuntimeError("mail server said 451")


def notify(ctx, input):
    ctx.jobs  # the handler may enqueue; this one only sends


mail = define_module(
    name="mail",
    jobs={
        "send": define_job(
            input={"to": "string", "subject": "string?"},
            idempotent=True,
            max_attempts=3,
            tags=["mail"],
            handler=send,
        ),
    },
)
app = define_deployment(name="app", modules=[mail], worker={"queues": {"default": 1}})
"""


# The app's suite runs in a pytest process of its own, which loads every installed plugin: the
# other plugins of ket's dev environment (hypothesis's and schemathesis's above all) cost each
# run about 2.5 s of CPU before the first test, and none of them is what these tests are about.
# ket's own plugin still loads the way an app gets it, through its entry point.
OTHER_PLUGINS = (
    "hypothesispytest",
    "schemathesis",
    "xdist",
    "xdist.looponfail",
    "anyio",
    "benchmark",
)


def run(project: pytest.Pytester) -> pytest.RunResult:
    """The app's tests, in a pytest process of their own."""
    blocked = [arg for name in OTHER_PLUGINS for arg in ("-p", f"no:{name}")]
    return project.runpytest_subprocess("-p", "no:cacheprovider", *blocked)


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    """An app with `[tool.ket]`, as a user's repository has it."""
    pytester.makepyfile(app=APP)
    pytester.makefile(".toml", pyproject='[tool.ket]\nworkspace = "app.py"\ndeployment = "app"\n')
    pytester.syspathinsert()
    return pytester


def test_the_fixtures_give_each_test_a_fresh_deployment_of_the_project(
    project: pytest.Pytester,
) -> None:
    project.makepyfile(
        test_app=textwrap.dedent(
            """
            from datetime import timedelta

            def test_enqueue_and_assert(ket_e2e, ket_clock):
                later = ket_clock.now() + timedelta(hours=1)
                ket_e2e.enqueue("mail.send", {"to": "ada", "subject": "hi"}, run_at=later)
                job = ket_e2e.assert_enqueued("mail.send", {"to": "ada"}, run_at=later)
                assert (job.state, job.tags) == ("scheduled", ("mail",))
                ket_e2e.refute_enqueued("mail.send", {"to": "bob"})
                assert ket_e2e.drain_jobs() == 0
                ket_clock.advance(hours=1)
                assert ket_e2e.drain_jobs() == 1
                ket_e2e.refute_enqueued("mail.send")

            def test_the_next_test_starts_empty(ket_e2e):
                assert ket_e2e.jobs() == []
            """
        )
    )
    run(project).assert_outcomes(passed=2)


def test_a_failed_assert_enqueued_names_what_it_wanted_and_lists_what_it_found(
    project: pytest.Pytester,
) -> None:
    project.makepyfile(
        test_app=textwrap.dedent(
            """
            def test_wrong_input(ket_e2e):
                ket_e2e.enqueue("mail.send", {"to": "ada"}, tags=["urgent"])
                ket_e2e.assert_enqueued("mail.send", {"to": "bob"})

            def test_unexpected_job(ket_e2e):
                ket_e2e.enqueue("mail.send", {"to": "ada"})
                ket_e2e.refute_enqueued("mail.send", {"to": "ada"})
            """
        )
    )
    result = run(project)
    result.assert_outcomes(failed=2)
    text = result.stdout.str()
    wanted = 'expected a job mail.send with input={"to": "bob"} to be enqueued;'
    assert f"AssertionError: {wanted}" in text
    assert (
        "job 1 mail.send [available] run_at=" in text
        and 'input={"subject": null, "to": "ada"} tags=[\'urgent\']' in text
    )
    assert 'expected no job mail.send with input={"to": "ada"} to be enqueued; found:' in text


def test_perform_job_runs_one_attempt_and_reports_its_outcome_to_hooks(
    project: pytest.Pytester,
) -> None:
    project.makepyfile(
        test_app=textwrap.dedent(
            """
            def test_outcomes(ket_e2e):
                events = []
                ket_e2e.hooks.subscribe(lambda event: events.append((event.kind, event.name)))
                assert ket_e2e.perform_job("mail.send", {"to": "ada"}).outcome == "completed"
                flaky = ket_e2e.perform_job("mail.send", {"to": "flaky"})
                assert flaky.outcome == "failed" and "451" in flaky.error
                assert flaky.delay_seconds > 0
                last = ket_e2e.perform_job("mail.send", {"to": "flaky"}, attempt=3)
                assert last.outcome == "discarded"
                assert ket_e2e.perform_job("mail.send", {"to": "nobody"}).outcome == "discarded"
                assert ket_e2e.jobs() == []  # nothing was queued
                ket_e2e.enqueue("mail.send", {"to": "ada"})
                assert [kind for kind, _ in events] == [
                    "started", "completed", "started", "failed", "started", "discarded",
                    "started", "discarded", "enqueued",
                ]
            """
        )
    )
    run(project).assert_outcomes(passed=1)


def test_with_a_postgres_server_each_test_gets_its_own_database_dropped_after(
    project: pytest.Pytester, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KET_TEST_POSTGRES_URL", postgres_url)
    seen = project.path / "seen.txt"
    project.makepyfile(
        test_app=textwrap.dedent(
            f"""
            def test_one(ket_e2e, ket_database_url):
                open({str(seen)!r}, "a").write(ket_database_url + "\\n")
                ket_e2e.enqueue("mail.send", {{"to": "ada"}})
                assert len(ket_e2e.jobs()) == 1

            def test_two(ket_e2e, ket_database_url):
                open({str(seen)!r}, "a").write(ket_database_url + "\\n")
                assert ket_e2e.jobs() == []
            """
        )
    )
    run(project).assert_outcomes(passed=2)
    urls = seen.read_text().split()
    assert len(set(urls)) == 2 and all(url.startswith("postgresql://") for url in urls)
    names = [url.rsplit("/", 1)[1] for url in urls]
    with psycopg.connect(postgres_url) as connection:
        left = connection.execute(
            "SELECT datname FROM pg_database WHERE datname = ANY(%s)", (names,)
        ).fetchall()
    assert left == []


def test_the_ini_option_picks_a_deployment_and_a_bad_one_is_named(
    project: pytest.Pytester,
) -> None:
    project.makepyfile(
        test_app="def test_it(ket_e2e):\n    assert ket_e2e.catalog.deployment == 'app'\n"
    )
    project.makeini("[pytest]\nket_deployment = app:app\n")
    run(project).assert_outcomes(passed=1)
    project.makeini("[pytest]\nket_deployment = app:mail\n")
    result = run(project)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*ket_deployment 'app:mail' is not a deployment*ModuleDecl*"])
