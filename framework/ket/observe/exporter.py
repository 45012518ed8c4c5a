"""`/metrics` over HTTP for a worker process: prometheus_client's own server, in a thread.

The server answers from the registry alone (counters kept by the event hook, gauges from the
last job stats), so a scrape never waits for the event loop or the database.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server

from ket.errors import KetError


@dataclass(frozen=True, kw_only=True)
class Exporter:
    """A running metrics server: where it listens, and how to stop it."""

    host: str
    port: int  # the port it listens on (the one the system chose, when asked for port 0)
    _server: WSGIServer
    _thread: threading.Thread

    @property
    def url(self) -> str:
        """The scrape URL, e.g. `http://127.0.0.1:9464/metrics`."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        """Stop serving and free the port."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5.0)


def export(registry: CollectorRegistry, *, host: str, port: int) -> Exporter:
    """Serve `registry` at http://host:port/metrics (port 0: a free port) until closed."""
    try:
        server, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as error:
        raise KetError(
            f"cannot serve metrics on {host}:{port}: {error.strerror or error}"
        ) from None
    return Exporter(host=host, port=server.server_port, _server=server, _thread=thread)
