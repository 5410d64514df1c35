"""Atomic document writes: each document is fully old or fully new, never a mixture.

A document replaces its previous revision, chunks, postings, BM25 statistics and
graph evidence in one transaction. The scoped writes of the vector-store API check,
with the rows locked in that transaction, what they replace. A record the database
refuses becomes a :class:`~retrieval_pipeline.errors.RecordRejectedError` once the
transaction has rolled back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from retrieval_pipeline.errors import RecordRejectedError
from retrieval_pipeline.tools.store import sql as q
from retrieval_pipeline.tools.store import sql_admin as qa
from retrieval_pipeline.tools.store import sql_documents as qd
from retrieval_pipeline.tools.store.connection import StoreConnection
from retrieval_pipeline.tools.store.graph_writes import write_graph
from retrieval_pipeline.tools.store.records import DocumentRecord
from retrieval_pipeline.tools.store.scope import AccessScope
from retrieval_pipeline.tools.store.vectors import format_vector


@contextmanager
def rejected_records(docs: Sequence[DocumentRecord]) -> Iterator[None]:
    """Turn the driver's refusal of a record into the project's error.

    Used outside the write's transaction, so the error is raised after the rollback:
    nothing of the refused write is stored. Data and integrity errors are the
    record's fault (a NUL character in text, a duplicate id); anything else (a lost
    connection, a timeout) is not and passes through.
    """
    try:
        yield
    except (psycopg.DataError, psycopg.IntegrityError) as exc:
        raise RecordRejectedError(
            str(exc), tuple(doc.source_id for doc in docs)
        ) from exc


class StoreWrites(StoreConnection):
    """The store's document writes (a part of :class:`~.store.Store`)."""

    def document_revisions(
        self, document_ids: Sequence[str]
    ) -> dict[str, tuple[str, str]]:
        """(revision, embedding model) of those of ``document_ids`` that are stored."""
        with self.connection() as conn:
            rows = conn.execute(q.DOCUMENT_REVISIONS, (list(document_ids),)).fetchall()
        return {row[0]: (row[1], row[2]) for row in rows}

    def site_boilerplate(
        self, tenants: Sequence[str]
    ) -> dict[tuple[str, str], frozenset[str]]:
        """Remembered boilerplate lines by (tenant, directory URI)."""
        if not tenants:
            return {}
        with self.connection() as conn:
            rows = conn.execute(q.SITE_BOILERPLATE, (sorted(set(tenants)),))
            return {(r[0], r[1]): frozenset(r[2]) for r in rows}

    def save_site_boilerplate(
        self, tenant: str, root_uri: str, lines: Sequence[str], pages: int
    ) -> None:
        """Remember the boilerplate lines counted on ``pages`` pages under a root."""
        with self.connection() as conn:
            conn.execute(
                q.SAVE_SITE_BOILERPLATE,
                {
                    "root_uri": root_uri,
                    "tenant": tenant,
                    "lines": Jsonb(sorted(lines)),
                    "pages": pages,
                },
            )

    def linked_pages(
        self, pages: Sequence[tuple[str, str, str]], relation: str
    ) -> set[tuple[str, str]]:
        """The pages another stored document has a ``relation`` to.

        ``pages`` are (tenant, entity id, document id); returns (tenant, entity id).
        """
        if not pages:
            return set()
        tenants, entities, documents = [list(c) for c in zip(*pages, strict=True)]
        with self.connection() as conn:
            rows = conn.execute(
                q.LINKED_PAGES, (tenants, entities, documents, relation)
            ).fetchall()
        return {(r[0], r[1]) for r in rows}

    def stored_source_uris(
        self, documents: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], str]:
        """The source URI of each stored (tenant, source id) of ``documents``."""
        if not documents:
            return {}
        tenants, ids = [list(column) for column in zip(*documents, strict=True)]
        with self.connection() as conn:
            rows = conn.execute(q.SOURCES_OF_DOCUMENTS, (tenants, ids)).fetchall()
        return {(r[0], r[1]): r[2] for r in rows}

    def stored_source_ids(
        self, sources: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], list[tuple[str, str]]]:
        """The stored (source id, path) of each (tenant, source_uri) that has any."""
        if not sources:
            return {}
        tenants, uris = [list(column) for column in zip(*sources, strict=True)]
        with self.connection() as conn:
            rows = conn.execute(q.DOCUMENTS_OF_SOURCES, (tenants, uris)).fetchall()
        found: dict[tuple[str, str], list[tuple[str, str]]] = {}
        for tenant, uri, source_id, path in rows:
            found.setdefault((tenant, uri), []).append((source_id, path))
        return {key: sorted(ids) for key, ids in found.items()}

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
        with rejected_records(docs), self.connection() as conn, conn.transaction():
            conn.execute(qa.ASYNC_COMMIT)
            self._replace_documents(conn, docs)

    def delete_document(self, document_id: str, *, tenant: str | None = None) -> bool:
        """Delete a document, its chunks, postings and graph evidence.

        ``tenant``, when the caller knows it, keeps the delete on that tenant's
        shard; without it the tenant is looked up by id first (every shard).
        """
        with self.connection() as conn, conn.transaction():
            if tenant is not None:
                return self._delete_documents(conn, tenant, [document_id]) > 0
            return self._delete_by_id(conn, [document_id]) > 0

    def delete_imported(self, origin: str, *, keep_source_ids: Sequence[str]) -> int:
        """Delete documents imported from ``origin`` whose source id is not kept."""
        with self.connection() as conn, conn.transaction():
            rows = conn.execute(
                qd.IMPORTED_NOT_KEPT, (origin, list(keep_source_ids))
            ).fetchall()
            return self._delete_by_id(conn, [r[0] for r in rows])

    def _delete_by_id(self, conn: psycopg.Connection[Any], ids: list[str]) -> int:
        """Delete documents by id alone: find their tenants, then delete per tenant."""
        tenants = conn.execute(q.DOCUMENT_TENANTS, {"document_ids": ids}).fetchall()
        return sum(self._delete_documents(conn, t, list(ids)) for t, ids in tenants)

    def _delete_documents(
        self, conn: psycopg.Connection[Any], tenant: str, ids: list[str]
    ) -> int:
        """Delete one tenant's documents, their statistics first (its shard alone).

        Documents not stored yet (a first ingest) have nothing to delete: the
        statements run only for the ids that exist.
        """
        params = {"tenant": tenant, "document_ids": ids}
        stored = [r[0] for r in conn.execute(q.STORED_DOCUMENTS, params)]
        if not stored:
            return 0
        params = {"tenant": tenant, "document_ids": stored}
        conn.execute(q.SUBTRACT_TERM_STATS, params)
        conn.execute(q.SUBTRACT_CORPUS_STATS, params)
        conn.execute(q.CLEAR_HOME_DOCUMENTS, params)
        return conn.execute(q.DELETE_DOCUMENTS, params).rowcount

    def _replace_documents(
        self, conn: psycopg.Connection[Any], docs: Sequence[DocumentRecord]
    ) -> None:
        """Delete and rewrite ``docs``, one tenant at a time in tenant order.

        Every statement names one tenant, so on a cluster distributed by tenant it
        runs on that tenant's shard alone (docs/scaling.md).
        """
        by_tenant: dict[str, list[DocumentRecord]] = {}
        for doc in docs:
            by_tenant.setdefault(doc.tenant, []).append(doc)
        for tenant in sorted(by_tenant):
            group = by_tenant[tenant]
            self._delete_documents(conn, tenant, [doc.id for doc in group])
            self._insert_documents(conn, tenant, group)

    def _insert_documents(
        self,
        conn: psycopg.Connection[Any],
        tenant: str,
        docs: Sequence[DocumentRecord],
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
                            format_vector(chunk.embedding),
                            chunk.page_start,
                            chunk.page_end,
                        )
                    )
        params = {"tenant": tenant, "document_ids": [doc.id for doc in docs]}
        conn.execute(q.INSERT_POSTINGS, params)
        conn.execute(q.SET_LEXEME_COUNTS, params)
        conn.execute(q.ADD_TERM_STATS, params)
        conn.execute(q.ADD_CORPUS_STATS, params)
        for doc in docs:
            self._write_graph(conn, doc)

    def _write_graph(self, conn: psycopg.Connection[Any], doc: DocumentRecord) -> None:
        # A method of its own so that the crash tests can fail a write after its
        # chunks were copied (tests/integration/test_ingest.py, test_faults.py).
        write_graph(conn, doc)

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
            self._delete_documents(conn, scope.tenant, visible)
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
        with rejected_records(docs), self.connection() as conn, conn.transaction():
            conn.execute(qa.ASYNC_COMMIT)
            rows = conn.execute(
                q.STORED_DOCUMENT_ACCESS_FOR_UPDATE,
                scope.params() | {"document_ids": [doc.id for doc in docs]},
            ).fetchall()
            check({r[0]: tuple(r[2]) if r[1] else None for r in rows})
            self._replace_documents(conn, docs)
