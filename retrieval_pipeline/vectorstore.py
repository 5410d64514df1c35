"""A LangChain ``VectorStore`` over the pipeline's store.

Code written against a vector store (``add_documents``, ``similarity_search``,
``max_marginal_relevance_search``, ``as_retriever``, ...) keeps working while the
pipeline serves the same rows. Searches are dense (pgvector cosine over the HNSW
index), with the store's tenant and principals and any metadata filter applied inside
the SQL, before ranking, exactly like the pipeline's own channels.

Metadata filters: ``{"key": value}`` (equality) and ``{"key": {"$in": [...]}}`` /
``{"$eq": value}``, all keys ANDed; an empty ``$in`` matches nothing. Scores from
``similarity_search_with_score`` are cosine distances (lower is closer), as in
``PGVector``; relevance scores are ``1 - distance``. A search returns at most
:data:`MAX_K` documents (pgvector's largest ``hnsw.ef_search``); a larger ``k`` is an
:class:`~retrieval_pipeline.errors.InvalidQueryError` and MMR's ``fetch_k`` is
clamped to it.

Writes are authorised exactly like reads: a vector store sees, deletes and
overwrites only documents of its tenant that are public or share one of its
principals.

- ``delete`` skips an id it cannot see just as it skips a missing one (both make it
  return ``False``; the database does the same one locked lookup for both).
- ``add_texts`` never overwrites a document it cannot see. Ids live in one key space
  per tenant (``documents (tenant, source_id)`` is unique, and the pipeline, its
  retriever and ``get_by_ids`` all address documents by that id), so we do not
  namespace them per caller: that would give one id several documents and break
  ``get_by_ids``/``delete`` for everyone who sees more than one. Instead an add under
  a hidden id is refused with :class:`~retrieval_pipeline.errors.WriteConflictError`
  ("id ... is not available"), the same error and text an add gets when a
  concurrent writer claims a brand-new id first, before anything is embedded or
  written. It says that the id is taken and nothing else (not the document's text,
  metadata, principals or whether it is visible to anyone); callers that must not
  learn even that let ``add_texts`` generate ids (UUIDs).
- An overwrite never changes who can read a document. Without a ``principals`` key
  in its metadata (or with ``None``) an overwrite keeps the stored principals;
  naming principals is allowed only when they equal the stored ones (as a set:
  ``"a, b"`` equals ``["b", "a"]``); anything else (other principals, or an empty
  list to make it public) is refused. To change access, delete the document and add
  it again. A new document takes its metadata's principals (none: public in the
  tenant).
- Every write re-checks these rules inside its own transaction, with the rows it
  replaces locked, so a concurrent writer cannot slip a hidden document in between.

Inputs PostgreSQL would reject become clear errors before any statement runs: NUL
characters or lone surrogates in ids, texts, metadata or filters, and metadata or
filter values that are not JSON (NaN included), are an ``InvalidQueryError``; a
query vector of another dimension than the index's is a
:class:`~retrieval_pipeline.errors.DimensionMismatchError`, one with NaN or infinite
components an ``InvalidQueryError``.
"""

from __future__ import annotations

import itertools
import json
import math
import uuid
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, cast

import numpy as np
import psycopg
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import VectorStore
from langchain_core.vectorstores.utils import maximal_marginal_relevance

from retrieval_pipeline.errors import (
    DimensionMismatchError,
    InvalidQueryError,
    RecordRejectedError,
    WriteConflictError,
)
from retrieval_pipeline.ingest.job import Ingestor
from retrieval_pipeline.ingest.langchain_postgres import parse_principals
from retrieval_pipeline.ingest.loaders import SourceDocument
from retrieval_pipeline.tools.embeddings import Embedder
from retrieval_pipeline.tools.store.records import DocumentRecord, document_key
from retrieval_pipeline.tools.store.store import AccessScope, EmbeddingIndex, Store

MAX_FILTER_COMBINATIONS = 256
# pgvector's largest hnsw.ef_search (its GUC range is 1..1000): a search deeper than
# the candidate list the graph walk keeps would be refused by the database.
MAX_K = 1000
# What metadata_filter returns for a filter no document can match (an empty $in).
NO_MATCH = ("__no_match__",)


def _require_storable(text: str, what: str) -> str:
    """``text`` if PostgreSQL can store it (no NUL, valid UTF-8), else a clear error."""
    if "\x00" in text:
        raise InvalidQueryError(
            f"{what} contains a NUL character (\\x00), which PostgreSQL cannot store"
        )
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidQueryError(
            f"{what} is not valid Unicode: a lone surrogate at position {exc.start}"
        ) from None
    return text


def _require_json(value: Any, what: str) -> None:
    """Raise unless ``value`` is JSON that PostgreSQL's ``jsonb`` accepts."""
    if isinstance(value, str):
        _require_storable(value, what)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidQueryError(f"{what} is {value}: JSON has no NaN or infinity")
    elif isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidQueryError(f"{what} has a non-string key {key!r}")
            _require_storable(key, f"a key in {what}")
            _require_json(item, what)
    elif isinstance(value, list | tuple):
        for item in value:
            _require_json(item, what)
    elif value is not None and not isinstance(value, bool | int):
        raise InvalidQueryError(
            f"{what} holds a {type(value).__name__}; use JSON values (strings, "
            "numbers, booleans, null, lists, objects)"
        )


def metadata_filter(spec: dict[str, Any] | None) -> tuple[str, ...] | None:
    """A LangChain-style filter as JSON containment objects (any one must match).

    :data:`NO_MATCH` when no document can match (an empty ``$in``).
    """
    if not spec:
        return None
    if not isinstance(spec, dict):
        raise InvalidQueryError(
            f"a filter is a dict of metadata keys, not a {type(spec).__name__}"
        )
    choices: list[list[tuple[str, Any]]] = []
    for key, condition in spec.items():
        if not isinstance(key, str):
            raise InvalidQueryError(f"filter keys are strings, not {key!r}")
        _require_storable(key, "a filter key")
        if key.startswith("$"):
            raise InvalidQueryError(
                f"unsupported filter operator {key}: use {{'key': value}} or "
                "{'key': {'$in': [...]}} / {'$eq': value}"
            )
        if isinstance(condition, dict):
            if set(condition) == {"$eq"}:
                values = [condition["$eq"]]
            elif set(condition) == {"$in"} and isinstance(condition["$in"], list):
                values = list(condition["$in"])
            else:
                raise InvalidQueryError(
                    f"unsupported filter on '{key}': {sorted(map(str, condition))}; "
                    "supported: a value, {'$eq': value}, {'$in': [values]}"
                )
        else:
            values = [condition]
        _require_json(values, f"the filter on {key!r}")
        choices.append([(key, v) for v in values])
    if not all(choices):
        return NO_MATCH
    combos = list(
        itertools.islice(itertools.product(*choices), MAX_FILTER_COMBINATIONS + 1)
    )
    if len(combos) > MAX_FILTER_COMBINATIONS:
        raise InvalidQueryError(
            f"the filter expands to more than {MAX_FILTER_COMBINATIONS} combinations"
        )
    return tuple(json.dumps(dict(combo), sort_keys=True) for combo in combos)


def _unavailable(doc_id: str) -> WriteConflictError:
    # One text for an id held by a hidden document and for an id a concurrent writer
    # claimed first: neither says whether, or to whom, the holder is visible.
    return WriteConflictError(
        f"document id {doc_id!r} is not available: another document holds it, or one "
        "is being written under it. Use another id, or leave ids out to have them "
        "generated."
    )


def _access_changed(doc_id: str) -> WriteConflictError:
    return WriteConflictError(
        f"document {doc_id!r} exists with other principals, and an overwrite never "
        "changes who can read a document: leave 'principals' out of its metadata to "
        "keep them, or delete it and add it again to change them."
    )


class _CheckedWrites:
    """The store as the vector store's ingestor sees it.

    Every batch write re-checks, in its own transaction and with the rows locked,
    that it replaces only visible documents and keeps their principals.
    """

    def __init__(self, store: Store, scope: AccessScope) -> None:
        self._store = store
        self._scope = scope

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def write_documents(self, docs: Sequence[DocumentRecord]) -> None:
        def check(stored: dict[str, tuple[str, ...] | None]) -> None:
            for doc in docs:
                if doc.id not in stored:
                    continue
                acl = stored[doc.id]
                if acl is None:
                    raise _unavailable(doc.source_id)
                if set(acl) != set(doc.acl):
                    raise _access_changed(doc.source_id)

        try:
            self._store.write_documents_checked(docs, self._scope, check)
        except RecordRejectedError as exc:
            # A concurrent writer created one of these ids after our check. In a
            # batch, re-raise: the ingestor then writes one by one to find which.
            duplicate = isinstance(exc.__cause__, psycopg.errors.UniqueViolation)
            if len(docs) > 1 or not duplicate:
                raise
            raise _unavailable(docs[0].source_id) from None

    def write_document(self, doc: DocumentRecord) -> None:
        self.write_documents([doc])


class PipelineVectorStore(VectorStore):
    """A ``VectorStore`` over :class:`~retrieval_pipeline.tools.store.store.Store`.

    Args:
        store: the pipeline's store.
        embedder: the pipeline's embedder (the index's model and dimension).
        tenant: the tenant this vector store reads and writes.
        principals: the caller's ACL principals, for searches and writes alike.
    """

    def __init__(
        self,
        store: Store,
        embedder: Embedder,
        *,
        tenant: str = "",
        principals: Sequence[str] = (),
    ) -> None:
        self.store = store
        self.embedder = embedder
        self.tenant = _require_storable(tenant, "the tenant")
        self.principals = tuple(_require_storable(p, "a principal") for p in principals)
        self._index: EmbeddingIndex | None = None
        self._ingestor = Ingestor(
            cast(Store, _CheckedWrites(store, self._scope(None))), embedder
        )

    @property
    def embeddings(self) -> Embeddings:
        """The LangChain embeddings object behind the embedder."""
        return self.embedder.embeddings  # type: ignore[no-any-return]

    # --- writes -------------------------------------------------------------------
    def _keys(self, ids: Sequence[str]) -> list[str]:
        return [
            document_key(self.tenant, _require_storable(i, "a document id"))
            for i in ids
        ]

    def add_texts(
        self,
        texts: Iterable[str],
        metadatas: list[dict[Any, Any]] | None = None,
        *,
        ids: list[str] | None = None,
        **kwargs: Any,
    ) -> list[str]:
        """Ingest texts as documents (chunked, embedded); returns their ids.

        A ``principals`` key in a new text's metadata restricts who can find it
        (list or comma-separated string); without it the text is public within the
        tenant. An overwrite keeps the stored principals (see the module docstring);
        an id this store cannot see is refused with ``WriteConflictError``.
        """
        texts = list(texts)
        metadatas = metadatas or [{} for _ in texts]
        ids = [i or str(uuid.uuid4()) for i in (ids or [""] * len(texts))]
        if not len(texts) == len(metadatas) == len(ids):
            raise InvalidQueryError(
                "texts, metadatas and ids must have the same length"
            )
        if len(set(ids)) < len(ids):
            raise InvalidQueryError("add_texts got the same id twice")
        for text, metadata in zip(texts, metadatas, strict=True):
            _require_storable(text, "a text")
            _require_json(metadata, "the metadata")
        keys = self._keys(ids)
        stored = self.store.document_access(keys, self._scope(None))
        now = datetime.now(UTC)
        sources = []
        for text, metadata, doc_id, key in zip(
            texts, metadatas, ids, keys, strict=True
        ):
            named = metadata.get("principals")
            principals = parse_principals(named)
            if key in stored:
                kept = stored[key]
                if kept is None:
                    raise _unavailable(doc_id)
                if named is not None and set(principals) != set(kept):
                    raise _access_changed(doc_id)
                principals = tuple(sorted(set(kept)))
            source_uri = str(metadata.get("source") or f"vectorstore:{doc_id}")
            sources.append(
                SourceDocument(
                    source_id=doc_id,
                    title=str(metadata.get("title") or ""),
                    path=str(metadata.get("source") or ""),
                    source_uri=source_uri,
                    content=text,
                    body_start=0,
                    kind="langchain",
                    tenant=self.tenant,
                    principals=principals,
                    updated_at=now,
                    metadata=dict(metadata),
                )
            )
        summary = self._ingestor.ingest_documents(sources)
        if summary.failures:
            raise ValueError(
                "; ".join(f"{path}: {reason}" for path, reason in summary.failures)
            )
        return ids

    def delete(self, ids: list[str] | None = None, **kwargs: Any) -> bool | None:
        """Delete documents by id; ``True`` when every one was deleted.

        Only documents this store can see are deleted: an id it cannot see counts
        as missing (``False``), exactly like an id that was never stored.
        """
        if ids is None:
            raise InvalidQueryError(
                "delete needs ids (deleting everything is not supported)"
            )
        keys = self._keys(ids)
        deleted = set(self.store.delete_visible_documents(keys, self._scope(None)))
        return all(key in deleted for key in keys)

    @classmethod
    def from_texts(
        cls,
        texts: list[str],
        embedding: Embeddings,
        metadatas: list[dict[Any, Any]] | None = None,
        *,
        ids: list[str] | None = None,
        **kwargs: Any,
    ) -> PipelineVectorStore:
        """Build over ``kwargs["store"]`` and add ``texts``.

        ``embedding`` must be (or wrap) the store's embedder: pass ``embedder=`` to use
        one with model provenance; otherwise ``embedding`` is wrapped and its model
        name taken from ``kwargs["model"]``.
        """
        store: Store = kwargs.pop("store")
        embedder = kwargs.pop("embedder", None) or Embedder(
            embedding, model=kwargs.pop("model"), version="langchain"
        )
        vectorstore = cls(store, embedder, **kwargs)
        vectorstore.add_texts(texts, metadatas, ids=ids)
        return vectorstore

    # --- searches ------------------------------------------------------------------
    def _scope(self, filter: dict[str, Any] | None) -> AccessScope:
        return AccessScope(
            principals=self.principals,
            tenant=self.tenant,
            metadata=metadata_filter(filter),
        )

    def _embedding_index(self) -> EmbeddingIndex | None:
        if self._index is None:
            self._index = self.store.embedding_index()
        return self._index

    def _query_vector(self, embedding: Sequence[float]) -> list[float]:
        """The vector as floats, checked against the index's dimension."""
        try:
            vector = np.asarray(embedding, dtype=np.float64)
        except (TypeError, ValueError):
            raise InvalidQueryError("a query vector is a list of numbers") from None
        index = self._embedding_index()
        dimension = index.dimension if index else self.embedder.dimension
        if vector.ndim != 1 or vector.shape[0] != dimension:
            model = index.model if index else self.embedder.model
            raise DimensionMismatchError(
                f"the query vector has {vector.shape[-1] if vector.ndim else 0} "
                f"dimensions, but this index stores {dimension}-dimensional "
                f"embeddings from '{model}': embed the query with that model"
            )
        if not np.isfinite(vector).all():
            raise InvalidQueryError(
                "the query vector has NaN or infinite components; every component "
                "must be a finite number"
            )
        return [float(v) for v in vector]

    @staticmethod
    def _check_k(k: int) -> None:
        if k > MAX_K:
            raise InvalidQueryError(
                f"k={k} is too many: a search returns at most {MAX_K} documents "
                f"(pgvector's largest hnsw.ef_search)"
            )

    def _search(
        self, embedding: Sequence[float], k: int, filter: dict[str, Any] | None
    ) -> list[tuple[Document, float, str]]:
        self._check_k(k)
        vector = self._query_vector(embedding)
        scope = self._scope(filter)
        if k < 1 or scope.metadata == NO_MATCH or self._embedding_index() is None:
            return []
        hits = self.store.search_dense(
            vector, scope, depth=k, ef_search=min(max(40, 2 * k), MAX_K)
        )
        rows = self.store.fetch_chunks([chunk_id for chunk_id, _ in hits], scope)
        metadata = self.store.document_metadata(
            [r["document_id"] for r in rows.values()]
        )
        out = []
        for chunk_id, similarity in hits:
            row = rows.get(chunk_id)
            if row is None:
                continue
            doc = Document(
                id=row["source_id"],
                page_content=row["body"],
                metadata={
                    **metadata.get(row["document_id"], {}),
                    "chunk_id": chunk_id,
                    "document_id": row["source_id"],
                    "source_uri": row["source_uri"],
                    "heading_path": list(row["heading_path"]),
                },
            )
            out.append((doc, 1.0 - similarity, chunk_id))
        return out

    def _embed_query(self, query: str) -> list[float]:
        return list(self.embedder.embed_query(_require_storable(query, "the query")))

    def similarity_search_with_score(
        self,
        query: str,
        k: int = 4,
        filter: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> list[tuple[Document, float]]:
        """Documents and cosine distances (lower is closer)."""
        self._check_k(k)
        metadata_filter(filter)  # a bad filter fails before the query is embedded
        embedding = self._embed_query(query)
        return [(d, s) for d, s, _ in self._search(embedding, k, filter)]

    def similarity_search(
        self,
        query: str,
        k: int = 4,
        filter: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        """The ``k`` nearest documents the caller may see."""
        return [d for d, _ in self.similarity_search_with_score(query, k, filter)]

    def similarity_search_by_vector(
        self,
        embedding: list[float],
        k: int = 4,
        filter: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        """The ``k`` nearest documents to a vector."""
        return [d for d, _, _ in self._search(embedding, k, filter)]

    def _select_relevance_score_fn(self) -> Callable[[float], float]:
        return lambda distance: 1.0 - distance

    def max_marginal_relevance_search(
        self,
        query: str,
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        filter: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        """MMR over the ``fetch_k`` nearest candidates (LangChain's own MMR)."""
        self._check_k(k)
        metadata_filter(filter)
        embedding = self._embed_query(query)
        return self.max_marginal_relevance_search_by_vector(
            embedding, k, fetch_k, lambda_mult, filter=filter
        )

    def max_marginal_relevance_search_by_vector(
        self,
        embedding: list[float],
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        filter: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        """MMR by vector; ``fetch_k`` is clamped to :data:`MAX_K`."""
        self._check_k(k)
        vector = self._query_vector(embedding)
        candidates = self._search(vector, min(max(fetch_k, k), MAX_K), filter)
        if not candidates:
            return []
        vectors = self.store.chunk_embeddings([c for _, _, c in candidates])
        chosen = maximal_marginal_relevance(
            np.array(vector, dtype=np.float32),
            [vectors[c] for _, _, c in candidates],
            lambda_mult=lambda_mult,
            k=k,
        )
        return [candidates[i][0] for i in chosen]

    def get_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        """Documents by id (whole document text), within the caller's access."""
        for i in ids:
            _require_storable(i, "a document id")
        found = self.store.documents_by_source_ids(list(ids), self._scope(None))
        return [
            Document(
                id=row["source_id"],
                page_content=row["content"],
                metadata=row["metadata"],
            )
            for row in found
        ]
