"""Stage 2: hybrid retrieval, run wide; one call per branch (fanned out with Send)."""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from retrieval_pipeline.graph.resources import PipelineResources
from retrieval_pipeline.graph.state import (
    BranchDebug,
    BranchInput,
    Candidate,
    RetrievalDebug,
)
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


def hybrid_retrieve(
    branch: BranchInput, runtime: Runtime[Any], resources: PipelineResources
) -> dict[str, Any]:
    """Retrieve one branch (a ``Send``) into the shared candidate pool, run wide."""
    ctx = context_of(runtime)
    scope = access_scope(resources, branch)
    debug: RetrievalDebug = {}
    trace = RetrievalTrace()
    weights = {"lexical": ctx.lexical_weight, "dense": ctx.dense_weight}
    with stage_timer(debug, "hybrid_retrieve", branch):
        fused = resources.retriever.fused(
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
    shown = shows_debug(branch)
    pool: dict[str, Candidate] = {}
    for chunk_id, score, ranks in fused[: ctx.candidate_pool]:
        candidate: Candidate = {
            "chunk_id": chunk_id,
            "score": score,
            "ranks": ranks,
            "graph_boosted": False,
        }
        if chunk_id in trace.documents:
            candidate["document_id"] = trace.documents[chunk_id]
        if shown:  # raw scores are a side channel (issue 15): debug only
            candidate["channel_scores"] = {
                channel: scores[chunk_id]
                for channel, scores in trace.channel_scores.items()
                if chunk_id in scores
            }
        pool[chunk_id] = candidate
    debug["branches"] = [_branch_debug(branch, trace, len(pool), shown)]
    if trace.embed_fallback:  # the lexical channel answered alone
        debug["fallbacks"] = [
            fallback("hybrid_retrieve", f"dense skipped: {trace.embed_fallback}")
        ]
    update: dict[str, Any] = {
        "candidate_pool": pool,
        "retrieval_debug": debug,
        "trace_key": branch.get("trace_key"),
    }
    if branch["branch"] == "main":  # one main branch per run: the run's query keys
        update.update(
            query=branch["question"],
            effective_query=branch["query"],
            run_key=branch["run_key"],
        )
    return update


def _branch_debug(
    branch: BranchInput, trace: RetrievalTrace, candidates: int, shown: bool
) -> BranchDebug:
    """The branch's debug entry; its timings also go to the operator trace."""
    timings: BranchDebug = {
        "lexical_ms": round(trace.lexical_ms, 3),
        "lexical_mode": trace.lexical_mode,
        "dense_ms": round(trace.dense_ms, 3),
        "embed_ms": round(trace.embed_ms, 3),
    }
    record_timings(
        branch.get("trace_key"),
        branch={"branch": branch["branch"], **timings},
        revision=trace.index_revision,
    )
    # Timings and the lexical mode depend on postings the caller cannot see:
    # debug only (issue 15). The candidate count is over visible chunks.
    return {
        "branch": branch["branch"],
        "channels": list(branch["channels"]),
        "candidates": candidates,
        **(timings if shown else {}),
    }
