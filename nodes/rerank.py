"""Stage 4: cross-encoder reranking; any error falls back to the fused order."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from langgraph.runtime import Runtime

from retrieval_pipeline.graph.resources import PipelineResources
from retrieval_pipeline.graph.state import Candidate, PipelineState
from retrieval_pipeline.nodes._common import (
    access_scope,
    context_of,
    fallback,
    query_of,
    stage_timer,
)
from retrieval_pipeline.tools.rerankers import RerankError

logger = logging.getLogger(__name__)


def make_rerank(
    resources: PipelineResources,
) -> Callable[[PipelineState, Runtime[Any]], dict[str, Any]]:
    """Build the node: score the top of the pool with the resolved reranker."""

    def rerank(state: PipelineState, runtime: Runtime[Any]) -> dict[str, Any]:
        ctx = context_of(runtime)
        reranker = resources.reranker_for(ctx.reranker)
        debug: dict[str, Any] = {"reranker_kind": reranker.kind, "reranked": False}
        pool = state.get("candidate_pool", {})
        # The whole pool (branches + graph additions), bounded by construction:
        # at most 1 + 1 + 3 branches of ``candidate_pool`` plus ``graph_chunks``.
        top = sorted(pool.values(), key=lambda c: (-c["score"], c["chunk_id"]))
        scope = access_scope(resources, state)
        updates: dict[str, Candidate] = {}
        with stage_timer(debug, "rerank", state):
            rows = resources.store.fetch_chunks([c["chunk_id"] for c in top], scope)
            top = [c for c in top if c["chunk_id"] in rows]
            query = query_of(state)
            try:
                scores = reranker.rerank(
                    query,
                    [rows[c["chunk_id"]]["content"] for c in top],
                    deadline_s=ctx.rerank_deadline_s,
                )
            except RerankError as exc:
                logger.warning("rerank fell back to fused order: %s", exc)
                debug["fallbacks"] = [fallback("rerank", str(exc))]
                return {"retrieval_debug": debug}
        for item in scores:
            candidate = top[item.index]
            updates[candidate["chunk_id"]] = {**candidate, "rerank_score": item.score}
        debug["reranked"] = bool(updates)
        return {"candidate_pool": updates, "retrieval_debug": debug}

    return rerank
