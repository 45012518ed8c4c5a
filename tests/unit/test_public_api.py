"""The public surface of `ket` is exactly the names SPEC.md promises (so far)."""

from __future__ import annotations

import ket


def test_public_names_are_pinned() -> None:
    assert sorted(ket.__all__) == [
        "Aborted",
        "Discard",
        "EffectError",
        "Retry",
        "Snooze",
        "define_deployment",
        "define_function",
        "define_job",
        "define_model",
        "define_module",
        "hooks",
        "open_async_client",
        "open_client",
    ]
    for name in ket.__all__:
        assert getattr(ket, name) is not None


def test_hooks_are_the_process_default_hooks_the_worker_emits_to() -> None:
    from ket import hooks
    from ket.runtime.events import hooks as default_hooks

    assert hooks is default_hooks


def test_control_flow_exceptions_carry_what_the_handler_said() -> None:
    retry = ket.Retry(in_seconds=30, reason="provider busy")
    assert (retry.in_seconds, str(retry)) == (30, "provider busy")
    assert str(ket.Discard("no recipient")) == "no recipient"
    assert ket.Aborted("timeout").reason == "timeout"
    assert str(ket.EffectError()) == (
        "The operation was not declared in the effects of the running function or job."
    )


def test_retry_refuses_a_negative_delay() -> None:
    try:
        ket.Retry(in_seconds=-1)
    except ValueError as error:
        assert "-1" in str(error)
    else:
        raise AssertionError("Retry(in_seconds=-1) was accepted")
