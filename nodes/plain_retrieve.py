"""The all-inactive path: exactly ``retrieve(question, limit, doc_ids)`` + slice."""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from retrieval_pipeline.auth import bind_state
from retrieval_pipeline.graph.context import DEFAULT_LIMIT
from retrieval_pipeline.graph.resources import PipelineResources
from retrieval_pipeline.graph.state import PipelineState, RetrievalDebug
from retrieval_pipeline.nodes._common import (
    context_of,
    emit_run_trace,
    fallback,
    reranker_fallbacks,
    run_revision,
    shows_debug,
    stage_timer,
)
from retrieval_pipeline.observability import new_trace_key, record_timings
from retrieval_pipeline.tools.retrieve import RetrievalTrace


def plain_retrieve(
    state: PipelineState, runtime: Runtime[Any], resources: PipelineResources
) -> dict[str, Any]:
    """The run's only stage; no assembler runs on this path (spec: degradation).

    It opens and closes the run's operator trace timings itself.
    """
    ctx = context_of(runtime)
    trace_key = new_trace_key()
    debug: RetrievalDebug = {
        "candidate_pool": 0,
        "graph_added": 0,
        "reranked": False,
        "reranker_kind": "none",
        "rewrite": None,
        "sub_queries": [],
        "path": "plain_retrieve",
    }
    trace = RetrievalTrace()
    bound = bind_state(state)
    shown = shows_debug(state)
    with stage_timer(debug, "plain_retrieve", {**state, "trace_key": trace_key}):
        chunks = resources.retriever.retrieve(
            state["question"],
            limit=state.get("limit", DEFAULT_LIMIT),
            doc_ids=state.get("doc_ids"),
            principals=bound.get("principals") or [],
            tenant=bound.get("tenant"),
            depth=ctx.channel_depth,
            trace=trace,
            debug=shown,
            embed_deadline_s=ctx.embed_deadline_s,
        )
    record_timings(
        trace_key,
        branch={
            "branch": "plain",
            "lexical_ms": round(trace.lexical_ms, 3),
            "dense_ms": round(trace.dense_ms, 3),
            "embed_ms": round(trace.embed_ms, 3),
        },
    )
    if trace.embed_fallback:  # the lexical channel answered alone
        debug["fallbacks"] = [
            fallback("plain_retrieve", f"dense skipped: {trace.embed_fallback}")
        ]
    if missing := reranker_fallbacks(resources.reranker_for(ctx.reranker)):
        debug["fallbacks"] = [*debug.get("fallbacks", []), *missing]
    output = [chunk.to_dict() for chunk in chunks]
    debug["assembled_tokens"] = sum(c.token_count for c in chunks)
    debug["token_method"] = "stored"
    revision = run_revision(
        resources, state, trace_key is not None, trace.index_revision
    )
    if shown:
        debug["index_revision"] = revision
    if trace_key is not None:
        emit_run_trace(state, debug, output, trace_key, revision)
    return {"chunks": output, "retrieval_debug": debug}
