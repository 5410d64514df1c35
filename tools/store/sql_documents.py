"""Named statements on documents outside the ranked channels: fetches and imports.

Every value is a bound parameter. A statement a caller reaches with a scope applies
the same tenant and ACL predicates as the channels (``sql.py``); the rest take ids
the caller was already allowed to see.
"""

from __future__ import annotations

from psycopg import sql

from retrieval_pipeline.tools.store.sql import ACL_FILTER, TENANT_FILTER

# --- fetches by id ------------------------------------------------------------------
DOCUMENT_METADATA = "SELECT id, metadata FROM documents WHERE id = ANY(%s::text[])"

# Stored vectors, optionally only those one model made (ingest reuses them).
CHUNK_EMBEDDINGS = """
SELECT id, embedding::text FROM chunks
WHERE id = ANY(%s::text[]) AND (%s::text IS NULL OR embedding_model = %s)
"""

# Whole documents by their own ids, in the order asked, that the caller may see.
DOCUMENTS_BY_SOURCE_IDS = sql.SQL(
    """
SELECT d.source_id, d.content, d.metadata FROM documents d
WHERE d.source_id = ANY(%(source_ids)s::text[]) AND {filters}
ORDER BY array_position(%(source_ids)s::text[], d.source_id)
"""
).format(filters=sql.SQL(f"{TENANT_FILTER} AND {ACL_FILTER}".format(a="d")))

# --- imports ------------------------------------------------------------------------
# Documents imported from one origin whose own id is not among those kept.
IMPORTED_NOT_KEPT = """
SELECT id FROM documents
WHERE metadata->>'imported_from' = %s AND NOT (source_id = ANY(%s::text[]))
"""

# --- entity linking: the document scope of a relink, for ``sql.CHUNKS_FOR_LINKING``
# and ``sql.DELETE_EXTRACTED_MENTIONS`` (their ``{scope}``); empty relinks the tenant.
LINKING_CHUNK_SCOPE = "AND c.document_id = ANY(%(doc_keys)s::text[])"
LINKING_MENTION_SCOPE = "AND m.document_id = ANY(%(doc_keys)s::text[])"
