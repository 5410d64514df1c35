"""Stage 5: token-budget assembly with MMR, duplicate drop and front-loading."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langgraph.runtime import Runtime

from retrieval_pipeline.graph.context import DEFAULT_LIMIT, Context
from retrieval_pipeline.graph.resources import PipelineResources
from retrieval_pipeline.graph.state import (
    Candidate,
    PipelineState,
    RetrievalDebug,
    merge_debug,
)
from retrieval_pipeline.nodes._common import (
    access_scope,
    context_of,
    emit_run_trace,
    reranker_fallbacks,
    run_revision,
    shows_debug,
    stage_timer,
)
from retrieval_pipeline.observability import recorded_revision, tracing_active
from retrieval_pipeline.tools.assembly import AssemblyItem, assemble
from retrieval_pipeline.tools.store.records import (
    ChunkOutput,
    RetrievedChunk,
    chunk_output,
)


def relevance(candidate: Candidate) -> float:
    """The reranker score when present, else the fused score (spec)."""
    return candidate.get("rerank_score", candidate["score"])


def candidate_output(
    row: Mapping[str, Any], candidate: Candidate, *, debug: bool
) -> ChunkOutput:
    """A pool candidate as the pipeline returns it (:func:`chunk_output`)."""
    chunk = RetrievedChunk.from_row(
        row,
        score=candidate["score"],
        ranks=candidate["ranks"],
        channel_scores=candidate.get("channel_scores"),
    )
    return chunk_output(
        chunk,
        graph_boosted=candidate["graph_boosted"],
        rerank_score=candidate.get("rerank_score"),
        debug=debug,
    )


def assemble_context(
    state: PipelineState, runtime: Runtime[Any], resources: PipelineResources
) -> dict[str, Any]:
    """Pack the pool into the token budget, cap at the answer budget, close the run."""
    ctx = context_of(runtime)
    pool = state.get("candidate_pool", {})
    # The whole pool: every branch's wide retrieve plus what graph fusion added.
    ranked = sorted(pool.values(), key=lambda c: (-relevance(c), c["chunk_id"]))
    debug: RetrievalDebug = {}
    with stage_timer(debug, "assemble_context", state):
        rows = _pool_rows(state, resources, [c["chunk_id"] for c in ranked])
        ranked = [c for c in ranked if c["chunk_id"] in rows]
        result = assemble(
            [
                AssemblyItem(
                    c["chunk_id"],
                    rows[c["chunk_id"]]["document_id"],
                    rows[c["chunk_id"]]["content"],
                    relevance(c),
                )
                for c in ranked
            ],
            resources.counter,
            token_budget=ctx.token_budget,
            max_chunks=ctx.max_chunks,
            mmr_lambda=ctx.mmr_lambda,
            duplicate_jaccard=ctx.duplicate_jaccard,
            document_share=ctx.document_share,
            document_chunks=ctx.document_chunks or None,
        )
    by_id = {c["chunk_id"]: c for c in ranked}
    selected = result.selected[: state.get("limit", DEFAULT_LIMIT)]
    shown = shows_debug(state)
    chunks = [candidate_output(rows[i], by_id[i], debug=shown) for i in selected]
    debug.update(
        {
            "candidate_pool": len(ranked),
            "assembled_tokens": sum(result.token_counts[i] for i in selected),
            "token_method": resources.counter.method,
            "duplicates_dropped": len(result.dropped_duplicates),
            "budget_dropped": len(result.dropped_budget),
            "document_share_dropped": len(result.dropped_document_share),
            "assembled_chunks": len(chunks),
        }
    )
    tracing = tracing_active()
    revision = run_revision(
        resources, state, tracing, recorded_revision(state.get("trace_key"))
    )
    summary = run_summary(state, resources, ctx)
    if shown:
        summary["index_revision"] = revision
    debug = {**summary, **debug}
    if tracing:
        whole = merge_debug(state.get("retrieval_debug", {}), debug)
        emit_run_trace(state, whole, chunks, state.get("trace_key"), revision)
    return {"chunks": chunks, "retrieval_debug": debug}


def _pool_rows(
    state: PipelineState, resources: PipelineResources, chunk_ids: list[str]
) -> dict[str, dict[str, Any]]:
    """The pool's rows: those the reranker handed on, else fetched now."""
    scope = access_scope(resources, state)
    handed = resources.take_rows(state["run_key"], scope, chunk_ids)
    if handed is not None:
        return handed
    return resources.store.fetch_chunks(chunk_ids, scope)


def run_summary(
    state: PipelineState, resources: PipelineResources, ctx: Context
) -> RetrievalDebug:
    """The run-level fields of the debug block (what ran, what it changed)."""
    seen = state.get("retrieval_debug", {})
    understanding = state.get("understanding") or {}
    question = state["query"]
    effective = state.get("effective_query") or question
    reranker = resources.reranker_for(ctx.reranker)
    summary: RetrievalDebug = {
        "path": "pipeline",
        "rewrite": effective if effective != question else None,
        "sub_queries": understanding.get("sub_queries", []),
        "graph_added": seen.get("graph_added", 0),
        "reranked": seen.get("reranked", False),
        "reranker_kind": seen.get("reranker_kind", reranker.kind),
    }
    if missing := reranker_fallbacks(reranker):
        summary["fallbacks"] = missing
    return summary
