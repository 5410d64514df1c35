"""Maintenance and inventory: planner statistics, vacuum and re-index, row counts.

What a bulk load or a re-ingest leaves behind, and the by-tenant listings that
ingest's pruning and evaluation read.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from psycopg import sql

from retrieval_pipeline.tools.store import sql_admin as qa
from retrieval_pipeline.tools.store.connection import StoreConnection
from retrieval_pipeline.tools.store.records import revision_label
from retrieval_pipeline.tools.store.replicas import replica_read


class StoreMaintenance(StoreConnection):
    """The store's maintenance and inventory (a part of :class:`~.store.Store`)."""

    def analyze(self) -> None:
        """Refresh planner statistics after a bulk change (cheap: sampled)."""
        with self.connection() as conn:
            for table in (
                "documents",
                "chunks",
                "chunk_terms",
                "term_stats",
                "mentions",
            ):
                conn.execute(qa.ANALYZE_TABLE.format(sql.Identifier(table)))

    def vacuum_analyze(self, tables: Sequence[str] = ("chunks", "chunk_terms")) -> None:
        """VACUUM (ANALYZE) the tables a bulk load filled.

        This sets the visibility map, so postings are read from the index alone
        instead of visiting the heap row by row. Autovacuum does this eventually
        on a running server; a benchmark or a one-off bulk load calls it directly.
        """
        self._outside_transaction(
            qa.VACUUM_ANALYZE_TABLE.format(sql.Identifier(t)) for t in tables
        )

    def _outside_transaction(self, statements: Iterable[sql.Composed]) -> None:
        """Run maintenance statements that PostgreSQL refuses inside a transaction."""
        with self.connection() as conn:
            conn.autocommit = True
            try:
                for statement in statements:
                    conn.execute(statement)
            finally:
                conn.autocommit = False

    # Tables that bulk ingest rewrites: what ``maintain`` vacuums and re-indexes.
    MAINTAINED_TABLES = (
        "documents",
        "chunks",
        "chunk_terms",
        "term_stats",
        "entities",
        "mentions",
        "relations",
    )

    def relation_sizes(self) -> dict[str, int]:
        """Bytes on disk per maintained table, its indexes and TOAST included."""
        with self.connection() as conn:
            rows = conn.execute(
                qa.RELATION_SIZES, (list(self.MAINTAINED_TABLES),)
            ).fetchall()
        return {name: int(size or 0) for name, size in rows}

    def maintain(self, *, reindex: bool = False) -> dict[str, tuple[int, int]]:
        """Reclaim what re-ingesting left behind; bytes (before, after) per table.

        A re-ingest replaces every changed document's chunks and postings, which
        leaves the B-tree and HNSW indexes about twice their compact size (measured
        2.2x on the evaluation database after re-ingesting four corpora), and an
        index that outgrows shared_buffers slows every query. ``VACUUM (ANALYZE)``
        makes the freed space reusable and refreshes the planner's statistics;
        ``reindex`` also rebuilds the indexes with ``REINDEX TABLE CONCURRENTLY``,
        which shrinks them while reads and writes go on.
        """
        before = self.relation_sizes()
        steps = [qa.VACUUM_ANALYZE_TABLE] + ([qa.REINDEX_TABLE] if reindex else [])
        self._outside_transaction(
            step.format(sql.Identifier(table))
            for table in self.MAINTAINED_TABLES
            for step in steps
        )
        after = self.relation_sizes()
        return {table: (before[table], after[table]) for table in before}

    def document_ids_under(
        self, source_uri_prefix: str, tenant: str
    ) -> list[tuple[str, str]]:
        """Return (id, source_uri) of stored documents under a URI prefix."""
        like = (
            source_uri_prefix.replace("\\", "\\\\")
            .replace("%", r"\%")
            .replace("_", r"\_")
        )
        with self.connection() as conn:
            return [
                (r[0], r[1])
                for r in conn.execute(qa.DOCUMENTS_UNDER_URI, (tenant, like + "%"))
            ]

    def counts(self) -> dict[str, int]:
        """Return row counts of the main tables (for status and tests)."""
        tables = (
            "documents",
            "chunks",
            "entities",
            "mentions",
            "relations",
            "chunk_terms",
        )
        counts: dict[str, int] = {}
        with self.connection() as conn:
            for table in tables:
                statement = qa.COUNT_ROWS.format(sql.Identifier(table))
                row = conn.execute(statement).fetchone()
                counts[table] = int(row[0]) if row else 0
        return counts

    @replica_read
    def index_revision(self, tenant: str) -> str:
        """A cheap identifier of the index state a query saw (for replaying traces)."""
        with self.read_connection() as conn:  # a query-path read: a replica answers
            row = conn.execute(qa.INDEX_REVISION, {"t": tenant}).fetchone()
        return revision_label(*(row or (None, None)))

    def chunk_sources(self, tenant: str) -> dict[str, str]:
        """Map every chunk id of a tenant to its document's own id (for evaluation)."""
        with self.connection() as conn:
            rows = conn.execute(qa.CHUNK_SOURCES, (tenant,)).fetchall()
        return {row[0]: row[1] for row in rows}
