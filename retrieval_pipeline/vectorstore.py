"""A LangChain ``VectorStore`` over the pipeline's store.

Code written against a vector store (``add_documents``, ``similarity_search``,
``max_marginal_relevance_search``, ``as_retriever``, ...) keeps working while the
pipeline serves the same rows. Searches are dense (pgvector cosine over the HNSW
index), with the store's tenant and principals and any metadata filter applied inside
the SQL, before ranking, exactly like the pipeline's own channels.

Metadata filters: ``{"key": value}`` (equality) and ``{"key": {"$in": [...]}}`` /
``{"$eq": value}``, all keys ANDed. Scores from ``similarity_search_with_score`` are
cosine distances (lower is closer), as in ``PGVector``; relevance scores are
``1 - distance``.
"""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import VectorStore
from langchain_core.vectorstores.utils import maximal_marginal_relevance

from retrieval_pipeline.ingest.job import Ingestor
from retrieval_pipeline.ingest.langchain_postgres import parse_principals
from retrieval_pipeline.ingest.loaders import SourceDocument
from retrieval_pipeline.tools.embeddings import Embedder
from retrieval_pipeline.tools.store.records import document_key
from retrieval_pipeline.tools.store.store import AccessScope, Store

MAX_FILTER_COMBINATIONS = 256


def metadata_filter(spec: dict[str, Any] | None) -> tuple[str, ...] | None:
    """A LangChain-style filter as JSON containment objects (any one must match)."""
    if not spec:
        return None
    choices: list[list[tuple[str, Any]]] = []
    for key, condition in spec.items():
        if key.startswith("$"):
            raise ValueError(
                f"unsupported filter operator {key}: use {{'key': value}} or "
                "{'key': {'$in': [...]}} / {'$eq': value}"
            )
        if isinstance(condition, dict):
            if set(condition) == {"$eq"}:
                values = [condition["$eq"]]
            elif set(condition) == {"$in"} and isinstance(condition["$in"], list):
                values = list(condition["$in"])
            else:
                raise ValueError(
                    f"unsupported filter on '{key}': {sorted(condition)}; "
                    "supported: a value, {'$eq': value}, {'$in': [values]}"
                )
        else:
            values = [condition]
        if not values:
            return ("__no_match__",)
        choices.append([(key, v) for v in values])
    combos = list(
        itertools.islice(itertools.product(*choices), MAX_FILTER_COMBINATIONS + 1)
    )
    if len(combos) > MAX_FILTER_COMBINATIONS:
        raise ValueError(
            f"the filter expands to more than {MAX_FILTER_COMBINATIONS} combinations"
        )
    return tuple(json.dumps(dict(combo), sort_keys=True) for combo in combos)


class PipelineVectorStore(VectorStore):
    """A ``VectorStore`` over :class:`~retrieval_pipeline.tools.store.store.Store`.

    Args:
        store: the pipeline's store.
        embedder: the pipeline's embedder (the index's model and dimension).
        tenant: the tenant this vector store reads and writes.
        principals: the caller's ACL principals for searches.
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
        self.tenant = tenant
        self.principals = tuple(principals)
        self._ingestor = Ingestor(store, embedder)

    @property
    def embeddings(self) -> Embeddings:
        """The LangChain embeddings object behind the embedder."""
        return self.embedder.embeddings  # type: ignore[no-any-return]

    # --- writes -------------------------------------------------------------------
    def add_texts(
        self,
        texts: Iterable[str],
        metadatas: list[dict[Any, Any]] | None = None,
        *,
        ids: list[str] | None = None,
        **kwargs: Any,
    ) -> list[str]:
        """Ingest texts as documents (chunked, embedded); returns their ids.

        A ``principals`` key in a text's metadata restricts who can find it (list or
        comma-separated string); without it the text is public within the tenant.
        """
        texts = list(texts)
        metadatas = metadatas or [{} for _ in texts]
        ids = [i or str(uuid.uuid4()) for i in (ids or [""] * len(texts))]
        if not len(texts) == len(metadatas) == len(ids):
            raise ValueError("texts, metadatas and ids must have the same length")
        now = datetime.now(UTC)
        sources = []
        for text, metadata, doc_id in zip(texts, metadatas, ids, strict=True):
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
                    principals=parse_principals(metadata.get("principals") or None),
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
        """Delete documents by id (in this vector store's tenant)."""
        if ids is None:
            raise ValueError("delete needs ids (deleting everything is not supported)")
        deleted = [
            self.store.delete_document(document_key(self.tenant, i)) for i in ids
        ]
        return all(deleted)

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

    def _search(
        self, embedding: Sequence[float], k: int, filter: dict[str, Any] | None
    ) -> list[tuple[Document, float, str]]:
        if k < 1:
            return []
        scope = self._scope(filter)
        hits = self.store.search_dense(
            embedding, scope, depth=k, ef_search=max(40, 2 * k)
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

    def similarity_search_with_score(
        self,
        query: str,
        k: int = 4,
        filter: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> list[tuple[Document, float]]:
        """Documents and cosine distances (lower is closer)."""
        embedding = self.embedder.embed_query(query)
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
        embedding = self.embedder.embed_query(query)
        return self.max_marginal_relevance_search_by_vector(
            list(embedding), k, fetch_k, lambda_mult, filter=filter
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
        """MMR by vector."""
        candidates = self._search(embedding, max(fetch_k, k), filter)
        if not candidates:
            return []
        vectors = self.store.chunk_embeddings([c for _, _, c in candidates])
        chosen = maximal_marginal_relevance(
            np.array(embedding, dtype=np.float32),
            [vectors[c] for _, _, c in candidates],
            lambda_mult=lambda_mult,
            k=k,
        )
        return [candidates[i][0] for i in chosen]

    def get_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        """Documents by id (whole document text), within the caller's access."""
        found = self.store.documents_by_source_ids(list(ids), self._scope(None))
        return [
            Document(
                id=row["source_id"],
                page_content=row["content"],
                metadata=row["metadata"],
            )
            for row in found
        ]
