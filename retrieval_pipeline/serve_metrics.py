"""The server's Prometheus metrics: per app, or summed over ``serve --workers N``."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from retrieval_pipeline.serve_guard import SERVED_ENDPOINTS


class Metrics:
    """Prometheus metrics for one app (its own registry, so apps do not collide).

    ``multiprocess``: the app is one of several ``serve --workers`` processes.
    Counters and histograms are then written to prometheus_client's shared files
    (``PROMETHEUS_MULTIPROC_DIR``, set by :func:`serve` before the workers start), so
    ``/metrics`` answers the sum over every worker whichever worker takes the scrape;
    the pool gauge is each live worker's pool, summed (``livesum``), refreshed after
    every request and at each scrape.
    """

    def __init__(
        self,
        pool_stats: Callable[[], Mapping[str, int]] | None,
        *,
        multiprocess: bool = False,
    ) -> None:
        self.registry = CollectorRegistry()
        self.multiprocess = multiprocess
        r = self.registry
        self.requests = Counter(
            "rp_http_requests",
            "HTTP requests by route and status code.",
            ["route", "status"],
            registry=r,
        )
        self.request_seconds = Histogram(
            "rp_http_request_seconds", "HTTP request latency.", ["route"], registry=r
        )
        self.queries = Counter(
            "rp_queries", "Pipeline queries by path.", ["path"], registry=r
        )
        self.stage_seconds = Histogram(
            "rp_stage_seconds",
            "Latency per pipeline stage.",
            ["stage"],
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
            registry=r,
        )
        self.fallbacks = Counter(
            "rp_fallbacks", "Stage fallbacks (degraded answers).", ["stage"], registry=r
        )
        self.empty = Counter(
            "rp_empty_results", "Queries that returned no chunk.", registry=r
        )
        self.denied = Counter(
            "rp_permission_rejections",
            "Requests refused or narrowed by access control "
            "(host, missing_key, invalid_key, missing_grant, principals_narrowed, "
            "tenant_overridden).",
            ["reason"],
            registry=r,
        )
        self.duplicate_share = Histogram(
            "rp_duplicate_share",
            "Share of near-duplicate passages in each returned context.",
            buckets=(0.0, 0.05, 0.1, 0.25, 0.5, 1.0),
            registry=r,
        )
        self.candidates = Histogram(
            "rp_candidate_pool",
            "Candidates considered per query.",
            buckets=(0, 5, 10, 20, 40, 80, 160, 320),
            registry=r,
        )
        self.workers = Gauge(
            "rp_workers",
            "Server worker processes alive.",
            registry=r,
            multiprocess_mode="livesum",
        )
        self.workers.set(1)
        self._pool_stats = pool_stats
        self._connections: Gauge | None = None
        if pool_stats is not None:
            self._connections = Gauge(
                "rp_db_pool_connections",
                "Database pool connections by state (summed over the workers).",
                ["state"],
                registry=r,
                multiprocess_mode="livesum",
            )
            if not multiprocess:
                for state in _POOL_STATES:
                    self._connections.labels(state).set_function(
                        _stat(pool_stats, state)
                    )

    def refresh_pool(self) -> None:
        """Write this worker's pool counters (multiprocess mode; else read live)."""
        if not self.multiprocess or self._connections is None:
            return
        assert self._pool_stats is not None
        stats = self._pool_stats()
        for state in _POOL_STATES:
            self._connections.labels(state).set(float(stats.get(state, 0)))

    def exposition(self) -> bytes:
        """The text ``/metrics`` answers: this app's, or every worker's summed."""
        if not self.multiprocess:
            return generate_latest(self.registry)
        from prometheus_client import multiprocess

        self.refresh_pool()
        forget_dead_workers()
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return generate_latest(registry)

    def observe(self, record: Mapping[str, Any]) -> None:
        """Record one query's trace (a :mod:`retrieval_pipeline.observability` hook)."""
        self.queries.labels(str(record.get("path"))).inc()
        for stage, ms in (record.get("stage_ms") or {}).items():
            self.stage_seconds.labels(stage).observe(float(ms) / 1000)
        for item in record.get("fallbacks") or []:
            self.fallbacks.labels(str(item.get("stage"))).inc()
        if record.get("empty"):
            self.empty.inc()
        self.duplicate_share.observe(float(record.get("duplicate_share", 0.0)))
        self.candidates.observe(float(record.get("fusion_candidates", 0)))


_POOL_STATES = ("pool_size", "pool_available", "requests_waiting")


def _stat(
    pool_stats: Callable[[], Mapping[str, int]], name: str
) -> Callable[[], float]:
    return lambda: float(pool_stats().get(name, 0))


class RequestMetrics:
    """Pure ASGI middleware counting requests by route and status, and their time."""

    def __init__(self, app: Any, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(
        self,
        scope: MutableMapping[str, Any],
        receive: Callable[[], Awaitable[Any]],
        send: Callable[[Any], Awaitable[None]],
    ) -> None:
        """Pass the request on; count its route and status and time it."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_status(message: Mapping[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        route = route_label(str(scope.get("path", "")))
        try:
            await self.app(scope, receive, send_status)
        finally:
            self.metrics.requests.labels(route, str(status)).inc()
            self.metrics.request_seconds.labels(route).observe(
                time.perf_counter() - started
            )
            self.metrics.refresh_pool()


# Metric labels: the served endpoints, longest first so "stream_log" is not "stream".
_ROUTES = tuple(sorted(SERVED_ENDPOINTS, key=len, reverse=True))


def route_label(path: str) -> str:
    """A bounded label set (never the raw path, which a client controls)."""
    if path.startswith("/retrieve"):
        for name in _ROUTES:
            if path.startswith(f"/retrieve/{name}"):
                return name
        return "retrieve_other"
    if path in ("/healthz", "/metrics", "/"):
        return path.strip("/") or "index"
    return "other"


_LIVE_FILE = re.compile(r"^gauge_live\w*?_(\d+)\.db$")


def forget_dead_workers(directory: str | None = None) -> list[int]:
    """Drop the live gauges of worker processes that are gone; returns their pids.

    A worker that exits cleanly removes its own; one killed (SIGKILL, the OOM
    killer) cannot, and uvicorn starts a replacement beside its files, so
    ``rp_workers`` and the pool gauges went on counting it. Checked at each scrape.
    """
    from prometheus_client import multiprocess

    directory = directory or os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if not directory or not os.path.isdir(directory):
        return []
    dead: set[int] = set()
    for name in os.listdir(directory):
        match = _LIVE_FILE.match(name)
        if match and not _alive(int(match.group(1))):
            dead.add(int(match.group(1)))
    for pid in sorted(dead):
        multiprocess.mark_process_dead(pid, directory)  # type: ignore[no-untyped-call]
    return sorted(dead)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True
