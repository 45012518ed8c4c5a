"""Manifest tests pass the default zone explicitly, never the one of the machine running them."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def no_ket_timezone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KET_TIMEZONE", raising=False)
