"""Graph fusion: entity-graph local search, then a retrieve scoped to what it found.

Deterministic and LLM-free. The seeds are the pool's strongest documents, each with
its retrieval score. The expansion (tools/store/graph.py) follows the entities they
mention to linked documents, each carrying the score of the seed it was reached from
(damped for pages that merely mention the entity, and across hops). A hybrid retrieve
over just those documents then scores each linked passage by its own relevance to the
question, and the passage enters the pool with the chain score

    link x (LINK_SHARE + (1 - LINK_SHARE) x relevance)

where relevance is its scoped fused score in [0, 1]. A second-hop passage can so
reach, but never pass, the seed that leads to it: the bridge paragraph of a
multi-hop question lands next to the evidence that names the bridge, while a linked
page that says nothing about the question stays at half its seed's score.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from retrieval_pipeline.tools.retrieve import RetrievalTrace, Retriever
from retrieval_pipeline.tools.store.graph import GraphStore
from retrieval_pipeline.tools.store.store import AccessScope

LINK_SHARE = 0.5
"""The part of a linked passage's chain score owed to the link alone; the rest is
earned by its relevance to the question (an even split, not tuned)."""


def chain_score(link: float, relevance: float, score_weight: float = 1.0) -> float:
    """A linked passage's score: ``weight x link x (share + (1 - share) x relevance)``.

    The invariant: it never passes ``link``, the score of the seed that led to the
    passage (the expansion keeps every link at or below its seed; see
    tools/store/graph.py). Relevance is clamped to [0, 1] and the weight to (0, 1], so
    neither a fusion that strays out of [0, 1] nor a caller's setting can break it.
    """
    weight = min(max(score_weight, 0.0), 1.0)
    earned = min(max(relevance, 0.0), 1.0)
    return weight * link * (LINK_SHARE + (1 - LINK_SHARE) * earned)


@dataclass
class GraphFusionResult:
    """Chunks to add, and counters for the debug block (ids only, no text)."""

    added: list[tuple[str, float, dict[str, int]]] = field(default_factory=list)
    boosted: list[tuple[str, float, dict[str, int]]] = field(default_factory=list)
    """Pool chunks the graph found again with a higher score (merged by max)."""
    seed_entities: int = 0
    expanded_entities: int = 0
    documents: int = 0
    documents_of: dict[str, str] = field(default_factory=dict)
    """Internal document id of each added or boosted chunk."""


def seed_documents(
    pool_scores: Mapping[str, float], chunk_documents: Mapping[str, str], count: int
) -> dict[str, float]:
    """The ``count`` strongest documents of the pool, each with its best chunk score."""
    seeds: dict[str, float] = {}
    for chunk_id, score in sorted(pool_scores.items(), key=lambda kv: (-kv[1], kv[0])):
        document = chunk_documents.get(chunk_id)
        if document is None or document in seeds:
            continue
        if len(seeds) == count:
            break
        seeds[document] = score
    return seeds


def graph_fusion(
    retriever: Retriever,
    query: str,
    pool_scores: Mapping[str, float],
    scope: AccessScope,
    *,
    seeds: int,
    top_entities: int,
    max_hops: int,
    frontier_cap: int,
    document_cap: int,
    chunk_cap: int,
    score_weight: float,
    rrf_k: int,
    pool_documents: Mapping[str, str] | None = None,
) -> GraphFusionResult:
    """Expand from the pool's strongest documents; return linked chunks, new or boosted.

    Of the scoped retrieve's passages, the ``chunk_cap`` best by chain score are kept:
    those missing from the pool are added; those already in it count as boosted when
    the chain scores them higher (the pool's merge keeps the max).

    ``pool_documents`` gives the pool chunks' document ids as the channels read
    them (under the same scope); only chunks missing from it cost a statement.
    """
    result = GraphFusionResult()
    store = retriever.store
    known = pool_documents or {}
    documents_of = {c: known[c] for c in pool_scores if c in known}
    missing = [c for c in pool_scores if c not in known]
    if missing:
        documents_of.update(store.chunk_documents(missing, scope))
    expansion = GraphStore(store).expand(
        seed_documents(pool_scores, documents_of, seeds),
        scope,
        top_entities=top_entities,
        max_hops=max_hops,
        frontier_cap=frontier_cap,
        document_cap=document_cap,
        question=query,
    )
    result.seed_entities = len(expansion.seeds)
    result.expanded_entities = sum(len(hop) for hop in expansion.hops)
    result.documents = len(expansion.documents)
    links = dict(expansion.documents)
    if scope.doc_keys is not None:  # expansion stays inside a caller's scope
        inside = set(scope.doc_keys)
        links = {doc: w for doc, w in links.items() if doc in inside}
    if not links:
        return result
    # The caller's scope, narrowed to the linked documents: every other filter holds.
    scoped = replace(scope, doc_keys=tuple(links))
    trace = RetrievalTrace()
    found = retriever.fused(
        query, scoped, depth=max(chunk_cap * 2, 20), rrf_k=rrf_k, trace=trace
    )
    found_in = trace.documents
    # The page of an entity the question asks for through a named relation ("who
    # owns X": the owner's page) answers by the link itself: its best passage earns
    # full relevance, so it reaches (never passes) its seed's score.
    answered: set[str] = set()
    chained: list[tuple[str, float, dict[str, int]]] = []
    for chunk_id, relevance, ranks in found:
        document = found_in.get(chunk_id)
        if document is None:
            continue
        if document in expansion.answers and document not in answered:
            answered.add(document)
            relevance = 1.0
        chained.append(
            (
                chunk_id,
                chain_score(links[document], relevance, score_weight),
                {f"graph_{c}": r for c, r in ranks.items()},
            )
        )
    chained.sort(key=lambda item: (-item[1], item[0]))
    for item in chained[:chunk_cap]:
        chunk_id, score, _ = item
        if chunk_id not in pool_scores:
            result.added.append(item)
        elif score > pool_scores[chunk_id]:
            result.boosted.append(item)
        else:
            continue
        result.documents_of[chunk_id] = found_in[chunk_id]
    return result
