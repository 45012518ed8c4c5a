"""Helpers for testing apps built on ket: `create_test_deployment` and the controllable clock."""

from ket.store.clock import ManualClock
from ket.testing.deployment import TestDeployment, WorkerDisabled, create_test_deployment

__all__ = ["ManualClock", "TestDeployment", "WorkerDisabled", "create_test_deployment"]
