"""The server's own limit for the enqueue rows, measured in the same run: how many single-row
INSERT commits a second pgbench gets with 1, 8 and 32 clients, into a table shaped like a queue's
(an id, a JSON input, a state, a time), on a fresh database of the same server. An enqueue that
commits its one row alone cannot beat it (ket's concurrent enqueues share commits, and can); the
report gives each library's enqueue rows as a fraction of it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from database import connect, fresh_database

_TABLE = """CREATE TABLE bench_limit (
    id bigserial PRIMARY KEY,
    payload jsonb NOT NULL,
    state text NOT NULL DEFAULT 'available',
    run_at timestamptz NOT NULL DEFAULT now()
)"""
_INSERT = """INSERT INTO bench_limit (payload) VALUES ('{"order_id": "o1", "amount": 1}');\n"""
_TPS = re.compile(r"tps = ([\d.]+) \(without initial connection time\)")


def pgbench_limit(clients: int, seconds: float = 5.0) -> float:
    """Commits a second of one-row INSERTs from `clients` pgbench clients."""
    pgbench = shutil.which("pgbench")
    if pgbench is None:
        raise RuntimeError("pgbench is not installed (Debian: postgresql-client)")
    with fresh_database() as database, connect(database) as connection:
        connection.execute(_TABLE)
        with tempfile.TemporaryDirectory(prefix="ket-limit-") as folder:
            script = Path(folder) / "insert.sql"
            script.write_text(_INSERT, encoding="utf-8")
            argv = [pgbench, "-n", "-c", str(clients), "-j", str(min(clients, 2))]
            argv += ["-T", str(int(seconds)), "-f", str(script), database.url]
            done = subprocess.run(argv, capture_output=True, text=True, check=True)
    found = _TPS.search(done.stdout)
    if found is None:
        raise RuntimeError(f"pgbench printed no tps:\n{done.stdout}\n{done.stderr}")
    return float(found[1])
