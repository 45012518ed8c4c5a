"""Metrics of `ket serve`'s requests: how many, by function and status, and how long they took.

An ASGI middleware around the server's app counts every HTTP request once its answer has
started. The `function` label is a declared function's name for `POST /functions/<name>`, and
otherwise one of a few fixed words, so that the number of series cannot grow with what clients
send: `unknown` (a function the deployment does not declare), `openapi`, `dashboard`, `other`.

    metrics = Metrics(catalog)
    app.add_middleware(RequestMetrics, counted=RequestCounts(metrics.registry, catalog))
"""

from __future__ import annotations

import time
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram

from ket.catalog import Catalog

# Seconds: a no-op function answers in a millisecond; one that works or waits, in seconds.
REQUEST_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
FUNCTIONS = "/functions/"


class RequestCounts:
    """The request metrics of one server, in `registry`."""

    def __init__(self, registry: CollectorRegistry, catalog: Catalog) -> None:
        self._functions = frozenset(catalog.functions)
        self.requests = Counter(
            "ket_http_requests",
            "HTTP requests this server answered, by function (or unknown, openapi, dashboard, "
            "other) and status code.",
            ["function", "status"],
            registry=registry,
        )
        self.duration = Histogram(
            "ket_http_request_duration_seconds",
            "From a request's arrival to the start of its answer, by function.",
            ["function"],
            buckets=REQUEST_BUCKETS,
            registry=registry,
        )

    def label(self, path: str) -> str:
        """The `function` label of a request for `path`."""
        if path.startswith(FUNCTIONS):
            name = path[len(FUNCTIONS) :]
            return name if name in self._functions else "unknown"
        if path == "/openapi.json":
            return "openapi"
        if path.startswith("/dashboard"):
            return "dashboard"
        return "other"


class RequestMetrics:
    """ASGI middleware: counts each HTTP request in `counted` when its answer starts."""

    def __init__(self, app: Any, counted: RequestCounts) -> None:
        self._app = app
        self._counted = counted

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        began = time.perf_counter()
        function = self._counted.label(scope.get("path", ""))
        answered = False

        async def sending(message: Any) -> None:
            nonlocal answered
            if message["type"] == "http.response.start" and not answered:
                answered = True
                counted = self._counted
                counted.requests.labels(function, str(message["status"])).inc()
                counted.duration.labels(function).observe(time.perf_counter() - began)
            await send(message)

        try:
            await self._app(scope, receive, sending)
        finally:
            if not answered:  # the app failed before answering: the server answers 500
                self._counted.requests.labels(function, "500").inc()
