"""The two search channels and the scoped fetches that follow them.

Access control is part of every statement's SQL (``WHERE`` on the chunk row, from
:class:`~.scope.AccessScope`), so unauthorised rows never reach a ranker.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg import sql
from psycopg.rows import dict_row

from retrieval_pipeline.tools.store import sql as q
from retrieval_pipeline.tools.store import sql_admin as qa
from retrieval_pipeline.tools.store import sql_documents as qd
from retrieval_pipeline.tools.store.connection import StoreConnection
from retrieval_pipeline.tools.store.records import revision_label
from retrieval_pipeline.tools.store.replicas import replica_read
from retrieval_pipeline.tools.store.scope import AccessScope
from retrieval_pipeline.tools.store.vectors import parse_vector, vector_literal

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


class StoreSearch(StoreConnection):
    """The store's channels and fetches (a part of :class:`~.store.Store`)."""

    @replica_read
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
        documents: dict[str, str] | None = None,
    ) -> list[tuple[str, float, int]]:
        """BM25 over postings, OR semantics: (chunk id, score, identifier hits).

        While the query's lexemes have at most ``exhaustive_postings`` postings in
        the tenant, every one is scored (exact). Past that, a document scope scores
        just its own chunks (exact), and an unscoped query reads each lexeme's
        strongest postings within ``read_budget`` from the impact-ordered index and
        re-scores the best candidates exactly (approximate, bounded cost).
        ``exhaustive_postings=None`` always scores exhaustively. ``stats``, when
        given, receives the mode, the postings the query touches, ``chunks`` (the
        tenant's chunk count) and ``revision`` (the index revision, as
        :meth:`index_revision` spells it), read in the same statement as the
        weights, whatever the query's words. ``documents``, when given, receives
        each returned chunk's internal document id.
        """
        with self.read_connection() as conn, conn.pipeline(), conn.transaction():
            # Both statements run on generic plans: planning them (custom plans
            # for their array parameters) cost more PostgreSQL CPU than running them
            # on the tenants we measured. In pipeline mode BEGIN and the setting
            # travel with the weights: three round trips with COMMIT (two in
            # autocommit), and less time in all (test_round_trips, docs/scaling.md).
            conn.execute(qa.GENERIC_PLANS)
            terms = conn.execute(
                q.QUERY_WEIGHTS,
                {
                    "query": query,
                    "identifiers": list(identifiers),
                    "tenant": scope.tenant,
                },
                prepare=True,
            ).fetchall()
            # No early return when no lexeme occurs in the tenant: the scorer runs
            # over nothing, so a word found nowhere costs the same round trip as a
            # word found only in chunks the caller cannot see (issue 15; measured
            # by bench/side_channels.py).
            corpus = next(t for t in terms if t[0] == "corpus")
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
                "avgdl": float(corpus[4]),
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
            rows = conn.execute(statement, params, prepare=True).fetchall()
        if stats is not None:
            stats.update(
                mode=mode,
                postings=postings,
                chunks=int(corpus[5]),
                revision=revision_label(corpus[5], corpus[6]),
            )
        if documents is not None:
            documents.update((r[0], r[3]) for r in rows)
        return [(r[0], float(r[2]), int(r[1])) for r in rows]

    def search_dense(
        self,
        embedding: Sequence[float],
        scope: AccessScope,
        *,
        depth: int,
        ef_search: int,
        tenant_chunks: int | None = None,
        documents: dict[str, str] | None = None,
    ) -> list[tuple[str, float]]:
        """Cosine nearest neighbours that pass the scope's filters, full depth.

        ``tenant_chunks`` (the tenant's chunk count, when the caller knows it) below
        ``depth`` goes straight to the exact scan: an index walk could not fill the
        page, so it would be followed by that scan anyway. ``documents``, when
        given, receives each returned chunk's internal document id.
        """
        params = scope.params() | {
            "embedding": vector_literal(embedding),
            "depth": depth,
        }
        exact = scope.doc_keys is not None or (
            tenant_chunks is not None and tenant_chunks < depth
        )
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
        if documents is not None:
            documents.update((r[0], r[2]) for r in rows)
        return [(r[0], float(r[1])) for r in rows]

    @replica_read
    def _dense(
        self,
        statement: sql.Composed,
        params: dict[str, Any],
        exact: bool,
        depth: int,
        ef_search: int,
    ) -> list[tuple[Any, ...]]:
        iterative = not exact and self.pgvector_version() >= (0, 8)
        with self.read_connection() as conn:
            if exact:  # no index settings: one statement, no transaction around it
                return conn.execute(statement, params).fetchall()
            # The SET LOCALs end with the transaction (pooler-safe). In pipeline
            # mode BEGIN, the settings and the walk travel together in one round
            # trip, and COMMIT a second (five before).
            with conn.pipeline(), conn.transaction():
                conn.execute(
                    qa.SET_EF_SEARCH.format(sql.Literal(max(ef_search, depth)))
                )
                if iterative:
                    # Keep walking the graph until `depth` rows pass the filters
                    # (pgvector 0.8); older versions return short lists under filters.
                    conn.execute(qa.SET_ITERATIVE_SCAN)
                return conn.execute(statement, params).fetchall()

    @replica_read
    def document_metadata(
        self, document_ids: Sequence[str]
    ) -> dict[str, dict[str, Any]]:
        """Metadata by internal document id (callers pass ids they already may see)."""
        with self.read_connection() as conn:
            rows = conn.execute(qd.DOCUMENT_METADATA, (list(document_ids),)).fetchall()
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
                qd.CHUNK_EMBEDDINGS, (list(chunk_ids), model, model)
            ).fetchall()
        return {r[0]: list(parse_vector(r[1])) for r in rows}

    @replica_read
    def documents_by_source_ids(
        self, source_ids: Sequence[str], scope: AccessScope
    ) -> list[dict[str, Any]]:
        """Whole documents by their own ids, filtered by the scope's tenant and ACL."""
        params = scope.params() | {"source_ids": list(source_ids)}
        with self.read_connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            return list(cur.execute(qd.DOCUMENTS_BY_SOURCE_IDS, params).fetchall())

    @replica_read
    def fetch_chunks(
        self, chunk_ids: Sequence[str], scope: AccessScope
    ) -> dict[str, dict[str, Any]]:
        """Return chunk rows with provenance by id (re-checking the scope's filters)."""
        if not chunk_ids:
            return {}
        statement = q.FETCH_CHUNKS.format(filters=scope.filters())
        params = scope.params() | {"chunk_ids": list(chunk_ids)}
        with self.read_connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            rows = cur.execute(statement, params).fetchall()
        return {row["id"]: row for row in rows}

    @replica_read
    def chunk_documents(
        self, chunk_ids: Sequence[str], scope: AccessScope
    ) -> dict[str, str]:
        """Internal document id by chunk id, for the chunks the scope may see."""
        if not chunk_ids:
            return {}
        statement = q.CHUNK_DOCUMENTS.format(filters=scope.filters())
        params = scope.params() | {"chunk_ids": list(chunk_ids)}
        with self.read_connection() as conn:
            return dict(conn.execute(statement, params).fetchall())
