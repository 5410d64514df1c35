"""The embedding index: which model and dimension the stored vectors come from.

The vector column and its HNSW index are created on first use, when the embedder's
dimension is known, and every later embedder must match them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from retrieval_pipeline.errors import DimensionMismatchError
from retrieval_pipeline.tools.store import sql_admin as qa
from retrieval_pipeline.tools.store.connection import MIGRATION_LOCK, StoreConnection
from retrieval_pipeline.tools.store.replicas import replica_read


@dataclass(frozen=True)
class EmbeddingIndex:
    """The embedding model and dimension an index was built with."""

    model: str
    dimension: int


class StoreEmbeddingIndex(StoreConnection):
    """The store's embedding-index settings (a part of :class:`~.store.Store`)."""

    @replica_read
    def embedding_index(self) -> EmbeddingIndex | None:
        """Return the model and dimension this index was built with, if any."""
        with self.read_connection() as conn:  # queries check it: a replica may answer
            rows = dict(conn.execute(qa.EMBEDDING_INDEX_SETTINGS).fetchall())
        if "embedding_dimension" not in rows:
            return None
        return EmbeddingIndex(rows["embedding_model"], int(rows["embedding_dimension"]))

    def ensure_embedding_index(self, model: str, dimension: int) -> EmbeddingIndex:
        """Create the vector column and HNSW index on first use; refuse a mismatch."""
        current = self.embedding_index()
        if current is None:
            with self.connection() as conn, conn.transaction():
                conn.execute(qa.ADVISORY_XACT_LOCK, (MIGRATION_LOCK,))
                if self._embedding_index_in(conn) is None:
                    conn.execute(
                        qa.ADD_EMBEDDING_COLUMN.format(sql.Literal(int(dimension)))
                    )
                    conn.execute(qa.CREATE_EMBEDDING_INDEX)
                    conn.execute(qa.RECORD_EMBEDDING_INDEX, (model, str(dimension)))
            current = self.embedding_index()
            assert current is not None
        self.check_embedding_compatible(current, model, dimension)
        return current

    @staticmethod
    def _embedding_index_in(conn: psycopg.Connection[Any]) -> str | None:
        row = conn.execute(qa.EMBEDDING_DIMENSION).fetchone()
        return row[0] if row else None

    @staticmethod
    def check_embedding_compatible(
        index: EmbeddingIndex, model: str, dimension: int
    ) -> None:
        """Raise a clear error when an embedder cannot serve this index."""
        if index.dimension != dimension:
            raise DimensionMismatchError(
                f"this index stores {index.dimension}-dimensional embeddings from "
                f"'{index.model}', but the configured embedder '{model}' produces "
                f"{dimension} dimensions. Use '{index.model}' "
                "(RETRIEVAL_PIPELINE_EMBEDDINGS), or re-index: `retrieval-pipeline db "
                "reset` (or a new RETRIEVAL_PIPELINE_HOME / database) and ingest again."
            )
        if index.model != model:
            raise DimensionMismatchError(
                f"this index was built with the embedding model '{index.model}', but "
                f"the configured embedder is '{model}' (same {dimension} dimensions, "
                "different "
                "vector space: its similarities would be meaningless). Use "
                f"'{index.model}', or re-index with `retrieval-pipeline db reset` and "
                "ingest again."
            )
