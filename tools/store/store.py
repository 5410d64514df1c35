"""The PostgreSQL store: migrations, atomic document writes, filtered channel queries.

One :class:`Store` owns a connection pool. Access control is part of every channel's
SQL (``WHERE`` on the chunk row), so unauthorised rows never reach a ranker.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool, PoolTimeout

from retrieval_pipeline.errors import (
    DatabaseTimeoutError,
    DatabaseUnavailableError,
    DimensionMismatchError,
)
from retrieval_pipeline.settings import (
    STATEMENT_TIMEOUT_ENV,
    redact_url,
    statement_timeout,
)
from retrieval_pipeline.settings import database_url as env_database_url
from retrieval_pipeline.tools.store import sql as q
from retrieval_pipeline.tools.store.embedded import EmbeddedPostgres
from retrieval_pipeline.tools.store.records import (
    DocumentRecord,
    EntitySpec,
    entity_key,
    normalise_entity_name,
)

logger = logging.getLogger(__name__)

_MIGRATION_NAME = re.compile(r"^(\d{3})_[a-z0-9_]+\.sql$")
# An advisory lock key so that concurrent processes migrate one at a time.
_MIGRATION_LOCK = 7_310_421


@dataclass(frozen=True)
class Migration:
    """A numbered SQL file."""

    version: int
    name: str
    sql: str


def load_migrations() -> list[Migration]:
    """Return the packaged migrations in version order."""
    folder = resources.files("retrieval_pipeline.tools.store") / "migrations"
    found = []
    for entry in folder.iterdir():
        match = _MIGRATION_NAME.match(entry.name)
        if match:
            found.append(Migration(int(match.group(1)), entry.name, entry.read_text()))
    return sorted(found, key=lambda m: m.version)


@dataclass(frozen=True)
class EmbeddingIndex:
    """The embedding model and dimension an index was built with."""

    model: str
    dimension: int


@dataclass(frozen=True)
class AccessScope:
    """Who is asking: applied inside the SQL of every channel."""

    principals: tuple[str, ...] = ()
    tenant: str = ""
    doc_keys: tuple[str, ...] | None = None  # internal document ids; None = no scope
    constraint: str | None = None  # web-search phrases/exclusions every result obeys
    metadata: tuple[str, ...] | None = None
    """Document metadata filters: JSON objects, a document must contain one of them."""

    def filters(self, alias: str = "c") -> sql.Composable:
        """Return the SQL ``WHERE`` fragment for this scope (values stay parameters).

        ``alias`` names a chunk row (``c``) or a posting (``p``): both carry the
        tenant, ACL and document id.
        """
        if alias not in ("c", "p"):
            raise ValueError("alias must be 'c' (chunks) or 'p' (postings)")
        parts = [q.TENANT_FILTER, q.ACL_FILTER]
        if self.doc_keys is not None:
            parts.append(q.SCOPE_FILTER)
        if self.metadata is not None:
            parts.append(q.METADATA_FILTER)
        fragments = [sql.SQL(part.format(a=alias)) for part in parts]
        if self.constraint:
            fragments.append(sql.SQL(q.CONSTRAINT_FILTER[alias]))
        return sql.SQL(" AND ").join(fragments)

    def params(self) -> dict[str, Any]:
        """Return the parameters the filter fragment binds."""
        return {
            "tenant": self.tenant,
            "principals": list(self.principals),
            "doc_keys": list(self.doc_keys) if self.doc_keys is not None else None,
            "constraint": self.constraint,
            "metadata": list(self.metadata) if self.metadata is not None else None,
        }


# The lexical channel's cost bounds (issue 3, bench/scale.py). A query whose lexemes
# have at most this many postings in the tenant is scored exhaustively (exact); every
# query of the four evaluation sets is (SciFact's largest touches 16k).
LEXICAL_EXHAUSTIVE_POSTINGS = 20_000
# Past it, an unscoped query reads at most about this many postings, strongest first.
LEXICAL_READ_BUDGET = 8_000
# Candidates re-scored exactly over all lexemes: max(this, twice the depth).
LEXICAL_RESCORE_MIN = 200


def posting_quotas(
    document_frequencies: Sequence[int], budget: int, floor: int = 1
) -> list[int]:
    """Share a read budget among lexemes by water-filling, rarest first.

    A lexeme rarer than its fair share is read whole and leaves the rest of its
    share to the others; the common lexemes split what remains equally. Every
    lexeme gets at least ``floor`` postings (the depth asked for), so one lexeme
    alone can fill the page and each one can still contribute.
    """
    order = sorted(
        range(len(document_frequencies)), key=document_frequencies.__getitem__
    )
    quotas = [0] * len(document_frequencies)
    left = max(budget, 0)
    for position, index in enumerate(order):
        share = max(floor, 1, left // (len(order) - position))
        quotas[index] = share
        left = max(left - min(share, document_frequencies[index]), 0)
    return quotas


_FIRST_WAIT_S = 0.25
"""How long a borrow waits before checking whether the server is up at all."""
_PROBE_TTL_S = 1.0
"""How long the answer of that check is reused."""


class Store:
    """PostgreSQL + pgvector storage for documents, chunks, postings and the graph."""

    def __init__(
        self,
        conninfo: str,
        *,
        pool_size: int = 4,
        connect_timeout: float = 10,
        statement_timeout_ms: int | None = None,
    ) -> None:
        """Open a pool; ``statement_timeout_ms`` caps every statement (0 = none).

        The default comes from ``RETRIEVAL_PIPELINE_STATEMENT_TIMEOUT_MS`` (60000).
        """
        self._conninfo = conninfo
        self.statement_timeout_ms = (
            statement_timeout()
            if statement_timeout_ms is None
            else statement_timeout_ms
        )
        # One direct attempt first: a wrong URL or a stopped server fails at once with
        # the driver's reason, instead of pool retries until a timeout.
        try:
            psycopg.connect(
                conninfo, connect_timeout=max(1, int(connect_timeout))
            ).close()
        except psycopg.Error as exc:
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
            raise DatabaseUnavailableError(
                f"cannot connect to PostgreSQL at {redact_url(conninfo)}: {reason}. "
                "Check that the server is running and DATABASE_URL is right, or unset "
                "DATABASE_URL to use the embedded server."
            ) from None
        self._pool = ConnectionPool(
            conninfo,
            min_size=1,
            max_size=pool_size,
            timeout=connect_timeout,
            check=ConnectionPool.check_connection,  # recover after a server restart
            configure=self._configure_connection,
            open=False,
        )
        try:
            self._pool.open(wait=True, timeout=connect_timeout)
        except PoolTimeout as exc:
            self._pool.close()
            raise DatabaseUnavailableError(
                f"cannot connect to PostgreSQL at {redact_url(conninfo)} within "
                f"{connect_timeout:.0f}s. Is the server running? Check DATABASE_URL, "
                "or "
                "unset it to use the embedded server (`retrieval-pipeline db start`)."
            ) from exc
        self._pgvector_version: tuple[int, ...] | None = None
        self._server_probe: tuple[float, bool] = (-_PROBE_TTL_S - 1.0, True)
        self.migrate()

    # --- lifecycle ----------------------------------------------------------------
    def _configure_connection(self, conn: psycopg.Connection[Any]) -> None:
        # Statements run in autocommit unless wrapped in ``conn.transaction()``.
        # Vectors travel as text literals cast in SQL, so no type registration needed.
        conn.autocommit = True
        conn.execute(
            sql.SQL("SET statement_timeout = {}").format(
                sql.Literal(int(self.statement_timeout_ms))
            )
        )

    def pool_stats(self) -> dict[str, int]:
        """The connection pool's counters (``pool_size``, ``pool_available``, ...)."""
        return dict(self._pool.get_stats())

    def close(self) -> None:
        """Close every pooled connection."""
        self._pool.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _borrow_timeout(self) -> float:
        """Seconds to wait for a pooled connection; fail fast when the server is down.

        A short wait first; if no connection came, one direct connection attempt
        tells a busy pool (wait the rest of the pool's timeout) from a server that is
        down (fail now, in about a second, instead of after the full timeout). The
        answer is kept for a second, so a busy pool is not probed by every waiter.
        """
        now = time.monotonic()
        checked_at, up = self._server_probe
        if now - checked_at > _PROBE_TTL_S:
            try:
                psycopg.connect(self._conninfo, connect_timeout=1).close()
                up = True
            except psycopg.Error:
                up = False
            self._server_probe = (time.monotonic(), up)
        return max(0.0, float(self._pool.timeout) - _FIRST_WAIT_S) if up else 0.0

    @contextmanager
    def _borrow(self) -> Iterator[psycopg.Connection[Any]]:
        try:
            conn = self._pool.getconn(timeout=_FIRST_WAIT_S)
        except PoolTimeout:
            rest = self._borrow_timeout()
            if rest <= 0:
                raise
            conn = self._pool.getconn(timeout=rest)
        try:
            with conn:  # the pool's own context behaviour: commit or roll back
                yield conn
        finally:
            self._pool.putconn(conn)

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        """Borrow a pooled connection; a dead server becomes a clear error."""
        try:
            with self._borrow() as conn:
                yield conn
        except PoolTimeout as exc:
            raise DatabaseUnavailableError(
                f"no database connection available from {redact_url(self._conninfo)}"
                f" ({exc}). Check that PostgreSQL is running."
            ) from exc
        except psycopg.errors.QueryCanceled:
            raise DatabaseTimeoutError(
                f"a database statement ran past the {self.statement_timeout_ms} ms "
                "statement timeout and was cancelled (nothing was half-written). "
                "Retry; if it keeps happening, narrow the query or raise "
                f"{STATEMENT_TIMEOUT_ENV}."
            ) from None
        except psycopg.OperationalError as exc:
            # The server went away mid-statement (restart, crash, terminated backend).
            # The pool discards the broken connection; the transaction rolled back.
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            raise DatabaseUnavailableError(
                f"lost the connection to PostgreSQL at {redact_url(self._conninfo)} "
                f"({first or type(exc).__name__}); the statement was rolled back, "
                "nothing was half-written. Retry once the server is up."
            ) from None

    def migrate(self) -> list[int]:
        """Apply pending migrations in order; return the versions applied."""
        applied: list[int] = []
        with self.connection() as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_version ("
                " version integer PRIMARY KEY, name text NOT NULL,"
                " applied_at timestamptz NOT NULL DEFAULT now())"
            )
            done = {
                row[0] for row in conn.execute("SELECT version FROM schema_version")
            }
            for migration in load_migrations():
                if migration.version in done:
                    continue
                conn.execute(migration.sql.encode())
                conn.execute(
                    "INSERT INTO schema_version (version, name) VALUES (%s, %s)",
                    (migration.version, migration.name),
                )
                applied.append(migration.version)
        if applied:
            logger.info("applied migrations %s", applied)
        return applied

    def schema_versions(self) -> list[int]:
        """Return the migration versions recorded in the database."""
        with self.connection() as conn:
            return [
                r[0]
                for r in conn.execute("SELECT version FROM schema_version ORDER BY 1")
            ]

    def pgvector_version(self) -> tuple[int, ...]:
        """Return the installed pgvector version, e.g. ``(0, 8, 0)``."""
        if self._pgvector_version is None:
            with self.connection() as conn:
                row = conn.execute(
                    "SELECT extversion FROM pg_extension WHERE extname = 'vector'"
                ).fetchone()
            text = row[0] if row else "0"
            self._pgvector_version = tuple(int(p) for p in re.findall(r"\d+", text))
        return self._pgvector_version

    # --- embedding index ----------------------------------------------------------
    def embedding_index(self) -> EmbeddingIndex | None:
        """Return the model and dimension this index was built with, if any."""
        with self.connection() as conn:
            rows = dict(
                conn.execute(
                    "SELECT key, value FROM index_settings"
                    " WHERE key IN ('embedding_model', 'embedding_dimension')"
                ).fetchall()
            )
        if "embedding_dimension" not in rows:
            return None
        return EmbeddingIndex(rows["embedding_model"], int(rows["embedding_dimension"]))

    def ensure_embedding_index(self, model: str, dimension: int) -> EmbeddingIndex:
        """Create the vector column and HNSW index on first use; refuse a mismatch."""
        current = self.embedding_index()
        if current is None:
            with self.connection() as conn, conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
                if self._embedding_index_in(conn) is None:
                    conn.execute(
                        sql.SQL(
                            "ALTER TABLE chunks ADD COLUMN embedding vector({})"
                        ).format(sql.Literal(int(dimension)))
                    )
                    # Cosine HNSW: our embedders normalise; the spec ranks by cosine.
                    conn.execute(
                        "CREATE INDEX chunks_embedding_hnsw ON chunks"
                        " USING hnsw (embedding vector_cosine_ops)"
                    )
                    conn.execute(
                        "INSERT INTO index_settings VALUES"
                        " ('embedding_model', %s), ('embedding_dimension', %s)",
                        (model, str(dimension)),
                    )
            current = self.embedding_index()
            assert current is not None
        self.check_embedding_compatible(current, model, dimension)
        return current

    @staticmethod
    def _embedding_index_in(conn: psycopg.Connection[Any]) -> str | None:
        row = conn.execute(
            "SELECT value FROM index_settings WHERE key = 'embedding_dimension'"
        ).fetchone()
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

    # --- documents ------------------------------------------------------------------
    def document_revisions(
        self, document_ids: Sequence[str]
    ) -> dict[str, tuple[str, str]]:
        """(revision, embedding model) of those of ``document_ids`` that are stored."""
        with self.connection() as conn:
            rows = conn.execute(q.DOCUMENT_REVISIONS, (list(document_ids),)).fetchall()
        return {row[0]: (row[1], row[2]) for row in rows}

    def write_document(self, doc: DocumentRecord) -> None:
        """Replace a document and everything derived from it in one transaction.

        Readers see either the old revision or the new one, never a mixture; an
        error anywhere rolls the whole document back.
        """
        self.write_documents([doc])

    def write_documents(self, docs: Sequence[DocumentRecord]) -> None:
        """Replace several documents in one transaction, with set-based statements.

        All or nothing: each document is fully old or fully new afterwards. Callers
        that must isolate a bad document retry one by one (see the ingest job).
        """
        if not docs:
            return
        with self.connection() as conn, conn.transaction():
            # Not waiting for the WAL flush keeps the batch atomic (it commits or
            # not) and only risks losing the last commits if the server crashes,
            # which a re-run re-ingests; it saves one fsync per transaction.
            conn.execute("SET LOCAL synchronous_commit = off")
            self._delete_documents(conn, [doc.id for doc in docs])
            self._insert_documents(conn, docs)

    def delete_document(self, document_id: str) -> bool:
        """Delete a document, its chunks, postings and graph evidence."""
        with self.connection() as conn, conn.transaction():
            return self._delete_documents(conn, [document_id]) > 0

    def delete_imported(self, origin: str, *, keep_source_ids: Sequence[str]) -> int:
        """Delete documents imported from ``origin`` whose source id is not kept."""
        with self.connection() as conn, conn.transaction():
            rows = conn.execute(
                "SELECT id FROM documents WHERE metadata->>'imported_from' = %s"
                " AND NOT (source_id = ANY(%s::text[]))",
                (origin, list(keep_source_ids)),
            ).fetchall()
            return self._delete_documents(conn, [r[0] for r in rows])

    def _delete_documents(self, conn: psycopg.Connection[Any], ids: list[str]) -> int:
        params = {"document_ids": ids}
        conn.execute(q.SUBTRACT_TERM_STATS, params)
        conn.execute(q.SUBTRACT_CORPUS_STATS, params)
        return conn.execute(q.DELETE_DOCUMENTS, params).rowcount

    def _insert_documents(
        self, conn: psycopg.Connection[Any], docs: Sequence[DocumentRecord]
    ) -> None:
        with conn.cursor() as cur:
            cur.executemany(
                q.INSERT_DOCUMENT,
                [
                    {
                        "id": doc.id,
                        "source_id": doc.source_id,
                        "tenant": doc.tenant,
                        "title": doc.title,
                        "path": doc.path,
                        "source_uri": doc.source_uri,
                        "revision": doc.revision,
                        "parser_version": doc.parser_version,
                        "acl": list(doc.acl),
                        "metadata": Jsonb(doc.metadata),
                        "content": doc.content,
                        "embedding_model": doc.embedding_model,
                        "created_at": doc.created_at,
                        "updated_at": doc.updated_at,
                    }
                    for doc in docs
                ],
            )
        with conn.cursor().copy(q.COPY_CHUNKS) as copy:
            for doc in docs:
                for chunk in doc.chunks:
                    copy.write_row(
                        (
                            chunk.id,
                            doc.id,
                            doc.source_id,
                            doc.tenant,
                            list(doc.acl),
                            chunk.ordinal,
                            list(chunk.heading_path),
                            chunk.body,
                            chunk.content,
                            chunk.char_start,
                            chunk.char_end,
                            chunk.token_count,
                            doc.revision,
                            doc.source_uri,
                            doc.parser_version,
                            doc.embedding_model,
                            doc.embedding_version,
                            doc.updated_at,
                            list(chunk.identifiers),
                            _vector_literal(chunk.embedding),
                            chunk.page_start,
                            chunk.page_end,
                        )
                    )
        params = {"document_ids": [doc.id for doc in docs]}
        conn.execute(q.INSERT_POSTINGS, params)
        conn.execute(q.SET_LEXEME_COUNTS, params)
        conn.execute(q.ADD_TERM_STATS, params)
        conn.execute(q.ADD_CORPUS_STATS, params)
        for doc in docs:
            self._write_graph(conn, doc)

    def _write_graph(self, conn: psycopg.Connection[Any], doc: DocumentRecord) -> None:
        def upsert(name: str, **fields: Any) -> str:
            key = entity_key(doc.tenant, name)
            conn.execute(
                q.UPSERT_ENTITY,
                {
                    "id": key,
                    "tenant": doc.tenant,
                    "name": name.strip(),
                    "type": fields.get("type"),
                    "lifecycle": fields.get("lifecycle"),
                    "canonical_id": fields.get("canonical_id"),
                    "description": fields.get("description", ""),
                    "home_document_id": fields.get("home_document_id"),
                },
            )
            return key

        def mention(entity_id: str, count: int, origin: str) -> None:
            conn.execute(
                q.INSERT_MENTION,
                {
                    "entity_id": entity_id,
                    "document_id": doc.id,
                    "chunk_id": None,
                    "count": count,
                    "origin": origin,
                },
            )

        def curate(entity_id: str, entity: EntitySpec, canonical: str | None) -> None:
            # Who declared what: graph fusion applies a curation only for callers
            # who may see its document, and it goes with the document (migration 005).
            if entity.type is None and entity.lifecycle is None and canonical is None:
                return
            conn.execute(
                q.INSERT_CURATION,
                {
                    "entity_id": entity_id,
                    "document_id": doc.id,
                    "type": entity.type,
                    "lifecycle": entity.lifecycle,
                    "canonical_id": canonical,
                },
            )

        if doc.title_entity and doc.title.strip():
            mention(upsert(doc.title, home_document_id=doc.id), 1, "title")
        for entity in doc.entities:
            canonical = upsert(
                entity.name,
                type=entity.type,
                lifecycle=entity.lifecycle,
                description=entity.description,
            )
            curate(canonical, entity, None)
            for alias in entity.aliases:
                if normalise_entity_name(alias) != normalise_entity_name(entity.name):
                    # A zero-count explicit mention records who declared the alias,
                    # which graph fusion checks before following it (tools/store/graph).
                    alias_id = upsert(
                        alias,
                        type=entity.type,
                        lifecycle=entity.lifecycle,
                        canonical_id=canonical,
                    )
                    mention(alias_id, 0, "explicit")
                    curate(alias_id, entity, canonical)
            mention(canonical, entity.count, "explicit")
        for relation in doc.relations:
            conn.execute(
                q.INSERT_RELATION,
                {
                    "source_id": upsert(relation.source),
                    "target_id": upsert(relation.target),
                    "type": relation.type,
                    "weight": relation.weight,
                    "document_id": doc.id,
                },
            )

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
                conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(table)))

    def vacuum_analyze(self, tables: Sequence[str] = ("chunks", "chunk_terms")) -> None:
        """VACUUM (ANALYZE) the tables a bulk load filled.

        This sets the visibility map, so postings are read from the index alone
        instead of visiting the heap row by row. Autovacuum does this eventually
        on a running server; a benchmark or a one-off bulk load calls it directly.
        """
        self._outside_transaction(
            sql.SQL("VACUUM (ANALYZE) {}").format(sql.Identifier(t)) for t in tables
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
                "SELECT t, pg_total_relation_size(to_regclass(t))"
                " FROM unnest(%s::text[]) AS t",
                (list(self.MAINTAINED_TABLES),),
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
        steps = ["VACUUM (ANALYZE) {}"] + (
            ["REINDEX TABLE CONCURRENTLY {}"] if reindex else []
        )
        self._outside_transaction(
            sql.SQL(step).format(sql.Identifier(table))
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
                for r in conn.execute(
                    "SELECT id, source_uri FROM documents"
                    " WHERE tenant = %s AND source_uri LIKE %s ORDER BY id",
                    (tenant, like + "%"),
                )
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
                statement = sql.SQL("SELECT count(*) FROM {}").format(
                    sql.Identifier(table)
                )
                row = conn.execute(statement).fetchone()
                counts[table] = int(row[0]) if row else 0
        return counts

    def index_revision(self, tenant: str) -> str:
        """A cheap identifier of the index state a query saw (for replaying traces)."""
        # Both parts are index lookups (corpus_stats by tenant, the newest ingest
        # through documents_tenant_ingested): O(log n), not a scan per query.
        with self.connection() as conn:
            row = conn.execute(
                "SELECT (SELECT chunk_count FROM corpus_stats WHERE tenant = %(t)s),"
                " (SELECT extract(epoch FROM max(ingested_at)) FROM documents"
                "  WHERE tenant = %(t)s)",
                {"t": tenant},
            ).fetchone()
        chunks, latest = (row[0] or 0, row[1] or 0) if row else (0, 0)
        return f"chunks-{int(chunks)}-{int(latest * 1000)}"

    def chunk_sources(self, tenant: str) -> dict[str, str]:
        """Map every chunk id of a tenant to its document's own id (for evaluation)."""
        with self.connection() as conn:
            rows = conn.execute(
                "SELECT id, source_id FROM chunks WHERE tenant = %s", (tenant,)
            ).fetchall()
        return {row[0]: row[1] for row in rows}

    # --- entity linking -------------------------------------------------------------
    def link_entities(
        self, tenant: str, document_ids: Sequence[str] | None = None
    ) -> int:
        """Record 'extracted' mentions of known entity names and aliases in chunk text.

        Deterministic: whole-word, case-insensitive matches of every non-deleted entity
        name of the tenant. Returns the number of mentions written.
        """
        with self.connection() as conn:
            names = conn.execute(q.ENTITY_NAMES, {"tenant": tenant}).fetchall()
        matcher = _EntityMatcher([(row[0], row[1]) for row in names])
        params: dict[str, Any] = {
            "tenant": tenant,
            "doc_keys": list(document_ids or []),
        }
        scope = (
            "AND c.document_id = ANY(%(doc_keys)s::text[])"
            if document_ids is not None
            else ""
        )
        delete_scope = (
            "AND m.document_id = ANY(%(doc_keys)s::text[])"
            if document_ids is not None
            else ""
        )
        written = 0
        with self.connection() as conn, conn.transaction():
            conn.execute(
                q.DELETE_EXTRACTED_MENTIONS.format(scope=delete_scope).encode(), params
            )
            if matcher.empty:
                return 0
            rows = conn.execute(
                q.CHUNKS_FOR_LINKING.format(scope=scope).encode(), params
            ).fetchall()
            batch = []
            for chunk_id, document_id, content in rows:
                for entity_id, count in matcher.find(content).items():
                    batch.append(
                        {
                            "entity_id": entity_id,
                            "document_id": document_id,
                            "chunk_id": chunk_id,
                            "count": count,
                            "origin": "extracted",
                        }
                    )
            if batch:
                with conn.cursor() as cur:
                    cur.executemany(q.INSERT_MENTION, batch)
            written = len(batch)
        return written

    # --- channels -------------------------------------------------------------------
    def search_lexical(
        self,
        query: str,
        identifiers: Sequence[str],
        scope: AccessScope,
        *,
        depth: int,
        k1: float,
        b: float,
        phrases: str | None = None,
        exhaustive_postings: int | None = LEXICAL_EXHAUSTIVE_POSTINGS,
        read_budget: int = LEXICAL_READ_BUDGET,
        stats: dict[str, Any] | None = None,
    ) -> list[tuple[str, float, int]]:
        """BM25 over postings, OR semantics: (chunk id, score, identifier hits).

        While the query's lexemes have at most ``exhaustive_postings`` postings in
        the tenant, every one is scored (exact). Past that, a document scope scores
        just its own chunks (exact), and an unscoped query reads each lexeme's
        strongest postings within ``read_budget`` from the impact-ordered index and
        re-scores the best candidates exactly (approximate, bounded cost).
        ``exhaustive_postings=None`` always scores exhaustively. ``stats``, when
        given, receives the mode and the postings the query touches.
        """
        with self.connection() as conn:
            terms = conn.execute(
                q.QUERY_WEIGHTS,
                {
                    "query": query,
                    "identifiers": list(identifiers),
                    "tenant": scope.tenant,
                },
            ).fetchall()
            # No early return when no lexeme occurs in the tenant: the scorer runs
            # over nothing, so a word found nowhere costs the same round trip as a
            # word found only in chunks the caller cannot see (issue 15; measured
            # by bench/side_channels.py).
            weights = [t[1:4] for t in terms if t[0] == "prose"]
            identifier_weights = [t[1:3] for t in terms if t[0] == "identifier"]
            frequencies = [int(w[2]) for w in weights]
            postings = sum(frequencies)
            mode = "exhaustive"
            if exhaustive_postings is not None and postings > exhaustive_postings:
                mode = "scoped" if scope.doc_keys is not None else "impact"
            quotas = posting_quotas(frequencies, read_budget, floor=depth)
            params = scope.params() | {
                "lexemes": [w[0] for w in weights],
                "idfs": [float(w[1]) for w in weights],
                "quotas": quotas,
                # A lexeme whose quota covers its postings is read whole by the
                # impact-ordered read: its part of a seed's score is already exact.
                "completes": [
                    q >= df for q, df in zip(quotas, frequencies, strict=True)
                ],
                "avgdl": float(terms[0][4]) if terms else 1.0,
                "identifiers": [w[0] for w in identifier_weights],
                "identifier_idfs": [float(w[1]) for w in identifier_weights],
                "phrases": phrases,
                "depth": depth,
                "rescore": max(2 * depth, LEXICAL_RESCORE_MIN),
                "k1": k1,
                "b": b,
            }
            statement = q.LEXICAL_BM25[mode].format(
                filters=scope.filters("c"), posting_filters=scope.filters("p")
            )
            rows = conn.execute(statement, params).fetchall()
        if stats is not None:
            stats.update(mode=mode, postings=postings)
        return [(r[0], float(r[2]), int(r[1])) for r in rows]

    def search_dense(
        self,
        embedding: Sequence[float],
        scope: AccessScope,
        *,
        depth: int,
        ef_search: int,
    ) -> list[tuple[str, float]]:
        """Cosine nearest neighbours that pass the scope's filters, full depth."""
        params = scope.params() | {
            "embedding": _vector_literal(embedding),
            "depth": depth,
        }
        exact = scope.doc_keys is not None
        template = q.DENSE_EXACT if exact else q.DENSE_INDEXED
        rows = self._dense(
            template.format(filters=scope.filters()), params, exact, depth, ef_search
        )
        if len(rows) < depth and not exact:
            # A filtered graph walk can stop short (pgvector < 0.8, or the iterative
            # scan hit hnsw.max_scan_tuples): finish with an exact scan of the allowed
            # rows, which is cheap precisely when the allowed set is small.
            rows = self._dense(
                q.DENSE_EXACT.format(filters=scope.filters()),
                params,
                True,
                depth,
                ef_search,
            )
        return [(r[0], float(r[1])) for r in rows]

    def _dense(
        self,
        statement: sql.Composed,
        params: dict[str, Any],
        exact: bool,
        depth: int,
        ef_search: int,
    ) -> list[tuple[Any, ...]]:
        with self.connection() as conn, conn.transaction():
            if not exact:
                conn.execute(
                    "SELECT set_config('hnsw.ef_search', %s, true)",
                    (str(max(ef_search, depth)),),
                )
                if self.pgvector_version() >= (0, 8):
                    # Keep walking the graph until `depth` rows pass the filters
                    # (pgvector 0.8); older versions return short lists under filters.
                    conn.execute(
                        "SELECT set_config('hnsw.iterative_scan', 'relaxed_order', "
                        "true)"
                    )
            return conn.execute(statement, params).fetchall()

    def document_metadata(
        self, document_ids: Sequence[str]
    ) -> dict[str, dict[str, Any]]:
        """Metadata by internal document id (callers pass ids they already may see)."""
        with self.connection() as conn:
            rows = conn.execute(
                "SELECT id, metadata FROM documents WHERE id = ANY(%s::text[])",
                (list(document_ids),),
            ).fetchall()
        return {r[0]: dict(r[1]) for r in rows}

    def chunk_embeddings(
        self, chunk_ids: Sequence[str], *, model: str | None = None
    ) -> dict[str, list[float]]:
        """Stored vectors by chunk id (callers pass ids they already may see).

        ``model`` keeps only vectors that model made: ingest reuses them, since a
        chunk id is a digest of (document, position, indexed text), so a stored
        vector under the same id and model embedded exactly the text to be written.
        """
        if not chunk_ids:
            return {}
        with self.connection() as conn:
            rows = conn.execute(
                "SELECT id, embedding::text FROM chunks WHERE id = ANY(%s::text[])"
                " AND (%s::text IS NULL OR embedding_model = %s)",
                (list(chunk_ids), model, model),
            ).fetchall()
        return {r[0]: list(parse_vector(r[1])) for r in rows}

    def documents_by_source_ids(
        self, source_ids: Sequence[str], scope: AccessScope
    ) -> list[dict[str, Any]]:
        """Whole documents by their own ids, filtered by the scope's tenant and ACL."""
        statement = sql.SQL(
            "SELECT d.source_id, d.content, d.metadata FROM documents d"
            " WHERE d.source_id = ANY(%(source_ids)s::text[]) AND {filters}"
            " ORDER BY array_position(%(source_ids)s::text[], d.source_id)"
        ).format(filters=sql.SQL(f"{q.TENANT_FILTER} AND {q.ACL_FILTER}".format(a="d")))
        params = scope.params() | {"source_ids": list(source_ids)}
        with self.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            return list(cur.execute(statement, params).fetchall())

    # --- scoped writes: a write is authorised like a read (vector-store API) --------
    def document_access(
        self, document_ids: Sequence[str], scope: AccessScope
    ) -> dict[str, tuple[str, ...] | None]:
        """Which of ``document_ids`` are stored in the scope's tenant.

        Maps each stored one to its ACL when the scope's principals may see it and
        to ``None`` when they may not (a hidden document's ACL is not read out).
        """
        if not document_ids:
            return {}
        with self.connection() as conn:
            rows = conn.execute(
                q.STORED_DOCUMENT_ACCESS,
                scope.params() | {"document_ids": list(document_ids)},
            ).fetchall()
        return {r[0]: tuple(r[2]) if r[1] else None for r in rows}

    def delete_visible_documents(
        self, document_ids: Sequence[str], scope: AccessScope
    ) -> list[str]:
        """Delete those of ``document_ids`` the scope may see; return their ids.

        Hidden and missing ids take the same path (one locked lookup that finds
        nothing to delete), so the result cannot tell them apart.
        """
        with self.connection() as conn, conn.transaction():
            rows = conn.execute(
                q.STORED_DOCUMENT_ACCESS_FOR_UPDATE,
                scope.params() | {"document_ids": list(document_ids)},
            ).fetchall()
            visible = [r[0] for r in rows if r[1]]
            self._delete_documents(conn, visible)
        return visible

    def write_documents_checked(
        self,
        docs: Sequence[DocumentRecord],
        scope: AccessScope,
        check: Callable[[dict[str, tuple[str, ...] | None]], None],
    ) -> None:
        """:meth:`write_documents`, once ``check`` approves the rows it replaces.

        ``check`` gets :meth:`document_access` of the documents, read and locked in
        the writing transaction (so no concurrent writer can change them between
        the check and the write), and raises to refuse; nothing is written then.
        """
        if not docs:
            return
        with self.connection() as conn, conn.transaction():
            conn.execute("SET LOCAL synchronous_commit = off")
            rows = conn.execute(
                q.STORED_DOCUMENT_ACCESS_FOR_UPDATE,
                scope.params() | {"document_ids": [doc.id for doc in docs]},
            ).fetchall()
            check({r[0]: tuple(r[2]) if r[1] else None for r in rows})
            self._delete_documents(conn, [doc.id for doc in docs])
            self._insert_documents(conn, docs)

    def fetch_chunks(
        self, chunk_ids: Sequence[str], scope: AccessScope
    ) -> dict[str, dict[str, Any]]:
        """Return chunk rows with provenance by id (re-checking the scope's filters)."""
        if not chunk_ids:
            return {}
        statement = q.FETCH_CHUNKS.format(filters=scope.filters())
        params = scope.params() | {"chunk_ids": list(chunk_ids)}
        with self.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            rows = cur.execute(statement, params).fetchall()
        return {row["id"]: row for row in rows}

    def chunk_documents(
        self, chunk_ids: Sequence[str], scope: AccessScope
    ) -> dict[str, str]:
        """Internal document id by chunk id, for the chunks the scope may see."""
        if not chunk_ids:
            return {}
        statement = q.CHUNK_DOCUMENTS.format(filters=scope.filters())
        params = scope.params() | {"chunk_ids": list(chunk_ids)}
        with self.connection() as conn:
            return dict(conn.execute(statement, params).fetchall())


def parse_vector(text: str) -> tuple[float, ...]:
    """A pgvector value in its text form (``[0.1,0.2]``) as floats."""
    return tuple(float(v) for v in text.strip("[]").split(","))


def _vector_literal(values: Sequence[float]) -> str:
    return "[" + ",".join(repr(float(v)) for v in values) + "]"


class _EntityMatcher:
    """Whole-word, case-insensitive matcher over a set of entity names."""

    def __init__(self, names: list[tuple[str, str]]) -> None:
        self._by_name: dict[str, str] = {}
        for entity_id, name in names:
            norm = normalise_entity_name(name)
            if len(norm) >= 3:  # two-letter names match too much prose to be evidence
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
        found: dict[str, int] = {}
        if self._regex is None:
            return found
        for match in self._regex.finditer(text):
            entity_id = self._by_name.get(normalise_entity_name(match.group(0)))
            if entity_id is not None:
                found[entity_id] = found.get(entity_id, 0) + 1
        return found


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
