"""Unique windows and debounce held by separate producer processes racing on one PostgreSQL
database while two real `ket worker` processes run the jobs: each customer is welcomed once
(its completed job holds the key for the window), and a burst of enqueues of one debounced key
from four processes leaves one job, which runs once, after the burst, with an input one of them
sent."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from .test_worker_processes import Fleet, _until, fleet_factory  # noqa: F401 (a fixture)

APP = """
import os, uuid
from pathlib import Path
from ket import define_deployment, define_job, define_module

RUNS = Path(os.environ["KET_TEST_RUNS"])

def welcome(ctx, input):
    (RUNS / f"welcome.{{input.customer}}.{{uuid.uuid4().hex}}").write_text(str(ctx.job.id))

def reindex(ctx, input):
    (RUNS / f"reindex.{{input.document}}.{{uuid.uuid4().hex}}").write_text(str(input.revision))

app = define_module(name="app", jobs={{
    "welcome": define_job(
        idempotent=True,
        input={{"customer": "string"}},
        unique={{"period": "1h", "key": ["customer"]}},
        handler=welcome,
    ),
    "reindex": define_job(
        idempotent=True,
        input={{"document": "string", "revision": "int"}},
        debounce={{"period": "6s", "key": ["document"]}},
        handler=reindex,
    ),
}})
main = define_deployment(name="main", modules=[app], worker={{
    "queues": {{"default": 8}}, "poll_min_ms": 20, "poll_max_ms": 500, "lease_ms": {lease_ms},
}})
"""

# A producer: waits for the start file, then enqueues through the client, as an app would.
PRODUCER = """
import json, random, sys, time
from pathlib import Path
from ket.client import open_client
from app.workspace import main

number, start = int(sys.argv[1]), Path(sys.argv[2])
rng = random.Random(number)
with open_client(main, database_url=sys.argv[3]) as client:
    while not start.exists():
        time.sleep(0.01)
    outcomes = []
    for _ in range(3):
        customers = [f"c{n}" for n in range(30)]
        rng.shuffle(customers)
        for customer in customers:
            inserted = client.enqueue("app.welcome", {"customer": customer})
            outcomes.append(["welcome", inserted.id, inserted.coalesced])
    for revision in range(20):
        inserted = client.enqueue(
            "app.reindex", {"document": "d1", "revision": number * 100 + revision}
        )
        outcomes.append(["reindex", inserted.id, inserted.coalesced])
print(json.dumps(outcomes))
"""


def test_producers_in_four_processes_keep_windows_and_debounce_while_workers_run(
    fleet_factory: Callable[..., Fleet],  # noqa: F811 (the fixture imported above)
) -> None:
    fleet = fleet_factory(app=APP)
    for _ in range(2):
        fleet.start(log_level="INFO")
    _until(
        lambda: all("serving deployment" in fleet.log_of(n) for n in range(2)),
        60,
        "two serving workers",
    )
    (fleet.root / "producer.py").write_text(PRODUCER)
    start = fleet.root / "start"
    producers = [
        subprocess.Popen(
            [sys.executable, "producer.py", str(n), str(start), fleet.url],
            cwd=fleet.root,
            env=fleet.environment(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(4)
    ]
    time.sleep(2)  # every producer's client open, waiting for the start
    start.write_text("go")
    began = time.monotonic()
    outputs = [p.communicate(timeout=120) for p in producers]
    burst = time.monotonic() - began
    for process, (_, err) in zip(producers, outputs, strict=True):
        assert process.returncode == 0, err
    assert burst < 6, f"the producers took {burst:.1f} s, past the debounce period"

    done = "SELECT count(*) FROM ket_jobs WHERE state = 'completed'"
    _until(lambda: fleet.query(done) == [(31,)], 60, "31 jobs completed")
    fleet.stop_all()
    rows = fleet.query("SELECT name, window_key, state FROM ket_jobs ORDER BY id")
    # one job per customer, however many processes enqueued it three times over
    welcomes = Counter(key for name, key, _ in rows if name == "app.welcome")
    assert welcomes == Counter({f'["c{n}"]': 1 for n in range(30)}), welcomes
    welcomed = Counter(path.name.split(".")[1] for path in fleet.runs.glob("welcome.*"))
    assert welcomed == Counter({f"c{n}": 1 for n in range(30)}), welcomed
    # eighty enqueues of one debounced key: one job, run once, with one of their inputs
    assert [row for row in rows if row[0] == "app.reindex"] == [
        ("app.reindex", '["d1"]', "completed")
    ]
    [ran] = list(fleet.runs.glob("reindex.*"))
    assert int(Path(ran).read_text()) % 100 in range(20)
    outcomes = [entry for out, _ in outputs for entry in json.loads(out)]
    assert sum(1 for kind, _, coalesced in outcomes if not coalesced) == 31
    assert len(outcomes) == 4 * (90 + 20)
