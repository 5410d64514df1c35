"""`/healthz` and `/metrics` for the Agent Server (`http.app` in langgraph.json).

The same two routes as ``retrieval-pipeline serve``, with the same rules:

- ``/healthz`` answers ``ok`` or ``unavailable`` (the database check) to anyone;
- ``/metrics`` (Prometheus text: queries by path, stage latencies, fallbacks, empty
  results, the pool) needs a key with the ``metrics`` grant from the same key file
  (``RETRIEVAL_PIPELINE_API_KEYS``) that :mod:`retrieval_pipeline.agent_auth` reads;
  without a key file (a local ``langgraph dev``) it is open, as on a loopback
  ``serve``.

Both pass through the one :class:`~retrieval_pipeline.auth.RequestGate`. The Agent
Server lists its own ``/metrics`` (run-queue statistics, no authentication) before
any custom route, so a plain route could not take the path: the app claims its two
paths in a middleware, which the Agent Server runs ahead of its routing for every
request, and hands every other request on untouched. The query metrics are those of
the runs this process executes (``langgraph dev`` and a single ``langgraph up``
container run them in the server process).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from functools import lru_cache
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from retrieval_pipeline.auth import ApiKeys, RequestGate
from retrieval_pipeline.observability import add_trace_listener
from retrieval_pipeline.serve import API_KEYS_ENV, Metrics

_log = logging.getLogger(__name__)
OWN_PATHS = frozenset({"/healthz", "/metrics"})

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


def _pool_stats() -> Mapping[str, int]:
    """The pipeline's pool, once a run has opened it (a scrape opens nothing)."""
    from retrieval_pipeline.graph import resources

    current = resources._default
    return current.store.pool_stats() if current is not None else {}


metrics = Metrics(_pool_stats)
add_trace_listener(metrics.observe)


def _health(request: Request) -> Response:
    from retrieval_pipeline.graph.resources import default_resources

    try:
        default_resources().store.schema_versions()
    except Exception:  # noqa: BLE001 - public: says ok or not, nothing else
        _log.warning("health check failed", exc_info=True)
        return JSONResponse({"status": "unavailable"}, 503)
    return JSONResponse({"status": "ok"})


def _metrics(request: Request) -> Response:
    return Response(metrics.exposition(), media_type=CONTENT_TYPE_LATEST)


_routes = Starlette(
    routes=[
        Route("/healthz", _health, methods=["GET"]),
        Route("/metrics", _metrics, methods=["GET"]),
    ]
)


@lru_cache(maxsize=4)
def _gate(keys_file: str | None) -> RequestGate:
    return RequestGate(
        _routes,
        api_keys=ApiKeys.load(keys_file) if keys_file else None,
        on_denied=lambda reason: metrics.denied.labels(reason).inc(),
    )


class ClaimPaths:
    """Pure ASGI middleware: ``/healthz`` and ``/metrics`` here, the rest passes on."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve our two paths through the gate; hand everything else on."""
        if scope["type"] == "http" and scope.get("path") in OWN_PATHS:
            gate = _gate(os.environ.get(API_KEYS_ENV) or None)
            await gate(scope, receive, send)
            return
        await self.app(scope, receive, send)


app = Starlette(middleware=[Middleware(ClaimPaths)])
"""The ``http.app`` of ``langgraph.json``."""
