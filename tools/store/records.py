"""Value types that cross the store boundary."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NotRequired

from typing_extensions import TypedDict

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


class ChunkOutput(TypedDict):
    """A chunk as every route returns it (plain retrieve, the pipeline, HTTP, tools).

    Built only by :func:`chunk_output`. The keys are the same on every route:

    - the provenance and score keys are always present; a value a source does not
      have is ``null``, never a missing key (``page_start``/``page_end`` for a
      source without pages);
    - ``graph_boosted`` is always present (``False`` when no graph stage ran);
    - two evidence keys appear only when that evidence exists, on every route alike:
      ``rerank_score`` when a reranker scored the chunk (absent when no reranker ran
      or it fell back), and ``channel_scores`` only when the caller asked for debug
      (raw scores are a side channel, issue 15), then an object per chunk (empty for
      a chunk no channel scored, such as one graph fusion added).
    """

    chunk_id: str
    document_id: str
    """The source's own id (BEIR ``_id``, path, front matter id)."""
    title: str
    text: str
    """Heading path + body, as indexed."""
    heading_path: list[str]
    source_uri: str
    revision: str
    char_start: int
    char_end: int
    page_start: int | None
    page_end: int | None
    token_count: int
    parser_version: str
    embedding_model: str
    embedding_version: str
    updated_at: str
    """ISO 8601."""
    score: float
    """Fused score in [0, 1] (or the graph chain score for a graph-added chunk)."""
    ranks: dict[str, int]
    """Best 1-based rank per channel (``lexical``, ``dense``)."""
    graph_boosted: bool
    rerank_score: NotRequired[float]
    channel_scores: NotRequired[dict[str, float]]


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

    @classmethod
    def from_row(
        cls,
        row: Mapping[str, Any],
        *,
        score: float,
        ranks: Mapping[str, int],
        channel_scores: Mapping[str, float] | None = None,
    ) -> RetrievedChunk:
        """A chunk from a fetched row (``Store.fetch_chunks``) and its scores."""
        return cls(
            chunk_id=row["id"],
            document_id=row["source_id"],
            title=row["title"],
            text=row["content"],
            body=row["body"],
            heading_path=tuple(row["heading_path"]),
            source_uri=row["source_uri"],
            revision=row["revision"],
            char_start=row["char_start"],
            char_end=row["char_end"],
            page_start=row["page_start"],
            page_end=row["page_end"],
            token_count=row["token_count"],
            parser_version=row["parser_version"],
            embedding_model=row["embedding_model"],
            embedding_version=row["embedding_version"],
            updated_at=row["updated_at"],
            score=score,
            ranks=dict(ranks),
            channel_scores=dict(channel_scores or {}),
        )

    def to_dict(self) -> ChunkOutput:
        """Return the JSON form (:class:`ChunkOutput`; see :func:`chunk_output`)."""
        return chunk_output(self)


def chunk_output(
    chunk: RetrievedChunk,
    *,
    graph_boosted: bool = False,
    rerank_score: float | None = None,
    debug: bool | None = None,
) -> ChunkOutput:
    """The one place a chunk's output is built (:class:`ChunkOutput`, snake_case).

    ``debug`` says whether the caller asked for raw channel scores; None infers it
    from the chunk (a plain retrieve fills them only when asked).
    """
    out: ChunkOutput = {
        "chunk_id": chunk.chunk_id,
        "document_id": chunk.document_id,
        "title": chunk.title,
        "text": chunk.text,
        "heading_path": list(chunk.heading_path),
        "source_uri": chunk.source_uri,
        "revision": chunk.revision,
        "char_start": chunk.char_start,
        "char_end": chunk.char_end,
        "page_start": chunk.page_start,
        "page_end": chunk.page_end,
        "token_count": chunk.token_count,
        "parser_version": chunk.parser_version,
        "embedding_model": chunk.embedding_model,
        "embedding_version": chunk.embedding_version,
        "updated_at": chunk.updated_at.isoformat(),
        "score": chunk.score,
        "ranks": dict(chunk.ranks),
        "graph_boosted": graph_boosted,
    }
    if rerank_score is not None:
        out["rerank_score"] = rerank_score
    if debug if debug is not None else bool(chunk.channel_scores):
        out["channel_scores"] = dict(chunk.channel_scores)
    return out


def revision_label(chunk_count: Any, latest_ingest: Any) -> str:
    """The index revision a query saw: ``chunks-<count>-<newest ingest, epoch ms>``.

    Cheap to read (the tenant's corpus statistics and its newest ingest) and enough
    to tell, when replaying a trace, whether the index changed since.
    """
    return f"chunks-{int(chunk_count or 0)}-{int((latest_ingest or 0) * 1000)}"
