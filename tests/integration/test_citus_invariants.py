"""Citus readiness (issue 20), checked on the real catalog of a migrated database.

The corpus tables are distributed by ``tenant`` and co-located; the tables listed in
``REFERENCE_TABLES`` are replicated whole (docs/scaling.md). A future migration that
adds a table must put it in one list or the other, and a corpus table must keep the
invariants below, or these tests fail:

- it has a ``tenant text NOT NULL`` column and a primary key (``mentions``: a
  unique index, its chunk being optional);
- every primary key and unique index has ``tenant`` among its key columns;
- every foreign key to another corpus table includes ``tenant`` at the same position
  on both sides (Citus co-located foreign keys), and none is ON DELETE SET NULL or
  SET DEFAULT or cascades on UPDATE (which Citus refuses on such keys);
- no reference table refers to a corpus table, and no identity columns.

Also checked here: the packaged SQL changes no planner or index setting for the whole
session (only ``SET LOCAL``/``set_config(..., true)``, which Citus propagates to the
workers inside the transaction); every statement on a corpus table names the tenant,
and every join between corpus tables matches on it; and a database populated at
schema 006 migrates to 007 with the same retrieval results.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from helpers import assert_stats_consistent
from psycopg import sql
from psycopg.conninfo import make_conninfo

from retrieval_pipeline.tools.store import Store
from retrieval_pipeline.tools.store import sql as q
from retrieval_pipeline.tools.store import sql_admin as qa
from retrieval_pipeline.tools.store import sql_documents as qd
from retrieval_pipeline.tools.store.connection import load_migrations
from retrieval_pipeline.tools.store.scope import AccessScope

REPO = Path(__file__).resolve().parents[2]

# Distributed by tenant, co-located with documents.
CORPUS_TABLES = frozenset(
    {
        "documents",
        "chunks",
        "chunk_terms",
        "term_stats",
        "corpus_stats",
        "entities",
        "mentions",
        "relations",
        "entity_curation",
        "site_boilerplate",
    }
)
# No tenant: migration bookkeeping and the index's own settings, replicated whole.
REFERENCE_TABLES = frozenset({"schema_version", "index_settings"})

TENANT = "tenant"


def _catalog(conn: psycopg.Connection[Any], query: str) -> list[tuple[Any, ...]]:
    return conn.execute(query).fetchall()


@pytest.fixture()
def catalog(session_store: Store) -> Iterator[psycopg.Connection[Any]]:
    with session_store.connection() as conn:
        yield conn


class TestCatalogInvariants:
    def test_every_table_is_a_corpus_or_a_reference_table(
        self, catalog: psycopg.Connection[Any]
    ) -> None:
        tables = {
            r[0]
            for r in _catalog(
                catalog,
                "SELECT c.relname FROM pg_class c"
                " WHERE c.relnamespace = 'public'::regnamespace"
                " AND c.relkind IN ('r', 'p')",
            )
        }
        unknown = tables - CORPUS_TABLES - REFERENCE_TABLES
        assert not unknown, (
            f"tables {sorted(unknown)} are neither corpus tables (distributed by "
            "tenant) nor reference tables: add them to one list here and to "
            "docs/scaling.md"
        )
        assert CORPUS_TABLES | REFERENCE_TABLES == tables

    def test_corpus_tables_carry_the_tenant(
        self, catalog: psycopg.Connection[Any]
    ) -> None:
        rows = _catalog(
            catalog,
            "SELECT table_name, data_type, is_nullable FROM information_schema.columns"
            " WHERE table_schema = 'public' AND column_name = 'tenant'",
        )
        found = {r[0]: (r[1], r[2]) for r in rows}
        for table in sorted(CORPUS_TABLES):
            assert found.get(table) == ("text", "NO"), f"{table}.tenant text NOT NULL"
        for table in REFERENCE_TABLES:
            assert table not in found

    def test_primary_keys_and_unique_indexes_include_the_tenant(
        self, catalog: psycopg.Connection[Any]
    ) -> None:
        rows = _catalog(
            catalog,
            """
            SELECT t.relname, i.relname, x.indisprimary,
                   EXISTS (SELECT 1 FROM unnest(x.indkey[0:x.indnkeyatts - 1]) k
                           JOIN pg_attribute a ON a.attrelid = t.oid
                            AND a.attnum = k AND a.attname = 'tenant')
            FROM pg_index x
            JOIN pg_class t ON t.oid = x.indrelid
            JOIN pg_class i ON i.oid = x.indexrelid
            WHERE t.relnamespace = 'public'::regnamespace AND x.indisunique
            """,
        )
        # mentions is keyed by a unique index (its chunk is optional), not a PK.
        with_primary = {r[0] for r in rows if r[2]} | {"mentions"}
        assert CORPUS_TABLES <= with_primary, "every corpus table has a primary key"
        assert "mentions" in {r[0] for r in rows}
        missing = [f"{r[0]}.{r[1]}" for r in rows if r[0] in CORPUS_TABLES and not r[3]]
        assert not missing, f"unique indexes without the tenant: {missing}"

    def test_foreign_keys_are_co_located(
        self, catalog: psycopg.Connection[Any]
    ) -> None:
        rows = _catalog(
            catalog,
            """
            SELECT c.conname, s.relname, t.relname, c.confdeltype, c.confupdtype,
                   array_position(c.conkey, (SELECT attnum FROM pg_attribute
                       WHERE attrelid = c.conrelid AND attname = 'tenant')),
                   array_position(c.confkey, (SELECT attnum FROM pg_attribute
                       WHERE attrelid = c.confrelid AND attname = 'tenant'))
            FROM pg_constraint c
            JOIN pg_class s ON s.oid = c.conrelid
            JOIN pg_class t ON t.oid = c.confrelid
            WHERE c.contype = 'f' AND c.connamespace = 'public'::regnamespace
            """,
        )
        assert len(rows) == 13  # every key of the migrations is seen
        for name, source, target, on_delete, on_update, left, right in rows:
            assert source not in REFERENCE_TABLES or target in REFERENCE_TABLES, (
                f"{name}: a reference table cannot refer to a distributed one"
            )
            if source in CORPUS_TABLES and target in CORPUS_TABLES:
                assert left is not None and left == right, (
                    f"{name} ({source} -> {target}) must include tenant at the same "
                    "position on both sides"
                )
                assert on_delete not in ("n", "d"), (
                    f"{name}: Citus refuses ON DELETE SET NULL/SET DEFAULT on a key "
                    "with the distribution column"
                )
                assert on_update in ("a", "r"), f"{name}: no ON UPDATE actions"

    def test_no_identity_columns(self, catalog: psycopg.Connection[Any]) -> None:
        rows = _catalog(
            catalog,
            "SELECT table_name, column_name FROM information_schema.columns"
            " WHERE table_schema = 'public' AND is_identity = 'YES'",
        )
        assert not [r for r in rows if r[0] in CORPUS_TABLES]


# --- packaged SQL -------------------------------------------------------------------
PACKAGED = ("retrieval_pipeline", "tools", "graph", "nodes", "ingest")
# A connection setting on purpose: the coordinator cancels a distributed statement
# that runs past it, and with it the workers' parts (docs/scaling.md).
SESSION_SETTINGS_ALLOWED = frozenset({"statement_timeout"})

_SET = re.compile(
    r"\bSET\s+(?!LOCAL\b)(?:SESSION\s+)?([a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)?)"
    r"\s*(?:=|\bTO\b)",
    re.IGNORECASE,
)
_SET_LOCAL = re.compile(r"\bSET\s+LOCAL\s+([a-z_][a-z0-9_.]*)", re.IGNORECASE)
_SET_CONFIG = re.compile(
    r"set_config\(\s*'([^']+)'\s*,[^,()]*,\s*(true|false)\s*\)", re.IGNORECASE
)


def _packaged_sources() -> list[Path]:
    files: list[Path] = []
    for folder in PACKAGED:
        files += sorted((REPO / folder).rglob("*.py"))
        files += sorted((REPO / folder).rglob("*.sql"))
    return files


class TestSessionSettings:
    def test_no_session_level_settings_in_packaged_sql(
        self, catalog: psycopg.Connection[Any]
    ) -> None:
        settings = {r[0] for r in _catalog(catalog, "SELECT name FROM pg_settings")}
        sessions: list[str] = []
        local: set[str] = set()
        for path in _packaged_sources():
            text = path.read_text(encoding="utf-8")
            where = path.relative_to(REPO)
            for match in _SET.finditer(text):
                name = match.group(1).lower()
                # UPDATE ... SET column = ...: a column, not a setting.
                if ("." in name or name in settings) and (
                    name not in SESSION_SETTINGS_ALLOWED
                ):
                    sessions.append(f"{where}: SET {name}")
            for match in _SET_CONFIG.finditer(text):
                if match.group(2).lower() == "false":
                    sessions.append(f"{where}: set_config({match.group(1)}, false)")
                else:
                    local.add(match.group(1))
            local.update(m.group(1) for m in _SET_LOCAL.finditer(text))
        assert not sessions, (
            "session-level settings do not reach the Citus workers and outlive the "
            f"pooled borrow; use SET LOCAL or set_config(..., true): {sessions}"
        )
        # The scan sees the transaction-scoped settings the package does make.
        assert {"hnsw.ef_search", "hnsw.iterative_scan"} <= local
        assert {"synchronous_commit", "plan_cache_mode"} <= local

    def test_the_scan_catches_a_session_set(self) -> None:
        assert _SET.search("SET hnsw.ef_search = 100")
        assert _SET.search("set session work_mem TO '64MB'")
        assert not _SET.search("SET LOCAL hnsw.ef_search = 100")
        match = _SET_CONFIG.search("SELECT set_config('hnsw.ef_search', %s, false)")
        assert match and match.group(2) == "false"


# --- every statement on a corpus table names the tenant -------------------------------
# Statements that look rows up by globally unique id alone: on a cluster they ask
# every shard. Each is an ingest or an import bookkeeping step, or a fetch of ids the
# caller already saw in a tenant-scoped result (docs/scaling.md, "Fan-out").
FAN_OUT_ALLOWED = frozenset(
    {
        "sql.DOCUMENT_REVISIONS",
        "sql.DOCUMENT_TENANTS",
        "sql_documents.DOCUMENT_METADATA",
        "sql_documents.CHUNK_EMBEDDINGS",
        "sql_documents.IMPORTED_NOT_KEPT",
        "sql_admin.COUNT_ROWS",
        "sql_admin.RELATION_SIZES",
        "sql_admin.ANALYZE_TABLE",
        "sql_admin.VACUUM_ANALYZE_TABLE",
        "sql_admin.REINDEX_TABLE",
        "sql_admin.ADD_EMBEDDING_COLUMN",
        "sql_admin.CREATE_EMBEDDING_INDEX",
        "sql.COPY_CHUNKS",  # COPY routes each row by its tenant column
        "sql.INSERT_DOCUMENT",  # routed by the tenant value it inserts
        "sql.UPSERT_ENTITY",
    }
)
_TABLE_USE = re.compile(
    r"\b(?:FROM|JOIN|INTO|UPDATE|COPY)\s+(" + "|".join(sorted(CORPUS_TABLES)) + r")\b",
    re.IGNORECASE,
)
_JOIN_ON = re.compile(
    r"\bJOIN\s+(" + "|".join(sorted(CORPUS_TABLES)) + r")\s+(?:AS\s+)?\w+\s+ON\s+"
    r"(.*?)(?=\bJOIN\b|\bWHERE\b|\bGROUP\b|\bORDER\b|\bLEFT\b|\bCROSS\b|\)|$)",
    re.IGNORECASE | re.DOTALL,
)


def _statements(conn: psycopg.Connection[Any]) -> dict[str, str]:
    """The SQL text of every named statement (graph.py's with its fragments)."""
    from retrieval_pipeline.tools.store import graph

    found: dict[str, str] = {}
    for module, label in ((q, "sql"), (qd, "sql_documents"), (qa, "sql_admin")):
        for name, value in vars(module).items():
            if not name.isupper() or name.startswith("_"):
                continue
            if isinstance(value, dict):
                for key, part in value.items():
                    found[f"{label}.{name}[{key}]"] = _text(part, conn)
            else:
                found[f"{label}.{name}"] = _text(value, conn)
    doc_filter = graph._DOC_FILTER
    for name, parts in (
        ("SEED_ENTITIES", graph._SEED_PARTS),
        ("NEIGHBOURS", graph._NEIGHBOUR_PARTS),
        ("ENTITY_DOCUMENTS", graph._DOCUMENT_PARTS),
        ("MENTIONING_TYPES", graph._TYPE_PARTS),
    ):
        statement = getattr(graph, name).format(doc_filter=doc_filter, **parts)
        found[f"graph.{name}"] = _text(statement, conn)
    return found


# Every filter a scope can add (document scope, metadata, web-search constraint), so
# the joins those filters make are checked too.
_FULL_SCOPE = AccessScope(doc_keys=(), constraint="x -y", metadata=("{}",))


def _text(value: Any, conn: psycopg.Connection[Any]) -> str:
    """A statement's text, its ``{filters}`` filled in as a channel fills them."""
    if isinstance(value, str):
        return value
    if isinstance(value, sql.SQL):
        value = value.format(
            sql.Identifier("chunks"),  # a table, a literal: the admin statements' {}
            filters=_FULL_SCOPE.filters("c"),
            posting_filters=_FULL_SCOPE.filters("p"),
        )
    if isinstance(value, sql.Composable):
        return value.as_string(conn)
    return ""


class TestTenantInEveryStatement:
    def test_every_statement_on_a_corpus_table_names_the_tenant(
        self, catalog: psycopg.Connection[Any]
    ) -> None:
        statements = _statements(catalog)
        assert len(statements) > 30
        missing = [
            name
            for name, text in statements.items()
            if _TABLE_USE.search(text)
            and "tenant" not in text
            and name.split("[")[0] not in FAN_OUT_ALLOWED
        ]
        assert not missing, f"statements that would fan out to every shard: {missing}"

    def test_joins_between_corpus_tables_match_the_tenant(
        self, catalog: psycopg.Connection[Any]
    ) -> None:
        statements = _statements(catalog)
        joins = 0
        unmatched: list[str] = []
        for name, text in statements.items():
            for match in _JOIN_ON.finditer(text):
                joins += 1
                if "tenant" not in match.group(2):
                    unmatched.append(
                        f"{name}: JOIN {match.group(1)} ON {match.group(2)}"
                    )
        assert joins >= 15
        assert not unmatched, f"joins that are not co-located: {unmatched}"


# --- a database populated at schema 006 migrates to 007 ---------------------------
QUESTIONS = (
    "Who owns the service that failed with ERR_CONN_RESET in v2.3.1?",
    "how do I roll back a deployment",
    "payments database failover",
    "auth gateway connection pool",
)
_COPY_ORDER = (
    "index_settings",
    "documents",
    "chunks",
    "chunk_terms",
    "term_stats",
    "corpus_stats",
    "entities",
    "mentions",
    "relations",
    "entity_curation",
)


def _results(store: Store, embedder: Any, tenant: str) -> list[Any]:
    from retrieval_pipeline.tools.retrieve import Retriever

    retriever = Retriever(store, embedder)
    return [
        [
            (c.chunk_id, round(c.score, 9), c.ranks)
            for c in retriever.retrieve(question, limit=8, tenant=tenant)
        ]
        for question in QUESTIONS
    ]


def _schema_006(url: str, dimension: str) -> None:
    """Apply migrations 001-006 and the embedding column, as a 006 store had them."""
    with psycopg.connect(url) as conn, conn.transaction():
        conn.execute(qa.CREATE_SCHEMA_VERSION)
        for migration in load_migrations():
            if migration.version <= 6:
                conn.execute(migration.sql.encode())
                conn.execute(qa.RECORD_MIGRATION, (migration.version, migration.name))
        conn.execute(qa.ADD_EMBEDDING_COLUMN.format(sql.Literal(int(dimension))))
        conn.execute(qa.CREATE_EMBEDDING_INDEX)


def _copy_rows(source: str, target: str) -> None:
    """Copy every row, in the columns the 006 target has, from source to target."""
    with psycopg.connect(source) as src, psycopg.connect(target) as dst:
        for table in _COPY_ORDER:
            columns = [
                r[0]
                for r in dst.execute(
                    "SELECT column_name FROM information_schema.columns"
                    " WHERE table_schema = 'public' AND table_name = %s"
                    " AND is_generated = 'NEVER' ORDER BY ordinal_position",
                    (table,),
                )
            ]
            names = sql.SQL(", ").join(sql.Identifier(c) for c in columns)
            read = sql.SQL("COPY (SELECT {} FROM {}) TO STDOUT").format(
                names, sql.Identifier(table)
            )
            write = sql.SQL("COPY {} ({}) FROM STDIN").format(
                sql.Identifier(table), names
            )
            with src.cursor().copy(read) as out, dst.cursor().copy(write) as into:
                for block in out:
                    into.write(block)
        dst.commit()


class TestMigrationFrom006:
    def test_populated_006_database_migrates_with_the_same_results(
        self,
        store: Store,
        ingestor: Any,
        embedder: Any,
        sample_corpus: Path,
        pg_url: str,
    ) -> None:
        ingestor.ingest_paths([sample_corpus])
        ingestor.ingest_paths([sample_corpus], tenant="acme", title_entities=True)
        before = {t: _results(store, embedder, t) for t in ("", "acme")}
        assert all(any(rows) for rows in before.values())
        with store.connection() as conn:
            dimension = conn.execute(qa.EMBEDDING_DIMENSION).fetchone()[0]

        name = f"citus_migration_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        target_url = make_conninfo(pg_url, dbname=name)
        try:
            _schema_006(target_url, dimension)
            _copy_rows(pg_url, target_url)
            with psycopg.connect(target_url) as conn:
                graph_rows = conn.execute("SELECT count(*) FROM mentions").fetchone()
            assert graph_rows and graph_rows[0] > 0

            migrated = Store(target_url)  # applies 007 to the populated database
            try:
                assert 7 in migrated.schema_versions()
                with migrated.connection() as conn:
                    wrong = conn.execute(
                        """
                        SELECT (SELECT count(*) FROM mentions m JOIN documents d
                                ON d.id = m.document_id WHERE d.tenant <> m.tenant)
                             + (SELECT count(*) FROM relations r JOIN documents d
                                ON d.id = r.document_id WHERE d.tenant <> r.tenant)
                             + (SELECT count(*) FROM entity_curation c
                                JOIN documents d ON d.id = c.document_id
                                WHERE d.tenant <> c.tenant)
                        """
                    ).fetchone()
                    acme = conn.execute(
                        "SELECT count(*) FROM mentions WHERE tenant = 'acme'"
                    ).fetchone()
                assert wrong == (0,)
                assert acme and acme[0] > 0
                assert_stats_consistent(migrated)
                after = {t: _results(migrated, embedder, t) for t in ("", "acme")}
                assert after == before
            finally:
                migrated.close()
        finally:
            with psycopg.connect(pg_url, autocommit=True) as admin:
                admin.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                        sql.Identifier(name)
                    )
                )
