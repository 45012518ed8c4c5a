"""The conformance kit: the specification of a job store, as tests every store runs unchanged.

A store joins by defining one pytest fixture, `ket_store_factory`, and importing the kit::

    import pytest
    from ket.tck import *  # noqa: F403

    @pytest.fixture
    def ket_store_factory(tmp_path):
        return MyStoreFactory(tmp_path / "jobs.db")

One area of docs/stores.md per module. A capability the store lacks (PushStore, QueryableStore,
BulkStore, TransactionalStore, SentLedger, RecordStore, VacuumStore, AuditLog, SessionStore,
RerunStore, PacedStore, QueueControl, MinuteStore) skips the tests that need it, with the reason
shown; so does a factory that cannot make a handle fail on demand (FaultyStoreFactory, see harness).
"""

# ruff: noqa: E402, F403
# (the areas are imported after pytest is told to rewrite their asserts)

import pytest

AREAS = (
    "insert",
    "claim",
    "settle",
    "heartbeat",
    "rescue",
    "cancel",
    "bulk",
    "prune",
    "schedule",
    "clock_seam",
    "query",
    "push",
    "paced",
    "transaction",
    "concurrency",
    "ledger",
    "records",
    "vacuum",
    "audit",
    "session",
    "rerun",
    "queues",
    "minutes",
    "expiry",
    "limits",
    "windows",
    "errors",
    "results",
    "steps",
)

# The kit's plain asserts explain their failures only if pytest rewrites them when imported.
pytest.register_assert_rewrite("ket.tck.arrange", *(f"ket.tck.{area}" for area in AREAS))

from ket.tck import (
    audit,
    bulk,
    cancel,
    claim,
    clock_seam,
    concurrency,
    errors,
    expiry,
    heartbeat,
    insert,
    ledger,
    limits,
    minutes,
    paced,
    prune,
    push,
    query,
    queues,
    records,
    rerun,
    rescue,
    results,
    schedule,
    session,
    settle,
    steps,
    transaction,
    vacuum,
    windows,
)
from ket.tck.audit import *
from ket.tck.bulk import *
from ket.tck.cancel import *
from ket.tck.claim import *
from ket.tck.clock_seam import *
from ket.tck.concurrency import *
from ket.tck.errors import *
from ket.tck.expiry import *
from ket.tck.harness import FaultyStoreFactory, Outage, StoreFactory, Tck, tck_test
from ket.tck.heartbeat import *
from ket.tck.insert import *
from ket.tck.ledger import *
from ket.tck.limits import *
from ket.tck.minutes import *
from ket.tck.paced import *
from ket.tck.prune import *
from ket.tck.push import *
from ket.tck.query import *
from ket.tck.queues import *
from ket.tck.records import *
from ket.tck.rerun import *
from ket.tck.rescue import *
from ket.tck.results import *
from ket.tck.schedule import *
from ket.tck.session import *
from ket.tck.settle import *
from ket.tck.steps import *
from ket.tck.transaction import *
from ket.tck.vacuum import *
from ket.tck.windows import *

__all__ = [
    "FaultyStoreFactory",
    "Outage",
    "StoreFactory",
    "Tck",
    "tck_test",
    *insert.__all__,
    *claim.__all__,
    *settle.__all__,
    *heartbeat.__all__,
    *rescue.__all__,
    *cancel.__all__,
    *bulk.__all__,
    *prune.__all__,
    *schedule.__all__,
    *clock_seam.__all__,
    *query.__all__,
    *push.__all__,
    *paced.__all__,
    *transaction.__all__,
    *concurrency.__all__,
    *ledger.__all__,
    *records.__all__,
    *vacuum.__all__,
    *audit.__all__,
    *session.__all__,
    *rerun.__all__,
    *results.__all__,
    *steps.__all__,
    *minutes.__all__,
    *queues.__all__,
    *expiry.__all__,
    *limits.__all__,
    *windows.__all__,
    *errors.__all__,
]
