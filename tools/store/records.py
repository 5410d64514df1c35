"""Value types that cross the store boundary."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

_SPACE = re.compile(r"\s+")


def _digest(*parts: str, size: int = 24) -> str:
    return hashlib.sha256("\x1f".join(parts).encode("utf-8")).hexdigest()[:size]


def document_key(tenant: str, source_id: str) -> str:
    """Stable internal document id: the same (tenant, source id) always maps here."""
    return "d_" + _digest(tenant, source_id)


def chunk_key(document_id: str, ordinal: int, content: str) -> str:
    """Stable passage id: same document, position and text give the same id."""
    return "c_" + _digest(document_id, str(ordinal), content)


def normalise_entity_name(name: str) -> str:
    """Case- and space-insensitive form used to identify an entity."""
    return _SPACE.sub(" ", name).strip().casefold()


def entity_key(tenant: str, name: str) -> str:
    """Stable entity id from (tenant, normalised name)."""
    return "e_" + _digest(tenant, normalise_entity_name(name))


def page_label(page_start: int | None, page_end: int | None) -> str:
    """``p. 14``, ``pp. 14–15`` (an en dash), or ``""`` for a source without pages."""
    if page_start is None:
        return ""
    if page_end is None or page_end == page_start:
        return f"p. {page_start}"
    return f"pp. {page_start}\u2013{page_end}"


@dataclass(frozen=True)
class EntitySpec:
    """An entity declared by a document (front matter, sidecar) or its title."""

    name: str
    type: str | None = None  # None: keep what another document declared
    lifecycle: str | None = None  # None: keep the stored lifecycle ('served' if new)
    aliases: tuple[str, ...] = ()
    description: str = ""
    count: int = 1  # how often the declaring document mentions it


@dataclass(frozen=True)
class RelationSpec:
    """A typed, weighted edge asserted by a document."""

    source: str
    target: str
    type: str = "related_to"
    weight: float = 1.0


LIFECYCLES = ("draft", "pending_review", "served", "deleted")


@dataclass(frozen=True)
class ChunkRecord:
    """One retrieval unit ready to be written (embedding included)."""

    id: str
    ordinal: int
    heading_path: tuple[str, ...]
    body: str
    content: str
    char_start: int
    char_end: int
    token_count: int
    identifiers: tuple[str, ...]
    embedding: tuple[float, ...]
    page_start: int | None = None  # 1-based PDF pages the chunk spans (None: no pages)
    page_end: int | None = None


@dataclass(frozen=True)
class DocumentRecord:
    """A parsed, chunked and embedded document ready for one atomic write."""

    id: str
    source_id: str
    tenant: str
    title: str
    path: str
    source_uri: str
    revision: str
    parser_version: str
    acl: tuple[str, ...]
    metadata: dict[str, Any]
    content: str
    embedding_model: str
    embedding_version: str
    created_at: datetime | None
    updated_at: datetime
    chunks: tuple[ChunkRecord, ...]
    entities: tuple[EntitySpec, ...] = ()
    relations: tuple[RelationSpec, ...] = ()
    title_entity: bool = False  # the title names an entity whose home is this document


@dataclass(frozen=True)
class RetrievedChunk:
    """A ranked chunk with its provenance and the evidence behind its rank."""

    chunk_id: str
    document_id: str  # the source's own id (BEIR _id, path, front matter id)
    title: str
    text: str  # heading path + body, as indexed
    body: str
    heading_path: tuple[str, ...]
    source_uri: str
    revision: str
    char_start: int
    char_end: int
    token_count: int
    parser_version: str
    embedding_model: str
    embedding_version: str
    updated_at: datetime
    score: float  # fused score (RRF)
    ranks: dict[str, int] = field(default_factory=dict)  # 1-based rank per channel
    channel_scores: dict[str, float] = field(default_factory=dict)
    """Raw score per channel; filled only on request (``debug``): see issue 15."""
    page_start: int | None = None  # first and last 1-based page (PDF); None: no pages
    page_end: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form (snake_case keys, ISO timestamps).

        ``channel_scores`` appears only when filled, so a chunk has the same keys
        on the plain path as on the pipeline's.
        """
        out = {
            "chunk_id": self.chunk_id,
            "document_id": self.document_id,
            "title": self.title,
            "text": self.text,
            "heading_path": list(self.heading_path),
            "source_uri": self.source_uri,
            "revision": self.revision,
            "char_start": self.char_start,
            "char_end": self.char_end,
            "page_start": self.page_start,
            "page_end": self.page_end,
            "token_count": self.token_count,
            "parser_version": self.parser_version,
            "embedding_model": self.embedding_model,
            "embedding_version": self.embedding_version,
            "updated_at": self.updated_at.isoformat(),
            "score": self.score,
            "ranks": dict(self.ranks),
        }
        if self.channel_scores:
            out["channel_scores"] = dict(self.channel_scores)
        return out
