"""The shipped stores offer every capability the operator tools use: the conformance kit skips
the tests of a capability a store lacks, so a store dropping one would otherwise go unseen."""

from __future__ import annotations

import pytest

from ket.store import AuditLog, BulkStore, QueryableStore, RerunStore, TransactionalStore
from ket.store.memory import MemoryStore
from ket.store.sql import SqlStore

CAPABILITIES = [AuditLog, BulkStore, QueryableStore, RerunStore, TransactionalStore]


@pytest.mark.parametrize("capability", CAPABILITIES, ids=lambda c: c.__name__)
@pytest.mark.parametrize("store", [MemoryStore, SqlStore], ids=lambda s: s.__name__)
def test_every_shipped_store_offers_the_operator_capabilities(
    store: type[object], capability: type[object]
) -> None:
    # an instance built without its __init__: the protocols look at methods only
    assert isinstance(object.__new__(store), capability)
