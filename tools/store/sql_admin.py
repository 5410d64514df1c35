"""Named statements that set up and look after the database, outside the channels.

Session settings, migrations, the embedding index, maintenance and inventory. Values
are bound parameters; the few that PostgreSQL cannot bind (a setting in ``SET``, a
column type, a table name) are composed with :mod:`psycopg.sql` as literals and
identifiers, never formatted in. The channels' statements live in ``sql.py``.
"""

from __future__ import annotations

from psycopg import sql

# --- session settings ---------------------------------------------------------------
# Every pooled connection's cap on one statement, in milliseconds ({} = a Literal).
# A connection setting on purpose, the one session-level SET in the package: it
# guards the statement the coordinator runs, and cancelling that cancels its parts
# on the workers, so it need not reach them (tests/integration/test_citus_invariants).
SET_STATEMENT_TIMEOUT = sql.SQL("SET statement_timeout = {}")

# For one write transaction: commit without waiting for the WAL flush. The batch stays
# atomic (it commits or not); a server crash can lose the last commits, which a re-run
# re-ingests. Saves one fsync per transaction.
ASYNC_COMMIT = "SET LOCAL synchronous_commit = off"

# Settings for one dense query are SET LOCAL statements, never session settings nor
# set_config(): Citus forwards a SET LOCAL (not a function call) to the workers that
# run the query when citus.propagate_set_commands = 'local' (docs/scaling.md), and
# the setting ends with the transaction, so a pooled connection keeps no trace of it.

# How many candidates the HNSW walk keeps (pgvector's ef_search); {} = an integer
# Literal (SET takes no bound parameters).
SET_EF_SEARCH = sql.SQL("SET LOCAL hnsw.ef_search = {}")

# pgvector 0.8+: keep walking the graph until enough rows pass the filters, instead
# of returning a short list.
SET_ITERATIVE_SCAN = "SET LOCAL hnsw.iterative_scan = relaxed_order"

# For the statements of one transaction: plan once per connection (prepared), not
# once per call. Their custom plans cost more to make than to run (the lexical pair,
# the graph expansion).
GENERIC_PLANS = "SET LOCAL plan_cache_mode = force_generic_plan"

# --- migrations ---------------------------------------------------------------------
# Held to the end of the transaction, so concurrent processes migrate one at a time.
ADVISORY_XACT_LOCK = "SELECT pg_advisory_xact_lock(%s)"

CREATE_SCHEMA_VERSION = """
CREATE TABLE IF NOT EXISTS schema_version (
    version integer PRIMARY KEY, name text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now())
"""

SCHEMA_VERSIONS = "SELECT version FROM schema_version ORDER BY version"

RECORD_MIGRATION = "INSERT INTO schema_version (version, name) VALUES (%s, %s)"

PGVECTOR_VERSION = "SELECT extversion FROM pg_extension WHERE extname = 'vector'"

# --- embedding index: created on first use, once the dimension is known -------------
EMBEDDING_INDEX_SETTINGS = """
SELECT key, value FROM index_settings
WHERE key IN ('embedding_model', 'embedding_dimension')
ORDER BY key
"""

EMBEDDING_DIMENSION = (
    "SELECT value FROM index_settings WHERE key = 'embedding_dimension'"
)

# {} = the dimension, a Literal: a column type cannot be a bound parameter.
ADD_EMBEDDING_COLUMN = sql.SQL("ALTER TABLE chunks ADD COLUMN embedding vector({})")

# Cosine HNSW: our embedders normalise; the spec ranks by cosine.
CREATE_EMBEDDING_INDEX = """
CREATE INDEX chunks_embedding_hnsw ON chunks USING hnsw (embedding vector_cosine_ops)
"""

RECORD_EMBEDDING_INDEX = """
INSERT INTO index_settings VALUES ('embedding_model', %s), ('embedding_dimension', %s)
"""

# --- maintenance: {} = a table, an Identifier ---------------------------------------
ANALYZE_TABLE = sql.SQL("ANALYZE {}")
# Refused by PostgreSQL inside a transaction: run on an autocommit connection.
VACUUM_ANALYZE_TABLE = sql.SQL("VACUUM (ANALYZE) {}")
REINDEX_TABLE = sql.SQL("REINDEX TABLE CONCURRENTLY {}")
COUNT_ROWS = sql.SQL("SELECT count(*) FROM {}")

# Bytes on disk per table, its indexes and TOAST included.
RELATION_SIZES = """
SELECT t, pg_total_relation_size(to_regclass(t)) FROM unnest(%s::text[]) AS t
"""

# Two index lookups (corpus_stats by tenant, the newest ingest through
# documents_tenant_ingested): O(log n), not a scan per query.
INDEX_REVISION = """
SELECT (SELECT chunk_count FROM corpus_stats WHERE tenant = %(t)s),
       (SELECT extract(epoch FROM max(ingested_at)) FROM documents
        WHERE tenant = %(t)s)
"""

# --- inventory: by tenant, for ingest's pruning and for evaluation ------------------
# %s is a LIKE pattern whose own wildcards the caller escaped.
DOCUMENTS_UNDER_URI = """
SELECT id, source_uri FROM documents
WHERE tenant = %s AND source_uri LIKE %s
ORDER BY id
"""

CHUNK_SOURCES = "SELECT id, source_id FROM chunks WHERE tenant = %s"
