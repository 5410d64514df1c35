"""Soft scope and freshness: score adjustments on a fused candidate list.

Advisory filters from query understanding never exclude anything; a match adds a
share of the best possible fused score (scores are in [0, 1]). A freshness intent
adds a recency term computed from the documents' timestamps (exponential decay with
a half-life); "historical" reverses it. With no filters and no intent the list is
returned untouched.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from retrieval_pipeline.graph.context import (
    RECENCY_HALF_LIFE_DAYS,
    RECENCY_WEIGHT,
    SOFT_FILTER_BOOST,
)
from retrieval_pipeline.tools.store.graph import GraphStore
from retrieval_pipeline.tools.store.store import AccessScope, Store


@dataclass(frozen=True)
class SoftScope:
    """What to boost; all empty means nothing changes."""

    path_prefix: str | None = None
    doc_title_contains: str | None = None
    entity_types: tuple[str, ...] = ()
    """Boost chunks whose document mentions an entity of one of these types."""
    freshness: str | None = None  # "recent" | "historical" | None

    @property
    def empty(self) -> bool:
        """True when no adjustment applies."""
        return not (
            self.path_prefix
            or self.doc_title_contains
            or self.entity_types
            or self.freshness
        )


def apply_soft_scope(
    fused: Sequence[tuple[str, float, dict[str, int]]],
    soft: SoftScope,
    store: Store,
    scope: AccessScope,
    *,
    now: datetime | None = None,
) -> list[tuple[str, float, dict[str, int]]]:
    """Return the list re-scored and re-sorted (ties by chunk id)."""
    if soft.empty or not fused:
        return list(fused)
    rows = store.fetch_chunks([chunk_id for chunk_id, _, _ in fused], scope)
    typed = (
        GraphStore(store).documents_mentioning_types(
            sorted({str(r["document_id"]) for r in rows.values()}),
            soft.entity_types,
            scope,
        )
        if soft.entity_types
        else set()
    )
    now = now or datetime.now(tz=UTC)
    adjusted = []
    for chunk_id, score, ranks in fused:
        row = rows.get(chunk_id)
        if row is not None:
            if soft.path_prefix and str(row["path"]).startswith(soft.path_prefix):
                score += SOFT_FILTER_BOOST
            title = soft.doc_title_contains
            if title and title.casefold() in str(row["title"]).casefold():
                score += SOFT_FILTER_BOOST
            if row["document_id"] in typed:
                score += SOFT_FILTER_BOOST
            if soft.freshness in ("recent", "historical"):
                age_days = max(0.0, (now - row["updated_at"]).total_seconds() / 86_400)
                recency = math.pow(0.5, age_days / RECENCY_HALF_LIFE_DAYS)
                term = recency if soft.freshness == "recent" else 1.0 - recency
                score += RECENCY_WEIGHT * term
        adjusted.append((chunk_id, score, ranks))
    return sorted(adjusted, key=lambda item: (-item[1], item[0]))
