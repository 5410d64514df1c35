"""The pipeline over HTTP: LangServe routes, health, Prometheus metrics, API keys.

``create_app()`` builds a FastAPI app with LangServe routes for the compiled pipeline
under ``/retrieve`` (``/invoke``, ``/batch``, ``/stream``, ``/stream_log``,
``/input_schema``, ``/output_schema``, ``/playground``), ``/healthz`` and ``/metrics``.
``retrieval-pipeline serve`` runs it with uvicorn, in one process or in ``--workers N``
processes (see :func:`serve`). Needs the ``serve`` extra. The app is built in
:mod:`~retrieval_pipeline.serve_app`, its input checks and error statuses live in
:mod:`~retrieval_pipeline.serve_guard`, its Prometheus metrics in
:mod:`~retrieval_pipeline.serve_metrics`; this module runs it.

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
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fastapi import FastAPI

from retrieval_pipeline.auth import ApiKeys, Identity, scope_for
from retrieval_pipeline.errors import ConfigurationError

# The app, its guard and its metrics live beside this module; their public names are
# re-exported so ``retrieval_pipeline.serve`` stays the one import for callers.
from retrieval_pipeline.serve_app import create_app, playground_schema
from retrieval_pipeline.serve_guard import (
    MAX_BATCH_ITEMS,
    SERVED_ENDPOINTS,
    EndpointName,
)
from retrieval_pipeline.serve_metrics import Metrics
from retrieval_pipeline.settings import allowed_hosts

__all__ = [
    "MAX_BATCH_ITEMS",
    "SERVED_ENDPOINTS",
    "ApiKeys",
    "EndpointName",
    "Identity",
    "Metrics",
    "create_app",
    "is_loopback",
    "playground_schema",
    "pool_per_worker",
    "scope_for",
    "serve",
    "worker_app",
]

API_KEYS_ENV = "RETRIEVAL_PIPELINE_API_KEYS"
"""Path of the API-key file the server reads when ``--api-keys`` is not given."""


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
    hosts = allowed_hosts(keyed=api_keys is not None)
    pool = pool_per_worker(budget, workers)
    database = _prepare_database(pool * workers)
    settings = {
        "database_url": database,
        "pool_size": pool,
        "api_keys_file": str(Path(path).resolve()) if path else None,
        "multiprocess": workers > 1,
        "allowed_hosts": None if hosts is None else sorted(hosts),
    }
    _configure_logging()
    if api_keys is None:
        print(
            f"no API keys configured: bound to loopback only ({host}); request "
            "bodies' principals and tenant are trusted; answering only requests "
            "addressed to " + ", ".join(sorted(hosts or ()))
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
    else:
        _run_workers(settings, host, port, workers=workers, log_level=log_level)


def _run_workers(
    settings: Mapping[str, Any], host: str, port: int, *, workers: int, log_level: str
) -> None:
    """``workers`` uvicorn processes on one socket, metrics summed over them."""
    import uvicorn

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


class AccessLogWithoutQuery(logging.Filter):
    """Drop query strings from uvicorn's access log lines.

    A client that puts a key or a question in the URL (``?api_key=...``) would
    otherwise write it to the log; the path, method and status stay.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        """Rewrite the record's path argument; never drop the line."""
        args = record.args
        if isinstance(args, tuple) and len(args) == 5 and isinstance(args[2], str):
            path, mark, _ = args[2].partition("?")
            if mark:
                record.args = (args[0], args[1], f"{path}?...", args[3], args[4])
        return True


def _configure_logging() -> None:
    """The access log without query strings; the trace log as bare JSON lines."""
    access = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, AccessLogWithoutQuery) for f in access.filters):
        access.addFilter(AccessLogWithoutQuery())
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
    _configure_logging()
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
        allowed_hosts=settings.get("allowed_hosts"),
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
