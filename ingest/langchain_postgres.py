"""Import from langchain-postgres: a ``PGVector`` collection or ``PGVectorStore`` table.

Reads rows with plain SQL (psycopg, parameterised, identifiers quoted), so it needs
neither SQLAlchemy nor langchain-postgres itself:

- ``PGVector`` (``langchain_pg_collection`` / ``langchain_pg_embedding``):
  ``--collection NAME``;
- ``PGVectorStore`` / ``PGEngine`` tables: ``--table NAME`` (columns ``langchain_id``,
  ``content``, ``embedding``, ``langchain_metadata`` by default; any other columns
  are metadata columns and join the metadata).

Each row becomes one document whose id is the row id (the id LangChain gave it), and
one chunk: rows are already chunks (the user's splitter made them), so they are not
split again.
Metadata maps onto provenance: ``source`` -> source URI and path, ``title`` -> title
(else the source's file name), ``updated_at`` / ``last_modified`` / ``created_at`` ->
timestamps.

Access control follows the same fail-closed rules as file ingestion, through the same
function (:func:`retrieval_pipeline.ingest.loaders.resolve_access`):

- ``principals`` (a list of non-empty strings, or a comma-separated string; ``acl``
  is an alias) restricts the row; the CLI's ``--principals`` applies to rows without
  it, and a row's own principals replace that default. ``public: true`` makes a row
  public explicitly.
- An explicitly empty or malformed ACL (``""``, ``[]``, null, a blank or non-string
  item, another type), both ``principals`` and ``acl``, ``public`` beside either, or
  an unknown key that looks like access control (``groups``, ``roles``,
  ``allowed_*``, ``readers``, ``permissions``, ...) fails that row: it is reported as
  ``<origin>/<row id>`` with the reason, not imported, and the import goes on.
- ``--tenant`` is a boundary: a row whose ``tenant`` names another tenant (``""``
  included) fails; one naming the same tenant, or none, is imported into it. Without
  ``--tenant`` a row's own ``tenant`` is used.

The keys stay in the imported document's metadata as they were.

Stored vectors are reused (no embedding call) when the collection's embedding model
matches ours (``--embedding-model``, else the collection's ``embedding_model``
metadata) and so does the dimension; otherwise the row is re-embedded. The import is
idempotent and incremental: a row whose content and metadata are unchanged is skipped;
``prune`` removes documents whose row is gone.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import PurePosixPath
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from retrieval_pipeline.errors import (
    ConfigurationError,
    DatabaseUnavailableError,
    IngestError,
)
from retrieval_pipeline.ingest.job import Ingestor, IngestSummary
from retrieval_pipeline.ingest.loaders import (
    SourceDocument,
    read_principals,
    resolve_access,
)
from retrieval_pipeline.settings import redact_url
from retrieval_pipeline.tools.store.store import parse_vector

ORIGIN_KEY = "imported_from"
"""Document metadata key recording the import source (used by ``prune``)."""
TIMESTAMP_KEYS = ("updated_at", "last_modified", "modified", "lastmod")
BATCH_ROWS = 512


@dataclass(frozen=True)
class LangchainSource:
    """Where to read: a PGVector collection or a PGVectorStore table."""

    url: str
    collection: str | None = None
    table: str | None = None
    schema: str = "public"
    id_column: str = "langchain_id"
    content_column: str = "content"
    embedding_column: str = "embedding"
    metadata_column: str = "langchain_metadata"

    def __post_init__(self) -> None:
        if (self.collection is None) == (self.table is None):
            raise ConfigurationError(
                "name exactly one of a PGVector collection (--collection) or a "
                "PGVectorStore table (--table)"
            )

    @property
    def origin(self) -> str:
        """A stable name for this source (stored with every imported document)."""
        if self.collection is not None:
            return f"langchain-postgres:collection:{self.collection}"
        return f"langchain-postgres:table:{self.schema}.{self.table}"


@dataclass(frozen=True)
class _Row:
    id: str
    content: str
    metadata: dict[str, Any]
    embedding: tuple[float, ...] | None


def _connect(url: str) -> psycopg.Connection[Any]:
    plain = url.replace("postgresql+psycopg://", "postgresql://").replace(
        "postgresql+asyncpg://", "postgresql://"
    )
    try:
        return psycopg.connect(plain, connect_timeout=10)
    except psycopg.OperationalError as exc:
        raise DatabaseUnavailableError(
            f"cannot connect to {redact_url(plain)}: {str(exc).strip()}"
        ) from exc


def _vector(text: str | None) -> tuple[float, ...] | None:
    return parse_vector(text) if text else None


def _collection_statement(
    conn: psycopg.Connection[Any], source: LangchainSource
) -> tuple[dict[str, Any], sql.SQL, dict[str, Any]]:
    """A PGVector collection: its metadata and the statement reading its rows."""
    present = conn.execute(
        "SELECT to_regclass('langchain_pg_collection') IS NOT NULL"
        " AND to_regclass('langchain_pg_embedding') IS NOT NULL"
    ).fetchone()
    if not (present and present[0]):
        # A bare query would end in UndefinedTable and its traceback.
        raise ConfigurationError(
            f"no PGVector tables (langchain_pg_collection, langchain_pg_embedding) "
            f"in {redact_url(source.url)}; is this the right database, or is the "
            "store a plain table (--table)?"
        )
    found = conn.execute(
        "SELECT uuid, cmetadata FROM langchain_pg_collection WHERE name = %s",
        (source.collection,),
    ).fetchone()
    if found is None:
        names = [
            r[0]
            for r in conn.execute(
                "SELECT name FROM langchain_pg_collection ORDER BY name"
            )
        ]
        listed = ", ".join(names) or "none"
        raise ConfigurationError(
            f"no PGVector collection '{source.collection}' in "
            f"{redact_url(source.url)}; collections: {listed}"
        )
    statement = sql.SQL(
        "SELECT id::text AS id, document AS content, cmetadata AS metadata,"
        " embedding::text AS embedding FROM langchain_pg_embedding"
        " WHERE collection_id = %(collection)s ORDER BY id"
    )
    return dict(found[1] or {}), statement, {"collection": found[0]}


def _table_statement(
    conn: psycopg.Connection[Any], source: LangchainSource
) -> sql.Composed:
    """A plain table's rows; its other columns come along as metadata."""
    columns = _table_columns(conn, source)
    known = {
        source.id_column,
        source.content_column,
        source.embedding_column,
        source.metadata_column,
    }
    extra = [c for c in columns if c not in known]
    has_json = source.metadata_column in columns
    return sql.SQL(
        "SELECT {id}::text AS id, {content} AS content, {meta} AS metadata,"
        " {embedding}::text AS embedding{extra} FROM {table} ORDER BY 1"
    ).format(
        id=sql.Identifier(source.id_column),
        content=sql.Identifier(source.content_column),
        meta=sql.Identifier(source.metadata_column)
        if has_json
        else sql.SQL("NULL::json"),
        embedding=sql.Identifier(source.embedding_column),
        extra=sql.SQL("").join(
            sql.SQL(", {}").format(sql.Identifier(c)) for c in extra
        ),
        table=sql.Identifier(source.schema, str(source.table)),
    )


def _rows(source: LangchainSource) -> tuple[dict[str, Any], Iterator[_Row]]:
    """The collection's metadata and an iterator over its rows (server-side cursor)."""
    conn = _connect(source.url)
    statement: sql.SQL | sql.Composed
    try:
        if source.collection is not None:
            collection_meta, statement, params = _collection_statement(conn, source)
        else:
            collection_meta, params = {}, {}
            statement = _table_statement(conn, source)
    except BaseException:
        conn.close()
        raise

    def iterate() -> Iterator[_Row]:
        try:
            with conn.cursor(name="rp_import", row_factory=dict_row) as cur:
                cur.itersize = BATCH_ROWS
                cur.execute(statement, params)
                for record in cur:
                    metadata = record.pop("metadata") or {}
                    if isinstance(metadata, str):
                        metadata = json.loads(metadata)
                    extras = {
                        k: v
                        for k, v in record.items()
                        if k not in ("id", "content", "embedding") and v is not None
                    }
                    yield _Row(
                        id=str(record["id"]),
                        content=record["content"] or "",
                        metadata={**extras, **dict(metadata)},
                        embedding=_vector(record["embedding"]),
                    )
        finally:
            conn.close()

    return collection_meta, iterate()


def _table_columns(conn: psycopg.Connection[Any], source: LangchainSource) -> list[str]:
    rows = conn.execute(
        "SELECT column_name FROM information_schema.columns"
        " WHERE table_schema = %s AND table_name = %s ORDER BY ordinal_position",
        (source.schema, source.table),
    ).fetchall()
    columns = [r[0] for r in rows]
    if not columns:
        raise ConfigurationError(
            f"no table {source.schema}.{source.table} in {redact_url(source.url)}"
        )
    for needed in (source.id_column, source.content_column, source.embedding_column):
        if needed not in columns:
            raise ConfigurationError(
                f"table {source.schema}.{source.table} has no column '{needed}' "
                f"(columns: {', '.join(columns)})"
            )
    return columns


def _same_model(declared: str | None, ours: str) -> bool:
    if not declared:
        return False
    short = ours.rsplit("/", 1)[-1].casefold()
    return declared.casefold() in (ours.casefold(), short)


def _timestamp(metadata: Mapping[str, Any], keys: Sequence[str]) -> datetime | None:
    for key in keys:
        value = metadata.get(key)
        if isinstance(value, int | float):
            return datetime.fromtimestamp(value, UTC)
        if isinstance(value, str):
            try:
                parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                continue
            return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    return None


def parse_principals(value: Any, default: Sequence[str] = ()) -> tuple[str, ...]:
    """ACL principals from a metadata value: a list or a comma-separated string.

    ``None`` means the key is absent and returns ``default`` (sorted, de-duplicated).
    Any other value goes through ``loaders.read_principals``: an empty or malformed
    value (``""``, ``[]``, blanks, a non-string or empty item) raises ``ValueError``
    instead of yielding a public document. Callers holding the whole metadata should
    prefer ``loaders.resolve_access``, which also applies the ``acl`` alias,
    ``public``, unknown look-alike keys and the tenant boundary.
    """
    if value is None:
        return tuple(sorted(set(default)))
    return read_principals(value)


def to_source_document(
    row: _Row,
    source: LangchainSource,
    *,
    tenant: str,
    principals: Sequence[str],
    reuse_vectors: bool,
) -> SourceDocument:
    """Map one langchain-postgres row onto a document (provenance + ACL).

    Raises:
        IngestError: the row's access control is unusable (see the module docstring);
            the error names the row as ``<origin>/<row id>``.
    """
    meta = dict(row.metadata)
    access = resolve_access(
        f"{source.origin}/{row.id}", meta, tenant=tenant, principals=principals
    )
    origin_uri = str(meta.get("source") or "")
    title = str(
        meta.get("title") or (PurePosixPath(origin_uri).name if origin_uri else "")
    )
    return SourceDocument(
        source_id=row.id,
        title=title,
        path=origin_uri,
        source_uri=origin_uri or f"{source.origin}/{row.id}",
        content=row.content,
        body_start=0,
        kind="langchain",
        tenant=access.tenant,
        principals=access.principals,
        created_at=_timestamp(meta, ("created_at",)),
        updated_at=_timestamp(meta, TIMESTAMP_KEYS + ("created_at",)),
        metadata={**meta, ORIGIN_KEY: source.origin},
        embedding=row.embedding if reuse_vectors else None,
        embedding_origin=source.origin,
    )


def import_langchain_postgres(
    ingestor: Ingestor,
    source: LangchainSource,
    *,
    tenant: str = "",
    principals: Sequence[str] = (),
    embedding_model: str | None = None,
    prune: bool = False,
) -> IngestSummary:
    """Import a PGVector collection or PGVectorStore table (see the module docstring).

    Args:
        ingestor: the ingestor (its store and embedder) to import into.
        source: where to read.
        tenant: the tenant rows are imported into; when set, a row naming another
            tenant fails (without it, a row's own tenant is used).
        principals: ACL principals for rows whose metadata names none.
        embedding_model: the model that made the stored vectors (default: the
            collection's ``embedding_model`` metadata); vectors are reused only when
            it matches ours.
        prune: delete previously imported documents whose row is gone.
    """
    collection_meta, rows = _rows(source)
    declared = embedding_model or collection_meta.get("embedding_model")
    reuse = _same_model(declared, ingestor.embedder.model)
    summary = IngestSummary()
    documents: list[SourceDocument] = []
    seen_ids: set[str] = set()
    for row in rows:
        seen_ids.add(row.id)
        if not row.content.strip():
            summary.fail(f"{source.origin}/{row.id}", "empty content")
            continue
        try:
            documents.append(
                to_source_document(
                    row,
                    source,
                    tenant=tenant,
                    principals=principals,
                    reuse_vectors=reuse,
                )
            )
        except IngestError as exc:
            summary.fail(exc.path, exc.reason)
    result = ingestor.ingest_documents(documents)
    result.failures[:0] = summary.failures
    if prune:
        result.removed = ingestor.store.delete_imported(
            source.origin, keep_source_ids=sorted(seen_ids)
        )
    return result
