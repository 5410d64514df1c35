"""Graph fusion: entity-graph local search, then a retrieve scoped to what it found.

Deterministic and LLM-free. The seed documents are those of the pool's chunks; the
expansion (tools/store/graph.py) resolves to documents; a hybrid retrieve runs over
just those documents, and the chunks it finds that the pool lacks enter the pool
tagged ``graph_boosted``, at ``graph_score_weight`` times their scoped fused score so
graph evidence supplements the text ranking rather than overriding it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from retrieval_pipeline.tools.retrieve import Retriever
from retrieval_pipeline.tools.store.graph import GraphStore
from retrieval_pipeline.tools.store.store import AccessScope


@dataclass
class GraphFusionResult:
    """Chunks to add, and counters for the debug block (ids only, no text)."""

    added: list[tuple[str, float, dict[str, int]]] = field(default_factory=list)
    boosted: list[tuple[str, float, dict[str, int]]] = field(default_factory=list)
    """Pool chunks the graph found again with a higher score (merged by max)."""
    seed_entities: int = 0
    expanded_entities: int = 0
    documents: int = 0


def graph_fusion(
    retriever: Retriever,
    query: str,
    seed_chunk_ids: Sequence[str],
    pool_scores: Mapping[str, float],
    scope: AccessScope,
    *,
    top_entities: int,
    max_hops: int,
    frontier_cap: int,
    document_cap: int,
    chunk_cap: int,
    score_weight: float,
    rrf_k: int,
) -> GraphFusionResult:
    """Expand from the seeds' documents; return graph-found chunks, new or boosted.

    The scoped retrieve keeps its best ``chunk_cap`` chunks: those missing from the
    pool are added; those already in it count as boosted when the graph scores them
    higher (the pool's merge keeps the max).
    """
    result = GraphFusionResult()
    rows = retriever.store.fetch_chunks(seed_chunk_ids, scope)
    seed_documents = sorted({row["document_id"] for row in rows.values()})
    expansion = GraphStore(retriever.store).expand(
        seed_documents,
        scope,
        top_entities=top_entities,
        max_hops=max_hops,
        frontier_cap=frontier_cap,
        document_cap=document_cap,
    )
    result.seed_entities = len(expansion.seeds)
    result.expanded_entities = sum(len(hop) for hop in expansion.hops)
    result.documents = len(expansion.documents)
    if not expansion.documents:
        return result
    allowed = [doc for doc, _ in expansion.documents]
    if scope.doc_keys is not None:  # expansion stays inside a caller's scope
        allowed = [doc for doc in allowed if doc in set(scope.doc_keys)]
    if not allowed:
        return result
    scoped = AccessScope(scope.principals, scope.tenant, tuple(allowed))
    found = retriever.fused(query, scoped, depth=max(chunk_cap * 2, 20), rrf_k=rrf_k)
    for chunk_id, score, ranks in found[:chunk_cap]:
        item = (
            chunk_id,
            score * score_weight,
            {f"graph_{c}": r for c, r in ranks.items()},
        )
        if chunk_id not in pool_scores:
            result.added.append(item)
        elif item[1] > pool_scores[chunk_id]:
            result.boosted.append(item)
    return result
