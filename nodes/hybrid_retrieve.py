"""Stage 2: hybrid retrieval, run wide; one call per branch (fanned out with Send)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langgraph.runtime import Runtime

from retrieval_pipeline.graph.resources import PipelineResources
from retrieval_pipeline.graph.state import BranchInput, Candidate
from retrieval_pipeline.nodes._common import (
    access_scope,
    context_of,
    fallback,
    shows_debug,
    stage_timer,
)
from retrieval_pipeline.observability import record_timings
from retrieval_pipeline.tools.boosts import SoftScope, apply_soft_scope
from retrieval_pipeline.tools.retrieve import RetrievalTrace


def make_hybrid_retrieve(
    resources: PipelineResources,
) -> Callable[[BranchInput, Runtime[Any]], dict[str, Any]]:
    """Build the node: retrieve one branch into the shared candidate pool."""

    def hybrid_retrieve(branch: BranchInput, runtime: Runtime[Any]) -> dict[str, Any]:
        ctx = context_of(runtime)
        retriever = resources.retriever
        scope = access_scope(resources, branch)
        debug: dict[str, Any] = {}
        trace = RetrievalTrace()
        weights = {"lexical": ctx.lexical_weight, "dense": ctx.dense_weight}
        with stage_timer(debug, "hybrid_retrieve", branch):
            fused = retriever.fused(
                branch["query"],
                scope,
                channels=tuple(branch["channels"]),
                depth=max(ctx.channel_depth, ctx.candidate_pool),
                rrf_k=ctx.rrf_k,
                weights=weights,
                trace=trace,
                fusion=ctx.fusion,
                embed_deadline_s=ctx.embed_deadline_s,
            )
            soft = SoftScope(
                path_prefix=branch.get("boost_path_prefix"),
                doc_title_contains=branch.get("boost_title"),
                entity_types=tuple(branch.get("boost_entity_types") or ()),
                freshness=branch.get("recency"),
            )
            fused = apply_soft_scope(fused, soft, resources.store, scope)
        pool: dict[str, Candidate] = {
            chunk_id: {
                "chunk_id": chunk_id,
                "score": score,
                "ranks": ranks,
                "graph_boosted": False,
            }
            for chunk_id, score, ranks in fused[: ctx.candidate_pool]
        }
        timings = {
            "lexical_ms": round(trace.lexical_ms, 3),
            "lexical_mode": trace.lexical_mode,
            "dense_ms": round(trace.dense_ms, 3),
            "embed_ms": round(trace.embed_ms, 3),
        }
        record_timings(
            branch.get("trace_key"), branch={"branch": branch["branch"], **timings}
        )
        # Timings and the lexical mode depend on postings the caller cannot see:
        # debug only (issue 15). The candidate count is over visible chunks.
        debug["branches"] = [
            {
                "branch": branch["branch"],
                "channels": list(branch["channels"]),
                "candidates": len(pool),
                **(timings if shows_debug(branch) else {}),
            }
        ]
        if trace.embed_fallback:  # the lexical channel answered alone
            debug["fallbacks"] = [
                fallback("hybrid_retrieve", f"dense skipped: {trace.embed_fallback}")
            ]
        return {
            "candidate_pool": pool,
            "retrieval_debug": debug,
            "trace_key": branch.get("trace_key"),
        }

    return hybrid_retrieve
