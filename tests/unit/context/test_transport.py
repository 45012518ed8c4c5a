"""`ctx.transport`: effects, message checks, one send per key and tenant, failure and abort."""

from __future__ import annotations

import asyncio
import email
import email.policy
import email.utils
from collections.abc import Coroutine
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import pytest
from pydantic import BaseModel

from ket.catalog import OperationSpec
from ket.context import AbortSignal, Blocking, Transport
from ket.declare.effect import parse_effect
from ket.errors import Aborted, EffectError, MessageRejected, Retry
from ket.store import ManualClock
from ket.store.memory import MemoryDatabase, MemoryStore
from ket.transport import Address, CaptureSender, DevSender, Message

T = TypeVar("T")
START = datetime(2030, 1, 15, 12, 0, tzinfo=UTC)


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coroutine)


def operation(*effects: str, name: str = "sales.send_confirmation") -> OperationSpec:
    return OperationSpec(
        name=name,
        handler=lambda ctx, input: None,
        input_model=BaseModel,
        effects=frozenset(parse_effect(effect) for effect in effects),
        cross_company=False,
    )


def message(key: str = "sales.confirmation:o1", **changes: Any) -> dict[str, Any]:
    shape: dict[str, Any] = {
        "idempotency_key": key,
        "from": {"address": "orders@example.com", "name": "Orders"},
        "to": [{"address": "ann@example.com", "name": "Ann"}],
        "subject": "Order 1001",
        "text": "Your order 1001 is confirmed.",
    }
    shape.update(changes)
    return {name: value for name, value in shape.items() if value is not None}


class Setup:
    """One tenant's ledger (a memory database on a manual clock) and a capturing sender."""

    def __init__(self, *effects: str, tenant: str = "acme") -> None:
        self.clock = ManualClock(START)
        self.database = MemoryDatabase()
        self.sender = CaptureSender()
        self.tenant = tenant
        self.effects = effects or ("transport:send",)

    def transport(self, sender: Any = None, *, abort_grace: float = 0.05) -> Transport:
        """A Transport on a new store handle of the same database: another worker, say."""
        return Transport(
            sender or self.sender,
            MemoryStore(self.database, clock=self.clock),
            operation(*self.effects),
            self.tenant,
            abort_grace_seconds=abort_grace,
        )


class FailingSender:
    """Fails the first `failures` sends with ConnectionError, then captures."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.captured = CaptureSender()

    async def send(self, message: Message, *, tenant: str) -> None:
        if self.failures:
            self.failures -= 1
            raise ConnectionError("relay refused the connection")
        await self.captured.send(message, tenant=tenant)


class SlowSender:
    """Takes `seconds` to send (forever by default), then fails or captures."""

    def __init__(self, seconds: float | None = None, *, fails: bool = False) -> None:
        self.started = asyncio.Event()
        self.seconds = seconds
        self.fails = fails
        self.captured = CaptureSender()

    async def send(self, message: Message, *, tenant: str) -> None:
        self.started.set()
        if self.seconds is None:
            await asyncio.Event().wait()  # forever
        else:
            await asyncio.sleep(self.seconds)
        if self.fails:
            raise TimeoutError("the relay stopped answering")
        await self.captured.send(message, tenant=tenant)


def abort_midway(transport: Transport, sender: SlowSender) -> Any:
    """Start a send, abort its signal once the sender is at work; the send's outcome."""

    async def scenario() -> Any:
        signal = AbortSignal()
        sending = asyncio.ensure_future(transport.send(message(), signal=signal))
        await sender.started.wait()
        signal.abort("timeout")
        try:
            return await sending
        except (Aborted, TimeoutError) as error:
            return error

    return run(scenario())


def test_a_message_is_sent_and_captured_as_given() -> None:
    setup = Setup()
    assert run(setup.transport().send(message(html="<p>Confirmed.</p>"))) is True
    assert setup.sender.sent == [message(html="<p>Confirmed.</p>")]
    assert setup.sender.sent_by("acme") == setup.sender.sent
    assert setup.sender.sent_by("globex") == []


def test_a_key_is_sent_once_across_two_transports_on_one_ledger() -> None:
    setup = Setup()

    async def scenario() -> list[bool]:
        first, second = setup.transport(), setup.transport()
        return [await first.send(message()), await second.send(message(subject="Again"))]

    assert run(scenario()) == [True, False]
    assert [m["subject"] for m in setup.sender.sent] == ["Order 1001"]


def test_a_sent_key_stays_sent_long_after_its_claim_would_go_stale() -> None:
    setup = Setup()
    run(setup.transport().send(message()))
    setup.clock.advance(days=30)
    assert run(setup.transport().send(message())) is False
    assert len(setup.sender.sent) == 1


def test_concurrent_sends_of_one_key_send_it_once() -> None:
    setup = Setup()

    async def scenario() -> list[bool | BaseException]:
        transports = [setup.transport() for _ in range(5)]
        return await asyncio.gather(
            *[t.send(message()) for t in transports], return_exceptions=True
        )

    outcomes = run(scenario())
    # one sends; the others see it sent (False) or still in flight (Retry: come back later)
    assert outcomes.count(True) == 1
    assert all(o is True or o is False or isinstance(o, Retry) for o in outcomes)
    assert len(setup.sender.sent) == 1


def test_the_same_key_in_two_tenants_is_two_messages() -> None:
    acme, globex = Setup(tenant="acme"), Setup(tenant="globex")
    shared = CaptureSender()
    assert run(acme.transport(shared).send(message())) is True
    assert run(globex.transport(shared).send(message())) is True
    assert len(shared.sent_by("acme")) == len(shared.sent_by("globex")) == 1


def test_a_failed_send_releases_the_key_so_a_retry_sends_it_once() -> None:
    setup = Setup()
    flaky = FailingSender(failures=1)
    with pytest.raises(ConnectionError, match="relay refused"):
        run(setup.transport(flaky).send(message()))
    assert flaky.captured.sent == []
    assert run(setup.transport(flaky).send(message())) is True
    assert run(setup.transport(flaky).send(message())) is False
    assert len(flaky.captured.sent) == 1


def test_send_without_the_transport_effect_raises_effect_error_and_claims_nothing() -> None:
    setup = Setup("read:sales.Order")
    with pytest.raises(EffectError) as raised:
        run(setup.transport().send(message()))
    assert str(raised.value) == (
        "sales.send_confirmation may not send messages: declare the effect 'transport:send'"
    )
    assert setup.sender.sent == []
    setup.effects = ("transport:send",)
    assert run(setup.transport().send(message())) is True  # the key was never claimed


@pytest.mark.parametrize("key", [None, "", "   ", 42, "k" * 501])
def test_a_message_without_a_usable_idempotency_key_is_rejected_naming_it(key: object) -> None:
    setup = Setup()
    given = message(key="placeholder")
    if key is None:
        del given["idempotency_key"]
    else:
        given["idempotency_key"] = key
    with pytest.raises(MessageRejected) as raised:
        run(setup.transport().send(given))
    assert "message with subject 'Order 1001' needs an idempotency_key" in str(raised.value)
    assert isinstance(raised.value, ValueError)
    assert setup.sender.sent == []


@pytest.mark.parametrize(
    ("changes", "complaint"),
    [
        ({"to": []}, "'to' must be a non-empty list"),
        ({"to": {"address": "ann@example.com"}}, "'to' must be a non-empty list"),
        ({"to": [{"address": "not-an-address"}]}, "'to[0]' address 'not-an-address'"),
        ({"to": [{"email": "ann@example.com"}]}, "'to[0]' must be {address, name?}"),
        ({"from": None}, "'from' must be {address, name?}"),
        ({"from": {"address": "a@b.c", "name": 7}}, "'from' needs a string address"),
        ({"subject": None}, "'subject' must be a string"),
        ({"subject": "Hi\r\nBcc: eve@example.com"}, "'subject' must be one line"),
        ({"text": b"bytes"}, "'text' must be a string"),
        ({"html": 1}, "'html' must be a string"),
        ({"body": "typo"}, "unknown fields ['body']"),
    ],
)
def test_the_message_shape_is_checked_before_anything_is_claimed(
    changes: dict[str, Any], complaint: str
) -> None:
    setup = Setup()
    with pytest.raises(MessageRejected) as raised:
        run(setup.transport().send(message(**changes)))
    assert "message 'sales.confirmation:o1'" in str(raised.value)
    assert complaint in str(raised.value)
    assert run(setup.transport().send(message())) is True  # nothing was claimed


def test_a_signal_aborted_before_sending_sends_nothing_and_keeps_the_key_free() -> None:
    setup = Setup()
    signal = AbortSignal()
    signal.abort("timeout")
    with pytest.raises(Aborted, match="timeout"):
        run(setup.transport().send(message(), signal=signal))
    assert setup.sender.sent == []
    assert run(setup.transport().send(message())) is True


def test_a_signal_aborted_while_claiming_releases_the_claim() -> None:
    setup = Setup()
    signal = AbortSignal()
    ledger = MemoryStore(setup.database, clock=setup.clock)
    transport = Transport(setup.sender, ledger, operation(*setup.effects), setup.tenant)
    real_claim = ledger.message_claim

    async def claim_then_abort(key: str, *, stale_after_seconds: float) -> bool:
        claimed = await real_claim(key, stale_after_seconds=stale_after_seconds)
        signal.abort("shutdown")
        return claimed

    ledger.message_claim = claim_then_abort  # type: ignore[method-assign]
    with pytest.raises(Aborted, match="shutdown"):
        run(transport.send(message(), signal=signal))
    assert setup.sender.sent == []
    assert run(setup.transport().send(message())) is True


def test_a_send_aborted_midway_keeps_its_claim_until_it_goes_stale() -> None:
    setup = Setup()
    stalled = SlowSender()
    outcome = abort_midway(setup.transport(stalled), stalled)
    assert isinstance(outcome, Aborted) and outcome.reason == "timeout"
    # the message may have gone out: no resend until the claim is stale (15 minutes); the
    # attempt that meets the live claim retries when it goes stale instead of giving up
    setup.clock.advance(minutes=14)
    with pytest.raises(Retry) as retry:
        run(setup.transport().send(message()))
    assert retry.value.in_seconds == 15 * 60
    setup.clock.advance(minutes=2)
    assert run(setup.transport().send(message())) is True
    assert len(setup.sender.sent) == 1


def test_a_signal_that_never_aborts_lets_the_send_finish() -> None:
    setup = Setup()
    assert run(setup.transport().send(message(), signal=AbortSignal())) is True
    assert len(setup.sender.sent) == 1


def test_a_plain_handler_sends_without_await_through_the_adapter() -> None:
    setup = Setup()

    async def scenario() -> bool:
        plain = Blocking(setup.transport(), asyncio.get_running_loop())
        result: bool = await asyncio.to_thread(plain.send, message())
        return result

    assert run(scenario()) is True
    assert len(setup.sender.sent) == 1


def test_the_dev_sender_writes_a_readable_eml_per_message_into_the_tenant_outbox(
    tmp_path: Path,
) -> None:
    setup = Setup()
    dev = DevSender(tmp_path / "outbox", clock=lambda: START)
    sent = message(html="<p>Your order <b>1001</b> is confirmed.</p>")
    assert run(setup.transport(dev).send(sent)) is True
    assert run(setup.transport(dev).send(sent)) is False

    [path] = (tmp_path / "outbox" / "acme").iterdir()
    assert path.name.startswith("20300115T120000.000000Z-sales.confirmation_o1-")
    assert path.suffix == ".eml"
    mail = email.message_from_bytes(path.read_bytes(), policy=email.policy.default)
    assert mail["From"] == "Orders <orders@example.com>"
    assert mail["To"] == "Ann <ann@example.com>"
    assert mail["Subject"] == "Order 1001"
    assert mail["Message-ID"].endswith(".ket@example.com>")
    assert email.utils.parsedate_to_datetime(mail["Date"]) == START
    body = mail.get_body(preferencelist=("plain",))
    html = mail.get_body(preferencelist=("html",))
    assert body is not None and html is not None
    assert body.get_content() == "Your order 1001 is confirmed.\n"
    assert html.get_content() == "<p>Your order <b>1001</b> is confirmed.</p>\n"


def test_a_resend_carries_the_same_message_id_and_tenants_differ() -> None:
    checked = Message(
        idempotency_key="k",
        sender=Address(address="orders@example.com"),
        to=(Address(address="ann@example.com"),),
        subject="s",
        text="t",
    )
    assert checked.message_id("acme") == checked.message_id("acme")
    assert checked.message_id("acme") != checked.message_id("globex")


def test_a_send_aborted_midway_that_finishes_within_the_grace_is_confirmed() -> None:
    setup = Setup()
    slow = SlowSender(0.05)
    assert abort_midway(setup.transport(slow, abort_grace=5), slow) is True
    assert len(slow.captured.sent) == 1
    assert run(setup.transport().send(message())) is False


def test_a_send_aborted_midway_that_fails_within_the_grace_frees_the_key() -> None:
    setup = Setup()
    slow = SlowSender(0.05, fails=True)
    outcome = abort_midway(setup.transport(slow, abort_grace=5), slow)
    assert isinstance(outcome, TimeoutError)
    assert run(setup.transport().send(message())) is True


class SlowConfirms(MemoryStore):
    """A ledger whose confirm waits for `go` (its connection waits in a spent budget, say)."""

    def __init__(self, database: MemoryDatabase, clock: ManualClock, *, fails: bool = False):
        super().__init__(database, clock=clock)
        self.confirming = asyncio.Event()
        self.go = asyncio.Event()
        self.fails = fails

    async def message_confirm(self, key: str) -> None:
        self.confirming.set()
        await self.go.wait()
        if self.fails:
            raise ConnectionError("the database went away")
        await super().message_confirm(key)


def cancel_while_confirming(setup: Setup, *, fails: bool = False) -> bool:
    """Send a message, cancel the attempt while its confirm waits, then let the confirm go
    on (and fail, with `fails`); whether the key is recorded as sent."""

    async def scenario() -> bool:
        ledger = SlowConfirms(setup.database, setup.clock, fails=fails)
        transport = Transport(setup.sender, ledger, operation(*setup.effects), setup.tenant)
        attempt = asyncio.ensure_future(transport.send(message()))
        await ledger.confirming.wait()  # the message is out; its confirm waits
        attempt.cancel()
        with pytest.raises(asyncio.CancelledError):
            await attempt
        ledger.go.set()
        for _ in range(10):
            await asyncio.sleep(0)
        return await ledger.message_sent("sales.confirmation:o1")

    return run(scenario())


def test_a_message_that_went_out_is_confirmed_though_its_attempt_is_cancelled() -> None:
    # the attempt's timeout struck while the confirm waited: left claimed, the key would keep
    # the retry waiting 15 minutes, and that retry would send the message a second time
    setup = Setup()
    assert cancel_while_confirming(setup) is True
    assert run(setup.transport().send(message())) is False  # the retry: sent before
    assert len(setup.sender.sent) == 1


def test_a_confirm_that_fails_after_its_attempt_was_cancelled_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert cancel_while_confirming(Setup(), fails=True) is False
    [record] = [r for r in caplog.records if r.name == "ket.transport"]
    assert record.levelname == "WARNING"
    text = record.getMessage()
    assert "'sales.confirmation:o1' of tenant acme went out" in text
    assert "the database went away" in text and "sends it again once the claim is stale" in text
