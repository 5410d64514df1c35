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
    _check_settings(
        token_budget, max_chunks, mmr_lambda, duplicate_jaccard, document_chunks
    )
    if not items:
        return AssemblyResult([], 0)
    budget = _Budget(
        counter,
        token_budget=token_budget,
        per_document_cap=max(1, int(token_budget * document_share)),
        document_chunks=document_chunks,
    )
    chosen = _greedy_mmr(
        items,
        budget,
        max_chunks=max_chunks,
        mmr_lambda=mmr_lambda,
        duplicate_jaccard=duplicate_jaccard,
    )
    fill = budget.fill(room=max_chunks - len(chosen))
    # Front-load: strongest evidence first (MMR order only decided membership); the
    # fill passages come after every other source's, strongest first among them.
    chosen.sort(key=lambda i: (-i.relevance, i.chunk_id))
    fill.sort(key=lambda i: (-i.relevance, i.chunk_id))
    chosen += fill
    result = budget.result
    result.selected = [item.chunk_id for item in chosen]
    result.token_counts = {
        item.chunk_id: budget.tokens[item.chunk_id] for item in chosen
    }
    return result


def _check_settings(
    token_budget: int,
    max_chunks: int,
    mmr_lambda: float,
    duplicate_jaccard: float,
    document_chunks: int | None,
) -> None:
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


@dataclass
class _Budget:
    """The token budget, each document's share and chunk cap, and what they left out."""

    counter: TokenCounter
    token_budget: int
    per_document_cap: int
    document_chunks: int | None
    result: AssemblyResult = field(default_factory=lambda: AssemblyResult([], 0))
    tokens: dict[str, int] = field(default_factory=dict)
    """Counted only for the candidates actually considered."""
    used_by_document: dict[str, int] = field(default_factory=dict)
    chunks_by_document: dict[str, int] = field(default_factory=dict)
    capped: list[AssemblyItem] = field(default_factory=list)
    """Passages past their document's chunk cap, in the order MMR met them."""

    def admit(self, item: AssemblyItem) -> bool:
        """Take ``item`` if it fits; else record why not (or keep it as capped)."""
        cost = self.tokens[item.chunk_id] = _cached_tokens(item, self.counter)
        if self.result.tokens + cost > self.token_budget:
            self.result.dropped_budget.append(item.chunk_id)
            return False
        # The first passage of a document always fits its share; later ones must.
        used = self.used_by_document.get(item.document_id, 0)
        passages = self.chunks_by_document.get(item.document_id, 0)
        if used and used + cost > self.per_document_cap:
            self.result.dropped_document_share.append(item.chunk_id)
            return False
        if self.document_chunks is not None and passages >= self.document_chunks:
            self.capped.append(item)  # taken back by fill() if slots are left over
            return False
        self.used_by_document[item.document_id] = used + cost
        self.chunks_by_document[item.document_id] = passages + 1
        self.result.tokens += cost
        return True

    def fill(self, room: int) -> list[AssemblyItem]:
        """Capped passages for the slots left (the cap never shortens the context).

        If the pool ran out of other sources, capped passages fill the ``room`` slots
        left, in the order MMR met them, still within the budget and the document's
        token share; they go after the other sources (a caller's limit cuts them
        first).
        """
        fill: list[AssemblyItem] = []
        for extra in self.capped:
            if len(fill) >= room:
                self.result.dropped_document_share.append(extra.chunk_id)
                continue
            cost = self.tokens[extra.chunk_id] = _cached_tokens(extra, self.counter)
            used = self.used_by_document.get(extra.document_id, 0)
            if (
                self.result.tokens + cost > self.token_budget
                or used + cost > self.per_document_cap
            ):
                self.result.dropped_document_share.append(extra.chunk_id)
                continue
            fill.append(extra)
            self.used_by_document[extra.document_id] = used + cost
            self.result.tokens += cost
        return fill


def _normalised_relevance(items: Sequence[AssemblyItem]) -> dict[str, float]:
    """Relevance divided by the pool's best, so it shares [0, 1] with Jaccard.

    Scaling by the best score keeps the gaps proportional (min-max would make the
    weakest candidate worthless).
    """
    low = min(item.relevance for item in items)
    shift = -low if low < 0 else 0.0
    top = max(item.relevance for item in items) + shift or 1.0
    return {item.chunk_id: (item.relevance + shift) / top for item in items}


def _greedy_mmr(
    items: Sequence[AssemblyItem],
    budget: _Budget,
    *,
    max_chunks: int,
    mmr_lambda: float,
    duplicate_jaccard: float,
) -> list[AssemblyItem]:
    """Choose chunks by greedy MMR within the budget; near-duplicates are dropped.

    Lazy greedy MMR (Minoux 1978), exact: a candidate's redundancy (its max Jaccard
    to the chosen chunks) only grows as chunks are chosen, so a score computed
    against fewer chosen chunks is an upper bound. The heap holds those bounds; the
    top entry is brought up to date and taken only if it still leads, so most
    candidates are never compared (nor shingled) at all. Ties go to the earlier
    position in the strongest-first order, exactly as a full scan would break them.
    """
    norm = _normalised_relevance(items)
    # Strongest first, ties by id: the first pick is always the top-scored chunk.
    ordered = sorted(items, key=lambda i: (-i.relevance, i.chunk_id))
    chosen: list[AssemblyItem] = []
    chosen_grams: list[frozenset[int]] = []
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
            budget.result.dropped_duplicates.append(best.chunk_id)
            continue
        if budget.admit(best):
            chosen.append(best)
            chosen_grams.append(grams.get(i) or _cached_shingles(best))
    return chosen
