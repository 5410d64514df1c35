"""Token-budget context assembly: MMR over shingles, near-duplicate drop, front-loading.

Deterministic by construction (no embeddings, no randomness, ties broken by chunk id),
so the same pool always assembles to the same bytes.

- Relevance is the reranker score when present, else the fused score, divided by
  the pool's best score so lambda means the same thing for both.
- Redundancy is the Jaccard similarity of normalised word 3-shingles (Broder 1997).
- Greedy Maximal Marginal Relevance (Carbonell & Goldstein 1998) with lambda 0.7.
- A chunk with Jaccard >= 0.9 to an already-selected chunk is dropped outright.
- A per-document share of the budget keeps one long document from crowding out
  independent evidence (spec: context construction, "group passages by source").
- A per-document chunk cap (``Context.document_chunks``) bounds how many passages of one
  source are chosen, so a top 10 holds more distinct sources: short chunks of one page
  pass the token share easily (ten 100-token chunks are a sixth of the budget), so
  the share alone let one page take most slots (measured in bench/documents.py). The
  cap is soft: when the pool has no other source left, capped passages fill the
  remaining slots, so the context is never shorter because of it.
- Selection stops at the token budget or the chunk cap; the output is ordered by
  relevance so the strongest evidence leads ("lost in the middle", Liu et al. 2024).
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from retrieval_pipeline.errors import ConfigurationError
from retrieval_pipeline.graph.context import (
    DOCUMENT_SHARE,
    DUPLICATE_JACCARD,
    MAX_CHUNKS,
    MMR_LAMBDA,
    SHINGLE_SIZE,
    TOKEN_BUDGET,
)
from retrieval_pipeline.tools.tokens import TokenCounter

_WORD = re.compile(r"\w+", re.UNICODE)


def shingles(text: str, size: int = SHINGLE_SIZE) -> frozenset[int]:
    """Normalised word ``size``-shingles (lower-cased, punctuation dropped), hashed.

    Each shingle is kept as the 64-bit hash of its word tuple: set operations on ints
    are several times faster than on joined strings, and a collision (which could
    only raise a similarity) has a probability of about 2**-64 per pair.
    """
    words = _WORD.findall(text.casefold())
    if len(words) < size:
        return frozenset([hash(tuple(words))]) if words else frozenset()
    return frozenset(map(hash, zip(*(words[i:] for i in range(size)), strict=False)))


# Chunk ids are content-addressed, so a chunk's shingles and token count never change:
# small bounded caches keyed by (id, text hash) spare the work for chunks that recur
# across queries. Keys hold no text; a full cache is simply emptied.
_SHINGLE_CACHE_SIZE = 4096
_TOKEN_CACHE_SIZE = 65536
_shingle_cache: dict[tuple[str, int], frozenset[int]] = {}
_token_cache: dict[tuple[str, str, int], int] = {}


def _cached_shingles(item: AssemblyItem) -> frozenset[int]:
    key = (item.chunk_id, hash(item.text))
    grams = _shingle_cache.get(key)
    if grams is None:
        if len(_shingle_cache) >= _SHINGLE_CACHE_SIZE:
            _shingle_cache.clear()
        grams = _shingle_cache[key] = shingles(item.text)
    return grams


def _cached_tokens(item: AssemblyItem, counter: TokenCounter) -> int:
    key = (counter.method, item.chunk_id, hash(item.text))
    count = _token_cache.get(key)
    if count is None:
        if len(_token_cache) >= _TOKEN_CACHE_SIZE:
            _token_cache.clear()
        count = _token_cache[key] = counter.count(item.text)
    return count


def jaccard(a: frozenset[int], b: frozenset[int]) -> float:
    """|a ∩ b| / |a ∪ b|; two empty sets are identical."""
    if not a and not b:
        return 1.0
    inter = len(a & b) if len(a) <= len(b) else len(b & a)
    union = len(a) + len(b) - inter
    return inter / union if union else 0.0


@dataclass(frozen=True)
class AssemblyItem:
    """One candidate for the context."""

    chunk_id: str
    document_id: str
    text: str
    relevance: float


@dataclass
class AssemblyResult:
    """What the assembler chose, and why the rest was left out."""

    selected: list[str]  # chunk ids, strongest evidence first
    tokens: int
    token_counts: dict[str, int] = field(default_factory=dict)  # per selected chunk
    dropped_duplicates: list[str] = field(default_factory=list)
    dropped_budget: list[str] = field(default_factory=list)
    dropped_document_share: list[str] = field(default_factory=list)
    """Left out by the per-document token share or chunk cap."""


def assemble(
    items: Sequence[AssemblyItem],
    counter: TokenCounter,
    *,
    token_budget: int = TOKEN_BUDGET,
    max_chunks: int = MAX_CHUNKS,
    mmr_lambda: float = MMR_LAMBDA,
    duplicate_jaccard: float = DUPLICATE_JACCARD,
    document_share: float = DOCUMENT_SHARE,
    document_chunks: int | None = None,
) -> AssemblyResult:
    """Select and order chunks for a context window (see module docstring).

    ``document_chunks`` caps the passages of one document (None: no cap); the
    pipeline passes :data:`DOCUMENT_CHUNKS`.
    """
    if token_budget < 1 or max_chunks < 1:
        raise ConfigurationError("token_budget and max_chunks must be positive")
    if document_chunks is not None and document_chunks < 1:
        raise ConfigurationError(
            "document_chunks must be positive (or None for no cap)"
        )
    if not 0.0 <= mmr_lambda <= 1.0 or not 0.0 < duplicate_jaccard <= 1.0:
        raise ConfigurationError(
            "mmr_lambda must be in [0, 1] and duplicate_jaccard in (0, 1]"
        )
    if not items:
        return AssemblyResult([], 0)
    # Scale by the best score so relevance and Jaccard share [0, 1] while keeping
    # the gaps proportional (min-max would make the weakest candidate worthless).
    low = min(item.relevance for item in items)
    shift = -low if low < 0 else 0.0
    top = max(item.relevance for item in items) + shift or 1.0
    norm = {item.chunk_id: (item.relevance + shift) / top for item in items}
    tokens: dict[str, int] = {}  # counted only for the candidates actually picked
    # Strongest first, ties by id: the first pick is always the top-scored chunk.
    ordered = sorted(items, key=lambda i: (-i.relevance, i.chunk_id))
    per_document_cap = max(1, int(token_budget * document_share))
    result = AssemblyResult([], 0)
    used_by_document: dict[str, int] = {}
    chunks_by_document: dict[str, int] = {}
    capped: list[AssemblyItem] = []
    chosen: list[AssemblyItem] = []
    chosen_grams: list[frozenset[int]] = []
    # Lazy greedy MMR (Minoux 1978), exact: a candidate's redundancy (its max Jaccard
    # to the chosen chunks) only grows as chunks are chosen, so a score computed
    # against fewer chosen chunks is an upper bound. The heap holds those bounds; the
    # top entry is brought up to date and taken only if it still leads, so most
    # candidates are never compared (nor shingled) at all. Ties go to the earlier
    # position in ``ordered``, exactly as a full scan would break them.
    redundancy = [0.0] * len(ordered)
    compared = [0] * len(ordered)  # how many chosen chunks each entry has seen
    grams: dict[int, frozenset[int]] = {}
    heap = [(-mmr_lambda * norm[item.chunk_id], i) for i, item in enumerate(ordered)]
    heapq.heapify(heap)
    while heap and len(chosen) < max_chunks:
        bound, i = heapq.heappop(heap)
        if compared[i] < len(chosen):
            mine = grams.get(i)
            if mine is None:
                mine = grams[i] = _cached_shingles(ordered[i])
            for other in chosen_grams[compared[i] :]:
                similarity = jaccard(mine, other)
                if similarity > redundancy[i]:
                    redundancy[i] = similarity
            compared[i] = len(chosen)
            score = (
                mmr_lambda * norm[ordered[i].chunk_id]
                - (1 - mmr_lambda) * redundancy[i]
            )
            if heap and (-score, i) > heap[0]:
                heapq.heappush(heap, (-score, i))
                continue
        best = ordered[i]
        if redundancy[i] >= duplicate_jaccard:
            result.dropped_duplicates.append(best.chunk_id)
            continue
        cost = tokens[best.chunk_id] = _cached_tokens(best, counter)
        if result.tokens + cost > token_budget:
            result.dropped_budget.append(best.chunk_id)
            continue
        # The first passage of a document always fits its share; later ones must.
        used = used_by_document.get(best.document_id, 0)
        passages = chunks_by_document.get(best.document_id, 0)
        if used and used + cost > per_document_cap:
            result.dropped_document_share.append(best.chunk_id)
            continue
        if document_chunks is not None and passages >= document_chunks:
            capped.append(best)  # taken back below if slots are left over
            continue
        chosen.append(best)
        chosen_grams.append(grams.get(i) or _cached_shingles(best))
        used_by_document[best.document_id] = used + cost
        chunks_by_document[best.document_id] = passages + 1
        result.tokens += cost
    # The chunk cap makes room for other sources; it never shortens the context. If
    # the pool runs out of other sources, capped passages fill the slots left, in the
    # order MMR met them, still within the budget and the document's token share,
    # and are placed after the other sources (a caller's limit cuts them first).
    fill: list[AssemblyItem] = []
    for extra in capped:
        if len(chosen) + len(fill) >= max_chunks:
            result.dropped_document_share.append(extra.chunk_id)
            continue
        cost = tokens[extra.chunk_id] = _cached_tokens(extra, counter)
        used = used_by_document.get(extra.document_id, 0)
        if result.tokens + cost > token_budget or used + cost > per_document_cap:
            result.dropped_document_share.append(extra.chunk_id)
            continue
        fill.append(extra)
        used_by_document[extra.document_id] = used + cost
        result.tokens += cost
    # Front-load: strongest evidence first (MMR order only decided membership); the
    # fill passages come after every other source's, strongest first among them.
    chosen.sort(key=lambda i: (-i.relevance, i.chunk_id))
    fill.sort(key=lambda i: (-i.relevance, i.chunk_id))
    chosen += fill
    result.selected = [item.chunk_id for item in chosen]
    result.token_counts = {item.chunk_id: tokens[item.chunk_id] for item in chosen}
    return result
