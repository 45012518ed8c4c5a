"""Secrets never shown: secret input fields stay out of `ket jobs show`, the worker's log, the
error history, the client's errors and the manifest; sealed at rest with KET_SECRET_KEYS, keys
rotate, and a job no key opens is discarded naming it.

Each test also proves the secret was there to leak (the handler received it, the raw row holds
it in clear without keys), so none of them passes for want of a secret.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
import time
import traceback
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml
from cryptography.fernet import Fernet
from pydantic import ValidationError
from sqlalchemy import create_engine, make_url

from ket import define_deployment, define_job, define_module, open_async_client, open_client
from ket.errors import StoreError
from ket.store.sql import SqlStore
from ket.testing import create_test_deployment
from tests.acceptance.conftest import run_ket

from ..processes import terminated

SECRET = "sk-live-7Qe2Xw9"
ACCOUNT = "ACCT-1234-5678"
KEY_A, KEY_B = Fernet.generate_key().decode(), Fernet.generate_key().decode()

APP = """
import os
import re
from pathlib import Path
from pydantic import BaseModel, SecretStr
from ket import define_deployment, define_function, define_job, define_module

class Charge(BaseModel):
    account: str
    card: SecretStr
    pin: SecretStr = SecretStr("pin-default-0000")

def use(ctx, input):
    key = input.api_key.get_secret_value()
    with open(os.environ["SEEN_FILE"], "a") as seen:   # proof the handler got the secret
        seen.write(key + "\\n")
    raise RuntimeError(f"provider refused key {key} for account ACCT-1234-5678")

def charge(ctx, input):
    pass

def sign(ctx, input):
    key = input.api_key.get_secret_value()
    with open(os.environ["SEEN_FILE"], "a") as seen:   # proof the function got the secret
        seen.write(key + "\\n")
    raise RuntimeError(f"signer refused key {key} for account ACCT-1234-5678")

vault = define_module(name="vault", functions={
    "sign": define_function(input={"api_key": "secret"}, handler=sign),
}, jobs={
    "use": define_job(
        idempotent=True, max_attempts=1, input={"api_key": "secret", "account": "string"},
        handler=use,
    ),
    "charge": define_job(idempotent=True, input=Charge, handler=charge),
})
main = define_deployment(
    name="main", modules=[vault], worker={"queues": {"default": 2}, "poll_min_ms": 10},
    redact=lambda text: re.sub(r"ACCT-\\d{4}-\\d{4}", "ACCT-****", text),
)
"""


async def _migrate(url: str) -> None:
    store = await SqlStore.open(url, migrate=True)
    await store.close()


@pytest.fixture
def database(tenant_database: str) -> str:
    """A migrated, empty tenant database on each store (tests/conftest.py)."""
    return tenant_database


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A project folder whose pyproject.toml points at app/workspace.py, holding APP."""
    folder = tmp_path / "project"
    (folder / "app").mkdir(parents=True)
    (folder / "pyproject.toml").write_text('[tool.ket]\nworkspace = "app/workspace.py"\n')
    (folder / "app" / "__init__.py").write_text("")
    (folder / "app" / "workspace.py").write_text(APP)
    return folder


def _env(root: Path, url: str, keys: str | None = None) -> dict[str, str]:
    env = {
        "KET_REGISTRY_URL": f"sqlite:///{root / 'registry.db'}",
        "KET_DATABASE_URL": url,
        "SEEN_FILE": str(root / "seen.txt"),
    }
    return env | ({"KET_SECRET_KEYS": keys} if keys else {})


def _vault() -> Any:
    """The project's deployment, loaded in this process as the app producing jobs would."""
    from ket.workspace import load_deployment

    return load_deployment(None, None)


def _enqueue(
    root: Path, url: str, monkeypatch: pytest.MonkeyPatch, keys: str | None = None, **input: Any
) -> int:
    monkeypatch.chdir(root)
    for name, value in _env(root, url, keys).items():
        monkeypatch.setenv(name, value)
    if keys is None:
        monkeypatch.delenv("KET_SECRET_KEYS", raising=False)
    with open_client(_vault(), database_url=url) as client:
        inserted = client.enqueue("vault.use", {"api_key": SECRET, "account": "acme", **input})
    return inserted.id


def _raw_payloads(url: str) -> list[str]:
    """The payload column as the database holds it, text as stored."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        with sqlite3.connect(str(parsed.database)) as connection:
            rows = connection.execute("SELECT payload FROM ket_jobs ORDER BY id").fetchall()
        return [str(row[0]) for row in rows]
    with psycopg.connect(parsed.set(drivername="postgresql").render_as_string(False)) as conn:
        rows = conn.execute("SELECT payload::text FROM ket_jobs ORDER BY id").fetchall()
    return [str(row[0]) for row in rows]


def _job_count(url: str) -> int:
    return len(_raw_payloads(url))


# -- ket call ---------------------------------------------------------------------------------


def test_ket_call_shows_a_functions_failure_without_its_secret_input_and_through_the_hook(
    root: Path, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'tenant.db'}"
    asyncio.run(_migrate(url))
    called = run_ket(
        "call", "vault.sign", json.dumps({"api_key": SECRET}), cwd=root, env=_env(root, url)
    )
    assert called.code == 1, called.err
    assert (root / "seen.txt").read_text() == SECRET + "\n"  # the function had it to leak
    assert "vault.sign raised" in called.err
    assert "RuntimeError: signer refused key *** for account ACCT-****" in called.err
    assert SECRET not in called.out + called.err
    assert ACCOUNT not in called.out + called.err


@pytest.mark.parametrize(
    ("text", "named"),
    [
        (
            f'{{"api_key": "{SECRET}", oops}}',
            "(Expecting property name enclosed in double quotes: line 1 column 32)",
        ),
        (f'{{"api_key": "{SECRET}', "(Unterminated string starting at: line 1 column 13)"),
        (f'["{SECRET}"]', "must be a JSON object, got an array"),
        (f'"{SECRET}"', "must be a JSON object, got a string"),
        (f'{{"api_key": "{SECRET}", "n": {"[" * 101}{"]" * 101}}}', "nested 102 levels deep"),
        (f'{{"api_key": "{SECRET}", "n": 1{"0" * 5_000}}}', "Exceeds the limit (4300 digits)"),
    ],
    ids=["invalid", "unterminated", "array", "string", "deep", "long-number"],
)
def test_ket_call_names_what_is_wrong_with_input_it_cannot_read_without_echoing_it(
    root: Path, tmp_path: Path, text: str, named: str
) -> None:
    url = f"sqlite:///{tmp_path / 'unused.db'}"  # refused before a database is opened
    called = run_ket("call", "vault.sign", text, cwd=root, env=_env(root, url))
    assert called.code == 2, called.err
    assert "Traceback" not in called.err
    assert "ket: error: input " in called.err and named in called.err
    assert SECRET not in called.out + called.err
    assert not (root / "seen.txt").exists()


# -- ket jobs show ---------------------------------------------------------------------------


@pytest.mark.parametrize("keys", [None, KEY_A], ids=["clear", "sealed"])
def test_jobs_show_prints_a_secret_field_as_stars_in_text_and_json(
    database: str, root: Path, monkeypatch: pytest.MonkeyPatch, keys: str | None
) -> None:
    job_id = _enqueue(root, database, monkeypatch, keys)
    [raw] = _raw_payloads(database)
    assert (SECRET in raw) is (keys is None)  # in clear without keys: there was one to leak
    env = _env(root, database)  # the operator's shell need not hold the keys
    text = run_ket("jobs", "show", str(job_id), cwd=root, env=env)
    assert text.code == 0, text.err
    assert 'payload:      {"account": "acme", "api_key": "***"}' in text.out
    shown = run_ket("jobs", "show", str(job_id), "--format", "json", cwd=root, env=env)
    assert json.loads(shown.out)["payload"] == {"account": "acme", "api_key": "***"}
    assert SECRET not in text.out + text.err + shown.out + shown.err


# -- a real worker's log and the error history -----------------------------------------------


def test_a_worker_run_logs_and_stores_no_secret_and_no_redacted_account(
    database: str, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_id = _enqueue(root, database, monkeypatch)
    environment = {k: v for k, v in os.environ.items() if not k.startswith("KET_")}
    environment |= _env(root, database)
    worker = subprocess.Popen(
        [sys.executable, "-m", "ket.cli.main", "worker", "--log-level", "DEBUG"],
        cwd=root,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        _wait_for(lambda: _state(root, database, job_id) == "discarded")
        log = terminated(worker)
    finally:
        worker.kill()
    assert (root / "seen.txt").read_text() == SECRET + "\n"  # the handler did get the secret
    expected = "RuntimeError: provider refused key *** for account ACCT-****"
    assert expected in log  # the WARNING line of the discard, redacted
    assert SECRET not in log
    assert ACCOUNT not in log
    shown = run_ket("jobs", "show", str(job_id), cwd=root, env=_env(root, database))
    assert f"{expected} (attempt 1 of 1: giving up)" in shown.out
    assert "Traceback" in shown.out  # the traceback is kept, redacted too
    assert SECRET not in shown.out
    assert ACCOUNT not in shown.out


def _state(root: Path, url: str, job_id: int) -> str:
    shown = run_ket("jobs", "show", str(job_id), "--format", "json", cwd=root, env=_env(root, url))
    return str(json.loads(shown.out)["state"]) if shown.code == 0 else shown.err


def _wait_for(predicate: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError("condition not reached in time")


# -- the client's errors ---------------------------------------------------------------------


def _refuse_inserts(url: str) -> None:
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        with sqlite3.connect(str(parsed.database)) as connection:
            connection.execute(
                "CREATE TRIGGER refuse BEFORE INSERT ON ket_jobs "
                "BEGIN SELECT RAISE(ABORT, 'inserts are refused'); END"
            )
        return
    with psycopg.connect(parsed.render_as_string(False), autocommit=True) as connection:
        connection.execute(
            "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN RAISE EXCEPTION 'inserts are refused'; END $$"
        )
        connection.execute(
            "CREATE TRIGGER refuse BEFORE INSERT ON ket_jobs FOR EACH ROW EXECUTE FUNCTION refuse()"
        )


def _everything(error: BaseException) -> str:
    """All a logger could print of `error`: its text, its chain, its traceback."""
    return "".join(traceback.format_exception(error))


def test_a_failing_insert_raises_a_ket_error_that_carries_no_payload(
    database: str, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _enqueue(root, database, monkeypatch)  # works, and stores the secret in clear (no keys)
    assert SECRET in _raw_payloads(database)[0]
    _refuse_inserts(database)
    vault = _vault()
    failures: list[BaseException] = []
    with open_client(vault, database_url=database) as client:
        with pytest.raises(StoreError) as own:
            client.enqueue("vault.use", {"api_key": SECRET, "account": "acme"})
        failures.append(own.value)
        # in the application's own transaction, on an engine that quotes parameters in errors
        engine = create_engine(make_url(database).set(drivername=_sync_driver(database)))
        with pytest.raises(StoreError) as app, engine.begin() as connection:
            client.enqueue("vault.use", {"api_key": SECRET, "account": "a"}, connection=connection)
        engine.dispose()
        failures.append(app.value)

    async def async_enqueue() -> None:
        client = await open_async_client(vault, database_url=database)
        try:
            await client.aenqueue_many([("vault.use", {"api_key": SECRET, "account": "b"})])
        finally:
            await client.aclose()

    with pytest.raises(StoreError) as asynchronous:
        asyncio.run(async_enqueue())
    failures.append(asynchronous.value)
    for failure in failures:
        assert "inserts are refused" in str(failure)
        assert SECRET not in _everything(failure)
        assert failure.__cause__ is None
    assert _job_count(database) == 1  # nothing written


def _sync_driver(url: str) -> str:
    return "sqlite" if url.startswith("sqlite") else "postgresql+psycopg"


@pytest.mark.parametrize(
    "input",
    [
        {"api_key": 987654321987, "account": "acme"},  # a secret of the wrong type
        {"api_key": "k", "account": "acme", "apikey": "987654321987"},  # a misspelt field
    ],
)
def test_refused_input_with_a_secret_field_never_quotes_the_values(
    root: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, input: dict[str, Any]
) -> None:
    url = f"sqlite:///{tmp_path / 'unused.db'}"
    (tmp_path / "unused.db").touch()  # a client needs the database to exist: the input is
    monkeypatch.chdir(root)  # refused before its tables are reached
    with (
        open_client(_vault(), database_url=url) as client,
        pytest.raises(ValidationError) as refused,
    ):
        client.enqueue("vault.use", input)
    assert "987654321987" not in _everything(refused.value)
    assert "api" in str(refused.value)  # the field is still named


# -- the manifest and ket diff ---------------------------------------------------------------


def test_the_manifest_marks_secret_fields_and_holds_no_secret_default(root: Path) -> None:
    done = run_ket("manifest", cwd=root)
    assert done.code == 0, done.err
    manifest = yaml.safe_load(done.out)
    jobs = manifest["modules"]["vault"]["jobs"]
    api_key = jobs["use"]["input"]["properties"]["api_key"]
    assert (api_key["writeOnly"], api_key["format"]) == (True, "password")
    pin = jobs["charge"]["input"]["properties"]["pin"]
    assert (pin["writeOnly"], pin["default"]) == (True, "**********")
    assert "pin-default-0000" not in done.out


def test_ket_diff_calls_a_field_becoming_secret_safe_and_losing_it_review(
    root: Path, tmp_path: Path
) -> None:
    current = run_ket("manifest", cwd=root).out
    manifest = yaml.safe_load(current)
    api_key = manifest["modules"]["vault"]["jobs"]["use"]["input"]["properties"]["api_key"]
    del api_key["writeOnly"], api_key["format"]  # as it was when api_key was a "string"
    (tmp_path / "plain.yaml").write_text(yaml.safe_dump(manifest, sort_keys=True))
    (tmp_path / "secret.yaml").write_text(current)
    became = run_ket("diff", str(tmp_path / "plain.yaml"), "--format", "json", cwd=root)
    assert became.code == 0, became.err
    assert _kinds(became.out) == {("input_field_secret", "safe", "job vault.use")}
    old, new = str(tmp_path / "secret.yaml"), str(tmp_path / "plain.yaml")
    lost = run_ket("diff", old, new, "--format", "json", cwd=root)
    assert lost.code == 0, lost.err
    assert _kinds(lost.out) == {("input_field_not_secret", "review", "job vault.use")}


def _kinds(output: str) -> set[tuple[str, str, str]]:
    return {(c["kind"], c["severity"], c["subject"]) for c in json.loads(output)["changes"]}


# -- sealed at rest, and key rotation --------------------------------------------------------

seen: list[str] = []


async def _remember(ctx: Any, input: Any) -> None:
    seen.append(input.api_key.get_secret_value())


ROTATING = define_deployment(
    name="rotating",
    modules=[
        define_module(
            name="vault",
            jobs={
                "use": define_job(idempotent=True, input={"api_key": "secret"}, handler=_remember)
            },
        )
    ],
)


def _produce(
    url: str, keys: str, monkeypatch: pytest.MonkeyPatch, secret: str, run_at: Any = None
) -> int:
    monkeypatch.setenv("KET_SECRET_KEYS", keys)
    with open_client(ROTATING, database_url=url) as client:
        return client.enqueue("vault.use", {"api_key": secret}, run_at=run_at).id


def test_sealed_secrets_rotate_old_jobs_run_and_a_dropped_key_discards_naming_the_job(
    database: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("KET_REGISTRY_URL", f"sqlite:///{tmp_path / 'registry.db'}")
    seen.clear()
    later = datetime.now(UTC) + timedelta(hours=1)
    first = _produce(database, KEY_A, monkeypatch, "secret-under-a-1")
    stranded = _produce(database, KEY_A, monkeypatch, "secret-under-a-2", run_at=later)
    second = _produce(database, f"{KEY_B},{KEY_A}", monkeypatch, "secret-under-b-3")
    rows = _raw_payloads(database)
    assert not any("secret-under" in row for row in rows)  # sealed at rest
    tokens = [json.loads(row)["api_key"]["$sealed"] for row in rows]
    Fernet(KEY_A.encode()).decrypt(tokens[0].encode())  # A sealed the old ones
    Fernet(KEY_B.encode()).decrypt(tokens[2].encode())  # B, the new first key, the new one
    with create_test_deployment(ROTATING, database_url=database) as e2e:  # keys still "B,A"
        assert e2e.drain_jobs() == 2
        assert sorted(seen) == ["secret-under-a-1", "secret-under-b-3"]
        assert {j.id: j.state for j in e2e.jobs()} == {
            first: "completed",
            second: "completed",
            stranded: "scheduled",
        }
    monkeypatch.setenv("KET_SECRET_KEYS", KEY_B)  # A dropped while a job it sealed still waits
    with create_test_deployment(ROTATING, database_url=database) as e2e:
        e2e.clock.advance(hours=2)
        assert e2e.drain_jobs() == 0
        [job] = [j for j in e2e.jobs() if j.id == stranded]
        assert (job.state, job.attempt) == ("discarded", 1)
        assert [e.error for e in job.errors] == [
            f"job {stranded}: cannot open its secret input: input field 'api_key': it opens "
            "with none of the 1 keys in KET_SECRET_KEYS; was the key that sealed it removed?"
        ]
    assert "secret-under-a-2" not in seen


# -- the redact hook -------------------------------------------------------------------------


async def _fails_quoting(ctx: Any, input: Any) -> None:
    raise RuntimeError(f"refused {input.note} with key {input.api_key.get_secret_value()}")


def _redact_or_explode(text: str) -> str:
    if "EXPLODE" in text:
        raise ValueError(text)  # a hook with a bug; its message quotes the text
    return text.replace("card 4111", "card <card>")


HOOKED = define_deployment(
    name="hooked",
    modules=[
        define_module(
            name="vault",
            jobs={
                "fail": define_job(
                    idempotent=True,
                    input={"api_key": "secret", "note": "string"},
                    handler=_fails_quoting,
                )
            },
        )
    ],
    redact=_redact_or_explode,
)


def test_a_raising_redact_hook_never_stops_outcomes_being_recorded(
    database: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("KET_REGISTRY_URL", f"sqlite:///{tmp_path / 'registry.db'}")
    monkeypatch.delenv("KET_SECRET_KEYS", raising=False)
    with create_test_deployment(HOOKED, database_url=database) as e2e:
        notes = ["card 4111", "EXPLODE card 4111", "card 4111 again"]
        ids = [e2e.enqueue("vault.fail", {"api_key": SECRET, "note": n}).id for n in notes]
        assert e2e.drain_jobs() == 0
        jobs = {job.id: job for job in e2e.jobs()}
    assert [jobs[i].state for i in ids] == ["retryable"] * 3  # every outcome was recorded
    assert [jobs[i].errors[0].error for i in ids] == [
        "RuntimeError: refused card <card> with key ***",
        "RuntimeError (redaction failed)",
        "RuntimeError: refused card <card> again with key ***",
    ]
    assert jobs[ids[1]].errors[0].traceback == (
        "(the traceback of RuntimeError is withheld: redaction failed)"
    )
    history = str([jobs[i].errors for i in ids])
    assert SECRET not in history
    assert "4111" not in history


def test_a_malformed_key_stops_the_worker_at_start_naming_its_position_not_its_value(
    root: Path, tmp_path: Path
) -> None:
    env = _env(root, f"sqlite:///{tmp_path / 'tenant.db'}", keys=f"{KEY_A},sk-not-a-fernet-key")
    done = run_ket("worker", cwd=root, env=env)
    assert done.code == 2
    assert done.err == (
        "ket: error: KET_SECRET_KEYS: key 2 of 2 is not a Fernet key (32 url-safe "
        "base64-encoded bytes, as Fernet.generate_key() makes)\n"
    )
    assert not (tmp_path / "tenant.db").exists()  # it stopped before touching any database
