"""`ket serve` under many concurrent calls across tenants: the PostgreSQL connections it holds,
and how long a normal call takes meanwhile (docs/serve.md, Tenants; issue 27, item 1).

    python3 bench/serve_connections.py --tenants 20 --calls 15 --seconds 20

Makes N tenant databases (copies of one migrated template) and a registry on the PostgreSQL
at KET_BENCH_ADMIN_URL (default postgresql://root@127.0.0.1/postgres), starts `ket serve` (of
the ket on PYTHONPATH, so another checkout can be measured: PYTHONPATH=/tmp/other/framework)
with its default budget, and for `--seconds` keeps `--calls` calls per tenant in flight at
once (each enqueues a job). Meanwhile a normal client calls one more tenant every 0.2 s. It
prints the connections the server held (sampled every 0.1 s from pg_stat_activity: peak and
median), the normal call's answer times, and the connections still held after 60 s idle. The
databases are dropped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import uuid
from pathlib import Path

import httpx2 as httpx
import psycopg

APP = """
from ket import define_deployment, define_function, define_job, define_module
from ket.serve import AuthRequest, Principal

async def authenticate(request: AuthRequest):
    if request.bearer_token() == "t0ken":
        return Principal(subject="bench", permissions={"call:*"})
    return None

async def work(ctx, input):
    return None

async def place(ctx, input):
    await ctx.jobs.enqueue("app.work", {"n": input.n})
    return "placed"

app = define_module(
    name="app",
    functions={
        "place": define_function(input={"n": "int"}, effects=["enqueue:app.work"], handler=place),
    },
    jobs={"work": define_job(input={"n": "int"}, idempotent=True, handler=work)},
)
main = define_deployment(name="main", modules=[app], serve={"authenticate": authenticate})
"""
TOKEN = {"Authorization": "Bearer t0ken"}
APP_NAME = "ket-bench-serve"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tenants", type=int, default=20)
    parser.add_argument("--calls", type=int, default=15, help="in flight per tenant (15)")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--idle", type=float, default=60.0, help="idle wait at the end (60)")
    args = parser.parse_args()
    admin = os.environ.get("KET_BENCH_ADMIN_URL", "postgresql://root@127.0.0.1/postgres")
    base = admin.rsplit("/", 1)[0]
    prefix = f"ketbench_serve_{uuid.uuid4().hex[:6]}_"
    tenants = [f"t{n:03d}" for n in range(args.tenants)]
    made: list[str] = []
    root = Path(tempfile.mkdtemp(prefix="ket-serve-"))
    (root / "bench_serve_app.py").write_text(textwrap.dedent(APP))
    (root / "pyproject.toml").write_text('[tool.ket]\nworkspace = "bench_serve_app.py"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("KET_")}
    env.update(
        KET_DATABASE_URL=f"{base}/{prefix}{{tenant}}",
        KET_REGISTRY_URL=f"{base}/{prefix}registry",
        PGAPPNAME=APP_NAME,
        PYTHONPATH=os.pathsep.join([str(root), *filter(None, [env.get("PYTHONPATH")])]),
    )
    ket = [sys.executable, "-m", "ket.cli.main"]
    server = None
    try:
        with psycopg.connect(admin, autocommit=True) as connection:
            for name in ["template", "registry"]:
                connection.execute(f'CREATE DATABASE "{prefix}{name}"')
                made.append(prefix + name)
        template_env = {**env, "KET_DATABASE_URL": f"{base}/{prefix}template"}
        template_env.pop("KET_REGISTRY_URL")
        subprocess.run([*ket, "migrate"], cwd=root, env=template_env, check=True)
        with psycopg.connect(admin, autocommit=True) as connection:
            for tenant in tenants:
                connection.execute(
                    f'CREATE DATABASE "{prefix}{tenant}" TEMPLATE "{prefix}template"'
                )
                made.append(prefix + tenant)
        for tenant in tenants:
            subprocess.run(
                [*ket, "tenants", "add", tenant], cwd=root, env=env, check=True, capture_output=True
            )
        server = subprocess.Popen(
            [*ket, "serve", "--port", "0"],
            cwd=root,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert server.stdout is not None
        url = None
        for line in server.stdout:
            found = re.search(r"on (http://127\.0\.0\.1:\d+)", line)
            if found and "serving the functions" in line:
                url = found.group(1)
                break
        assert url is not None, "the server did not start"
        output = server.stdout
        threading.Thread(target=lambda: [None for _ in output], daemon=True).start()
        held = _sampler(admin)
        normal: list[float] = []
        lost = [0]
        stop = threading.Event()

        def caller() -> None:
            with httpx.Client(base_url=url, timeout=30) as client:
                while not stop.is_set():
                    began = time.monotonic()
                    try:
                        answer = client.post(
                            "/functions/app.place",
                            json={"n": 0},
                            headers={**TOKEN, "X-Ket-Tenant": tenants[0]},
                        )
                        if answer.status_code == 200:
                            normal.append(time.monotonic() - began)
                        else:
                            lost[0] += 1
                    except httpx.HTTPError:
                        lost[0] += 1
                    stop.wait(0.2)

        async def flood() -> int:
            done = 0
            deadline = time.monotonic() + args.seconds
            async with httpx.AsyncClient(base_url=url, timeout=60) as client:

                async def one_tenant(tenant: str) -> None:
                    nonlocal done
                    while time.monotonic() < deadline:
                        await client.post(
                            "/functions/app.place",
                            json={"n": 1},
                            headers={**TOKEN, "X-Ket-Tenant": tenant},
                        )
                        done += 1

                await asyncio.gather(
                    *[one_tenant(t) for t in tenants[1:] for _ in range(args.calls)]
                )
            return done

        sampling = threading.Event()
        samples: list[int] = []

        def sample() -> None:
            while not sampling.is_set():
                samples.append(held())
                sampling.wait(0.1)

        sampler = threading.Thread(target=sample)
        sampler.start()
        calling = threading.Thread(target=caller)
        calling.start()
        calls = asyncio.run(flood())
        stop.set()
        calling.join()
        sampling.set()
        sampler.join()
        time.sleep(args.idle)
        after_idle = held()
        ordered = sorted(normal)
        print(
            f"{args.tenants} tenants, {args.calls} calls in flight per tenant for "
            f"{args.seconds:g} s: {calls} calls answered"
        )
        print(
            f"connections held by ket serve: peak {max(samples)}, median "
            f"{statistics.median(samples):.0f}; after {args.idle:g} s idle: {after_idle}"
        )
        if ordered:
            p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
            print(
                f"normal call meanwhile: {len(ordered)} answered, {lost[0]} not; p50 "
                f"{statistics.median(ordered) * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms"
            )
        else:
            print(f"normal call meanwhile: none answered, {lost[0]} not")
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
        with psycopg.connect(admin, autocommit=True) as connection:
            for name in made:
                connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    return 0


def _sampler(admin: str):  # type: ignore[no-untyped-def]
    connection = psycopg.connect(admin, autocommit=True)

    def held() -> int:
        row = connection.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (APP_NAME,)
        ).fetchone()
        return int(row[0]) if row else 0

    return held


if __name__ == "__main__":
    raise SystemExit(main())
