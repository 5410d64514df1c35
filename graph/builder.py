"""The retrieval pipeline as a LangGraph ``StateGraph``.

::

    START ─► understand_query ─► hybrid_retrieve (one Send per branch)
          ─► fuse_graph ─► rerank ─► assemble_context ─► END
    START ─► plain_retrieve ─► END   (every optional stage inactive)

Conditional edges skip inactive stages. ``build_pipeline(...)`` compiles a pipeline
over explicit resources; the module-level ``graph`` (for ``langgraph.json``, LangServe
and subgraph use) resolves its resources from the environment on first use.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime
from langgraph.types import Send

from retrieval_pipeline.auth import bind_state
from retrieval_pipeline.graph.context import Context
from retrieval_pipeline.graph.resources import PipelineResources, default_resources
from retrieval_pipeline.graph.routing import active_stages, branches, validate_input
from retrieval_pipeline.graph.state import (
    PipelineInput,
    PipelineOutput,
    PipelineState,
    merge_debug,
)
from retrieval_pipeline.nodes._common import context_of, shows_debug
from retrieval_pipeline.nodes.assemble_context import make_assemble_context
from retrieval_pipeline.nodes.fuse_graph import make_fuse_graph
from retrieval_pipeline.nodes.hybrid_retrieve import make_hybrid_retrieve
from retrieval_pipeline.nodes.plain_retrieve import make_plain_retrieve
from retrieval_pipeline.nodes.rerank import make_rerank
from retrieval_pipeline.nodes.understand_query import make_understand_query
from retrieval_pipeline.observability import (
    emit_trace,
    new_trace_key,
    take_timings,
    trace_record,
    tracing_active,
)

ResourceSource = PipelineResources | Callable[[], PipelineResources]


class _Lazy:
    """Resolve resources on first use, so importing the graph touches nothing."""

    def __init__(self, source: ResourceSource) -> None:
        self._source = source
        self._resolved: PipelineResources | None = None

    def get(self) -> PipelineResources:
        if self._resolved is None:
            source = self._source
            self._resolved = (
                source if isinstance(source, PipelineResources) else source()
            )
        return self._resolved


def _deferred(
    lazy: _Lazy, factory: Callable[[PipelineResources], Callable[..., dict[str, Any]]]
) -> Callable[..., dict[str, Any]]:
    built: list[Callable[..., dict[str, Any]]] = []

    def node(state: Any, runtime: Runtime[Any]) -> dict[str, Any]:
        if not built:
            built.append(factory(lazy.get()))
        return built[0](state, runtime)

    node.__name__ = factory.__name__.removeprefix("make_")
    return node


def build_pipeline(
    resources: ResourceSource | None = None,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """Compile the pipeline over ``resources`` (default: from the environment)."""
    lazy = _Lazy(resources or default_resources)

    def route_start(state: PipelineState, runtime: Runtime[Any]) -> str | list[Send]:
        validate_input(state)
        stages = active_stages(lazy.get(), context_of(runtime))
        if not stages.any:
            return "plain_retrieve"
        if stages.understanding:
            return "understand_query"
        return branches(state)

    def route_after_retrieve(state: PipelineState, runtime: Runtime[Any]) -> str:
        stages = active_stages(lazy.get(), context_of(runtime))
        if stages.graph_fusion:
            return "fuse_graph"
        return "rerank" if stages.rerank else "assemble_context"

    def route_after_graph(state: PipelineState, runtime: Runtime[Any]) -> str:
        stages = active_stages(lazy.get(), context_of(runtime))
        return "rerank" if stages.rerank else "assemble_context"

    builder = StateGraph(
        PipelineState,
        context_schema=Context,
        input_schema=PipelineInput,
        output_schema=PipelineOutput,
    )
    builder.add_node("understand_query", _deferred(lazy, make_understand_query))
    builder.add_node("hybrid_retrieve", _deferred(lazy, make_hybrid_retrieve))
    builder.add_node("fuse_graph", _deferred(lazy, make_fuse_graph))
    builder.add_node("rerank", _deferred(lazy, make_rerank))
    builder.add_node("assemble_context", _deferred(lazy, _with_summary(lazy)))
    builder.add_node("plain_retrieve", _deferred(lazy, _traced_plain_retrieve))
    builder.add_conditional_edges(
        START, route_start, ["understand_query", "plain_retrieve", "hybrid_retrieve"]
    )
    builder.add_conditional_edges("understand_query", branches, ["hybrid_retrieve"])
    builder.add_conditional_edges(
        "hybrid_retrieve",
        route_after_retrieve,
        ["fuse_graph", "rerank", "assemble_context"],
    )
    builder.add_conditional_edges(
        "fuse_graph", route_after_graph, ["rerank", "assemble_context"]
    )
    builder.add_edge("rerank", "assemble_context")
    builder.add_edge("assemble_context", END)
    builder.add_edge("plain_retrieve", END)
    return builder.compile(name="retrieval_pipeline")


def _with_summary(
    lazy: _Lazy,
) -> Callable[[PipelineResources], Callable[..., dict[str, Any]]]:
    """Assemble, then complete the debug block with the run-level fields."""

    def make_assemble_with_summary(
        resources: PipelineResources,
    ) -> Callable[..., dict[str, Any]]:
        assemble = make_assemble_context(resources)

        def assemble_context(
            state: PipelineState, runtime: Runtime[Any]
        ) -> dict[str, Any]:
            update = assemble(state, runtime)
            ctx = context_of(runtime)
            seen = state.get("retrieval_debug", {})
            understanding = state.get("understanding") or {}
            question = state["question"].strip()
            effective = state.get("effective_query") or question
            summary: dict[str, Any] = {
                "path": "pipeline",
                "rewrite": effective if effective != question else None,
                "sub_queries": understanding.get("sub_queries", []),
                "graph_added": seen.get("graph_added", 0),
                "reranked": seen.get("reranked", False),
                "reranker_kind": seen.get(
                    "reranker_kind", resources.reranker_for(ctx.reranker).kind
                ),
            }
            tracing = tracing_active()
            revision = (
                resources.store.index_revision(bind_state(state).get("tenant") or "")
                if tracing or shows_debug(state)
                else None
            )
            if shows_debug(state):
                summary["index_revision"] = revision
            update["retrieval_debug"] = {**summary, **update["retrieval_debug"]}
            if tracing:
                debug = merge_debug(seen, update["retrieval_debug"])
                emit_trace(
                    trace_record(
                        state,
                        operator_debug(debug, state.get("trace_key"), revision),
                        update["chunks"],
                    )
                )
            return update

        return assemble_context

    make_assemble_with_summary.__name__ = "make_assemble_context"
    return make_assemble_with_summary


def _traced_plain_retrieve(
    resources: PipelineResources,
) -> Callable[..., dict[str, Any]]:
    plain = make_plain_retrieve(resources)

    def plain_retrieve(state: PipelineState, runtime: Runtime[Any]) -> dict[str, Any]:
        # The only stage of this path: it opens and closes the run's trace timings.
        key = new_trace_key()
        update = plain({**state, "trace_key": key}, runtime)
        if key is None and not shows_debug(state):
            return update
        revision = resources.store.index_revision(bind_state(state).get("tenant") or "")
        if shows_debug(state):
            update["retrieval_debug"]["index_revision"] = revision
        if key is not None:
            debug = operator_debug(update["retrieval_debug"], key, revision)
            emit_trace(trace_record(state, debug, update["chunks"]))
        return update

    return plain_retrieve


def operator_debug(
    debug: dict[str, Any], trace_key: str | None, revision: str | None
) -> dict[str, Any]:
    """The debug block as the operator trace sees it (never returned to a caller).

    It holds the run's timings and the index revision, whatever the caller was shown.
    """
    timings = take_timings(trace_key)
    return {
        **debug,
        "stage_ms": timings["stage_ms"] or debug.get("stage_ms", {}),
        "branches": timings["branches"] or debug.get("branches", []),
        "index_revision": revision,
    }


graph = build_pipeline()
"""The pipeline over environment-resolved resources (``langgraph.json`` points here)."""
