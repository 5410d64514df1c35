"""Stage 4: cross-encoder reranking; any error falls back to the fused order."""

from __future__ import annotations

import logging
from typing import Any

from langgraph.runtime import Runtime

from retrieval_pipeline.graph.resources import PipelineResources
from retrieval_pipeline.graph.state import Candidate, PipelineState, RetrievalDebug
from retrieval_pipeline.nodes._common import (
    access_scope,
    context_of,
    fallback,
    query_of,
    stage_timer,
)
from retrieval_pipeline.tools.rerankers import RerankError

logger = logging.getLogger(__name__)


def rerank(
    state: PipelineState, runtime: Runtime[Any], resources: PipelineResources
) -> dict[str, Any]:
    """Score the pool with the resolved reranker; any error keeps the fused order.

    The pool's rows are fetched here under the caller's scope and handed on to the
    assembler (:meth:`PipelineResources.hand_on_rows`), so a run fetches them once.
    """
    ctx = context_of(runtime)
    reranker = resources.reranker_for(ctx.reranker)
    debug: RetrievalDebug = {"reranker_kind": reranker.kind, "reranked": False}
    pool = state.get("candidate_pool", {})
    # The whole pool (branches + graph additions), bounded by construction:
    # at most 1 + 1 + 3 branches of ``candidate_pool`` plus ``graph_chunks``.
    top = sorted(pool.values(), key=lambda c: (-c["score"], c["chunk_id"]))
    scope = access_scope(resources, state)
    updates: dict[str, Candidate] = {}
    with stage_timer(debug, "rerank", state):
        rows = resources.store.fetch_chunks([c["chunk_id"] for c in top], scope)
        resources.hand_on_rows(state["run_key"], scope, pool, rows)
        top = [c for c in top if c["chunk_id"] in rows]
        try:
            scores = reranker.rerank(
                query_of(state),
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
