"""The pipeline over HTTP: LangServe routes, health, Prometheus metrics, API keys.

``create_app()`` builds a FastAPI app with LangServe routes for the compiled pipeline
under ``/retrieve`` (``/invoke``, ``/batch``, ``/stream``, ``/stream_log``,
``/input_schema``, ``/output_schema``, ``/playground``), ``/healthz`` and ``/metrics``.
``retrieval-pipeline serve`` runs it with uvicorn. Needs the ``serve`` extra.

Access: without API keys every request's ``principals`` and ``tenant`` are trusted,
so the server refuses to bind anywhere but loopback. With API keys (a JSON or YAML
file, see :class:`ApiKeys`) each key maps to principals and a tenant; a request may
narrow its principals but never widen them, and its tenant is always the key's.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import logging
import os
import time
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from fastapi import Depends, FastAPI, HTTPException, Request
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

from retrieval_pipeline.errors import (
    ConfigurationError,
    DatabaseUnavailableError,
    RetrievalPipelineError,
)
from retrieval_pipeline.graph.state import PipelineInput
from retrieval_pipeline.observability import add_trace_listener

API_KEYS_ENV = "RETRIEVAL_PIPELINE_API_KEYS"
"""Path of the API-key file the server reads when ``--api-keys`` is not given."""
IDENTITY_KEY = "retrieval_pipeline_identity"
"""Request-config metadata key carrying the authenticated caller (server-side only)."""

_log = logging.getLogger(__name__)


# --- API keys ---------------------------------------------------------------------
@dataclass(frozen=True)
class Identity:
    """What an API key grants: a name (for metrics/logs), principals and a tenant."""

    name: str
    principals: tuple[str, ...]
    tenant: str | None


@dataclass
class ApiKeys:
    """API keys mapped to identities, loaded from a JSON or YAML file.

    ::

        keys:
          - name: support-bot
            key_env: SUPPORT_BOT_KEY      # the key itself lives in the environment
            principals: [support]
            tenant: acme
          - name: ops
            sha256: 5e88...               # or the hex SHA-256 of the key
            principals: [ops, security]

    Keys are compared as SHA-256 digests in constant time; the file never needs to
    hold a key in clear. Callers send ``Authorization: Bearer KEY`` or
    ``X-API-Key: KEY``.
    """

    by_digest: dict[bytes, Identity] = field(default_factory=dict)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> ApiKeys:
        """Read and validate a key file; errors name the file and the entry."""
        file = Path(path)
        try:
            raw = yaml.safe_load(file.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigurationError(f"cannot read API key file {file}: {exc}") from exc
        entries = raw.get("keys") if isinstance(raw, Mapping) else None
        if not isinstance(entries, list) or not entries:
            raise ConfigurationError(
                f"API key file {file} must hold a non-empty list under 'keys'"
            )
        keys = cls()
        for index, entry in enumerate(entries):
            where = f"{file}: keys[{index}]"
            if not isinstance(entry, Mapping) or not entry.get("name"):
                raise ConfigurationError(f"{where} needs a 'name'")
            principals = entry.get("principals") or []
            if not isinstance(principals, list) or not all(
                isinstance(p, str) and p for p in principals
            ):
                raise ConfigurationError(f"{where}: 'principals' must be strings")
            tenant = entry.get("tenant")
            if tenant is not None and not isinstance(tenant, str):
                raise ConfigurationError(f"{where}: 'tenant' must be a string")
            digest = _entry_digest(entry, where)
            if digest in keys.by_digest:
                raise ConfigurationError(f"{where}: duplicate key")
            keys.by_digest[digest] = Identity(
                str(entry["name"]), tuple(principals), tenant
            )
        return keys

    def identify(self, key: str) -> Identity | None:
        """The identity of ``key``, or None (constant-time over all keys)."""
        digest = hashlib.sha256(key.encode("utf-8")).digest()
        found: Identity | None = None
        for candidate, identity in self.by_digest.items():
            if hmac.compare_digest(candidate, digest):
                found = identity
        return found


def _entry_digest(entry: Mapping[str, Any], where: str) -> bytes:
    if entry.get("key_env"):
        value = os.environ.get(str(entry["key_env"]))
        if not value:
            raise ConfigurationError(
                f"{where}: environment variable {entry['key_env']} is not set"
            )
        return hashlib.sha256(value.encode("utf-8")).digest()
    if entry.get("sha256"):
        try:
            digest = bytes.fromhex(str(entry["sha256"]))
        except ValueError:
            digest = b""
        if len(digest) != 32:
            raise ConfigurationError(f"{where}: 'sha256' must be 64 hex digits")
        return digest
    raise ConfigurationError(f"{where} needs 'key_env' or 'sha256'")


def scope_for(identity: Identity, requested: Mapping[str, Any]) -> dict[str, Any]:
    """Principals and tenant for a request: narrowed by the body, never widened."""
    wanted = requested.get("principals")
    granted = list(identity.principals)
    principals = [p for p in granted if p in set(wanted)] if wanted else granted
    return {"principals": principals, "tenant": identity.tenant}


# --- metrics ----------------------------------------------------------------------
class Metrics:
    """Prometheus metrics for one app (its own registry, so apps do not collide)."""

    def __init__(self, pool_stats: Callable[[], Mapping[str, int]] | None) -> None:
        self.registry = CollectorRegistry()
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
        if pool_stats is not None:
            connections = Gauge(
                "rp_db_pool_connections",
                "Database pool connections by state.",
                ["state"],
                registry=r,
            )
            for state in ("pool_size", "pool_available", "requests_waiting"):
                connections.labels(state).set_function(_stat(pool_stats, state))

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


def _without_aggregator(config: RunnableConfig | None) -> RunnableConfig | None:
    from langserve.callbacks import AsyncEventAggregatorCallback

    if not config:
        return config
    handlers = config.get("callbacks")
    if isinstance(handlers, list):
        kept = [h for h in handlers if not isinstance(h, AsyncEventAggregatorCallback)]
        return {**config, "callbacks": kept or None}
    return config


# --- app --------------------------------------------------------------------------
def _scoped(pipeline: Runnable[Any, Any]) -> Runnable[Any, Any]:
    """The pipeline behind an identity check: the key's scope replaces the body's."""

    def apply_identity(payload: PipelineInput, config: RunnableConfig) -> PipelineInput:
        identity = (config.get("metadata") or {}).get(IDENTITY_KEY)
        if identity is None:
            return payload
        return {**payload, **identity}  # type: ignore[typeddict-item]

    async def aapply_identity(
        payload: PipelineInput, config: RunnableConfig
    ) -> PipelineInput:
        return apply_identity(payload, config)  # no thread hop on the async path

    return (
        RunnableLambda(apply_identity, afunc=aapply_identity) | pipeline
    ).with_types(input_type=PipelineInput)


def create_app(
    pipeline: Runnable[Any, Any] | None = None,
    *,
    api_keys: ApiKeys | None = None,
    health: Callable[[], Mapping[str, Any]] | None = None,
    pool_stats: Callable[[], Mapping[str, int]] | None = None,
) -> FastAPI:
    """Build the FastAPI app.

    Args:
        pipeline: the compiled pipeline (default: the environment-resolved ``graph``).
        api_keys: keys mapping to principals and tenant; None trusts request bodies.
        health: a database check returning details (default: the pipeline store's).
        pool_stats: the database pool's statistics for ``/metrics``.
    """
    from langserve import add_routes

    if pipeline is None:
        from retrieval_pipeline.graph.builder import graph

        pipeline = graph
    if health is None or pool_stats is None:
        default_health, default_stats = _store_probes()
        health = health or default_health
        pool_stats = pool_stats or default_stats

    metrics = Metrics(pool_stats)
    remove_listener = add_trace_listener(metrics.observe)
    app = FastAPI(
        title="retrieval-pipeline",
        description="Ranked, deduplicated, token-budgeted context with provenance.",
        version="0.1.0",
    )
    app.router.add_event_handler("shutdown", remove_listener)
    app.state.metrics = metrics
    app.state.auth = "api-keys" if api_keys else "none"

    async def authenticate(request: Request) -> None:
        if api_keys is None:
            return
        key = _presented_key(request)
        if key is None:
            metrics.denied.labels("missing_key").inc()
            raise HTTPException(
                401,
                "missing API key: send 'Authorization: Bearer KEY' or 'X-API-Key: KEY'",
                headers={"WWW-Authenticate": "Bearer"},
            )
        identity = api_keys.identify(key)
        if identity is None:
            metrics.denied.labels("invalid_key").inc()
            raise HTTPException(
                401, "invalid API key", headers={"WWW-Authenticate": "Bearer"}
            )
        request.state.identity = identity

    async def per_request(config: dict[str, Any], request: Request) -> dict[str, Any]:
        identity: Identity | None = getattr(request.state, "identity", None)
        if identity is None:
            return config
        body = await _json_body(request)
        raw = body.get("input")
        requested: dict[str, Any] = raw if isinstance(raw, dict) else {}
        scope = scope_for(identity, requested)
        if requested.get("principals") and set(requested["principals"]) - set(
            scope["principals"]
        ):
            metrics.denied.labels("principals_narrowed").inc()
        if "tenant" in requested and requested["tenant"] != identity.tenant:
            metrics.denied.labels("tenant_overridden").inc()
        metadata = dict(config.get("metadata") or {})
        metadata[IDENTITY_KEY] = scope
        return {**config, "metadata": metadata}

    add_routes(
        app,
        # Without keys the body is trusted as is: no wrapper, no extra run.
        _Served(bound=_scoped(pipeline) if api_keys is not None else pipeline),
        path="/retrieve",
        per_req_config_modifier=per_request,
        dependencies=[Depends(authenticate)],
        enabled_endpoints=[
            "invoke",
            "batch",
            "stream",
            "stream_log",
            "input_schema",
            "output_schema",
            "config_schema",
            "playground",
        ],
    )

    @app.get("/healthz")
    def healthz() -> Response:
        try:
            details = dict(health())
        except RetrievalPipelineError as exc:
            return JSONResponse({"status": "unavailable", "reason": str(exc)}, 503)
        return JSONResponse({"status": "ok", **details})

    @app.get("/metrics")
    def prometheus() -> Response:
        return Response(
            generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST
        )

    @app.exception_handler(RetrievalPipelineError)
    async def user_error(request: Request, exc: RetrievalPipelineError) -> Response:
        status = 503 if isinstance(exc, DatabaseUnavailableError) else 400
        return JSONResponse({"detail": str(exc)}, status)

    @app.exception_handler(ValueError)
    async def bad_value(request: Request, exc: ValueError) -> Response:
        return JSONResponse({"detail": str(exc)}, 400)

    app.add_middleware(_RequestMetrics, metrics=metrics)

    @app.get("/", include_in_schema=False)
    def index() -> PlainTextResponse:
        return PlainTextResponse(
            "retrieval-pipeline: POST /retrieve/invoke, /retrieve/playground/, "
            "/healthz, /metrics, /docs\n"
        )

    return app


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


async def _json_body(request: Request) -> dict[str, Any]:
    try:
        body = json.loads(await request.body() or b"{}")
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _presented_key(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    if header.lower().startswith("bearer ") and header[7:].strip():
        return header[7:].strip()
    key = request.headers.get("x-api-key", "").strip()
    return key or None


_ROUTES = ("invoke", "batch", "stream_log", "stream", "input_schema", "output_schema")


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


def serve(
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    api_keys_file: str | None = None,
    log_level: str = "info",
) -> None:
    """Run the server (blocking). Refuses a non-loopback bind without API keys."""
    import uvicorn

    path = api_keys_file or os.environ.get(API_KEYS_ENV)
    api_keys = ApiKeys.load(path) if path else None
    if api_keys is None and not is_loopback(host):
        raise ConfigurationError(
            f"refusing to bind {host} without authentication: every request's "
            "principals would be trusted. Pass --api-keys FILE (or set "
            f"{API_KEYS_ENV}), or bind 127.0.0.1."
        )
    trace_handler = logging.StreamHandler()
    trace_handler.setFormatter(logging.Formatter("%(message)s"))
    trace_logger = logging.getLogger("retrieval_pipeline.trace")
    trace_logger.addHandler(trace_handler)
    trace_logger.setLevel(logging.INFO)
    trace_logger.propagate = False
    if api_keys is None:
        print(
            f"no API keys configured: bound to loopback only ({host}); request "
            "bodies' principals and tenant are trusted"
        )
    else:
        print(f"API keys: {len(api_keys.by_digest)} configured; bound to {host}")
    print(
        f"serving on http://{host}:{port}/retrieve (playground: /retrieve/playground/)"
    )
    uvicorn.run(
        create_app(api_keys=api_keys), host=host, port=port, log_level=log_level
    )
