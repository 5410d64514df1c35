"""The all-inactive path: exactly ``retrieve(question, limit, doc_ids)`` + slice."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langgraph.runtime import Runtime

from retrieval_pipeline.auth import bind_state
from retrieval_pipeline.graph.context import DEFAULT_LIMIT
from retrieval_pipeline.graph.resources import PipelineResources
from retrieval_pipeline.graph.state import PipelineState
from retrieval_pipeline.nodes._common import (
    context_of,
    fallback,
    shows_debug,
    stage_timer,
)
from retrieval_pipeline.observability import record_timings
from retrieval_pipeline.tools.retrieve import RetrievalTrace


def make_plain_retrieve(
    resources: PipelineResources,
) -> Callable[[PipelineState, Runtime[Any]], dict[str, Any]]:
    """Build the node; no assembler runs on this path (spec: degradation)."""

    def plain_retrieve(state: PipelineState, runtime: Runtime[Any]) -> dict[str, Any]:
        ctx = context_of(runtime)
        debug: dict[str, Any] = {
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
        with stage_timer(debug, "plain_retrieve", state):
            chunks = resources.retriever.retrieve(
                state["question"],
                limit=state.get("limit", DEFAULT_LIMIT),
                doc_ids=state.get("doc_ids"),
                principals=bound.get("principals") or [],
                tenant=bound.get("tenant"),
                depth=ctx.channel_depth,
                trace=trace,
                debug=shows_debug(state),
                embed_deadline_s=ctx.embed_deadline_s,
            )
        record_timings(
            state.get("trace_key"),
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
        output = [{**c.to_dict(), "graph_boosted": False} for c in chunks]
        debug["assembled_tokens"] = sum(c.token_count for c in chunks)
        debug["token_method"] = "stored"
        return {"chunks": output, "retrieval_debug": debug}

    return plain_retrieve
