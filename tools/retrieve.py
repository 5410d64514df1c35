"""The plain hybrid retrieve: BM25 + pgvector, fused (convex combination or RRF).

This is the primitive every pipeline stage widens, reorders or prunes:
``retrieve(question, limit=..., doc_ids=..., principals=..., tenant=...)``.
Access control (tenant, ACL principals, document scope) is applied inside each
channel's SQL, before any ranking.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from retrieval_pipeline.errors import ConfigurationError
from retrieval_pipeline.graph.context import (
    BM25_B,
    BM25_K1,
    CHANNEL_DEPTH,
    DEFAULT_LIMIT,
    EMBED_DEADLINE_S,
    FUSION,
    FUSIONS,
    HNSW_EF_SEARCH,
    RRF_K,
)
from retrieval_pipeline.ingest.chunker import extract_identifiers
from retrieval_pipeline.tools.embeddings import (
    Embedder,
    EmbeddingUnavailable,
    resolve_embedder,
)

# Query handling and fusion live in their own modules; re-exported here, where
# callers have always imported them from.
from retrieval_pipeline.tools.fusion import (
    convex_fusion,
    fuse,
    reciprocal_rank_fusion,
)
from retrieval_pipeline.tools.query import (
    WebQuery,
    check_limit,
    check_scope_values,
    clean_query,
    parse_websearch,
    prose_query,
)
from retrieval_pipeline.tools.store.records import RetrievedChunk, document_key
from retrieval_pipeline.tools.store.store import (
    LEXICAL_EXHAUSTIVE_POSTINGS,
    AccessScope,
    Store,
    open_store,
)

__all__ = [
    "CHANNELS",
    "RetrievalTrace",
    "Retriever",
    "WebQuery",
    "check_limit",
    "check_scope_values",
    "clean_query",
    "convex_fusion",
    "default_retriever",
    "fuse",
    "parse_websearch",
    "prose_query",
    "reciprocal_rank_fusion",
    "retrieve",
]

logger = logging.getLogger(__name__)

CHANNELS = ("lexical", "dense")


@dataclass
class RetrievalTrace:
    """Timings and counts of one retrieve call (no chunk text, no secrets)."""

    embed_ms: float = 0.0
    lexical_ms: float = 0.0
    dense_ms: float = 0.0
    fetch_ms: float = 0.0
    lexical_candidates: int = 0
    lexical_mode: str = ""  # exhaustive, impact (bounded read) or scoped
    lexical_postings: int = 0  # postings of the query's lexemes in the tenant
    dense_candidates: int = 0
    fused_candidates: int = 0
    # Why the dense channel was skipped (the query embedding failed or was late).
    embed_fallback: str = ""
    # Raw (chunk id -> score) per fused channel; a side channel (issue 15): a caller
    # sees it only with debug.
    channel_scores: dict[str, dict[str, float]] = field(default_factory=dict)
    # Internal document id of every chunk the channels returned (scoped like them),
    # so a caller needs no second statement to group chunks by document.
    documents: dict[str, str] = field(default_factory=dict)
    # The index revision the lexical channel read with its weights ("" when no
    # channel ran); operator traces use it (debug-gated).
    index_revision: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


class Retriever:
    """Hybrid retrieval over one store with one embedder."""

    def __init__(
        self,
        store: Store,
        embedder: Embedder,
        *,
        rrf_k: int = RRF_K,
        depth: int = CHANNEL_DEPTH,
        weights: Mapping[str, float] | None = None,
        k1: float = BM25_K1,
        b: float = BM25_B,
        fusion: str = FUSION,
        lexical_exhaustive_postings: int | None = LEXICAL_EXHAUSTIVE_POSTINGS,
    ) -> None:
        if fusion not in FUSIONS:
            raise ConfigurationError(
                f"unknown fusion '{fusion}'; choose one of: {FUSIONS}"
            )
        if rrf_k < 1 or depth < 1:
            raise ConfigurationError("rrf_k and depth must be positive")
        unknown = set(weights or {}) - set(CHANNELS)
        if unknown:
            raise ConfigurationError(
                f"unknown channel weights {sorted(unknown)}; valid: {CHANNELS}"
            )
        self.store = store
        self.embedder = embedder
        self.rrf_k = rrf_k
        self.depth = depth
        self.weights = dict(weights) if weights else None
        self.k1 = k1
        self.b = b
        self.fusion = fusion
        # None scores every query exhaustively (exact at any cost).
        self.lexical_exhaustive_postings = lexical_exhaustive_postings
        self._index_checked = False
        self._index_dimension = 0

    def scope(
        self,
        *,
        principals: Sequence[str] = (),
        tenant: str | None = None,
        doc_ids: Sequence[str] | None = None,
    ) -> AccessScope:
        """Build the access scope; ``doc_ids`` are the sources' own ids."""
        check_scope_values(principals, tenant, doc_ids)
        tenant_key = tenant or ""
        keys = (
            None
            if doc_ids is None
            else tuple(document_key(tenant_key, d) for d in doc_ids)
        )
        return AccessScope(
            principals=tuple(sorted({p for p in principals if p})),
            tenant=tenant_key,
            doc_keys=keys,
        )

    def _check_index(self) -> bool:
        if not self._index_checked:
            index = self.store.embedding_index()
            if index is None:
                return False  # nothing ingested yet
            # A remote embedder's width is known only after a call: never probe the
            # provider here (an outage would fail the query, not just its dense arm).
            dimension = self.embedder.known_dimension or index.dimension
            self.store.check_embedding_compatible(index, self.embedder.model, dimension)
            self._index_dimension = index.dimension
            self._index_checked = True
        return True

    def channels(
        self,
        query: str,
        scope: AccessScope,
        *,
        depth: int | None = None,
        trace: RetrievalTrace | None = None,
        query_embedding: Sequence[float] | None = None,
        run_dense: bool = True,
        embed_deadline_s: float = EMBED_DEADLINE_S,
    ) -> dict[str, list[tuple[str, float]]]:
        """Run the channels; return ranked (chunk id, score) lists per channel.

        ``query_embedding`` skips embedding the query (batched callers, benchmarks);
        ``run_dense=False`` runs the lexical channel alone (its dense list is empty).
        The query embedding starts before the lexical search and gets
        ``embed_deadline_s``; if it fails or is late, the dense list is empty and
        ``trace.embed_fallback`` says why (the lexical channel still answers).
        """
        trace = trace if trace is not None else RetrievalTrace()
        depth = depth or self.depth
        if not self._check_index():
            return {channel: [] for channel in CHANNELS}
        parsed = parse_websearch(query)
        query = parsed.text
        if parsed.constraint:
            scope = replace(scope, constraint=parsed.constraint)
        pending = None
        embed_started = time.perf_counter()
        if run_dense and query_embedding is None:
            # Started first: a remote provider's round trip overlaps the lexical query.
            pending = self.embedder.query_future(query)
            embed_started = time.perf_counter()  # a cold model's load is not counted
        started = time.perf_counter()
        lexical_stats: dict[str, Any] = {}
        lexical = self.store.search_lexical(
            prose_query(query),
            extract_identifiers(query),
            scope,
            depth=depth,
            k1=self.k1,
            b=self.b,
            phrases=parsed.phrases,
            exhaustive_postings=self.lexical_exhaustive_postings,
            stats=lexical_stats,
            documents=trace.documents,
        )
        trace.lexical_ms = (time.perf_counter() - started) * 1000
        trace.lexical_mode = lexical_stats.get("mode", "")
        trace.lexical_postings = lexical_stats.get("postings", 0)
        trace.lexical_candidates = len(lexical)
        trace.index_revision = lexical_stats.get("revision", trace.index_revision)
        lexical_hits = [(chunk_id, score) for chunk_id, score, _ in lexical]
        if not run_dense:
            return {"lexical": lexical_hits, "dense": []}
        if pending is None:
            vector = list(query_embedding) if query_embedding is not None else []
        else:
            try:
                vector = self.embedder.await_query(pending, embed_deadline_s)
            except EmbeddingUnavailable as exc:
                trace.embed_ms = (time.perf_counter() - embed_started) * 1000
                trace.embed_fallback = exc.reason
                logger.warning("dense channel skipped: %s", exc.reason)
                return {"lexical": lexical_hits, "dense": []}
            trace.embed_ms = (time.perf_counter() - embed_started) * 1000
            wanted = self._index_dimension
            if wanted and len(vector) != wanted:
                # A provider now answering for another model (a changed base URL): the
                # database would reject the vector; the lexical channel still answers.
                trace.embed_fallback = (
                    f"the embedder returned a {len(vector)}-dimensional vector but the "
                    f"index holds {wanted} dimensions; check the provider's model"
                )
                logger.warning("dense channel skipped: %s", trace.embed_fallback)
                return {"lexical": lexical_hits, "dense": []}
        started = time.perf_counter()
        dense = self.store.search_dense(
            vector,
            scope,
            depth=depth,
            ef_search=HNSW_EF_SEARCH,
            tenant_chunks=lexical_stats.get("chunks"),
            documents=trace.documents,
        )
        trace.dense_ms = (time.perf_counter() - started) * 1000
        trace.dense_candidates = len(dense)
        return {
            "lexical": lexical_hits,
            "dense": dense,
        }

    def fused(
        self,
        query: str,
        scope: AccessScope,
        *,
        channels: Sequence[str] = CHANNELS,
        depth: int | None = None,
        rrf_k: int | None = None,
        weights: Mapping[str, float] | None = None,
        trace: RetrievalTrace | None = None,
        query_embedding: Sequence[float] | None = None,
        fusion: str | None = None,
        embed_deadline_s: float = EMBED_DEADLINE_S,
    ) -> list[tuple[str, float, dict[str, int]]]:
        """Fuse the chosen channels: (chunk id, score in [0, 1], rank per channel).

        ``channels=("lexical",)`` runs the lexical channel alone (no embedding), as
        the pipeline does for the original-question branch.
        """
        unknown = set(channels) - set(CHANNELS)
        if unknown or not channels:
            raise ConfigurationError(
                f"channels must be a non-empty subset of {CHANNELS}"
            )
        trace = trace if trace is not None else RetrievalTrace()
        depth = depth or self.depth
        ranked = self.channels(
            query,
            scope,
            depth=depth,
            trace=trace,
            query_embedding=query_embedding,
            run_dense="dense" in channels,
            embed_deadline_s=embed_deadline_s,
        )
        lists = {c: [i for i, _ in ranked[c]] for c in channels}
        trace.channel_scores = {c: dict(ranked[c]) for c in channels}
        fused = fuse(
            {c: ranked[c] for c in channels},
            method=fusion or self.fusion,
            k=rrf_k or self.rrf_k,
            weights=weights if weights else self.weights,
        )
        ranks = {c: {i: r for r, i in enumerate(lists[c], start=1)} for c in channels}
        trace.fused_candidates = len(fused)
        return [
            (
                chunk_id,
                score,
                {c: ranks[c][chunk_id] for c in channels if chunk_id in ranks[c]},
            )
            for chunk_id, score in fused
        ]

    def retrieve(
        self,
        question: str,
        *,
        limit: int = DEFAULT_LIMIT,
        doc_ids: Sequence[str] | None = None,
        principals: Sequence[str] = (),
        tenant: str | None = None,
        depth: int | None = None,
        trace: RetrievalTrace | None = None,
        query_embedding: Sequence[float] | None = None,
        debug: bool = False,
        embed_deadline_s: float = EMBED_DEADLINE_S,
    ) -> list[RetrievedChunk]:
        """Return up to ``limit`` chunks ranked by the fusion of both channels.

        ``debug`` adds each chunk's raw channel scores (``channel_scores``). They are
        off by default: a raw BM25 score carries the tenant-wide idf, from which a
        caller could count the chunks it cannot see that contain a word (issue 15).
        """
        query = clean_query(question)
        limit = check_limit(limit)
        trace = trace if trace is not None else RetrievalTrace()
        scope = self.scope(principals=principals, tenant=tenant, doc_ids=doc_ids)
        ranked = self.channels(
            query,
            scope,
            depth=max(depth or self.depth, limit),
            trace=trace,
            query_embedding=query_embedding,
            embed_deadline_s=embed_deadline_s,
        )
        fused = fuse(ranked, method=self.fusion, k=self.rrf_k, weights=self.weights)[
            :limit
        ]
        trace.fused_candidates = len(fused)
        started = time.perf_counter()
        rows = self.store.fetch_chunks([chunk_id for chunk_id, _ in fused], scope)
        trace.fetch_ms = (time.perf_counter() - started) * 1000
        ranks = {
            c: {i: r for r, (i, _) in enumerate(ranked[c], start=1)} for c in CHANNELS
        }
        scores = {c: dict(ranked[c]) for c in CHANNELS}
        results = []
        for chunk_id, score in fused:
            row = rows.get(chunk_id)
            if row is None:  # deleted between the channel query and the fetch
                continue
            results.append(
                RetrievedChunk.from_row(
                    row,
                    score=score,
                    ranks={
                        c: ranks[c][chunk_id] for c in CHANNELS if chunk_id in ranks[c]
                    },
                    channel_scores={
                        c: scores[c][chunk_id]
                        for c in CHANNELS
                        if debug and chunk_id in scores[c]
                    },
                )
            )
        return results


_default: Retriever | None = None
_default_lock = threading.Lock()


def default_retriever() -> Retriever:
    """The process-wide retriever over the configured store and embedder."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Retriever(open_store(), resolve_embedder())
        return _default


def retrieve(
    question: str,
    *,
    limit: int = DEFAULT_LIMIT,
    doc_ids: Sequence[str] | None = None,
    principals: Sequence[str] = (),
    tenant: str | None = None,
    retriever: Retriever | None = None,
    debug: bool = False,
) -> list[RetrievedChunk]:
    """Hybrid retrieve with the configured store and embedder (:class:`Retriever`)."""
    return (retriever or default_retriever()).retrieve(
        question,
        limit=limit,
        doc_ids=doc_ids,
        principals=principals,
        tenant=tenant,
        debug=debug,
    )
