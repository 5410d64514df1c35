"""One document's graph evidence: its entities, aliases, curations and relations.

Written inside the document's own write transaction (see :mod:`.writes`), so the
graph never refers to a revision that is not stored. Graph *reads* are
:mod:`.graph`'s.
"""

from __future__ import annotations

from typing import Any

import psycopg

from retrieval_pipeline.tools.store import sql as q
from retrieval_pipeline.tools.store.records import (
    DocumentRecord,
    EntitySpec,
    entity_key,
    normalise_entity_name,
)


def write_graph(conn: psycopg.Connection[Any], doc: DocumentRecord) -> None:
    """Record ``doc``'s title entity, declared entities and relations on ``conn``."""
    _GraphWriter(conn, doc).write()


class _GraphWriter:
    """The statements of one document's graph evidence, in the order they run."""

    def __init__(self, conn: psycopg.Connection[Any], doc: DocumentRecord) -> None:
        self._conn = conn
        self._doc = doc

    def write(self) -> None:
        doc = self._doc
        if doc.title_entity and doc.title.strip():
            self._mention(self._upsert(doc.title, home_document_id=doc.id), 1, "title")
        for entity in doc.entities:
            self._declare(entity)
        for relation in doc.relations:
            self._conn.execute(
                q.INSERT_RELATION,
                {
                    "tenant": doc.tenant,
                    "source_id": self._upsert(relation.source),
                    "target_id": self._upsert(relation.target),
                    "type": relation.type,
                    "weight": relation.weight,
                    "document_id": doc.id,
                },
            )

    def _declare(self, entity: EntitySpec) -> None:
        """An entity the document declares, with its aliases."""
        canonical = self._upsert(
            entity.name,
            type=entity.type,
            lifecycle=entity.lifecycle,
            description=entity.description,
        )
        self._curate(canonical, entity, None)
        for alias in entity.aliases:
            if normalise_entity_name(alias) != normalise_entity_name(entity.name):
                # A zero-count explicit mention records who declared the alias,
                # which graph fusion checks before following it (tools/store/graph).
                alias_id = self._upsert(
                    alias,
                    type=entity.type,
                    lifecycle=entity.lifecycle,
                    canonical_id=canonical,
                )
                self._mention(alias_id, 0, "explicit")
                self._curate(alias_id, entity, canonical)
        self._mention(canonical, entity.count, "explicit")

    def _upsert(self, name: str, **fields: Any) -> str:
        key = entity_key(self._doc.tenant, name)
        self._conn.execute(
            q.UPSERT_ENTITY,
            {
                "id": key,
                "tenant": self._doc.tenant,
                "name": name.strip(),
                "type": fields.get("type"),
                "lifecycle": fields.get("lifecycle"),
                "canonical_id": fields.get("canonical_id"),
                "description": fields.get("description", ""),
                "home_document_id": fields.get("home_document_id"),
            },
        )
        return key

    def _mention(self, entity_id: str, count: int, origin: str) -> None:
        self._conn.execute(
            q.INSERT_MENTION,
            {
                "tenant": self._doc.tenant,
                "entity_id": entity_id,
                "document_id": self._doc.id,
                "chunk_id": None,
                "count": count,
                "origin": origin,
            },
        )

    def _curate(
        self, entity_id: str, entity: EntitySpec, canonical: str | None
    ) -> None:
        # Who declared what: graph fusion applies a curation only for callers
        # who may see its document, and it goes with the document (migration 005).
        if entity.type is None and entity.lifecycle is None and canonical is None:
            return
        self._conn.execute(
            q.INSERT_CURATION,
            {
                "tenant": self._doc.tenant,
                "entity_id": entity_id,
                "document_id": self._doc.id,
                "type": entity.type,
                "lifecycle": entity.lifecycle,
                "canonical_id": canonical,
            },
        )
