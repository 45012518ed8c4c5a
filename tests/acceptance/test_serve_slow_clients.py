"""`ket serve` against slow clients, with real sockets on loopback (issue 27, item 2).

Before, 300 connections sending one header line every few seconds stayed open as long as they
liked; under `ulimit -n 256` the server answered nobody. A body sent a byte a second was read
for as long as it came. Now a request's headers must be in within `--header-timeout`, its body
within `--body-timeout`, and when `--max-clients` (or the open-file limit) is reached the
connection that waited longest for its request is closed to make room.
"""

from __future__ import annotations

import selectors
import socket
import threading
import time
from collections.abc import Callable
from urllib.parse import urlsplit

import httpx2 as httpx

from tests.acceptance.conftest import Project, run_ket
from tests.acceptance.test_cli_serve import SERVED, TOKEN, Server, start  # noqa: F401 (the fixture)

SLOW = 300  # connections of the attack: more than the open-file limit below leaves
OPEN_FILES = 256


class Trickle:
    """`count` connections to `url`, each sending its request a little at a time (`step()`
    sends one more piece to each still open); which of them the server has closed."""

    def __init__(self, url: str, count: int, head: bytes) -> None:
        parts = urlsplit(url)
        self.address = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.selector = selectors.DefaultSelector()
        self.open: list[socket.socket] = []
        self.closed = 0
        for _ in range(count):
            sock = socket.create_connection(self.address, timeout=5)
            sock.sendall(head)
            sock.setblocking(False)
            self.selector.register(sock, selectors.EVENT_READ)
            self.open.append(sock)

    def step(self, piece: bytes) -> None:
        """Send `piece` to every open connection; count and forget those the server closed."""
        for key, _ in self.selector.select(timeout=0):
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            try:
                data = sock.recv(4096)
            except (ConnectionResetError, BlockingIOError):
                data = b""
            if not data:
                self._gone(sock)
        for sock in list(self.open):
            try:
                sock.send(piece)
            except (BrokenPipeError, ConnectionResetError, BlockingIOError):
                self._gone(sock)

    def _gone(self, sock: socket.socket) -> None:
        if sock in self.open:
            self.open.remove(sock)
            self.selector.unregister(sock)
            sock.close()
            self.closed += 1

    def close(self) -> None:
        for sock in self.open:
            sock.close()
        self.selector.close()


def _answers(url: str, stop: threading.Event, times: list[float | None]) -> None:
    """A normal client meanwhile: one call every 0.3 s, each answer's time (None: none)."""
    while not stop.is_set():
        began = time.monotonic()
        try:
            answer = httpx.post(
                url + "/functions/app.nap", json={"seconds": 0}, headers=TOKEN, timeout=10
            )
            times.append(time.monotonic() - began if answer.status_code == 200 else None)
        except httpx.HTTPError:
            times.append(None)
        stop.wait(0.3)


def _attack(
    start: Callable[..., Server],  # noqa: F811
    project: Project,
    head: bytes,
    piece: bytes,
    *args: str,
    count: int = SLOW,
) -> tuple[Trickle, list[float | None], str]:
    root = project({"app/workspace.py": SERVED})
    assert run_ket("migrate", cwd=root).code == 0
    server = start(root, "serve", *args, open_files=OPEN_FILES)
    first = httpx.post(
        server.url + "/functions/app.nap", json={"seconds": 0}, headers=TOKEN, timeout=30
    )
    assert first.status_code == 200, first.text
    slow = Trickle(server.url, count, head)
    times: list[float | None] = []
    stop = threading.Event()
    normal = threading.Thread(target=_answers, args=(server.url, stop, times))
    normal.start()
    try:
        for _ in range(10):  # 5 s of trickling: a piece every half second
            slow.step(piece)
            time.sleep(0.5)
    finally:
        stop.set()
        normal.join(timeout=30)
        slow.close()
    code, output = server.stop()
    assert code == 0, output
    return slow, times, output


def test_clients_sending_headers_a_line_at_a_time_are_closed_and_others_are_answered(
    project: Project,
    start: Callable[..., Server],  # noqa: F811
) -> None:
    head = b"POST /functions/app.nap HTTP/1.1\r\nHost: x\r\n"
    slow, times, output = _attack(start, project, head, b"X-Slow: 1\r\n", "--header-timeout", "2")
    # every trickling connection was closed by the server, though each kept sending; before,
    # all 300 stayed open
    assert slow.closed == SLOW, (slow.closed, output[-2000:])
    # and the normal client was answered all along: before, under this open-file limit, the
    # server answered nobody once the attack held its descriptors
    assert times and all(t is not None for t in times), (times, output[-2000:])
    # the first closes are said at once (the others within the minute, in one line): 300 are
    # more than the open-file limit leaves for clients, so the first were evictions
    assert "slow clients: closed" in output
    assert f"evicted at {OPEN_FILES - 64 - 20} open connections" in output
    assert "Traceback" not in output


def test_a_body_sent_a_byte_at_a_time_is_cut_off(
    project: Project,
    start: Callable[..., Server],  # noqa: F811
) -> None:
    # fewer than the clients' room: none is evicted, each is closed for its slow body
    count = 100
    head = (
        b"POST /functions/app.nap HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer t0ken\r\n"
        b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"
    )
    slow, times, output = _attack(start, project, head, b" ", "--body-timeout", "2", count=count)
    assert slow.closed == count, (slow.closed, output[-2000:])
    assert times and all(t is not None for t in times), (times, output[-2000:])
    assert "slow clients: closed" in output and "body not in within 2 s" in output
    assert "evicted" not in output
    assert "Traceback" not in output
