"""`ket serve` under a slow-client attack: a normal client's answer times, and the descriptors
the server holds, while N connections trickle their requests (docs/serve.md, Slow clients).

    python3 bench/slow_clients.py --attack headers --connections 300 --open-files 256
    python3 bench/slow_clients.py --attack body --connections 300 --seconds 20

Each run starts a fresh `ket serve` (of the ket on PYTHONPATH, so another checkout can be
measured: PYTHONPATH=/tmp/other/framework) on an embedded SQLite project with one function,
opens the connections (each sends the start of a request, then one more piece every half
second), and meanwhile calls the function every 0.2 s with a 10 s timeout. It prints the
answer times (p50, p99, max, and how many got no answer) and, sampled each second, how many
descriptors the server process held and how many of the attack's connections it had closed.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import selectors
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import httpx2 as httpx

APP = """
from ket import define_deployment, define_function, define_module
from ket.serve import AuthRequest, Principal

async def authenticate(request: AuthRequest) -> Principal | None:
    if request.bearer_token() == "t0ken":
        return Principal(subject="bench", permissions={"call:*"})
    return None

async def ping(ctx, input):
    return "pong"

app = define_module(name="app", functions={"ping": define_function(handler=ping)})
main = define_deployment(name="main", modules=[app], serve={"authenticate": authenticate})
"""
HEADS = {
    "headers": (b"POST /functions/app.ping HTTP/1.1\r\nHost: x\r\n", b"X-Slow: 1\r\n"),
    "body": (
        b"POST /functions/app.ping HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer t0ken\r\n"
        b"Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{",
        b" ",
    ),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--attack", choices=sorted(HEADS), default="headers")
    parser.add_argument("--connections", type=int, default=300)
    parser.add_argument("--open-files", type=int, default=256, help="the server's ulimit -n")
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="ket-slow-"))
    (root / "app.py").write_text(textwrap.dedent(APP))
    (root / "pyproject.toml").write_text('[tool.ket]\nworkspace = "app.py"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("KET_")}
    ket = [sys.executable, "-m", "ket.cli.main"]
    subprocess.run([*ket, "migrate"], cwd=root, env=env, check=True, capture_output=True)

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (args.open_files, args.open_files))

    server = subprocess.Popen(
        [*ket, "serve", "--port", "0"],
        cwd=root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=limited,
    )
    assert server.stdout is not None
    url = None
    for line in server.stdout:
        found = re.search(r"on (http://127\.0\.0\.1:\d+)", line)
        if found and "serving the functions" in line:
            url = found.group(1)
            break
    assert url is not None, "the server did not start"
    threading.Thread(target=lambda: [None for _ in server.stdout or []], daemon=True).start()
    call = {
        "url": url + "/functions/app.ping",
        "json": {},
        "headers": {"Authorization": "Bearer t0ken"},
    }
    httpx.post(**call, timeout=30)  # type: ignore[arg-type]
    head, piece = HEADS[args.attack]
    port = int(url.rsplit(":", 1)[1])
    selector = selectors.DefaultSelector()
    opened: list[socket.socket] = []
    refused = 0
    for _ in range(args.connections):
        try:
            sock = socket.create_connection(("127.0.0.1", port), timeout=2)
            sock.sendall(head)
            sock.setblocking(False)
            selector.register(sock, selectors.EVENT_READ)
            opened.append(sock)
        except OSError:
            refused += 1
    closed = 0
    times: list[float] = []
    lost = 0
    stop = threading.Event()

    def normal() -> None:
        nonlocal lost
        while not stop.is_set():
            began = time.monotonic()
            try:
                answer = httpx.post(**call, timeout=10)  # type: ignore[arg-type]
                if answer.status_code == 200:
                    times.append(time.monotonic() - began)
                else:
                    lost += 1
            except httpx.HTTPError:
                lost += 1
            stop.wait(0.2)

    caller = threading.Thread(target=normal)
    caller.start()
    samples: list[tuple[float, int, int]] = []
    began = time.monotonic()
    next_sample = began
    while time.monotonic() - began < args.seconds:
        for key, _ in selector.select(timeout=0):
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            try:
                data = sock.recv(4096)
            except (ConnectionResetError, BlockingIOError):
                data = b""
            if not data:
                selector.unregister(sock)
                opened.remove(sock)
                sock.close()
                closed += 1
        for sock in list(opened):
            try:
                sock.send(piece)
            except OSError:
                selector.unregister(sock)
                opened.remove(sock)
                sock.close()
                closed += 1
        if time.monotonic() >= next_sample:
            files = len(os.listdir(f"/proc/{server.pid}/fd"))
            samples.append((time.monotonic() - began, files, closed))
            next_sample += 1.0
        time.sleep(0.5)
    stop.set()
    caller.join()
    for sock in opened:
        sock.close()
    server.terminate()
    server.wait(timeout=30)
    ordered = sorted(times)
    print(
        f"attack: {args.attack}, {args.connections} connections ({refused} refused at connect), "
        f"server ulimit -n {args.open_files}, {args.seconds:g} s"
    )
    if ordered:
        p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
        print(
            f"normal calls: {len(ordered)} answered, {lost} not; p50 "
            f"{statistics.median(ordered) * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms, max "
            f"{ordered[-1] * 1000:.0f} ms"
        )
    else:
        print(f"normal calls: none answered, {lost} not")
    print("server descriptors held / attack connections closed by the server, each second:")
    print("  " + ", ".join(f"{t:.0f}s {files}/{gone}" for t, files, gone in samples))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
