"""What `ket serve` and `ket dev --all` check before they start, and how dev --all supervises
the worker and the server."""

from __future__ import annotations

import asyncio
import importlib.util
import logging

import pytest

from ket import define_deployment, define_module
from ket.catalog import Catalog
from ket.cli import dev, serve
from ket.cli.worker import Stopping
from ket.errors import KetError
from tests.unit.serve.shop import deployment


def test_without_the_server_packages_it_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    found = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name: None if name == "uvicorn" else found(name)
    )
    with pytest.raises(KetError) as refused:
        serve.check_servable(Catalog.build(deployment()), "ket serve")
    assert refused.value.message == (
        "ket serve needs uvicorn, which is not installed (ket-jobs depends on it: the install is "
        "incomplete): pip install uvicorn"
    )


def test_without_an_authenticator_it_refuses_to_start() -> None:
    catalog = Catalog.build(define_deployment(name="shop", modules=[define_module(name="a")]))
    with pytest.raises(KetError, match="ket dev --all refuses to start: deployment 'shop'"):
        serve.check_servable(catalog, "ket dev --all")


async def _ends(after: float, code: int = 0) -> int:
    await asyncio.sleep(after)
    return code


def _both(worker_after: float, http_after: float, *, signalled: bool) -> tuple[int, list[str]]:
    stopped: list[str] = []

    async def main() -> int:
        stopping = Stopping()
        if signalled:
            stopping.event.set()
        worker = asyncio.ensure_future(_ends(worker_after))
        http = asyncio.ensure_future(_ends(http_after))
        return await dev._both(worker, http, stopping, lambda: stopped.append("http"))

    return asyncio.run(main()), stopped


def test_dev_all_exits_1_and_stops_the_server_when_the_worker_stops_unasked(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.ERROR, logger="ket.dev"):
        code, stopped = _both(0.01, 0.05, signalled=False)
    assert (code, stopped) == (1, ["http"])
    assert "the worker stopped unexpectedly (it returned); stopping the HTTP server" in caplog.text


def test_dev_all_exits_1_when_the_server_stops_unasked(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="ket.dev"):
        code, _ = _both(0.05, 0.01, signalled=False)
    assert code == 1
    assert "the HTTP server stopped unexpectedly" in caplog.text


def test_dev_all_exits_0_when_both_stop_after_a_signal() -> None:
    assert _both(0.01, 0.02, signalled=True) == (0, [])
