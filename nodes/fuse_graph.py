"""Stage 3: graph fusion (GraphRAG local search in SQL)."""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from retrieval_pipeline.graph.resources import PipelineResources
from retrieval_pipeline.graph.state import Candidate, PipelineState, RetrievalDebug
from retrieval_pipeline.nodes._common import (
    access_scope,
    context_of,
    query_of,
    stage_timer,
)
from retrieval_pipeline.tools.graph_fusion import graph_fusion


def fuse_graph(
    state: PipelineState, runtime: Runtime[Any], resources: PipelineResources
) -> dict[str, Any]:
    """Add graph-found chunks to the pool, tagged ``graph_boosted``."""
    ctx = context_of(runtime)
    scope = access_scope(resources, state)
    pool = state.get("candidate_pool", {})
    debug: RetrievalDebug = {}
    with stage_timer(debug, "fuse_graph", state):
        result = graph_fusion(
            resources.retriever,
            query_of(state),
            {c["chunk_id"]: c["score"] for c in pool.values()},
            scope,
            pool_documents={
                c["chunk_id"]: c["document_id"]
                for c in pool.values()
                if "document_id" in c
            },
            seeds=ctx.graph_seeds,
            top_entities=ctx.top_entities,
            max_hops=ctx.max_hops,
            frontier_cap=ctx.frontier_cap,
            document_cap=ctx.graph_documents,
            chunk_cap=ctx.graph_chunks,
            score_weight=ctx.graph_score_weight,
            rrf_k=ctx.rrf_k,
        )
    added: dict[str, Candidate] = {}
    for chunk_id, score, ranks in [*result.added, *result.boosted]:
        candidate: Candidate = {
            "chunk_id": chunk_id,
            "score": score,
            "ranks": {**(pool[chunk_id]["ranks"] if chunk_id in pool else {}), **ranks},
            "graph_boosted": True,
        }
        if chunk_id in result.documents_of:
            candidate["document_id"] = result.documents_of[chunk_id]
        added[chunk_id] = candidate
    debug.update(
        {
            "graph_added": len(result.added),
            "graph_boosted": len(result.boosted),
            "graph_seed_entities": result.seed_entities,
            "graph_expanded_entities": result.expanded_entities,
            "graph_documents": result.documents,
        }
    )
    return {"candidate_pool": added, "retrieval_debug": debug}
