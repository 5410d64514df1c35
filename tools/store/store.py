"""The PostgreSQL store: migrations, atomic document writes, filtered channel queries.

One :class:`Store` owns a connection pool. Access control is part of every channel's
SQL (``WHERE`` on the chunk row), so unauthorised rows never reach a ranker.

:class:`Store` is one class put together from a part per concern, each a subclass of
the connection owner, so callers (and tests that patch a method) see one flat API:

- :mod:`.connection`: the pool, migrations and health;
- :mod:`.embedding_index`: the vector column and the model it was built with;
- :mod:`.writes` (with :mod:`.graph_writes`): atomic document writes;
- :mod:`.search`: the lexical and dense channels, and the scoped fetches;
- :mod:`.maintenance`: statistics, vacuum, re-index, counts and inventory.

Graph reads are :class:`~.graph.GraphStore`'s; entity linking is ingest's
(:mod:`retrieval_pipeline.ingest.linking`). SQL lives in ``sql*.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from retrieval_pipeline.settings import database_url as env_database_url
from retrieval_pipeline.tools.store.connection import Migration, load_migrations
from retrieval_pipeline.tools.store.embedded import EmbeddedPostgres
from retrieval_pipeline.tools.store.embedding_index import (
    EmbeddingIndex,
    StoreEmbeddingIndex,
)
from retrieval_pipeline.tools.store.maintenance import StoreMaintenance
from retrieval_pipeline.tools.store.scope import AccessScope
from retrieval_pipeline.tools.store.search import (
    LEXICAL_EXHAUSTIVE_POSTINGS,
    LEXICAL_READ_BUDGET,
    LEXICAL_RESCORE_MIN,
    StoreSearch,
    posting_quotas,
)
from retrieval_pipeline.tools.store.vectors import parse_vector
from retrieval_pipeline.tools.store.writes import StoreWrites

__all__ = [
    "LEXICAL_EXHAUSTIVE_POSTINGS",
    "LEXICAL_READ_BUDGET",
    "LEXICAL_RESCORE_MIN",
    "AccessScope",
    "EmbeddedPostgres",
    "EmbeddingIndex",
    "Migration",
    "Store",
    "load_migrations",
    "open_store",
    "parse_vector",
    "posting_quotas",
]


class Store(StoreSearch, StoreWrites, StoreMaintenance, StoreEmbeddingIndex):
    """PostgreSQL + pgvector storage for documents, chunks, postings and the graph."""

    def link_entities(
        self, tenant: str, document_ids: Sequence[str] | None = None
    ) -> int:
        """Record 'extracted' mentions of known entity names and aliases in chunk text.

        See :func:`retrieval_pipeline.ingest.linking.link_entities`. Returns the
        number of mentions written.
        """
        # Imported on use: ingest builds on the store, and a module-level import
        # would make each package's first import depend on the other's.
        from retrieval_pipeline.ingest.linking import link_entities

        return link_entities(self, tenant, document_ids)


def open_store(
    database_url: str | None = None,
    *,
    home: Path | None = None,
    keep_running: bool = True,
    pool_size: int = 4,
) -> Store:
    """Open the configured store: ``database_url`` / ``DATABASE_URL``, else embedded.

    The embedded server starts on demand and, by default, keeps running for the next
    process (``retrieval-pipeline db stop`` stops it).
    """
    url = database_url or env_database_url()
    if url is None:
        url = EmbeddedPostgres(home, keep_running=keep_running).start()
    return Store(url, pool_size=pool_size)
