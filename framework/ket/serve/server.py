"""Running the app on uvicorn, with ket owning the process's signals.

uvicorn's own handling of SIGTERM and SIGINT would replace the handlers of the process (those of
`ket dev --all`, which stops a worker too) and raise the signal again once it is done, which
ends the process with the signal rather than with exit status 0. So the server here never
touches signals: the command calls `stop()` at the first signal (no new connections; requests
in flight finish within `shutdown_grace_ms`; then the app's shutdown closes the tenants'
databases) and `force()` at the second.
"""

from __future__ import annotations

import contextlib
import logging
import resource
import socket
from collections.abc import Callable, Iterator, Sequence

import uvicorn
from starlette.applications import Starlette

from ket.errors import KetError
from ket.serve.protocol import ClientLimits, guarded_protocol

log = logging.getLogger("ket.serve")


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # the command owns the signals (see the module's docstring)


class HttpServer:
    """One app served on one listening socket until stopped."""

    def __init__(
        self,
        app: Starlette,
        sock: socket.socket,
        *,
        grace_seconds: float,
        access_log: bool,
        limits: ClientLimits | None = None,
        on_close: Sequence[Callable[[], None]] = (),
    ) -> None:
        config = uvicorn.Config(
            app,
            # uvicorn's HTTP/1.1 with the limits it lacks against slow clients (serve/protocol.py)
            http=guarded_protocol(limits or ClientLimits()),
            log_config=None,  # ket's logging, already configured by the command
            access_log=access_log,
            lifespan="on",
            # typed int, but uvicorn hands it to asyncio.timeout, which takes fractions too
            timeout_graceful_shutdown=grace_seconds,  # type: ignore[arg-type]
            server_header=False,
        )
        self._server = _Server(config)
        self._socket = sock
        self._on_close = on_close  # called once the server stopped (a metrics exporter's close)

    async def run(self) -> int:
        """Serve until stopped; 0 after a graceful stop, 1 if the server could not start."""
        try:
            await self._server.serve(sockets=[self._socket])
        except SystemExit:  # uvicorn's way to report an app whose start-up failed
            log.error("the HTTP server could not start; see the errors above")
            return 1
        finally:
            for close in self._on_close:
                close()
        return 0 if self._server.started else 1

    def stop(self) -> None:
        """Stop accepting, let requests in flight finish within the grace period, then stop."""
        self._server.should_exit = True

    def force(self) -> None:
        """Stop now, without waiting for requests in flight."""
        self._server.should_exit = self._server.force_exit = True


# file descriptors kept for what is not a client: the database connections, logs, the registry
OWN_FILES = 64


def client_limits(
    header_seconds: float, body_seconds: float, max_clients: int | None, max_connections: int
) -> ClientLimits:
    """The limits of a server's clients. The soft limit of open files is raised to the hard one
    first, and the clients may take what it leaves beside the server's own files (its database
    connections among them): a server out of descriptors could answer nobody, nor read its
    tenants. `max_clients` None: 1000, or fewer if the open-file limit is lower."""
    files = raise_open_files()
    room = max(files - OWN_FILES - max_connections, 1) if files else 1000
    if max_clients is None:
        max_clients = min(1000, room)
    elif max_clients > room:
        log.warning(
            "--max-clients %d is more than the open-file limit (%d) leaves for clients; "
            "serving at most %d at once",
            max_clients,
            files,
            room,
        )
        max_clients = room
    return ClientLimits(
        head_seconds=header_seconds, body_seconds=body_seconds, max_clients=max_clients
    )


def raise_open_files() -> int:
    """Raise the soft limit of open files to the hard one; the soft limit now (0: none)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 0
    wanted = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 16)
    if soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (ValueError, OSError):
            pass
    return soft


def listen(host: str, port: int) -> socket.socket:
    """A socket listening on `host`:`port` (port 0: any free port); KetError naming the address
    when it cannot, before anything else starts."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        sock = socket.create_server((host, port), family=family, backlog=2048)
    except OSError as error:
        raise KetError(f"cannot listen on {host}:{port}: {error.strerror or error}") from None
    sock.set_inheritable(True)
    return sock


def address(sock: socket.socket) -> str:
    """`http://host:port` of a listening socket."""
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"
