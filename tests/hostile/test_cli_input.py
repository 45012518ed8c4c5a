"""Bad input on the command line: one line naming the value, exit status 2, never a traceback.

Run as a user runs `ket` (a separate process, in a project folder of its own).
"""

from __future__ import annotations

import json
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from ket.cli import manifest as manifest_command
from ket.cli.main import main
from ket.errors import TransportError
from ket.store import NewJob
from ket.store.sql import SqlStore
from ket.transport import sender_from_url
from tests.acceptance.conftest import Result, run_ket
from tests.hostile.project import fresh_database, write_project

APP = """
from ket import define_deployment, define_function, define_module

async def echo(ctx, input):
    return {"value": input.value, "company": ctx.company}

app = define_module(name="app", functions={
    "echo": define_function(input={"value": "json"}, handler=echo),
})
main = define_deployment(name="main", modules=[app])
"""
BIG = 2**63
MAX = 2**63 - 1


def _usage_error(result: Result, value: str) -> None:
    assert result.code == 2, (result.out, result.err)
    assert result.out == ""
    assert "Traceback" not in result.err
    *_, last = result.err.splitlines()
    assert ": error: " in last
    assert value in last, last


def _env(root: Path, url: str | None = None) -> dict[str, str]:
    env = {"KET_REGISTRY_URL": f"sqlite:///{root / 'registry.db'}"}
    return env | ({"KET_DATABASE_URL": url} if url else {})


@pytest.fixture
def app(tmp_path: Path) -> Path:
    """A migrated project with one function, app.echo."""
    root = write_project(tmp_path, APP)
    done = run_ket("migrate", cwd=root, env=_env(root))
    assert done.code == 0, done.err
    return root


async def _one_job(store: SqlStore) -> None:
    await store.job_insert([NewJob(name="app.ping", payload={"n": 1})])


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A migrated tenant database holding one job (id 1), on each store; its URL."""
    with fresh_database(request, tmp_path, _one_job) as url:
        yield url


# ket call: hostile JSON


@pytest.mark.parametrize(
    "text",
    ["[" * 60_000 + "]" * 60_000, '{"a":' * 5_000 + "1" + "}" * 5_000, "[" * 101],
    ids=["deep-array", "deep-object", "just-past-the-cap"],
)
def test_call_refuses_deeply_nested_json(app: Path, text: str) -> None:
    result = run_ket("call", "app.echo", text, cwd=app, env=_env(app))
    _usage_error(result, "levels deep, more than 100")
    assert text[:50] not in result.err  # named by its depth, never printed back


def test_call_accepts_json_nested_to_the_cap(app: Path) -> None:
    value = "[" * 99 + "]" * 99
    result = run_ket("call", "app.echo", f'{{"value": {value}}}', cwd=app, env=_env(app))
    assert result.code == 0, result.err
    assert result.out.count("[") == 99


def test_call_refuses_a_5000_digit_integer(app: Path) -> None:
    text = '{"value": 1' + "0" * 5_000 + "}"
    result = run_ket("call", "app.echo", text, cwd=app, env=_env(app))
    _usage_error(result, "Exceeds the limit (4300 digits)")
    assert '{"value": 1000' not in result.err  # named by its length, never printed back


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ('{"value": NaN}', "NaN is not a JSON number: line 1 column 11"),
        ('{"value": [1, -Infinity]}', "-Infinity is not a JSON number: line 1 column 15"),
        ('{"value": 1e400}', "overflows to infinity: line 1 column 11"),
    ],
    ids=["nan", "minus-infinity", "overflow"],
)
def test_call_refuses_numbers_json_has_not(app: Path, text: str, named: str) -> None:
    result = run_ket("call", "app.echo", text, cwd=app, env=_env(app))
    _usage_error(result, "input is not valid JSON (")
    assert f"{named}); hint: give a finite number, a string or null" in result.err
    assert "1e400" not in result.err  # named by its kind and position, never printed back


@pytest.mark.parametrize(
    ("call", "named"),
    [
        (("app.nosuch", "{}"), "--call: unknown function 'app.nosuch' in deployment 'main'"),
        (("app.echo", '{"n": 1}'), "--call: invalid input for app.echo: value: Field required"),
    ],
    ids=["unknown-function", "refused-input"],
)
def test_dev_refuses_a_call_it_cannot_make_before_starting(
    app: Path, call: tuple[str, str], named: str
) -> None:
    result = run_ket("dev", "--call", *call, cwd=app, env=_env(app))  # before: ran until killed
    _usage_error(result, named)


def test_call_runs_for_the_company_given_and_refuses_a_bad_one(app: Path) -> None:
    done = run_ket("call", "app.echo", '{"value": 1}', "--company", "north", cwd=app, env=_env(app))
    assert (done.code, json.loads(done.out)) == (0, {"value": 1, "company": "north"}), done.err
    plain = run_ket("call", "app.echo", '{"value": 1}', cwd=app, env=_env(app))
    assert json.loads(plain.out) == {"value": 1, "company": None}
    for bad in ("", " north", "x" * 501):
        result = run_ket("call", "app.echo", "{}", "--company", bad, cwd=app, env=_env(app))
        _usage_error(result, "a company must be 1 to 500 characters")


def test_call_brackets_inside_strings_do_not_count_as_nesting(app: Path) -> None:
    text = '{"value": "' + "[" * 500 + '\\"]"}'
    result = run_ket("call", "app.echo", text, cwd=app, env=_env(app))
    assert result.code == 0, result.err


# ids, limits and offsets past 64 bits


@pytest.mark.parametrize(
    ("argv", "value"),
    [
        (["show", str(BIG)], str(BIG)),
        (["show", "-1"], "-1"),
        (["show", "0"], "0"),
        (["retry", str(2**64)], str(2**64)),
        (["cancel", "9" * 5_000], "9" * 50),
        (["show", "\u0661\u0662"], "\u0661\u0662"),
        (["show", " 7"], "' 7'"),
        (["list", "--limit", str(BIG)], str(BIG)),
        (["list", "--limit", "0"], "0"),
        (["list", "--offset", str(BIG)], str(BIG)),
        (["list", "--offset", "-1"], "-1"),
        (["prune", "--older-than", "99999999999999999999d"], "99999999999999999999d"),
        (["prune", "--older-than", "9" * 5_000 + "d"], "9" * 50),
        # a dash and a digit: argparse took it for an option ("expected one argument")
        (["prune", "--older-than", "-1d"], "-1d"),
        (["list", "--limit", "-5x"], "-5x"),
    ],
    ids=lambda v: str(v)[:30],
)
def test_jobs_refuses_numbers_out_of_range(
    tmp_path: Path, database: str, argv: list[str], value: str
) -> None:
    result = run_ket("jobs", *argv, "--database-url", database, cwd=tmp_path, env=_env(tmp_path))
    _usage_error(result, value)
    assert (
        f"from 1 to {MAX}" in result.err
        or f"from 0 to {MAX}" in result.err
        or "at most 36500d (a century)" in result.err
        or "expected a duration such as 12h or 30d" in result.err
    )


def test_jobs_takes_the_largest_id_limit_and_offset_on_each_store(
    tmp_path: Path, database: str
) -> None:
    url = ["--database-url", database]
    env = _env(tmp_path)
    shown = run_ket("jobs", "show", str(MAX), *url, cwd=tmp_path, env=env)
    assert (shown.code, shown.err) == (1, f"ket: no job {MAX}\n")
    retried = run_ket("jobs", "retry", str(MAX), *url, cwd=tmp_path, env=env)
    assert (retried.code, retried.err) == (1, f"ket: job {MAX}: no such job\n")
    page = run_ket("jobs", "list", "--limit", str(MAX), "--offset", str(MAX), *url, cwd=tmp_path)
    assert (page.code, page.out) == (0, "no jobs\n"), page.err
    whole = run_ket("jobs", "list", "--limit", str(MAX), *url, cwd=tmp_path, env=env)
    assert whole.code == 0, whole.err
    assert "app.ping" in whole.out  # nothing was lost or changed by the refusals


# transport URLs


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("smtp://user:secret@[::1", "'smtp://***@[::1' (Invalid IPv6 URL)"),
        ("smtp://mail.example.com:99999", "'smtp://mail.example.com:99999' has an invalid port"),
        ("smtp://mail.example.com:25x", "'smtp://mail.example.com:25x' has an invalid port"),
        ("smtps://user:secret@mail.example.com:-1", "'smtps://user:***@mail.example.com:-1'"),
        ("smtp://user:secret@mail.example.com:9" + "9" * 5_000, "has an invalid port"),
        ("nope://[::1", "unknown transport URL 'nope://[::1'"),
    ],
)
def test_malformed_transport_urls_are_refused_naming_them(url: str, shown: str) -> None:
    with pytest.raises(TransportError) as raised:
        sender_from_url(url)
    assert shown in raised.value.message
    assert "secret" not in raised.value.message


def test_call_with_a_malformed_transport_url_is_a_message(app: Path) -> None:
    env = _env(app) | {"KET_TRANSPORT_URL": "smtp://user:secret@[::1"}
    result = run_ket("call", "app.echo", '{"value": 1}', cwd=app, env=env)
    _usage_error(result, "malformed transport URL 'smtp://***@[::1'")
    assert "secret" not in result.err


def test_call_with_an_s3_endpoint_url_carrying_a_query_is_a_message_without_it(
    app: Path,
) -> None:
    storage = "s3://invoices?endpoint_url=https://minio.local:9000/?X-Amz-Signature=sig-8Jd3"
    result = run_ket(
        "call", "app.echo", '{"value": 1}', cwd=app, env=_env(app) | {"KET_STORAGE_URL": storage}
    )
    _usage_error(
        result,
        "malformed storage URL 's3://invoices?endpoint_url=***': endpoint_url takes no query",
    )
    assert "sig-8Jd3" not in result.err


def test_worker_with_a_malformed_port_is_a_message(app: Path) -> None:
    env = _env(app) | {"KET_TRANSPORT_URL": "smtp://mail.example.com:65536"}
    result = run_ket("worker", cwd=app, env=env)
    _usage_error(result, "'smtp://mail.example.com:65536' has an invalid port")


# odd files


def test_manifest_output_to_a_folder_is_refused(app: Path) -> None:
    result = run_ket("manifest", "-o", str(app), cwd=app, env=_env(app))
    _usage_error(result, f"cannot write {str(app)!r}: it is a folder")


def test_manifest_output_never_replaces_a_device(app: Path) -> None:
    result = run_ket("manifest", "-o", "/dev/null", cwd=app, env=_env(app))
    _usage_error(result, "cannot write '/dev/null': it is not a regular file")
    assert stat.S_ISCHR(Path("/dev/null").stat().st_mode)


def test_manifest_output_into_a_missing_folder_is_refused(app: Path) -> None:
    target = app / "absent" / "erp.yaml"
    result = run_ket("manifest", "-o", str(target), cwd=app, env=_env(app))
    _usage_error(result, f"folder {str(app / 'absent')!r} does not exist")


def test_manifest_output_in_a_read_only_folder_is_refused(app: Path) -> None:
    target = Path("/proc/version")  # a folder no one can create files in, even root
    result = run_ket("manifest", "-o", str(target), cwd=app, env=_env(app))
    assert result.code == 2, result.err
    assert "cannot write '/proc/version'" in result.err
    assert "Traceback" not in result.err


def test_workspace_that_is_a_device_or_a_folder_is_refused(app: Path) -> None:
    for spec in ("/dev/zero", str(app), f"{app}/\udcff.py"):
        result = run_ket("check", "--workspace", spec, cwd=app, env=_env(app))
        assert result.code == 2, result.err
        assert "does not exist" in result.err
        assert "Traceback" not in result.err


# the last resort


def _crashing(args: object) -> int:
    raise RuntimeError("boom\x1b[2J\nket: error: forged")


def test_unexpected_error_is_one_escaped_line_with_a_hint(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(manifest_command, "run", _crashing)
    monkeypatch.delenv("KET_DEBUG", raising=False)
    assert main(["manifest"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        "ket: error: unexpected RuntimeError: boom\\x1b[2J\\nket: error: forged (this is a bug; "
        "rerun with --debug or KET_DEBUG=1 to see its traceback)\n"
    )


@pytest.mark.parametrize("how", ["--debug", "KET_DEBUG=1"])
def test_debug_shows_the_traceback_of_an_unexpected_error(
    monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    monkeypatch.setattr(manifest_command, "run", _crashing)
    monkeypatch.delenv("KET_DEBUG", raising=False)
    if how == "KET_DEBUG=1":
        monkeypatch.setenv("KET_DEBUG", "1")
    with pytest.raises(RuntimeError, match="boom"):
        main([*(["--debug"] if how == "--debug" else []), "manifest"])
