"""The catalog builds every job the same way: secret input fields sealed (or marked) in the
payload, validation errors that never quote a secret, and the handler's input opened back."""

from __future__ import annotations

from typing import Any

import pytest
from cryptography.fernet import Fernet
from pydantic import BaseModel, SecretStr, ValidationError, field_validator

from ket import define_deployment, define_function, define_job, define_module
from ket.catalog import Catalog, EnqueueOptions, UpgradeFailed, validate_input
from ket.declare import flow
from ket.errors import JobRejected, SecretKeyError
from ket.store.types import JOB_STATES, JobLimits, Rate, Window

KEY = Fernet.generate_key().decode()


def handler(ctx: Any, input: Any) -> None:
    """A handler."""


class Card(BaseModel):
    holder: str
    number: SecretStr

    @field_validator("holder")
    @classmethod
    def known_holder(cls, value: str) -> str:
        if value == "{unknown}":
            raise ValueError("holder {unknown} is not on file")
        return value


MODULE = define_module(
    name="v",
    jobs={
        "use": define_job(
            idempotent=True, input={"api_key": "secret", "n": "int"}, handler=handler
        ),
        "plain": define_job(idempotent=True, input={"n": "int"}, handler=handler),
        "bare": define_job(idempotent=True, handler=handler),
    },
    functions={"charge": define_function(input=Card, handler=handler)},
)
DEPLOYMENT = define_deployment(name="vault", modules=[MODULE])


def catalog(keys: str = "") -> Catalog:
    return Catalog.build(DEPLOYMENT, environ={"KET_SECRET_KEYS": keys})


def test_without_keys_a_secret_is_stored_marked_and_in_clear() -> None:
    job = catalog().new_job("v.use", {"api_key": "sk-1234", "n": 1})
    assert job.payload == {"api_key": {"$secret": "sk-1234"}, "n": 1}


def test_with_keys_a_secret_is_sealed_and_opens_back_for_the_handler() -> None:
    sealed = catalog(KEY)
    job = sealed.new_job("v.use", {"api_key": "sk-1234", "n": 1})
    assert "sk-1234" not in str(job.payload)
    value, secrets = sealed.job_input(sealed.jobs["v.use"], dict(job.payload))  # as stored
    assert value.api_key.get_secret_value() == "sk-1234"  # type: ignore[attr-defined]
    assert secrets == ["sk-1234"]


def test_a_job_without_secret_fields_keeps_its_plain_payload() -> None:
    assert catalog(KEY).new_job("v.plain", {"n": 1}).payload == {"n": 1}
    assert catalog(KEY).jobs["v.plain"].secret is False


@pytest.mark.parametrize(
    "input",
    [
        {"api_key": 98765432, "n": 1},  # a secret of the wrong type
        {"api_key": "k", "n": 1, "api_kye": "98765432"},  # misspelt, so an unknown field
        {"api_key": "k", "n": "98765432x"},  # a secret pasted into the wrong field
    ],
)
def test_refused_input_with_secret_fields_names_the_field_never_the_value(
    input: dict[str, Any],
) -> None:
    with pytest.raises(ValidationError) as refused:
        catalog().new_job("v.use", input)
    assert "98765432" not in str(refused.value)
    assert all(error["input"] is None for error in refused.value.errors())
    assert refused.value.__cause__ is None
    assert refused.value.__suppress_context__


def test_a_custom_validator_message_survives_without_the_input() -> None:
    spec = catalog().functions["v.charge"]
    with pytest.raises(ValidationError) as refused:
        validate_input(spec, {"holder": "{unknown}", "number": "4111-1111"})
    [error] = refused.value.errors()
    assert (error["loc"], error["msg"]) == (
        ("holder",),
        "Value error, holder {unknown} is not on file",
    )
    assert "4111" not in str(refused.value)


def test_refused_input_without_secret_fields_keeps_pydantics_message() -> None:
    with pytest.raises(ValidationError) as refused:
        catalog().new_job("v.plain", {"n": "many"})
    assert "input_value='many'" in str(refused.value)


@pytest.mark.parametrize("given", [None, {}])
def test_a_job_declared_without_input_stores_an_empty_payload(given: Any) -> None:
    job = catalog().new_job("v.bare", given)
    assert job.payload == {}
    assert job.payload is not catalog().new_job("v.bare").payload  # never shared between jobs


def test_a_job_declared_without_input_still_refuses_input() -> None:
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        catalog().new_job("v.bare", {"n": 1})


@pytest.mark.parametrize(
    ("job", "given", "named"),
    [
        ("v.plain", ["blob"], "got list; hint: pass a dict of its fields (n)"),
        ("v.use", "sk-live", "got str; hint: pass a dict of its fields (api_key, n)"),
        ("v.plain", [("n", 1)], "got list; hint: pass a dict of its fields (n)"),
        ("v.bare", [], "got list; hint: pass nothing: it declares no input"),
    ],
)
def test_input_that_is_no_mapping_is_refused_naming_the_job_and_its_type(
    job: str, given: Any, named: str
) -> None:
    with pytest.raises(JobRejected) as refused:
        catalog().new_job(job, given)
    assert (
        str(refused.value) == f"job {job!r}: input must be a mapping (or its input model), {named}"
    )
    assert "sk-live" not in str(refused.value)  # named by its type: it may hold a secret


def test_malformed_keys_stop_the_catalog_being_built() -> None:
    with pytest.raises(SecretKeyError, match="key 1 of 1 is not a Fernet key"):
        catalog("not-a-key")


def _versioned(**options: Any) -> Catalog:
    job = define_job(
        idempotent=True, input={"a": "int", "b": "int", "c": "int"}, handler=handler, **options
    )
    return Catalog.build(
        define_deployment(name="d", modules=[define_module(name="v", jobs={"up": job})])
    )


def test_an_enqueued_job_carries_its_input_version() -> None:
    catalog = _versioned(input_version=3, upgrade={2: dict})
    assert catalog.new_job("v.up", {"a": 1, "b": 2, "c": 3}).payload_version == 3


def test_an_old_payload_goes_through_each_upgrade_in_turn() -> None:
    steps: list[int] = []

    def step(version: int, field: str) -> Any:
        def upgrade(payload: dict[str, Any]) -> dict[str, Any]:
            steps.append(version)
            return {**payload, field: len(steps)}

        return upgrade

    catalog = _versioned(input_version=3, upgrade={1: step(1, "b"), 2: step(2, "c")})
    spec = catalog.jobs["v.up"]
    value, _ = catalog.job_input(spec, {"a": 0}, 1)
    assert (value.a, value.b, value.c, steps) == (0, 1, 2, [1, 2])  # type: ignore[attr-defined]
    value, _ = catalog.job_input(spec, {"a": 0, "b": 5}, 2)
    assert (value.b, value.c, steps) == (5, 3, [1, 2, 2])  # type: ignore[attr-defined]


def test_an_upgrade_that_returns_no_dict_fails_naming_the_job_and_version() -> None:
    catalog = _versioned(input_version=2, upgrade={1: lambda payload: None})
    with pytest.raises(UpgradeFailed) as failed:
        catalog.job_input(catalog.jobs["v.up"], {"a": 0}, 1)
    assert str(failed.value.error) == (
        "the upgrade of v.up from input version 1 returned NoneType, not a dict"
    )


TAGGED = define_deployment(
    name="tagged",
    modules=[
        define_module(
            name="t",
            jobs={"send": define_job(idempotent=True, tags=["billing"], handler=handler)},
        )
    ],
)


def test_a_job_carries_its_declared_tags_unless_the_enqueue_gives_its_own() -> None:
    tagged = Catalog.build(TAGGED, environ={})
    assert tagged.new_job("t.send").tags == ("billing",)
    assert tagged.new_job("t.send", None, EnqueueOptions(tags=[" eu ", "urgent", "eu"])).tags == (
        "eu",
        "urgent",
    )
    assert tagged.new_job("t.send", None, EnqueueOptions(tags=[])).tags == ()


@pytest.mark.parametrize(("tags", "named"), [("eu", "'eu'"), ([1], "got 1"), ([""], "got ''")])
def test_bad_tags_at_enqueue_are_refused_naming_the_job_and_the_value(
    tags: Any, named: str
) -> None:
    with pytest.raises(JobRejected) as refused:
        Catalog.build(TAGGED, environ={}).new_job("t.send", None, EnqueueOptions(tags=tags))
    assert "job 't.send'" in str(refused.value) and named in str(refused.value)


def test_enqueue_options_of_an_item_refuse_a_name_they_do_not_know() -> None:
    # the third member of an enqueue_many item, as every enqueue path reads it
    assert EnqueueOptions.of("t.send", None) is EnqueueOptions.of("t.send", {})
    assert EnqueueOptions.of("t.send", {"priority": 3}) == EnqueueOptions(priority=3)
    with pytest.raises(JobRejected, match=r"job 't.send': unknown enqueue options \['prio'\]"):
        EnqueueOptions.of("t.send", {"prio": 3})


def test_options_given_as_none_are_the_plain_enqueue() -> None:
    tagged = Catalog.build(TAGGED, environ={})
    assert EnqueueOptions.given() is EnqueueOptions.given(tags=None)
    # the plain enqueue of a job without input is built once and reused
    assert tagged.new_job("t.send", None, EnqueueOptions.given()) is tagged.new_job("t.send")


async def _noop(ctx: Any, input: Any) -> None:
    return None


def test_a_declared_expiry_goes_on_every_job_and_an_enqueue_s_replaces_it() -> None:
    app = define_deployment(
        name="main",
        modules=[
            define_module(
                name="t",
                jobs={"code": define_job(idempotent=True, expires_in="10m", handler=_noop)},
            )
        ],
    )
    catalog = Catalog.build(app, environ={})
    assert catalog.new_job("t.code").expires_in_seconds == 600.0
    assert catalog.new_job("t.code", None, EnqueueOptions(expires_in="1h")).expires_in_seconds == (
        3600.0
    )


def test_a_limited_job_carries_its_keys_and_its_queue_s_claims_keep_its_limits() -> None:
    app = define_deployment(
        name="main",
        modules=[
            define_module(
                name="t",
                jobs={
                    "sync": define_job(
                        queue="partners",
                        input={"customer_id": "id", "region": "string?"},
                        idempotent=True,
                        concurrency_limit={"limit": 1, "key": ["customer_id", "region"]},
                        rate_limit={"limit": 20, "period": "1s"},
                        handler=_noop,
                    ),
                    "plain": define_job(queue="partners", idempotent=True, handler=_noop),
                    "other": define_job(idempotent=True, handler=_noop),
                },
            )
        ],
        worker={
            "queues": {
                "default": 1,
                "partners": {"concurrency": 4, "rate_limit": {"limit": 100, "period": "1m"}},
            }
        },
    )
    catalog = Catalog.build(app, environ={})
    job = catalog.new_job("t.sync", {"customer_id": "c1"})
    assert job.concurrency_key == 't.sync|["c1",null]'  # a missing value is a value too
    assert job.rate_key == "t.sync|[]"
    assert (catalog.new_job("t.plain").concurrency_key, catalog.new_job("t.plain").rate_key) == (
        None,
        None,
    )
    assert set(catalog.claim_limits) == {"partners"}
    limits = catalog.claim_limits["partners"]
    assert limits.jobs["t.sync"] == JobLimits(concurrency=1, rate=Rate(limit=20, period_seconds=1))
    assert (limits.concurrency, limits.rate) == (None, Rate(limit=100, period_seconds=60))


def _windowed_app() -> Any:
    return define_deployment(
        name="main",
        modules=[
            define_module(
                name="t",
                jobs={
                    "welcome": define_job(
                        input={"customer_id": "id", "plan": "string?"},
                        idempotent=True,
                        unique={"period": "1d", "key": ["customer_id"], "states": ["completed"]},
                        handler=_noop,
                    ),
                    "reindex": define_job(
                        input={"document_id": "id"},
                        idempotent=True,
                        debounce={"period": "30s", "max_wait": "5m"},
                        handler=_noop,
                    ),
                },
            )
        ],
    )


def test_a_windowed_job_is_keyed_by_its_fields_or_by_the_enqueue_s_unique_key() -> None:
    catalog = Catalog.build(_windowed_app(), environ={})
    job = catalog.new_job("t.welcome", {"customer_id": "c1", "plan": "pro"})
    assert (job.window_key, job.unique_key) == ('["c1"]', None)
    assert job.window == Window(seconds=86_400, states=("completed",))
    given = catalog.new_job("t.welcome", {"customer_id": "c1"}, EnqueueOptions(unique_key="vip"))
    # the enqueue's key takes the fields' place, under the window: no active-only unique key
    assert (given.window_key, given.unique_key) == ("vip", None)
    assert given.run_at is None and given.delay_seconds == 0  # a window does not delay


def test_a_debounced_job_runs_its_period_after_its_enqueue_s_run_time() -> None:
    catalog = Catalog.build(_windowed_app(), environ={})
    now = catalog.new_job("t.reindex", {"document_id": "d1"})
    assert (now.window_key, now.run_at, now.delay_seconds) == ("[]", None, 30.0)
    assert now.window == Window(seconds=30, debounce=True, max_wait_seconds=300)
    later = catalog.new_job("t.reindex", {"document_id": "d1"}, EnqueueOptions(run_in="1m"))
    assert (later.run_at, later.delay_seconds) == (None, 90.0)
    at = catalog.new_job(
        "t.reindex", {"document_id": "d1"}, EnqueueOptions(run_at="2026-12-24T09:00:00+01:00")
    )
    assert at.run_at is not None and at.run_at.isoformat() == "2026-12-24T09:00:30+01:00"


def test_the_states_a_window_may_name_are_the_store_s_job_states() -> None:
    # declaring never imports the store: the two lists are kept equal here
    assert flow.JOB_STATES == JOB_STATES
    assert set(flow.DEFAULT_UNIQUE_STATES) == set(JOB_STATES) - {"discarded", "cancelled"}
