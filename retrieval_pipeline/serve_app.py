"""The FastAPI app: LangServe routes for the pipeline, health, metrics, playground.

Every input passes the scope binding (:func:`~retrieval_pipeline.auth.bind_scope`)
on every route; the request gate, the input checks and the metrics middleware wrap
the whole app (:func:`create_app`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Collection, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import (
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
)
from langchain_core.runnables import (
    Runnable,
    RunnableBinding,
    RunnableConfig,
    RunnableLambda,
)
from langchain_core.runnables.config import run_in_executor
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import BaseModel

from retrieval_pipeline.auth import (
    AGENT_USER_KEY,
    ApiKeys,
    RequestGate,
    Scope,
    bind_scope,
)
from retrieval_pipeline.errors import RetrievalPipelineError
from retrieval_pipeline.graph.state import PipelineInput
from retrieval_pipeline.observability import add_trace_listener
from retrieval_pipeline.serve_guard import (
    SERVED_ENDPOINTS,
    StreamErrors,
    error_response,
    validate_inputs,
)
from retrieval_pipeline.serve_metrics import Metrics, RequestMetrics

_log = logging.getLogger("retrieval_pipeline.serve")


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
        """The whole run on one executor thread (sync ``invoke``).

        The stages are synchronous: LangGraph's async path hops to the executor and
        back for every node and router, which measured 2.6 ms per request more than
        one hop for the whole run (``bench/serve.py``). The scope binding is part of
        ``bound``, so it runs here exactly as on every other route.
        """
        return await run_in_executor(
            None, self.bound.invoke, input, _without_aggregator(config), **kwargs
        )

    async def abatch(
        self,
        inputs: list[Any],
        config: RunnableConfig | list[RunnableConfig] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> list[Any]:
        """A batch on one executor thread (``batch`` spreads its inputs itself)."""
        configs: Any = (
            [_without_aggregator(c) for c in config]
            if isinstance(config, list)
            else _without_aggregator(config)
        )
        return await run_in_executor(
            None,
            self.bound.batch,
            inputs,
            configs,
            return_exceptions=return_exceptions,
            **kwargs,
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
    allowed_hosts: Collection[str] | None = None,
) -> FastAPI:
    """Build the FastAPI app.

    Args:
        pipeline: the compiled pipeline (default: the environment-resolved ``graph``).
        api_keys: keys mapping to principals and tenant; None trusts request bodies.
        health: a database check (default: the pipeline store's); ``/healthz``
            answers ok or unavailable and nothing more.
        pool_stats: the database pool's statistics for ``/metrics``.
        multiprocess_metrics: one of several worker processes (see :class:`Metrics`).
        allowed_hosts: the ``Host`` names answered (None: any); ``serve`` passes
            :func:`~retrieval_pipeline.settings.allowed_hosts` (loopback names only
            without API keys, against DNS rebinding).
    """
    from langserve import add_routes

    from retrieval_pipeline import serve_encoding

    serve_encoding.install()
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
        # No redirect to the slash-less route: Starlette's names the request's
        # Host header, so a rewritten Host would send a client, with its POST body
        # and key, to another server. `/retrieve/invoke/` is a 404 instead.
        redirect_slashes=False,
    )
    app.router.add_event_handler("shutdown", remove_listener)
    executor = ServeExecutor()
    app.router.add_event_handler("startup", executor.install)
    app.router.add_event_handler("shutdown", executor.shutdown)
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

    _add_service_routes(app, health, metrics)

    @app.exception_handler(RetrievalPipelineError)
    async def user_error(request: Request, exc: RetrievalPipelineError) -> Response:
        return error_response(exc)

    # The last added is outermost: metrics see every answer, including the gate's
    # 401s; a stream's failure is answered inside the gate.
    app.add_middleware(StreamErrors)
    app.add_middleware(
        RequestGate,
        api_keys=api_keys,
        on_denied=lambda reason: metrics.denied.labels(reason).inc(),
        validate=lambda path, body: validate_inputs(
            path, body, keyed=api_keys is not None
        ),
        allowed_hosts=allowed_hosts,
    )
    app.add_middleware(RequestMetrics, metrics=metrics)

    return app


class ServeExecutor:
    """The event loop's default executor, sized for a server (``serve_threads``).

    LangGraph runs each sync stage of an async run on the loop's default executor;
    asyncio's own has ``min(32, cores + 4)`` threads, so a few requests waiting on
    a provider used them all. Installed at startup, on the loop uvicorn runs.
    """

    def __init__(self) -> None:
        self.pool: ThreadPoolExecutor | None = None

    async def install(self) -> None:
        """Give the running loop a pool of ``serve_threads()`` threads."""
        from retrieval_pipeline.settings import serve_threads

        self.pool = ThreadPoolExecutor(
            max_workers=serve_threads(), thread_name_prefix="rp-serve"
        )
        asyncio.get_running_loop().set_default_executor(self.pool)

    async def shutdown(self) -> None:
        """Let running stages finish; the loop's own shutdown joins the threads."""
        if self.pool is not None:
            self.pool.shutdown(wait=False)


def _add_service_routes(
    app: FastAPI, health: Callable[[], Mapping[str, Any]], metrics: Metrics
) -> None:
    """``/healthz``, ``/metrics`` and the index page."""

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

    @app.get("/", include_in_schema=False)
    def index() -> PlainTextResponse:
        return PlainTextResponse(
            "retrieval-pipeline: POST /retrieve/invoke, /retrieve/playground/, "
            "/healthz, /metrics, /docs\n"
        )


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

    async def to_playground() -> Response:
        # Relative, so that it names no host (the app does not redirect slashes).
        return RedirectResponse("playground/", status_code=307)

    app.get(path + "/playground", include_in_schema=False)(to_playground)


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
