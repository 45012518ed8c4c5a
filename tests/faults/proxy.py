"""A TCP proxy that injects network faults between ket and PostgreSQL.

Modes, switchable at any time:

- `pass`: forward bytes both ways.
- `blackhole`: every connection stays open but all bytes are silently dropped both ways, so the
  peers see a half-open connection (no RST, no FIN), as after a dropped network or a server that
  vanished. A connection that was ever blackholed stays so until it closes: its dropped bytes broke
  the protocol stream, so forwarding again would only feed the peers garbage. Returning to `pass`
  serves new connections.
- `refuse`: new connections are reset at once and existing ones are reset (RST to the client).

In tests, as a context manager running its event loop in a background thread:

    with Proxy(("127.0.0.1", 5432)) as proxy:
        url = f"postgresql://root@127.0.0.1:{proxy.port}/postgres"
        proxy.set_mode("blackhole")

As a separate process (e.g. in front of one `ket worker`), from the repository root:

    python -m tests.faults.proxy --listen-port 6543 --target 127.0.0.1:5432 --control mode.txt

It prints `listening on 127.0.0.1:PORT` once ready (`--listen-port 0` picks a free port). Switch its
mode by writing `pass`, `blackhole` or `refuse` into the control file (read every 0.1 s), or by a
signal: SIGUSR1 = blackhole, SIGUSR2 = refuse, SIGHUP = pass. SIGTERM or SIGINT stops it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import socket
import struct
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Literal

Mode = Literal["pass", "blackhole", "refuse"]
MODES: tuple[Mode, ...] = ("pass", "blackhole", "refuse")
_CHUNK = 65_536


@dataclass(eq=False)
class _Link:
    """One client connection and, unless it arrived blackholed, its upstream connection."""

    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter | None = None
    dropping: bool = False
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def writers(self) -> list[asyncio.StreamWriter]:
        return [w for w in (self.client, self.upstream) if w is not None]


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with RST rather than FIN: SO_LINGER with a zero timeout, then abort."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class Proxy:
    """Forwards 127.0.0.1:<port> to `target`, with faults switched by `set_mode`."""

    def __init__(self, target: tuple[str, int], *, listen_port: int = 0) -> None:
        self.target = target
        self.port = listen_port
        self.accepted = 0  # connections accepted so far (in any mode): reconnects show here
        self._mode: Mode = "pass"
        self._links: set[_Link] = set()
        self._accepting: set[asyncio.Task[None]] = set()  # connections being accepted or served
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread: threading.Thread | None = None

    @property
    def mode(self) -> Mode:
        return self._mode

    # -- running in a background thread (tests) ----------------------------------------------

    def __enter__(self) -> Proxy:
        started = threading.Event()
        self._thread = threading.Thread(
            target=lambda: asyncio.run(self.serve(started)), name="fault-proxy", daemon=True
        )
        self._thread.start()
        if not started.wait(10):
            raise RuntimeError("the fault proxy did not start within 10 s")
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(10)

    def set_mode(self, mode: Mode) -> None:
        """Switch modes; returns once the proxy has applied it (safe from any thread)."""
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
        loop = self._loop
        try:
            on_loop = asyncio.get_running_loop() is loop
        except RuntimeError:
            on_loop = False
        if loop is None or on_loop:
            self._apply(mode)
        else:
            asyncio.run_coroutine_threadsafe(self._apply_async(mode), loop).result(10)

    # -- the event loop side -----------------------------------------------------------------

    async def serve(self, started: threading.Event | None = None) -> None:
        """Accept and forward until stopped (`__exit__`, or `stop()` from the loop's thread)."""
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)
        self.port = server.sockets[0].getsockname()[1]
        if started is not None:
            started.set()
        try:
            await self._stop.wait()
        finally:
            server.close()
            # every connection still being accepted goes too: one cut short in its upstream
            # connect would otherwise leave its socket to the garbage collector (a
            # ResourceWarning, an error under filterwarnings=error)
            for accepting in list(self._accepting):
                accepting.cancel()
            await asyncio.gather(*self._accepting, return_exceptions=True)
            links = list(self._links)
            for link in links:
                for writer in link.writers():
                    writer.transport.abort()
            for link in links:
                for task in link.tasks:
                    task.cancel()
            await asyncio.gather(*(t for link in links for t in link.tasks), return_exceptions=True)
            await server.wait_closed()

    def stop(self) -> None:
        """Stop serving (call on the proxy's own loop)."""
        if self._stop is not None:
            self._stop.set()

    async def _apply_async(self, mode: Mode) -> None:
        self._apply(mode)

    def _apply(self, mode: Mode) -> None:
        self._mode = mode
        for link in list(self._links):
            if mode == "blackhole":
                link.dropping = True
            elif mode == "refuse":
                _reset(link.client)
                if link.upstream is not None:
                    link.upstream.transport.abort()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._accepting.add(task)
        try:
            await self._forward(reader, writer)
        finally:
            self._accepting.discard(task)
            writer.transport.abort()  # closed whatever happened (a no-op when it is already)

    async def _forward(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        if self._mode == "refuse":
            _reset(writer)
            return
        link = _Link(client=writer, dropping=self._mode == "blackhole")
        upstream_reader: asyncio.StreamReader | None = None
        if not link.dropping:  # a blackholed newcomer never reaches the server
            try:
                upstream_reader, link.upstream = await asyncio.open_connection(*self.target)
            except OSError:
                _reset(writer)
                return
        self._links.add(link)
        task = asyncio.current_task()
        assert task is not None
        link.tasks.append(task)
        try:
            pumps = [self._pump(link, reader, link.upstream)]
            if upstream_reader is not None:
                pumps.append(self._pump(link, upstream_reader, writer))
            await asyncio.gather(*pumps)
        finally:
            self._links.discard(link)
            for other in link.writers():
                other.transport.abort()

    async def _pump(
        self, link: _Link, source: asyncio.StreamReader, sink: asyncio.StreamWriter | None
    ) -> None:
        """Copy `source` to `sink` until EOF; while the link is dropping, read and discard."""
        while True:
            try:
                chunk = await source.read(_CHUNK)
            except OSError:
                chunk = b""
            if not chunk:
                break
            if link.dropping or sink is None:
                continue
            sink.write(chunk)
            with contextlib.suppress(OSError):
                await sink.drain()
        if not link.dropping:
            # one side closed while forwarding: close the other side too. A dropping link keeps
            # the other side open, as a real partition would, until that side closes as well.
            for writer in link.writers():
                writer.transport.abort()


# -- the separate-process entry point ----------------------------------------------------------


async def _watch_control(proxy: Proxy, control: Path) -> None:
    """Apply the mode written in `control` whenever it changes."""
    while True:
        with contextlib.suppress(OSError):
            wanted = control.read_text().strip()
            if wanted in MODES and wanted != proxy.mode:
                proxy.set_mode(wanted)
                print(f"mode {wanted}", flush=True)
        await asyncio.sleep(0.1)


async def _main(proxy: Proxy, control: Path | None) -> None:
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGUSR1, proxy.set_mode, "blackhole")
    loop.add_signal_handler(signal.SIGUSR2, proxy.set_mode, "refuse")
    loop.add_signal_handler(signal.SIGHUP, proxy.set_mode, "pass")
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, proxy.stop)
    started = threading.Event()
    serving = asyncio.ensure_future(proxy.serve(started))
    while not started.is_set() and not serving.done():
        await asyncio.sleep(0.01)
    print(f"listening on 127.0.0.1:{proxy.port}", flush=True)
    watcher = asyncio.ensure_future(_watch_control(proxy, control)) if control else None
    try:
        await serving
    finally:
        if watcher is not None:
            watcher.cancel()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.faults.proxy", description=__doc__)
    parser.add_argument("--listen-port", type=int, default=0)
    parser.add_argument("--target", default="127.0.0.1:5432", help="HOST:PORT")
    parser.add_argument("--control", type=Path, help="a file holding the mode to apply")
    parser.add_argument("--mode", choices=MODES, default="pass", help="the starting mode")
    options = parser.parse_args(argv)
    host, _, port = options.target.rpartition(":")
    proxy = Proxy((host, int(port)), listen_port=options.listen_port)
    proxy.set_mode(options.mode)
    asyncio.run(_main(proxy, options.control))
    return 0


if __name__ == "__main__":
    sys.exit(main())
