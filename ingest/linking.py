"""Entity linking: 'extracted' mentions of known entity names in chunk text.

Runs at the end of an ingest (see :mod:`.job`): a newly declared name can occur in
documents written earlier, so a run that changed the graph relinks the whole tenant,
and one that did not relinks just the documents it wrote. Deterministic: whole-word,
case-insensitive matches, longest name first.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from retrieval_pipeline.tools.store import sql as q
from retrieval_pipeline.tools.store import sql_documents as qd
from retrieval_pipeline.tools.store.connection import StoreConnection
from retrieval_pipeline.tools.store.records import normalise_entity_name

# Two-letter names match too much prose to be evidence.
MIN_NAME_LENGTH = 3


class EntityMatcher:
    """Whole-word, case-insensitive matcher over a set of entity names."""

    def __init__(self, names: Iterable[tuple[str, str]]) -> None:
        """Match ``names``, pairs of (entity id, name); the first id of a name wins."""
        self._by_name: dict[str, str] = {}
        for entity_id, name in names:
            norm = normalise_entity_name(name)
            if len(norm) >= MIN_NAME_LENGTH:
                self._by_name.setdefault(norm, entity_id)
        ordered = sorted(self._by_name, key=lambda n: (-len(n), n))
        self.empty = not ordered
        pattern = "|".join(re.escape(n).replace(r"\ ", r"\s+") for n in ordered)
        self._regex = (
            re.compile(rf"(?<!\w)(?:{pattern})(?!\w)", re.IGNORECASE)
            if ordered
            else None
        )

    def find(self, text: str) -> dict[str, int]:
        """Occurrences in ``text`` by entity id."""
        found: dict[str, int] = {}
        if self._regex is None:
            return found
        for match in self._regex.finditer(text):
            entity_id = self._by_name.get(normalise_entity_name(match.group(0)))
            if entity_id is not None:
                found[entity_id] = found.get(entity_id, 0) + 1
        return found


def link_entities(
    store: StoreConnection, tenant: str, document_ids: Sequence[str] | None = None
) -> int:
    """Record 'extracted' mentions of known entity names and aliases in chunk text.

    Replaces the tenant's extracted mentions (of ``document_ids`` only, when given)
    in one transaction, matching every non-deleted entity name of the tenant.
    Returns the number of mentions written.
    """
    with store.connection() as conn:
        names = conn.execute(q.ENTITY_NAMES, {"tenant": tenant}).fetchall()
    matcher = EntityMatcher((row[0], row[1]) for row in names)
    params: dict[str, Any] = {"tenant": tenant, "doc_keys": list(document_ids or [])}
    scoped = document_ids is not None
    chunk_scope = qd.LINKING_CHUNK_SCOPE if scoped else ""
    mention_scope = qd.LINKING_MENTION_SCOPE if scoped else ""
    with store.connection() as conn, conn.transaction():
        conn.execute(
            q.DELETE_EXTRACTED_MENTIONS.format(scope=mention_scope).encode(), params
        )
        if matcher.empty:
            return 0
        rows = conn.execute(
            q.CHUNKS_FOR_LINKING.format(scope=chunk_scope).encode(), params
        ).fetchall()
        batch = _extracted_mentions(matcher, rows)
        if batch:
            with conn.cursor() as cur:
                cur.executemany(
                    q.INSERT_MENTION, [row | {"tenant": tenant} for row in batch]
                )
    return len(batch)


def _extracted_mentions(
    matcher: EntityMatcher, chunks: Iterable[tuple[str, str, str]]
) -> list[dict[str, Any]]:
    """INSERT_MENTION rows for the matches in (chunk id, document id, text) rows."""
    return [
        {
            "entity_id": entity_id,
            "document_id": document_id,
            "chunk_id": chunk_id,
            "count": count,
            "origin": "extracted",
        }
        for chunk_id, document_id, content in chunks
        for entity_id, count in matcher.find(content).items()
    ]
