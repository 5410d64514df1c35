"""The pipeline over HTTP: LangServe routes, health, Prometheus metrics, API keys.

``create_app()`` builds a FastAPI app with LangServe routes for the compiled pipeline
under ``/retrieve`` (``/invoke``, ``/batch``, ``/stream``, ``/stream_log``,
``/input_schema``, ``/output_schema``, ``/playground``), ``/healthz`` and ``/metrics``.
``retrieval-pipeline serve`` runs it with uvicorn, in one process or in ``--workers N``
processes (see :func:`serve`). Needs the ``serve`` extra.

Access: without API keys every request's ``principals`` and ``tenant`` are trusted,
so the server refuses to bind anywhere but loopback. With API keys (a JSON or YAML
file, see :class:`~retrieval_pipeline.auth.ApiKeys`) every route but ``/healthz``
needs a key; each key maps to principals, a tenant and grants, bound once per request
by :class:`~retrieval_pipeline.auth.RequestGate` and applied to every pipeline input
by :func:`~retrieval_pipeline.auth.bind_scope` (see that module for the rules).
"""

from __future__ import annotations

import ipaddress
import json
import logging
import math
import os
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, MutableMapping
from pathlib import Path
from typing import Any, Literal, get_args

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from langchain_core.runnables import (
    Runnable,
    RunnableBinding,
    RunnableConfig,
    RunnableLambda,
)
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from pydantic import BaseModel

from retrieval_pipeline.auth import (
    AGENT_USER_KEY,
    ApiKeys,
    Identity,
    RequestGate,
    Scope,
    bind_scope,
    scope_for,
)
from retrieval_pipeline.errors import (
    AccessDeniedError,
    ConfigurationError,
    DatabaseTimeoutError,
    DatabaseUnavailableError,
    InvalidQueryError,
    RetrievalPipelineError,
)
from retrieval_pipeline.graph.state import PipelineInput
from retrieval_pipeline.observability import add_trace_listener

EndpointName = Literal[
    "invoke",
    "batch",
    "stream",
    "stream_log",
    "input_schema",
    "output_schema",
    "config_schema",
    "playground",
]

__all__ = ["ApiKeys", "Identity", "create_app", "is_loopback", "scope_for", "serve"]

API_KEYS_ENV = "RETRIEVAL_PIPELINE_API_KEYS"
"""Path of the API-key file the server reads when ``--api-keys`` is not given."""

_log = logging.getLogger(__name__)


# --- metrics ----------------------------------------------------------------------
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
            "(missing_key, invalid_key, principals_narrowed, tenant_overridden).",
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


class _Served(RunnableBinding[Any, Any]):
    """The pipeline as served: LangServe's callback-event aggregator left out.

    LangServe attaches an aggregator to every ``/invoke`` and ``/batch`` call; its
    events are only used when ``include_callback_events`` is on (it is off here), but
    while attached it turns every node, branch and router into a callback run, which
    costs more than the HTTP round trip. Other handlers (LangSmith, stream_log) stay.
    """

    async def ainvoke(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> Any:
        return await self.bound.ainvoke(input, _without_aggregator(config), **kwargs)

    async def abatch(
        self,
        inputs: list[Any],
        config: RunnableConfig | list[RunnableConfig] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> list[Any]:
        configs: Any = (
            [_without_aggregator(c) for c in config]
            if isinstance(config, list)
            else _without_aggregator(config)
        )
        return await self.bound.abatch(
            inputs, configs, return_exceptions=return_exceptions, **kwargs
        )

    async def astream(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> AsyncIterator[Any]:
        async for item in self.bound.astream(
            input, _without_aggregator(config), **kwargs
        ):
            yield item

    async def astream_log(  # type: ignore[override]
        self,
        input: Any,
        config: RunnableConfig | None = None,
        *,
        diff: bool = True,
        with_streamed_output_list: bool = True,
        **kwargs: Any,
    ) -> AsyncIterator[Any]:
        """The run log of the whole run only: no node, router or branch logs.

        Inner runs carry start and end times per stage (a timing side channel the
        debug grant exists to close) and routers' ``Send`` objects (not JSON). The
        caller's name/type/tag filters are ignored for the same reason.
        """
        async for item in self.bound.astream_log(
            input,
            _without_aggregator(config),
            diff=diff,  # type: ignore[call-overload]
            with_streamed_output_list=with_streamed_output_list,
            include_names=[],
        ):
            yield item


def _without_aggregator(config: RunnableConfig | None) -> RunnableConfig | None:
    """The request's config without LangServe's aggregator or a forged identity.

    A client's ``configurable`` reaches the graph; the Agent Server's user key in it
    (which :func:`~retrieval_pipeline.auth.bind_state` reads) is dropped, so a
    LangServe client cannot claim an identity by writing it there.
    """
    from langserve.callbacks import AsyncEventAggregatorCallback

    if not config:
        return config
    configurable = config.get("configurable")
    if isinstance(configurable, dict) and AGENT_USER_KEY in configurable:
        config = {
            **config,
            "configurable": {
                k: v for k, v in configurable.items() if k != AGENT_USER_KEY
            },
        }
    handlers = config.get("callbacks")
    if isinstance(handlers, list):
        kept = [h for h in handlers if not isinstance(h, AsyncEventAggregatorCallback)]
        return {**config, "callbacks": kept or None}
    return config


# --- app --------------------------------------------------------------------------
def _scoped(
    pipeline: Runnable[Any, Any], *, keyed: bool, metrics: Metrics
) -> Runnable[Any, Any]:
    """The pipeline behind the scope binding: every input passes it, on every route."""

    def count(scope: Scope) -> None:
        if scope.narrowed:
            metrics.denied.labels("principals_narrowed").inc()
        if scope.tenant_overridden:
            metrics.denied.labels("tenant_overridden").inc()

    def apply_identity(payload: Any) -> Any:
        return bind_scope(payload, keyed=keyed, on_scope=count)

    async def aapply_identity(payload: Any) -> Any:
        return apply_identity(payload)  # no thread hop on the async path

    return (
        RunnableLambda(apply_identity, afunc=aapply_identity, name="bind_scope")
        | pipeline
    ).with_types(input_type=PipelineInput)


def create_app(
    pipeline: Runnable[Any, Any] | None = None,
    *,
    api_keys: ApiKeys | None = None,
    health: Callable[[], Mapping[str, Any]] | None = None,
    pool_stats: Callable[[], Mapping[str, int]] | None = None,
    multiprocess_metrics: bool = False,
) -> FastAPI:
    """Build the FastAPI app.

    Args:
        pipeline: the compiled pipeline (default: the environment-resolved ``graph``).
        api_keys: keys mapping to principals and tenant; None trusts request bodies.
        health: a database check (default: the pipeline store's); ``/healthz``
            answers ok or unavailable and nothing more.
        pool_stats: the database pool's statistics for ``/metrics``.
        multiprocess_metrics: one of several worker processes (see :class:`Metrics`).
    """
    from langserve import add_routes

    if pipeline is None:
        from retrieval_pipeline.graph.builder import graph

        pipeline = graph
    if health is None or pool_stats is None:
        default_health, default_stats = _store_probes()
        health = health or default_health
        pool_stats = pool_stats or default_stats

    metrics = Metrics(pool_stats, multiprocess=multiprocess_metrics)
    remove_listener = add_trace_listener(metrics.observe)
    app = FastAPI(
        title="retrieval-pipeline",
        description="Ranked, deduplicated, token-budgeted context with provenance.",
        version="0.1.0",
    )
    app.router.add_event_handler("shutdown", remove_listener)
    app.state.metrics = metrics
    app.state.auth = "api-keys" if api_keys else "none"

    served = _Served(
        bound=_scoped(pipeline, keyed=api_keys is not None, metrics=metrics)
    )
    add_routes(
        app,
        served,
        path="/retrieve",
        enabled_endpoints=[e for e in SERVED_ENDPOINTS if e != "playground"],
    )
    _add_playground(app, served, "/retrieve")

    @app.get("/healthz")
    def healthz() -> Response:
        try:
            health()
        except Exception:  # noqa: BLE001 - public: says ok or not, nothing else
            _log.warning("health check failed", exc_info=True)
            return JSONResponse({"status": "unavailable"}, 503)
        return JSONResponse({"status": "ok"})

    @app.get("/metrics")
    def prometheus() -> Response:
        return Response(metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    @app.exception_handler(RetrievalPipelineError)
    async def user_error(request: Request, exc: RetrievalPipelineError) -> Response:
        return _error_response(exc)

    # Outermost first: metrics see every answer, including the gate's 401s.
    app.add_middleware(
        RequestGate,
        api_keys=api_keys,
        on_denied=lambda reason: metrics.denied.labels(reason).inc(),
        validate=lambda path, body: _validate_inputs(
            path, body, keyed=api_keys is not None
        ),
    )
    app.add_middleware(_RequestMetrics, metrics=metrics)

    @app.get("/", include_in_schema=False)
    def index() -> PlainTextResponse:
        return PlainTextResponse(
            "retrieval-pipeline: POST /retrieve/invoke, /retrieve/playground/, "
            "/healthz, /metrics, /docs\n"
        )

    return app


def _add_playground(app: FastAPI, served: Runnable[Any, Any], path: str) -> None:
    """LangServe's playground page, rendered from a form-friendly input schema.

    The playground's form renderer (JSON Forms) knows no ``{"type": "null"}``, so a
    nullable field (``doc_ids``, ``tenant``) left the page blank. The page gets the
    same schema with ``X | null`` read as ``X`` and without ``doc_ids``
    (:func:`playground_schema`): the form sends every list field, empty or not, and
    an empty ``doc_ids`` scopes a query to no document at all (scoping by id is for
    API callers). An empty ``principals`` means public documents only, as an absent
    one does on a server without keys; with keys it can only narrow. What the API
    accepts is unchanged: the playground's runs go through ``/stream_log`` and the
    same gate and validation as every other caller's.
    """
    from langserve.playground import serve_playground

    schema: dict[str, Any] = playground_schema(
        served.get_input_jsonschema(), drop=("doc_ids",)
    )
    output_schema: Any = served.output_schema

    class PlaygroundInput(BaseModel):
        @classmethod
        def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
            return schema

    async def playground(file_path: str, request: Request) -> Response:
        base = request.scope.get("root_path", "").rstrip("/") + path + "/playground"
        return await serve_playground(
            served,
            PlaygroundInput,
            output_schema,
            ["configurable"],
            base,
            file_path,
            False,  # feedback
            False,  # public trace links
            playground_type="default",
        )

    app.get(path + "/playground/{file_path:path}", include_in_schema=False)(playground)


def playground_schema(schema: Any, *, drop: tuple[str, ...] = ()) -> Any:
    """A JSON schema with ``anyOf: [X, {"type": "null"}]`` read as ``X``.

    ``drop``: properties left out of every object schema.
    """
    if isinstance(schema, list):
        return [playground_schema(item, drop=drop) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: playground_schema(value, drop=drop) for key, value in schema.items()}
    properties = out.get("properties")
    if isinstance(properties, dict) and drop:
        out["properties"] = {k: v for k, v in properties.items() if k not in drop}
        if isinstance(out.get("required"), list):
            out["required"] = [k for k in out["required"] if k not in drop]
    options = out.get("anyOf")
    if isinstance(options, list):
        kept = [o for o in options if o != {"type": "null"}]
        if len(kept) != len(options):
            out.pop("anyOf")
            if len(kept) == 1:
                out = {**kept[0], **out}
            elif kept:
                out["anyOf"] = kept
            if out.get("default", ...) is None:
                out.pop("default")
    return out


SERVED_ENDPOINTS: tuple[EndpointName, ...] = get_args(EndpointName)
"""LangServe endpoints the app enables (``stream_events`` and feedback are off)."""


_DATA_ROUTES = ("invoke", "batch", "stream", "stream_log")
MAX_BATCH_ITEMS = 64
"""Inputs one ``/batch`` request may hold: one caller cannot hold the server for
minutes (2,000 items took 28 s and stalled every other caller)."""


def _validate_inputs(path: str, body: Any, *, keyed: bool) -> None:
    """Check a data route's inputs before any response starts.

    A stream cannot answer 400 once its first event is out, so the question, limit
    and access fields of ``/invoke``, ``/stream``, ``/stream_log`` and each
    ``/batch`` item are validated here, with the caller bound, exactly as the
    pipeline will read them. Inputs of the wrong shape are left to LangServe's 422.
    """
    from retrieval_pipeline.graph.routing import validate_input

    route = path.rstrip("/").rsplit("/", 1)[-1]
    if not path.startswith("/retrieve/") or route not in _DATA_ROUTES:
        return
    if not isinstance(body, dict):
        raise InvalidQueryError("the request body must be a JSON object")
    config = body.get("config")
    if route == "batch":
        inputs = body.get("inputs")
        if not isinstance(inputs, list):
            raise InvalidQueryError("'inputs' must be a list of pipeline inputs")
        if len(inputs) > MAX_BATCH_ITEMS:
            raise InvalidQueryError(
                f"a batch holds at most {MAX_BATCH_ITEMS} inputs, got {len(inputs)}; "
                "split it into several requests"
            )
        if not all(isinstance(item, dict) for item in inputs):
            raise InvalidQueryError(
                "each item of 'inputs' must be an object with a 'question'"
            )
        if isinstance(config, list) and len(config) != len(inputs):
            raise InvalidQueryError(
                "'config' as a list needs one entry per item of 'inputs'"
            )
        configs = config if isinstance(config, list) else [config]
    else:
        inputs = [body.get("input")]
        configs = [config]
    if not all(c is None or isinstance(c, dict) for c in configs):
        raise InvalidQueryError("'config' must be an object (or, for batch, a list)")
    if body.get("kwargs") is not None and not isinstance(body["kwargs"], dict):
        raise InvalidQueryError("'kwargs' must be an object")
    for item in inputs:
        if isinstance(item, dict) and "question" in item:
            validate_input(bind_scope(item, keyed=keyed))  # type: ignore[arg-type]


def _error_response(exc: RetrievalPipelineError) -> Response:
    """Map the project's errors to a status and a message that names no server path."""
    if isinstance(exc, DatabaseTimeoutError):
        _log.warning("database timeout: %s", exc)
        return JSONResponse(
            {
                "detail": "a database statement ran past the statement timeout and "
                "was cancelled (nothing was half-written); retry, or narrow the query"
            },
            503,
        )
    if isinstance(exc, DatabaseUnavailableError):
        _log.warning("database unavailable: %s", exc)
        return JSONResponse(
            {"detail": "the database is unavailable; retry shortly"},
            503,
            headers={"Retry-After": "1"},
        )
    if isinstance(exc, AccessDeniedError):
        return JSONResponse({"detail": str(exc)}, 403)
    if isinstance(exc, InvalidQueryError | ConfigurationError):
        return JSONResponse({"detail": str(exc)}, 400)
    # Another project error a request caused (a rejected record, a dimension
    # mismatch): the message is written for the user and names no secret.
    return JSONResponse({"detail": str(exc)}, 400)


class _RequestMetrics:
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

        route = _route_label(str(scope.get("path", "")))
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


def _route_label(path: str) -> str:
    """A bounded label set (never the raw path, which a client controls)."""
    if path.startswith("/retrieve"):
        for name in _ROUTES:
            if path.startswith(f"/retrieve/{name}"):
                return name
        return "retrieve_other"
    if path in ("/healthz", "/metrics", "/"):
        return path.strip("/") or "index"
    return "other"


def _store_probes() -> tuple[
    Callable[[], Mapping[str, Any]], Callable[[], Mapping[str, int]]
]:
    from retrieval_pipeline.graph.resources import default_resources

    def health() -> Mapping[str, Any]:
        store = default_resources().store
        return {"schema_versions": store.schema_versions()}

    def stats() -> Mapping[str, int]:
        return default_resources().store.pool_stats()

    return health, stats


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and ``localhost``."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


DB_CONNECTIONS_ENV = "RETRIEVAL_PIPELINE_DB_CONNECTIONS"
"""The server's database connection budget over all its workers (default 16)."""
DEFAULT_DB_CONNECTIONS = 16
POOL_MIN, POOL_MAX = 2, 8
"""Bounds on one worker's pool: two connections let one request's parallel branches
overlap; beyond eight a worker gains nothing (its event loop runs the sync stages on
an executor of ``min(32, cores + 4)`` threads, and the GIL bounds it before that)."""
_WORKER_ENV = "RETRIEVAL_PIPELINE_SERVE_WORKER"
"""How :func:`serve` hands its resolved settings to worker processes (JSON)."""


def pool_per_worker(budget: int, workers: int) -> int:
    """Connections in one worker's pool: ``clamp(ceil(budget / workers), 2, 8)``.

    The budget is the most the server as a whole should hold open
    (``--db-connections``, ``RETRIEVAL_PIPELINE_DB_CONNECTIONS``, default 16): one
    worker gets 8, two get 8 each, four get 4 each, eight get 2 each. A budget that
    cannot give every worker two connections is refused (:func:`serve`).
    """
    return max(POOL_MIN, min(POOL_MAX, math.ceil(budget / workers)))


def _db_budget(value: int | None) -> int:
    if value is not None:
        return value
    raw = os.environ.get(DB_CONNECTIONS_ENV, "").strip()
    if not raw:
        return DEFAULT_DB_CONNECTIONS
    try:
        return int(raw)
    except ValueError:
        raise ConfigurationError(
            f"{DB_CONNECTIONS_ENV} must be a whole number of connections, got {raw!r}"
        ) from None


def serve(
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    api_keys_file: str | None = None,
    log_level: str = "info",
    workers: int = 1,
    db_connections: int | None = None,
) -> None:
    """Run the server (blocking). Refuses a non-loopback bind without API keys.

    ``workers``: uvicorn worker processes sharing one listening socket and the
    database. This process checks everything first (the key file, the connection
    budget against the server's ``max_connections``), opens the database once (it
    starts the embedded server if needed and applies migrations, under the store's
    advisory lock, so no worker ever migrates), then starts the workers; each opens
    its own pool of :func:`pool_per_worker` connections, loads the embedder and reads
    the same key file. With several workers, ``/metrics`` sums every worker
    (prometheus_client's multiprocess mode, in a private temporary directory).
    """
    import uvicorn

    if workers < 1:
        raise ConfigurationError(f"--workers must be at least 1, got {workers}")
    path = api_keys_file or os.environ.get(API_KEYS_ENV)
    api_keys = ApiKeys.load(path) if path else None
    if api_keys is None and not is_loopback(host):
        raise ConfigurationError(
            f"refusing to bind {host} without authentication: every request's "
            "principals would be trusted. Pass --api-keys FILE (or set "
            f"{API_KEYS_ENV}), or bind 127.0.0.1."
        )
    budget = _db_budget(db_connections)
    if budget < POOL_MIN * workers:
        raise ConfigurationError(
            f"{workers} workers need at least {POOL_MIN * workers} database "
            f"connections ({POOL_MIN} each), but the budget is {budget}: raise "
            f"--db-connections (or {DB_CONNECTIONS_ENV}) or run fewer workers"
        )
    pool = pool_per_worker(budget, workers)
    database = _prepare_database(pool * workers)
    settings = {
        "database_url": database,
        "pool_size": pool,
        "api_keys_file": str(Path(path).resolve()) if path else None,
        "multiprocess": workers > 1,
    }
    _configure_trace_log()
    if api_keys is None:
        print(
            f"no API keys configured: bound to loopback only ({host}); request "
            "bodies' principals and tenant are trusted"
        )
    else:
        print(f"API keys: {len(api_keys.by_digest)} configured; bound to {host}")
    print(
        f"{workers} worker{'s' if workers > 1 else ''}, {pool} database connections "
        f"each (budget {budget})"
    )
    print(
        f"serving on http://{host}:{port}/retrieve (playground: /retrieve/playground/)"
    )
    if workers == 1:
        uvicorn.run(_worker_app(settings), host=host, port=port, log_level=log_level)
        return
    own_dir = "PROMETHEUS_MULTIPROC_DIR" not in os.environ
    metrics_dir = (
        tempfile.mkdtemp(prefix="rp-metrics-")
        if own_dir
        else os.environ["PROMETHEUS_MULTIPROC_DIR"]
    )
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir
    os.environ[_WORKER_ENV] = json.dumps(settings)
    try:
        uvicorn.run(
            "retrieval_pipeline.serve:worker_app",
            factory=True,
            host=host,
            port=port,
            workers=workers,
            log_level=log_level,
        )
    finally:
        os.environ.pop(_WORKER_ENV, None)
        if own_dir:
            os.environ.pop("PROMETHEUS_MULTIPROC_DIR", None)
            shutil.rmtree(metrics_dir, ignore_errors=True)


def _prepare_database(connections: int) -> str:
    """Open the database once: start it if embedded, migrate, check the budget.

    Returns the URL the workers connect to (the embedded server's, or DATABASE_URL).
    """
    from retrieval_pipeline.settings import database_url
    from retrieval_pipeline.tools.store.embedded import EmbeddedPostgres
    from retrieval_pipeline.tools.store.store import Store

    url = database_url() or EmbeddedPostgres(keep_running=True).start()
    with Store(url, pool_size=1) as store, store.connection() as conn:  # migrates
        row = conn.execute(
            "SELECT current_setting('max_connections')::int"
            " - current_setting('superuser_reserved_connections')::int"
        ).fetchone()
    available = int(row[0]) if row else 0
    if connections > available:
        raise ConfigurationError(
            f"the workers' pools would hold {connections} connections but the "
            f"database allows {available}; lower --db-connections or --workers, or "
            "raise the server's max_connections"
        )
    return url


def _configure_trace_log() -> None:
    trace_handler = logging.StreamHandler()
    trace_handler.setFormatter(logging.Formatter("%(message)s"))
    trace_logger = logging.getLogger("retrieval_pipeline.trace")
    trace_logger.addHandler(trace_handler)
    trace_logger.setLevel(logging.INFO)
    trace_logger.propagate = False


def worker_app() -> FastAPI:
    """The app of one ``serve --workers N`` process (a uvicorn factory)."""
    raw = os.environ.get(_WORKER_ENV)
    if not raw:
        raise ConfigurationError(
            "worker_app is started by `retrieval-pipeline serve --workers N`"
        )
    _configure_trace_log()
    return _worker_app(json.loads(raw))


def _worker_app(settings: Mapping[str, Any]) -> FastAPI:
    """One process's app: its own pool, embedder and key table, warmed up."""
    from retrieval_pipeline.graph.builder import build_pipeline
    from retrieval_pipeline.graph.resources import PipelineResources
    from retrieval_pipeline.tools.embeddings import resolve_embedder
    from retrieval_pipeline.tools.judge import resolve_judge
    from retrieval_pipeline.tools.retrieve import Retriever
    from retrieval_pipeline.tools.store.store import Store

    store = Store(str(settings["database_url"]), pool_size=int(settings["pool_size"]))
    embedder = resolve_embedder()
    embedder.embed_query("warm-up")  # load the model before taking requests
    resources = PipelineResources(
        retriever=Retriever(store, embedder), judge=resolve_judge()
    )
    keys_file = settings.get("api_keys_file")
    multiprocess = bool(settings.get("multiprocess"))
    app = create_app(
        build_pipeline(resources),
        api_keys=ApiKeys.load(keys_file) if keys_file else None,
        health=lambda: {"schema_versions": store.schema_versions()},
        pool_stats=store.pool_stats,
        multiprocess_metrics=multiprocess,
    )

    def shutdown() -> None:
        if multiprocess:
            from prometheus_client import multiprocess as mp

            mp.mark_process_dead(os.getpid())  # type: ignore[no-untyped-call]
        store.close()

    app.router.add_event_handler("shutdown", shutdown)
    return app
