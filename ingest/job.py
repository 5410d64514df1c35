"""The ingest job: load, chunk, embed in batches, write each document atomically.

A failing file is reported with its path and reason and the run continues. An
unchanged revision is skipped without embedding; a changed one replaces the old
chunks in one transaction. Entity mentions are linked deterministically at the end.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shlex
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol
from urllib.parse import unquote, urlsplit
from urllib.request import url2pathname

from retrieval_pipeline.errors import (
    DimensionMismatchError,
    IngestError,
    RecordRejectedError,
)
from retrieval_pipeline.graph.context import CHUNK_MAX_TOKENS, CHUNK_OVERLAP_TOKENS
from retrieval_pipeline.ingest.chunker import Chunk, chunk_text, extract_identifiers
from retrieval_pipeline.ingest.linking import link_entities
from retrieval_pipeline.ingest.loaders import (
    PARSER_VERSION,
    LoadDefaults,
    SourceDocument,
    discover,
    load_file,
    page_span,
)
from retrieval_pipeline.ingest.site import (
    LINK_RELATION,
    SiteMemory,
    directory_uri,
    is_page,
    outside_links,
    page_entity,
    prepare_pages,
)
from retrieval_pipeline.tools.embeddings import Embedder, EmbeddingUnavailable
from retrieval_pipeline.tools.store.records import (
    ChunkRecord,
    DocumentRecord,
    chunk_key,
    document_key,
    entity_key,
)
from retrieval_pipeline.tools.store.store import Store
from retrieval_pipeline.tools.tokens import TokenCounter, default_token_counter

logger = logging.getLogger(__name__)
_IN_SUMMARY = {"in_summary": True}
"""Marks a log record that the summary also reports (the CLI prints it once)."""

DOCUMENT_BATCH = 128  # documents embedded together; bounds memory on big corpora
SITE_LINKS = True
"""Links between the pages of one ingest become graph relations (bench/documents.py)."""


@dataclass
class IngestSummary:
    """Counts and timings of one ingest run."""

    documents: int = 0  # written (new or changed)
    chunks: int = 0
    skipped: int = 0  # unchanged revisions
    removed: int = 0
    failures: list[tuple[str, str]] = field(default_factory=list)  # (path, reason)
    warnings: list[tuple[str, str]] = field(default_factory=list)  # ingested anyway
    not_ingested: list[tuple[str, str]] = field(default_factory=list)
    """Files under a directory left out, with why (an unsupported type, a special
    file, a link not followed, an unreadable directory): never dropped in silence."""
    mentions_linked: int = 0
    seconds: float = 0.0
    embed_seconds: float = 0.0
    write_seconds: float = 0.0
    embeddings_reused: int = 0  # stored vectors taken over instead of re-embedding

    @property
    def failed(self) -> int:
        """Number of files or records that could not be ingested."""
        return len(self.failures)

    def fail(self, path: str, reason: str) -> None:
        """Record a file or record that was not ingested, and log it (a WARNING)."""
        path = _shown(path)
        self.failures.append((path, reason))
        logger.warning("failed: %s: %s", path, reason, extra=_IN_SUMMARY)

    def warn(self, path: str, reason: str) -> None:
        """Record a warning about an ingested file, and log it (a WARNING)."""
        path = _shown(path)
        self.warnings.append((path, reason))
        logger.warning("warning: %s: %s", path, reason, extra=_IN_SUMMARY)

    def to_dict(self) -> dict[str, object]:
        """Return the JSON form."""
        return {
            "documents": self.documents,
            "chunks": self.chunks,
            "skipped": self.skipped,
            "removed": self.removed,
            "failed": self.failed,
            "failures": [{"path": p, "reason": r} for p, r in self.failures],
            "warnings": [{"path": p, "reason": r} for p, r in self.warnings],
            "not_ingested": [{"path": p, "reason": r} for p, r in self.not_ingested],
            "mentions_linked": self.mentions_linked,
            "seconds": round(self.seconds, 3),
            "embed_seconds": round(self.embed_seconds, 3),
            "write_seconds": round(self.write_seconds, 3),
            "embeddings_reused": self.embeddings_reused,
        }


@dataclass(frozen=True)
class _Prepared:
    source: SourceDocument
    document_id: str
    revision: str
    chunks: list[Chunk]


def _shown(path: str) -> str:
    """A path as the summary says it: a ``file:`` URI as its local path.

    A JSONL record keeps its ``#id``, so every line names files the same way.
    """
    local = _file_of(path)
    if local is None:
        return path
    fragment = urlsplit(path).fragment
    return local + ("#" + unquote(fragment) if fragment else "")


def _listed(ids: Sequence[str]) -> str:
    return ", ".join(f"'{i}'" for i in ids)


def _delete_command(tenant: str, ids: Sequence[str]) -> str:
    """The CLI line that deletes ``ids``, quoted for a POSIX shell."""
    scope = f" --tenant {shlex.quote(tenant)}" if tenant else ""
    return f"retrieval-pipeline delete{scope} -- " + " ".join(
        shlex.quote(i) for i in ids
    )


def _file_of(uri: str) -> str | None:
    """The local path of a ``file:`` URI (a JSONL record's ``#id`` dropped)."""
    parts = urlsplit(uri)
    if parts.scheme != "file":
        return None
    return url2pathname(parts.path)


def _root_of(uri: str, source_id: str) -> str | None:
    """The decoded root URI a path-derived ``source_id`` was taken under."""
    decoded = unquote(uri)
    if "#" in uri or not decoded.endswith("/" + source_id):
        return None
    return decoded[: len(decoded) - len(source_id)]


def revision_of(source: SourceDocument, embedding_model: str) -> str:
    """Content revision: changes with the text or anything that shapes the index."""
    indexing = {
        "title": source.title,
        "path": source.path,
        "tenant": source.tenant,
        "principals": list(source.principals),
        "metadata": source.metadata,
        "entities": [e.__dict__ for e in source.entities],
        "relations": [r.__dict__ for r in source.relations],
        "title_entity": source.title_entity,
        "created_at": source.created_at.isoformat() if source.created_at else None,
        "updated_at": source.updated_at.isoformat() if source.updated_at else None,
        "parser": PARSER_VERSION,
        "chunking": [CHUNK_MAX_TOKENS, CHUNK_OVERLAP_TOKENS],
        "embedding_model": embedding_model,
    }
    digest = hashlib.sha256(source.content.encode("utf-8"))
    digest.update(json.dumps(indexing, sort_keys=True, default=str).encode("utf-8"))
    return "sha256:" + digest.hexdigest()


def _reusable(item: _Prepared, dimension: int) -> bool:
    """A stored vector fits when it embedded exactly the one chunk's indexed text."""
    vector = item.source.embedding
    return (
        vector is not None
        and len(vector) == dimension
        and len(item.chunks) == 1
        and item.chunks[0].indexed_text().strip() == item.source.content.strip()
    )


def chunk_document(source: SourceDocument, counter: TokenCounter) -> list[Chunk]:
    """Chunk a loaded document according to its kind."""
    if source.kind == "langchain":
        # An imported row is already a chunk (the user's splitter made it, and its
        # stored vector embedded exactly this text): keep it whole.
        text = source.content
        start, end = len(text) - len(text.lstrip()), len(text.rstrip())
        if start >= end:
            return []
        body = text[start:end]
        return [Chunk(0, (), start, end, body, counter.count(body))]
    structured = source.kind in ("markdown", "html", "pdf", "docx")
    base = () if structured else ((source.title,) if source.title else ())
    chunks = chunk_text(
        source.content,
        counter=counter,
        start=source.body_start,
        structured=structured,
        base_headings=base,
    )
    if source.kind == "html":
        chunks = merge_small_chunks(source.content, chunks, counter)
    return chunks


SMALL_CHUNK_TOKENS = 24
"""A chunk this short (a title line, "VACUUM — garbage-collect a database") is merged
into the next chunk of its page: alone it is all topic and no content, and wins
dense rankings it should not."""


def merge_small_chunks(
    text: str,
    chunks: list[Chunk],
    counter: TokenCounter,
    *,
    min_tokens: int = SMALL_CHUNK_TOKENS,
    max_tokens: int = CHUNK_MAX_TOKENS,
) -> list[Chunk]:
    """Merge each chunk under ``min_tokens`` into a neighbour of its document.

    The next chunk when the merged span fits ``max_tokens``, else the previous one
    when it has the same heading path (a small last section keeps its own). The
    merged body is the exact span from the first chunk's start to the second's
    end (a heading line between them included), with the heading path of the chunk
    it joins.
    """
    spans = [(c.char_start, c.char_end, c.heading_path) for c in chunks]
    merged: list[tuple[int, int, tuple[str, ...]]] = []
    i = 0
    while i < len(spans):
        lo, hi, path = spans[i]
        small = counter.count(text[lo:hi]) < min_tokens
        if small and i + 1 < len(spans):
            n_lo, n_hi, n_path = spans[i + 1]
            if n_lo >= hi and counter.count(text[lo:n_hi]) <= max_tokens:
                spans[i + 1] = (lo, n_hi, n_path)
                i += 1
                continue
        if small and merged and lo >= merged[-1][1] and merged[-1][2] == path:
            p_lo, _, p_path = merged[-1]
            if counter.count(text[p_lo:hi]) <= max_tokens:
                merged[-1] = (p_lo, hi, p_path)
                i += 1
                continue
        merged.append((lo, hi, path))
        i += 1
    if len(merged) == len(chunks):
        return chunks
    return [
        Chunk(n, path, lo, hi, text[lo:hi], counter.count(text[lo:hi]))
        for n, (lo, hi, path) in enumerate(merged)
    ]


class Ingestor:
    """Ingests sources into a store with one embedder (whose dimension it checks)."""

    def __init__(
        self,
        store: Store,
        embedder: Embedder,
        *,
        counter: TokenCounter | None = None,
        progress: bool = False,
        on_document_written: Callable[[DocumentRecord], None] | None = None,
    ) -> None:
        self.store = store
        self.embedder = embedder
        self.counter = counter or default_token_counter()
        self.progress = progress
        self._on_written = on_document_written

    def ingest_paths(
        self,
        paths: Sequence[Path | str],
        *,
        tenant: str = "",
        principals: Sequence[str] = (),
        title_entities: bool = False,
        prune: bool = False,
        site_links: bool = SITE_LINKS,
    ) -> IngestSummary:
        """Ingest files and directories (recursively); see :class:`IngestSummary`.

        Shared HTML boilerplate is removed across the loaded pages, and with
        ``site_links`` links between them become graph relations
        (:mod:`retrieval_pipeline.ingest.site`).
        """
        started = time.perf_counter()
        summary = IngestSummary()
        targets = [Path(p) for p in paths]
        sources: list[SourceDocument] = []
        # Each file once, however many paths reach it (`ingest docs docs`, a link
        # beside its target): resolved file -> [(path, the defaults of its root)].
        reached: dict[Path, list[tuple[Path, LoadDefaults]]] = {}
        for target in targets:
            root = target if target.is_dir() else target.parent
            defaults = LoadDefaults(
                tenant=tenant,
                principals=tuple(sorted(set(principals))),
                title_entities=title_entities,
                root=root,
            )
            try:
                files = list(discover([target], summary.not_ingested))
            except IngestError as exc:
                summary.fail(exc.path, exc.reason)
                continue
            for file in files:
                reached.setdefault(file.resolve(), []).append((file, defaults))
        for reaching in reached.values():
            # Read at the file itself rather than a link to it (its name, its
            # title); every path's sidecar is the file's (load_file's aliases).
            (file, defaults), *others = sorted(
                reaching, key=lambda p: p[0].is_symlink()
            )
            for other, _ in others:
                summary.warn(
                    str(other), f"reached twice (also as {file}): ingested once"
                )
            try:
                loaded = load_file(file, defaults, aliases=[o for o, _ in others])
            except IngestError as exc:
                summary.fail(exc.path, exc.reason)
                continue
            sources.extend(loaded)
            # A JSONL file's documents share its sidecar, and its warnings.
            for warning in dict.fromkeys(w for s in loaded for w in s.warnings):
                summary.warn(str(file), warning)
        sources = self._one_copy_per_file(sources, summary)
        roots = [directory_uri(t) for t in targets if t.is_dir()]
        site = prepare_pages(
            sources, links=site_links, roots=roots, memory=self._site_memory(sources)
        )
        sources = site.sources
        self._ingest_sources(sources, summary)
        for (owner, directory), (lines, pages) in sorted(site.boilerplate.items()):
            self.store.save_site_boilerplate(owner, directory, sorted(lines), pages)
        if prune:
            summary.removed = self._prune(targets, sources, tenant)
        summary.seconds = time.perf_counter() - started
        return summary

    def ingest_documents(self, sources: Iterable[SourceDocument]) -> IngestSummary:
        """Ingest already-loaded documents (the Python API for custom loaders)."""
        started = time.perf_counter()
        summary = IngestSummary()
        self._ingest_sources(list(sources), summary)
        summary.seconds = time.perf_counter() - started
        return summary

    def _ingest_sources(
        self, sources: list[SourceDocument], summary: IngestSummary
    ) -> None:
        if not sources:
            return
        self.store.ensure_embedding_index(self.embedder.model, self.embedder.dimension)
        seen: dict[str, str] = {}
        unique: list[SourceDocument] = []
        for source in sources:
            key = document_key(source.tenant, source.source_id)
            if key in seen:
                summary.fail(
                    source.source_uri,
                    f"duplicate document id '{source.source_id}' "
                    f"(also in {seen[key]}); the first one was kept",
                )
                continue
            seen[key] = source.source_uri
            unique.append(source)
        bar = _progress_bar(len(unique), self.progress)
        written_ids: list[str] = []
        graph_changed = False
        tenants: set[str] = set()
        written_batches = 0
        try:
            for offset in range(0, len(unique), DOCUMENT_BATCH):
                batch = unique[offset : offset + DOCUMENT_BATCH]
                prepared = self._prepare(batch, summary)
                if not prepared:  # every document unchanged: nothing to embed
                    bar.update(len(batch))
                    continue
                records = self._embed(prepared, summary)
                write_started = time.perf_counter()
                for record in self._write(records, summary):
                    summary.documents += 1
                    summary.chunks += len(record.chunks)
                    written_ids.append(record.id)
                    tenants.add(record.tenant)
                    graph_changed |= bool(
                        record.entities or record.relations or record.title_entity
                    )
                    if self._on_written is not None:
                        self._on_written(record)
                written_batches += 1
                more = offset + DOCUMENT_BATCH < len(unique)
                if more and written_batches & (written_batches - 1) == 0:
                    # Batches 1, 2, 4, 8, ...: the planner learns the tables' new
                    # size while a big ingest is still writing (log2 n analyses;
                    # the last batch is analysed once, after the loop).
                    self.store.analyze()
                summary.write_seconds += time.perf_counter() - write_started
                bar.update(len(batch))
        finally:
            bar.close()
        link_started = time.perf_counter()
        if written_ids:
            # Fresh statistics keep the channel queries on their index plans.
            self.store.analyze()
        for tenant in sorted(tenants):
            # New entity names can appear in documents written earlier: relink them all.
            scope = None if graph_changed else list(written_ids)
            summary.mentions_linked += link_entities(self.store, tenant, scope)
        summary.write_seconds += time.perf_counter() - link_started

    def _site_memory(self, sources: list[SourceDocument]) -> SiteMemory:
        """What earlier ingests stored about the sites these pages belong to."""
        pages = [s for s in sources if is_page(s)]
        if not pages:
            return SiteMemory()
        outside = sorted(outside_links(pages))
        stored = self.store.stored_source_ids(outside) if outside else {}
        linked = self.store.linked_pages(
            [
                (
                    s.tenant,
                    entity_key(s.tenant, page_entity(s.source_id)),
                    document_key(s.tenant, s.source_id),
                )
                for s in pages
            ],
            LINK_RELATION,
        )
        return SiteMemory(
            boilerplate=self.store.site_boilerplate(
                [s.tenant for s in pages if s.kind == "html"]
            ),
            pages={key: copies[0][0] for key, copies in stored.items()},
            linked=frozenset(
                (s.tenant, s.source_id)
                for s in pages
                if (s.tenant, entity_key(s.tenant, page_entity(s.source_id))) in linked
            ),
        )

    def _one_copy_per_file(
        self, sources: list[SourceDocument], summary: IngestSummary
    ) -> list[SourceDocument]:
        """Keep one document per file, and one file per document id.

        A file's id and path default to its path under the root it was found from,
        so the same file reached from another root (``ingest docs``, then
        ``ingest docs/sub/a.md``) would be stored, and retrieved, twice; and a page
        ingested alone (``site/guide/index.html``, id ``index.html``) would replace
        the home page. So:

        - a file stored earlier keeps its stored id (when its id is its path) and
          path (when its path is), and is updated in place;
        - a file whose given ``id`` differs from its stored copy's fails with what
          to do: writing it would add a second copy, and skipping it would leave
          the stored copy stale without a word;
        - a new file whose path-derived id another stored file holds takes its
          path under that file's root when it lies below it (its id in a whole
          ingest of that root), fails when a file of this run holds the id, and
          otherwise replaces it with a warning naming the other file.
        """
        copies_of = self.store.stored_source_ids(
            [(s.tenant, s.source_uri) for s in sources]
        )
        settled: list[SourceDocument] = []
        for source in sources:
            copies = copies_of.get((source.tenant, source.source_uri), [])
            mine = [c for c in copies if c[0] == source.source_id]
            others = [c for c in copies if c[0] != source.source_id]
            if others and source.id_from_path and len(copies) == 1:
                mine, others = others, []
                source = replace(source, source_id=mine[0][0])
            if mine and source.path_from_root:
                source = replace(source, path=mine[0][1])
            ids = [i for i, _ in others]
            if others and not mine:
                summary.fail(
                    source.source_uri,
                    f"this file is already stored as document "
                    f"{_listed(ids)} (under another id); to keep that id, remove "
                    f"the 'id' you gave it; to replace it, remove it first with "
                    f"{_delete_command(source.tenant, ids)}",
                )
                continue
            if others:  # copies written before this check existed
                summary.warn(
                    source.source_uri,
                    f"also stored as {_listed(ids)}: remove the extra copy with "
                    f"{_delete_command(source.tenant, ids)}",
                )
            settled.append(source)
        return self._one_file_per_id(settled, summary)

    def _one_file_per_id(
        self, sources: list[SourceDocument], summary: IngestSummary
    ) -> list[SourceDocument]:
        """The last rules of :meth:`_one_copy_per_file`: an id held by another file."""
        holders = self.store.stored_source_uris(
            [(s.tenant, s.source_id) for s in sources]
        )
        claimed = {  # ids this run's files hold already (stored from their own URI)
            (s.tenant, s.source_id): s.source_uri
            for s in sources
            if holders.get((s.tenant, s.source_id)) == s.source_uri
        }
        out: list[SourceDocument] = []
        moved: list[int] = []  # indexes in out whose id was re-derived below
        for source in sources:
            key = (source.tenant, source.source_id)
            held = holders.get(key)
            if held is None or held == source.source_uri:
                out.append(source)
                continue
            holder = _file_of(held)
            if claimed.get(key, source.source_uri) != source.source_uri:
                remove = _delete_command(source.tenant, [source.source_id])
                summary.fail(
                    source.source_uri,
                    f"its id '{source.source_id}' is already the id of {holder} "
                    f"(stored from another root); to store both, remove that "
                    f"document with {remove} and ingest again, or give this file "
                    "an 'id' of its own",
                )
                continue
            root = _root_of(held, source.source_id)
            here = unquote(source.source_uri)
            if source.id_from_path and root and here.startswith(root):
                below = here[len(root) :]
                moved.append(len(out))
                out.append(
                    replace(
                        source,
                        source_id=below,
                        path=below if source.path_from_root else source.path,
                    )
                )
                continue
            if holder is not None and Path(holder).exists():
                summary.warn(
                    source.source_uri,
                    f"replaces document '{source.source_id}', stored from {holder} "
                    "(still there): an id is a path under the ingest root, so give "
                    "one of the two files an 'id' of its own to keep both",
                )
            out.append(source)
        if not moved:
            return out
        taken = self.store.stored_source_uris(
            [(out[i].tenant, out[i].source_id) for i in moved]
        )
        keep = set(range(len(out)))
        for i in moved:
            source = out[i]
            held = taken.get((source.tenant, source.source_id))
            if held is not None and held != source.source_uri:
                keep.discard(i)
                summary.fail(
                    source.source_uri,
                    f"its id under its site's root, '{source.source_id}', is already "
                    f"the id of {_file_of(held)}; give this file an 'id' of its own",
                )
        return [s for i, s in enumerate(out) if i in keep]

    def _write(
        self, records: list[DocumentRecord], summary: IngestSummary
    ) -> list[DocumentRecord]:
        """Write a batch in one transaction; returns what was written.

        If the database rejects the batch, the documents are retried one by one so
        that only the culprit fails (with its reason) and the rest still land.
        """
        try:
            self.store.write_documents(records)
            return records
        except RecordRejectedError:
            pass  # isolate the bad document below
        written = []
        for record in records:
            try:
                self.store.write_document(record)
            except RecordRejectedError as exc:
                summary.fail(record.source_uri, str(exc))
                continue
            written.append(record)
        return written

    def _prepare(
        self, batch: list[SourceDocument], summary: IngestSummary
    ) -> list[_Prepared]:
        prepared = []
        stored_revisions = self.store.document_revisions(
            [document_key(s.tenant, s.source_id) for s in batch]
        )
        for source in batch:
            document_id = document_key(source.tenant, source.source_id)
            revision = revision_of(source, self.embedder.model)
            stored = stored_revisions.get(document_id)
            if stored is not None and stored == (revision, self.embedder.model):
                summary.skipped += 1
                continue
            chunks = chunk_document(source, self.counter)
            if not chunks:
                summary.fail(source.source_uri, "no text to index (empty body)")
                continue
            prepared.append(_Prepared(source, document_id, revision, chunks))
        return prepared

    def _embed(
        self, prepared: list[_Prepared], summary: IngestSummary
    ) -> list[DocumentRecord]:
        reused = {
            index: item.source.embedding
            for index, item in enumerate(prepared)
            if _reusable(item, self.embedder.dimension)
        }
        keys = {
            (index, chunk.ordinal): chunk_key(
                item.document_id, chunk.ordinal, chunk.indexed_text()
            )
            for index, item in enumerate(prepared)
            for chunk in item.chunks
        }
        # A changed revision whose chunk text did not change (a touched file, a new
        # ACL) keeps its stored vectors: chunk ids are content-addressed.
        wanted = [key for (index, _), key in keys.items() if index not in reused]
        kept = {
            chunk_id: vector
            for chunk_id, vector in self.store.chunk_embeddings(
                sorted(set(wanted)), model=self.embedder.model
            ).items()
            if len(vector) == self.embedder.dimension
        }
        texts = [
            chunk.indexed_text()
            for index, item in enumerate(prepared)
            if index not in reused
            for chunk in item.chunks
            if keys[index, chunk.ordinal] not in kept
        ]
        embed_started = time.perf_counter()
        # Remote batches run concurrently with retries; a text whose batch finally
        # failed comes back as the error, and its whole document is left unwritten.
        fresh = self.embedder.embed_each(texts) if texts else []
        summary.embed_seconds += time.perf_counter() - embed_started
        summary.embeddings_reused += len(reused) + sum(k in kept for k in wanted)
        vectors, failed = self._vectors(prepared, reused, kept, keys, fresh)
        for index, reason in failed.items():
            summary.fail(prepared[index].source.source_uri, f"not written: {reason}")
        records = []
        cursor = 0
        for index, item in enumerate(prepared):
            count = len(item.chunks)
            if index not in failed:  # never half-written: the document waits a rerun
                chunk_ids = [keys[index, chunk.ordinal] for chunk in item.chunks]
                records.append(
                    self._record(
                        item,
                        chunk_ids,
                        vectors[cursor : cursor + count],
                        reused=index in reused,
                    )
                )
            cursor += count
        return records

    def _vectors(
        self,
        prepared: list[_Prepared],
        reused: Mapping[int, Sequence[float] | None],
        kept: Mapping[str, Sequence[float]],
        keys: Mapping[tuple[int, int], str],
        fresh: Sequence[Sequence[float] | EmbeddingUnavailable],
    ) -> tuple[list[Sequence[float]], dict[int, str]]:
        """Every chunk's vector in order (reused, kept or fresh) and failed docs."""
        vectors: list[Sequence[float]] = []
        failed: dict[int, str] = {}
        fresh_iter = iter(fresh)
        for index, item in enumerate(prepared):
            stored = reused.get(index)
            if stored is not None:
                vectors.append(stored)
                continue
            for chunk in item.chunks:
                previous = kept.get(keys[index, chunk.ordinal])
                vector = previous if previous is not None else next(fresh_iter)
                if isinstance(vector, EmbeddingUnavailable):
                    failed.setdefault(index, vector.reason)
                    vectors.append(())
                else:
                    vectors.append(vector)
        good = [v for v in fresh if not isinstance(v, EmbeddingUnavailable)]
        if good and len(good[0]) != self.embedder.dimension:
            raise DimensionMismatchError(
                f"the embedder '{self.embedder.model}' returned "
                f"{len(good[0])}-dimensional "
                f"vectors but declared {self.embedder.dimension}"
            )
        return vectors, failed

    def _record(
        self,
        item: _Prepared,
        chunk_ids: Sequence[str],
        vectors: Sequence[Sequence[float]],
        *,
        reused: bool,
    ) -> DocumentRecord:
        """The record to write for one prepared document and its chunks' vectors."""
        source = item.source
        chunk_records = []
        for chunk, chunk_id, vector in zip(
            item.chunks, chunk_ids, vectors, strict=True
        ):
            content = chunk.indexed_text()
            page_start, page_end = page_span(
                source.pages, chunk.char_start, chunk.char_end
            )
            chunk_records.append(
                ChunkRecord(
                    id=chunk_id,
                    ordinal=chunk.ordinal,
                    heading_path=chunk.heading_path,
                    body=chunk.body,
                    content=content,
                    char_start=chunk.char_start,
                    char_end=chunk.char_end,
                    token_count=chunk.token_count,
                    identifiers=extract_identifiers(content),
                    embedding=tuple(vector),
                    page_start=page_start,
                    page_end=page_end,
                )
            )
        version = self.embedder.version
        if reused:
            version = f"{version} (vector reused from {source.embedding_origin})"
        return DocumentRecord(
            id=item.document_id,
            source_id=source.source_id,
            tenant=source.tenant,
            title=source.title,
            path=source.path,
            source_uri=source.source_uri,
            revision=item.revision,
            parser_version=PARSER_VERSION,
            acl=source.principals,
            metadata=source.metadata,
            content=source.content,
            embedding_model=self.embedder.model,
            embedding_version=version,
            created_at=source.created_at,
            updated_at=source.updated_at or datetime.now(UTC),
            chunks=tuple(chunk_records),
            entities=source.entities,
            relations=source.relations,
            title_entity=source.title_entity,
        )

    def _prune(
        self, targets: list[Path], sources: list[SourceDocument], tenant: str
    ) -> int:
        """Delete stored documents under the given directories that no longer exist."""
        present = {document_key(s.tenant, s.source_id) for s in sources}
        removed = 0
        for target in targets:
            if not target.is_dir():
                continue
            for document_id, _uri in self.store.document_ids_under(
                target.resolve().as_uri() + "/", tenant
            ):
                if document_id not in present and self.store.delete_document(
                    document_id
                ):
                    removed += 1
        return removed


class _Progress(Protocol):
    def update(self, n: int) -> object: ...

    def close(self) -> None: ...


class _NoBar:
    def update(self, n: int) -> None:
        return None

    def close(self) -> None:
        return None


def _progress_bar(total: int, enabled: bool) -> _Progress:
    if not enabled:
        return _NoBar()
    from tqdm import tqdm

    bar: _Progress = tqdm(total=total, unit="doc", desc="ingest")
    return bar
