"""Stage 5: token-budget assembly with MMR, duplicate drop and front-loading."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langgraph.runtime import Runtime

from retrieval_pipeline.graph.context import DEFAULT_LIMIT
from retrieval_pipeline.graph.resources import PipelineResources
from retrieval_pipeline.graph.state import Candidate, PipelineState
from retrieval_pipeline.nodes._common import access_scope, context_of, stage_timer
from retrieval_pipeline.tools.assembly import AssemblyItem, assemble


def relevance(candidate: Candidate) -> float:
    """The reranker score when present, else the fused score (spec)."""
    return candidate.get("rerank_score", candidate["score"])


def chunk_output(row: dict[str, Any], candidate: Candidate) -> dict[str, Any]:
    """The output form of a chunk: provenance, scores, ranks, graph_boosted."""
    out: dict[str, Any] = {
        "chunk_id": candidate["chunk_id"],
        "document_id": row["source_id"],
        "title": row["title"],
        "text": row["content"],
        "heading_path": list(row["heading_path"]),
        "source_uri": row["source_uri"],
        "revision": row["revision"],
        "char_start": row["char_start"],
        "char_end": row["char_end"],
        "page_start": row["page_start"],
        "page_end": row["page_end"],
        "token_count": row["token_count"],
        "parser_version": row["parser_version"],
        "embedding_model": row["embedding_model"],
        "embedding_version": row["embedding_version"],
        "updated_at": row["updated_at"].isoformat(),
        "score": candidate["score"],
        "ranks": dict(candidate["ranks"]),
        "graph_boosted": candidate["graph_boosted"],
    }
    if "rerank_score" in candidate:
        out["rerank_score"] = candidate["rerank_score"]
    return out


def make_assemble_context(
    resources: PipelineResources,
) -> Callable[[PipelineState, Runtime[Any]], dict[str, Any]]:
    """Build the node: pack the pool into the budget, cap at the answer budget."""

    def assemble_context(state: PipelineState, runtime: Runtime[Any]) -> dict[str, Any]:
        ctx = context_of(runtime)
        pool = state.get("candidate_pool", {})
        # The whole pool: every branch's wide retrieve plus what graph fusion added.
        ranked = sorted(pool.values(), key=lambda c: (-relevance(c), c["chunk_id"]))
        scope = access_scope(resources, state)
        debug: dict[str, Any] = {}
        with stage_timer(debug, "assemble_context", state):
            rows = resources.store.fetch_chunks([c["chunk_id"] for c in ranked], scope)
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
        limit = state.get("limit", DEFAULT_LIMIT)
        selected = result.selected[:limit]
        chunks = [chunk_output(rows[i], by_id[i]) for i in selected]
        debug.update(
            candidate_pool=len(ranked),
            assembled_tokens=sum(result.token_counts[i] for i in selected),
            token_method=resources.counter.method,
            duplicates_dropped=len(result.dropped_duplicates),
            budget_dropped=len(result.dropped_budget),
            document_share_dropped=len(result.dropped_document_share),
            assembled_chunks=len(chunks),
        )
        return {"chunks": chunks, "retrieval_debug": debug}

    return assemble_context
