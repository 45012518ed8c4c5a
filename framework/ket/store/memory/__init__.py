"""The in-process memory store: a real implementation of the store contract, for tests.

It runs the same conformance kit as SQLite and PostgreSQL. Several `MemoryStore` handles on one
`MemoryDatabase` act as replicas of one deployment::

    database = MemoryDatabase()
    worker, producer = MemoryStore(database), MemoryStore(database)
"""

from ket.store.memory.database import MemoryDatabase
from ket.store.memory.store import MemoryStore
from ket.store.memory.transaction import MemoryTransaction

__all__ = ["MemoryDatabase", "MemoryStore", "MemoryTransaction"]
