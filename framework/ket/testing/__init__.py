"""Helpers for testing apps built on ket: `create_test_deployment` and the controllable clock.

Its names are imported on first use: pytest loads ket's plugin (`ket.testing.plugin`) in every
test session, and one that never uses ket's fixtures should not pay for importing the runtime.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ket.store.clock import ManualClock
    from ket.testing.deployment import (
        Performed,
        TestDeployment,
        WorkerDisabled,
        create_test_deployment,
    )

__all__ = ["ManualClock", "Performed", "TestDeployment", "WorkerDisabled", "create_test_deployment"]
_HOMES = {"ManualClock": "ket.store.clock"}


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'ket.testing' has no attribute {name!r}")
    return getattr(importlib.import_module(_HOMES.get(name, "ket.testing.deployment")), name)
