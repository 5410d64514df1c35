"""Named SQL statements. Every value is a bound parameter; never format user input in.

Filter fragments are composed with :mod:`psycopg.sql` from constants only, so a
scoped query gets a plan that can use the scope's index instead of a generic
``param IS NULL OR ...`` plan that cannot.

Here: the channels, ingestion and graph writes. The statements that set up and look
after the database are in ``sql_admin.py``; fetches and imports in
``sql_documents.py``.
"""

from __future__ import annotations

from psycopg import sql

# --- access control: applied to the chunk row in every channel, before ranking ------
TENANT_FILTER = "{a}.tenant = %(tenant)s"
# A chunk without principals is public; otherwise the caller must hold one of them.
ACL_FILTER = "({a}.acl = '{{}}'::text[] OR {a}.acl && %(principals)s::text[])"
SCOPE_FILTER = "{a}.document_id = ANY(%(doc_keys)s::text[])"
# Document metadata filters (vector-store API): a document matches when its metadata
# contains any one of the given JSON objects.
METADATA_FILTER = (
    "({a}.document_id, {a}.tenant) IN (SELECT md.id, md.tenant FROM documents md"
    " WHERE md.tenant = %(tenant)s AND md.metadata @> ANY(%(metadata)s::jsonb[]))"
)
# Web-search exclusions (-term, -"phrase") with websearch_to_tsquery's own semantics;
# a constraint without lexemes (only stop words) constrains nothing.
_CONSTRAINT_QUERY = "websearch_to_tsquery('english'::regconfig, %(constraint)s)"
CONSTRAINT_FILTER = {
    "c": f"(numnode({_CONSTRAINT_QUERY}) = 0 OR c.tsv_prose @@ {_CONSTRAINT_QUERY})",
    "p": f"(numnode({_CONSTRAINT_QUERY}) = 0 OR (p.chunk_id, p.tenant) IN ("
    f"SELECT x.id, x.tenant FROM chunks x WHERE x.tenant = %(tenant)s"
    f" AND x.tsv_prose @@ {_CONSTRAINT_QUERY}))",
}

# --- lexical channel: BM25 from postings maintained at ingest -----------------------
# Okapi BM25 (Robertson & Zaragoza 2009) with Lucene's non-negative idf
# ln(1 + (N - df + 0.5) / (df + 0.5)). Candidates are an OR over the query's lexemes,
# so one absent word never empties the result. The query's lexemes and their idf are
# fetched first (a handful of rows, in one statement with the identifiers' weights),
# then passed as arrays, so the postings lookup is
# an index range scan per lexeme whatever the planner's statistics say; postings
# carry the chunk length, ACL and document, so scoring and filtering need no join.
# Identifiers (ERR_CONN_RESET, v2.3.1, getUserById) are a second field, matched
# unstemmed and whole: a chunk containing one of the query's identifiers gains that
# identifier's BM25 weight (idf over the tenant's chunks, tf 1) on top of its prose
# score. A rare identifier therefore puts its chunks first, while a common token
# that merely looks like one (CD4, interleukin-2) counts no more than its rarity.
QUERY_WEIGHTS = """
WITH newest AS (  -- the index revision's ingest time, from the same snapshot
    SELECT extract(epoch FROM max(ingested_at)) AS latest
    FROM documents WHERE tenant = %(tenant)s
)
SELECT 'prose' AS field, t.lexeme AS token,
       ln(1 + (greatest(cs.chunk_count, 1) - ts.df + 0.5) / (ts.df + 0.5)) AS idf,
       ts.df,
       NULL::float8 AS avgdl, NULL::bigint AS chunk_count,
       NULL::numeric AS latest_ingest
FROM (SELECT DISTINCT lexeme
      FROM unnest(to_tsvector('english'::regconfig, %(query)s))) AS t
JOIN term_stats ts ON ts.tenant = %(tenant)s AND ts.lexeme = t.lexeme AND ts.df > 0
JOIN corpus_stats cs ON cs.tenant = %(tenant)s
UNION ALL
SELECT 'identifier', i.token,
       ln(1 + (greatest(cs.chunk_count, 1) - d.df + 0.5) / (d.df + 0.5)),
       d.df, NULL, NULL, NULL
FROM (SELECT DISTINCT token FROM unnest(%(identifiers)s::text[]) AS token) AS i
CROSS JOIN LATERAL (
    SELECT count(*) AS df FROM chunks c
    WHERE c.tenant = %(tenant)s AND c.identifiers @> ARRAY[i.token]
) AS d
JOIN corpus_stats cs ON cs.tenant = %(tenant)s
WHERE d.df > 0
UNION ALL  -- always one row, whatever the query's words: the tenant's size and the
           -- index revision (a word found nowhere costs the same statements as one
           -- found only in chunks the caller cannot see; issue 15)
SELECT 'corpus', NULL, NULL, NULL,
       greatest(cs.total_length, 1)::float8 / greatest(cs.chunk_count, 1),
       coalesce(cs.chunk_count, 0), (SELECT latest FROM newest)
FROM (VALUES (1)) AS one (x) LEFT JOIN corpus_stats cs ON cs.tenant = %(tenant)s
"""

# A posting's BM25 term-frequency factor at the default k1 = 0.9, b = 0.4 and a
# reference chunk length of 100 lexemes: tf / (tf + k1 (1 - b) + k1 b len / 100).
# It orders a lexeme's postings from strongest to weakest evidence (an impact-ordered
# index, Anh & Moffat 2006); idf is constant within a lexeme, so only the order
# matters. Spelled exactly as in migration 004, so the planner matches the index.
IMPACT = "(p.tf::float8 / (p.tf::float8 + 0.54 + 0.0036 * p.doc_len::float8))"

_BM25_TERM = (
    "w.idf * p.tf * (%(k1)s + 1)"
    " / (p.tf + %(k1)s * (1 - %(b)s + %(b)s * p.doc_len / %(avgdl)s))"
)

# Exhaustive: every posting of every query lexeme. Exact; cost grows with the
# postings the query touches, so it is used while they fit the exhaustive budget.
_BM25_EXHAUSTIVE = f"""
bm25 AS (
    SELECT p.chunk_id, p.document_id, sum({_BM25_TERM}) AS score
    FROM weighted w
    JOIN chunk_terms p ON p.tenant = %(tenant)s AND p.lexeme = w.lexeme
    WHERE {{posting_filters}}
    GROUP BY p.chunk_id, p.document_id
)"""

# Exact BM25 of a known set of chunks: ``known`` is the part already summed from
# lexemes whose postings were read whole; every other (chunk, lexeme) is one
# primary-key probe, whatever the lexeme's document frequency. ``LIMIT 1`` (the key
# is unique) keeps the planner from flattening the probe into a join that scans
# whole posting lists.
_BM25_OF_POOL = f"""
bm25 AS (
    SELECT pool.chunk_id, pool.document_id,
           pool.known + coalesce(sum(x.term), 0) AS score
    FROM pool CROSS JOIN weighted w LEFT JOIN LATERAL (
        SELECT {_BM25_TERM} AS term
        FROM chunk_terms p
        WHERE NOT (w.complete AND pool.seeded)
          AND p.tenant = %(tenant)s AND p.lexeme = w.lexeme
          AND p.chunk_id = pool.chunk_id
        LIMIT 1
    ) AS x ON true
    GROUP BY pool.chunk_id, pool.document_id, pool.known
    HAVING pool.known > 0 OR count(x.term) > 0
)"""

# Impact-ordered (past the exhaustive budget, unscoped): each lexeme contributes its
# highest-impact postings up to its quota of the read budget (rare lexemes are read
# whole, common ones split the rest), the best partial sums are re-scored exactly
# over the lexemes not read whole, and identifier and phrase matches are always
# scored. Like an HNSW walk this is approximate: a chunk whose only matches are
# low-impact postings of common lexemes can be missed (its cost in quality against
# the exhaustive scorer is measured in bench/scale.py).
_POOL_PRUNED = f"""
seed AS MATERIALIZED (
    SELECT p.chunk_id, p.document_id,
           sum(CASE WHEN w.complete THEN {_BM25_TERM} ELSE 0 END) AS known
    FROM weighted w CROSS JOIN LATERAL (
        SELECT p.chunk_id, p.document_id, p.tf, p.doc_len
        FROM chunk_terms p
        WHERE p.tenant = %(tenant)s AND p.lexeme = w.lexeme AND {{posting_filters}}
        ORDER BY {IMPACT} DESC
        LIMIT w.quota
    ) AS p
    GROUP BY p.chunk_id, p.document_id
    ORDER BY sum({_BM25_TERM}) DESC, p.chunk_id
    LIMIT %(rescore)s
),
pool AS (
    SELECT chunk_id, document_id, known, true AS seeded FROM seed
    UNION ALL
    SELECT chunk_id, document_id, 0::float8, false
    FROM (SELECT chunk_id, document_id FROM exact
          UNION SELECT chunk_id, document_id FROM phrased) AS matched
    WHERE chunk_id NOT IN (SELECT chunk_id FROM seed)
),"""

# A document scope past the exhaustive budget: the scope's own chunks, scored exactly.
_POOL_SCOPED = """
pool AS (
    SELECT c.id AS chunk_id, c.document_id, 0::float8 AS known, false AS seeded
    FROM chunks c WHERE {filters}
),"""

_LEXICAL = """
WITH weighted AS (
    SELECT * FROM unnest(%(lexemes)s::text[], %(idfs)s::float8[], %(quotas)s::int[],
                         %(completes)s::bool[]) AS w(lexeme, idf, quota, complete)
),
exact AS MATERIALIZED (  -- the identifier field: whole, unstemmed tokens
    SELECT c.id AS chunk_id, c.document_id, count(*) AS hits,
           sum(i.idf) * (%(k1)s + 1)
               / (1 + %(k1)s * (1 - %(b)s + %(b)s * c.lexeme_count / %(avgdl)s))
               AS score
    FROM chunks c
    JOIN unnest(%(identifiers)s::text[], %(identifier_idfs)s::float8[])
        AS i(token, idf) ON c.identifiers @> ARRAY[i.token]
    WHERE cardinality(%(identifiers)s::text[]) > 0
      AND c.identifiers && %(identifiers)s::text[] AND {filters}
    GROUP BY c.id, c.document_id, c.lexeme_count
),
phrased AS MATERIALIZED (  -- chunks containing every quoted phrase rank first
    SELECT c.id AS chunk_id, c.document_id
    FROM chunks c
    WHERE %(phrases)s::text IS NOT NULL
      AND c.tsv_prose @@ websearch_to_tsquery('english'::regconfig, %(phrases)s)
      AND {filters}
),
POOL_AND_BM25
SELECT coalesce(b.chunk_id, e.chunk_id) AS chunk_id,
       coalesce(e.hits, 0) AS identifier_hits,
       coalesce(b.score, 0) + coalesce(e.score, 0) AS score,
       coalesce(b.document_id, e.document_id) AS document_id
FROM bm25 b FULL OUTER JOIN exact e ON e.chunk_id = b.chunk_id
LEFT JOIN phrased ph ON ph.chunk_id = coalesce(b.chunk_id, e.chunk_id)
-- Quoted phrases are the caller's explicit syntax: their chunks come first. Scores
-- equal to 1e-9 are ties (sums taken in another order differ in the last bits),
-- broken by chunk id, so every mode ranks a tie the same way.
ORDER BY (ph.chunk_id IS NOT NULL) DESC,
         round((coalesce(b.score, 0) + coalesce(e.score, 0)) * 1e9) DESC, chunk_id
LIMIT %(depth)s
"""

LEXICAL_BM25 = {
    "exhaustive": sql.SQL(_LEXICAL.replace("POOL_AND_BM25", _BM25_EXHAUSTIVE.lstrip())),
    "impact": sql.SQL(
        _LEXICAL.replace("POOL_AND_BM25", _POOL_PRUNED.lstrip() + _BM25_OF_POOL)
    ),
    "scoped": sql.SQL(
        _LEXICAL.replace("POOL_AND_BM25", _POOL_SCOPED.lstrip() + _BM25_OF_POOL)
    ),
}

# --- dense channel: pgvector cosine distance over the HNSW index --------------------
# Ordered by distance alone so the HNSW index is usable; ties are broken by chunk id
# after the fetch. The outer re-sort makes relaxed-order iterative scans exact.
DENSE_INDEXED = sql.SQL(
    """
SELECT chunk_id, 1 - distance AS score, document_id FROM (
    SELECT c.id AS chunk_id, c.document_id,
           c.embedding <=> %(embedding)s::vector AS distance
    FROM chunks c
    WHERE {filters}
    ORDER BY c.embedding <=> %(embedding)s::vector
    LIMIT %(depth)s
) AS nearest
ORDER BY distance, chunk_id
"""
)

# When the allowed set is small (a document scope), an exact scan over just those
# rows is both faster and complete; a graph index walk would mostly skip them.
DENSE_EXACT = sql.SQL(
    """
WITH allowed AS MATERIALIZED (
    SELECT c.id, c.document_id, c.embedding FROM chunks c WHERE {filters}
)
SELECT id AS chunk_id, 1 - (embedding <=> %(embedding)s::vector) AS score,
       document_id
FROM allowed
ORDER BY embedding <=> %(embedding)s::vector, id
LIMIT %(depth)s
"""
)

FETCH_CHUNKS = sql.SQL(
    """
SELECT c.id, c.document_id, c.source_id, c.tenant, c.ordinal, c.heading_path, c.body,
       c.content, c.char_start, c.char_end, c.token_count, c.revision, c.source_uri,
       c.parser_version, c.embedding_model, c.embedding_version, c.updated_at,
       c.page_start, c.page_end, d.title, d.path
FROM chunks c JOIN documents d ON d.id = c.document_id AND d.tenant = c.tenant
WHERE c.id = ANY(%(chunk_ids)s::text[]) AND {filters}
"""
)

CHUNK_DOCUMENTS = sql.SQL(
    "SELECT c.id, c.document_id FROM chunks c"
    " WHERE c.id = ANY(%(chunk_ids)s::text[]) AND {filters}"
)

# --- ingestion ----------------------------------------------------------------------
DOCUMENT_REVISIONS = """
SELECT id, revision, embedding_model FROM documents WHERE id = ANY(%s::text[])
"""

# Site boilerplate of earlier ingests (migration 009), for some tenants.
SITE_BOILERPLATE = """
SELECT tenant, root_uri, lines FROM site_boilerplate WHERE tenant = ANY(%s::text[])
"""

SAVE_SITE_BOILERPLATE = """
INSERT INTO site_boilerplate (root_uri, tenant, lines, pages)
VALUES (%(root_uri)s, %(tenant)s, %(lines)s, %(pages)s)
ON CONFLICT (root_uri, tenant) DO UPDATE
SET lines = EXCLUDED.lines, pages = EXCLUDED.pages, updated_at = now()
"""

# Which of some page entities other documents link to (their links_to relations).
LINKED_PAGES = """
SELECT DISTINCT r.tenant, r.target_id
FROM relations r
JOIN unnest(%s::text[], %s::text[], %s::text[]) AS page (tenant, entity_id, document_id)
  ON r.tenant = page.tenant AND r.target_id = page.entity_id
WHERE r.type = %s AND r.document_id <> page.document_id
"""

# The files that hold some (tenant, source id)s: index documents_tenant_source.
SOURCES_OF_DOCUMENTS = """
SELECT d.tenant, d.source_id, d.source_uri
FROM documents d
JOIN unnest(%s::text[], %s::text[]) AS wanted (tenant, source_id)
  ON d.tenant = wanted.tenant AND d.source_id = wanted.source_id
"""

# The stored documents of some files, by (tenant, source_uri): index
# documents_tenant_source_uri (migration 008).
DOCUMENTS_OF_SOURCES = """
SELECT d.tenant, d.source_uri, d.source_id, d.path
FROM documents d
JOIN unnest(%s::text[], %s::text[]) AS wanted (tenant, source_uri)
  ON d.tenant = wanted.tenant AND d.source_uri = wanted.source_uri
"""

# Every ingestion statement writes one tenant's documents (%(tenant)s), so on a
# cluster distributed by tenant it runs on that tenant's shard alone, and every join
# matches the tenant as well as the id (co-located; docs/scaling.md).

# The tenants of stored documents, for a delete by id alone (the only statement here
# that does not name a tenant: on a cluster it asks every shard).
DOCUMENT_TENANTS = """
SELECT tenant, array_agg(id ORDER BY id) FROM documents
WHERE id = ANY(%(document_ids)s::text[])
GROUP BY tenant ORDER BY tenant
"""

# The batch's chunk ids, computed once before the postings are read: the statements
# below then filter chunk_terms by a fixed id list (chunk_terms_chunk can serve it),
# so even a plan that scans the tenant's postings does so once, never per row.
# Statistics are stale while an ingest writes a new tenant (the job analyses between
# batches, not after each one), and a join on the tenant had planned a nested loop
# that rescanned the tenant's postings for every row.
_BATCH_CHUNK_IDS = """ARRAY(
          SELECT c.id FROM chunks c
          WHERE c.tenant = %(tenant)s
            AND c.document_id = ANY(%(document_ids)s::text[]))"""

# The documents of a batch that are already stored (only those have rows to delete).
STORED_DOCUMENTS = """
SELECT id FROM documents
WHERE tenant = %(tenant)s AND id = ANY(%(document_ids)s::text[])
"""

# Remove a document's contribution to the BM25 statistics before its rows go.
# Lexemes are updated in sorted order so concurrent ingests lock rows in one order.
# The per-lexeme counts are computed once (MATERIALIZED): as a subquery it was re-run
# for every term_stats row (30 s for a second batch of 1,000 small documents, past
# the statement timeout on a loaded machine).
SUBTRACT_TERM_STATS = f"""
WITH d AS MATERIALIZED (
    SELECT p.lexeme, count(*) AS n
    FROM chunk_terms p
    WHERE p.tenant = %(tenant)s AND p.chunk_id = ANY({_BATCH_CHUNK_IDS})
    GROUP BY p.lexeme ORDER BY p.lexeme
)
UPDATE term_stats AS s SET df = s.df - d.n
FROM d
WHERE s.tenant = %(tenant)s AND s.lexeme = d.lexeme
"""

SUBTRACT_CORPUS_STATS = """
UPDATE corpus_stats AS s SET
    chunk_count = s.chunk_count - d.n,
    total_length = s.total_length - d.len
FROM (SELECT count(*) AS n, coalesce(sum(lexeme_count), 0) AS len
      FROM chunks
      WHERE tenant = %(tenant)s AND document_id = ANY(%(document_ids)s::text[])
      ) AS d
WHERE s.tenant = %(tenant)s AND d.n > 0
"""

# A document is an entity's home page until it goes (the foreign key cannot do this
# on a cluster: Citus refuses ON DELETE SET NULL on a key with the tenant).
CLEAR_HOME_DOCUMENTS = """
UPDATE entities SET home_document_id = NULL
WHERE tenant = %(tenant)s AND home_document_id = ANY(%(document_ids)s::text[])
"""

DELETE_DOCUMENTS = """
DELETE FROM documents
WHERE tenant = %(tenant)s AND id = ANY(%(document_ids)s::text[])
"""

INSERT_DOCUMENT = """
INSERT INTO documents (id, source_id, tenant, title, path, source_uri, revision,
                       parser_version, acl, metadata, content, embedding_model,
                       created_at, updated_at)
VALUES (%(id)s, %(source_id)s, %(tenant)s, %(title)s, %(path)s, %(source_uri)s,
        %(revision)s, %(parser_version)s, %(acl)s, %(metadata)s, %(content)s,
        %(embedding_model)s, %(created_at)s, %(updated_at)s)
"""

COPY_CHUNKS = """
COPY chunks (id, document_id, source_id, tenant, acl, ordinal, heading_path, body,
             content, char_start, char_end, token_count, revision, source_uri,
             parser_version, embedding_model, embedding_version, updated_at,
             identifiers, embedding, page_start, page_end)
FROM STDIN
"""

INSERT_POSTINGS = """
INSERT INTO chunk_terms (tenant, lexeme, chunk_id, tf, doc_len, acl, document_id)
SELECT c.tenant, t.lexeme, c.id, cardinality(t.positions),
       sum(cardinality(t.positions)) OVER (PARTITION BY c.id), c.acl, c.document_id
FROM chunks c, unnest(c.tsv_prose) AS t
WHERE c.tenant = %(tenant)s AND c.document_id = ANY(%(document_ids)s::text[])
"""

SET_LEXEME_COUNTS = f"""
WITH d AS MATERIALIZED (
    SELECT p.chunk_id, sum(p.tf) AS len
    FROM chunk_terms p
    WHERE p.tenant = %(tenant)s AND p.chunk_id = ANY({_BATCH_CHUNK_IDS})
    GROUP BY p.chunk_id
)
UPDATE chunks c SET lexeme_count = d.len
FROM d
WHERE c.tenant = %(tenant)s AND c.id = d.chunk_id
"""

ADD_TERM_STATS = f"""
INSERT INTO term_stats (tenant, lexeme, df)
SELECT p.tenant, p.lexeme, count(*)
FROM chunk_terms p
WHERE p.tenant = %(tenant)s AND p.chunk_id = ANY({_BATCH_CHUNK_IDS})
GROUP BY p.tenant, p.lexeme ORDER BY p.lexeme
ON CONFLICT (tenant, lexeme) DO UPDATE SET df = term_stats.df + EXCLUDED.df
"""

ADD_CORPUS_STATS = """
INSERT INTO corpus_stats AS s (tenant, chunk_count, total_length)
SELECT tenant, count(*), coalesce(sum(lexeme_count), 0)
FROM chunks
WHERE tenant = %(tenant)s AND document_id = ANY(%(document_ids)s::text[])
GROUP BY tenant
ON CONFLICT (tenant) DO UPDATE SET
    chunk_count = s.chunk_count + EXCLUDED.chunk_count,
    total_length = s.total_length + EXCLUDED.total_length
"""

UPSERT_ENTITY = """
INSERT INTO entities (id, tenant, name, type, lifecycle, canonical_id, description,
                      home_document_id)
VALUES (%(id)s, %(tenant)s, %(name)s, coalesce(%(type)s, 'thing'),
        coalesce(%(lifecycle)s, 'served'), %(canonical_id)s, %(description)s,
        %(home_document_id)s)
ON CONFLICT (id, tenant) DO UPDATE SET
    -- A bare mention (no type, no lifecycle) never overrides a declaration.
    type = coalesce(%(type)s, entities.type),
    lifecycle = coalesce(%(lifecycle)s, entities.lifecycle),
    canonical_id = coalesce(EXCLUDED.canonical_id, entities.canonical_id),
    description = CASE WHEN EXCLUDED.description <> '' THEN EXCLUDED.description
                       ELSE entities.description END,
    home_document_id = coalesce(EXCLUDED.home_document_id, entities.home_document_id),
    updated_at = now()
"""

INSERT_MENTION = """
INSERT INTO mentions (tenant, entity_id, document_id, chunk_id, count, origin)
VALUES (%(tenant)s, %(entity_id)s, %(document_id)s, %(chunk_id)s, %(count)s,
        %(origin)s)
ON CONFLICT (entity_id, tenant, document_id, coalesce(chunk_id, ''), origin)
DO UPDATE SET count = EXCLUDED.count
"""

# One document's curation of one entity; NULL columns declare nothing. A document
# that declares an entity twice keeps each value it declared.
INSERT_CURATION = """
INSERT INTO entity_curation AS ec
    (tenant, entity_id, document_id, type, lifecycle, canonical_id)
VALUES (%(tenant)s, %(entity_id)s, %(document_id)s, %(type)s, %(lifecycle)s,
        %(canonical_id)s)
ON CONFLICT (entity_id, tenant, document_id) DO UPDATE SET
    type = coalesce(EXCLUDED.type, ec.type),
    lifecycle = coalesce(EXCLUDED.lifecycle, ec.lifecycle),
    canonical_id = coalesce(EXCLUDED.canonical_id, ec.canonical_id)
"""

INSERT_RELATION = """
INSERT INTO relations (tenant, source_id, target_id, type, weight, document_id)
VALUES (%(tenant)s, %(source_id)s, %(target_id)s, %(type)s, %(weight)s,
        %(document_id)s)
ON CONFLICT (source_id, tenant, target_id, type, document_id)
DO UPDATE SET weight = EXCLUDED.weight
"""

ENTITY_NAMES = """
SELECT e.id, e.name FROM entities e
WHERE e.tenant = %(tenant)s
ORDER BY e.id
"""

CHUNKS_FOR_LINKING = """
SELECT c.id, c.document_id, c.content FROM chunks c
WHERE c.tenant = %(tenant)s {scope}
ORDER BY c.id
"""

DELETE_EXTRACTED_MENTIONS = """
DELETE FROM mentions m
WHERE m.tenant = %(tenant)s AND m.origin = 'extracted' {scope}
"""

# --- scoped writes (vector-store API): a write is authorised like a read -----------
# The stored documents under the given ids in the caller's tenant, and whether the
# caller's principals may see each one. A hidden row's ACL never leaves the database.
_STORED_DOCUMENT_ACCESS = """
SELECT d.id, {acl} AS visible, CASE WHEN {acl} THEN d.acl END AS acl
FROM documents d
WHERE d.id = ANY(%(document_ids)s::text[]) AND {tenant}
ORDER BY d.id
"""
_ACCESS_PARTS = {
    "acl": sql.SQL(ACL_FILTER.format(a="d")),
    "tenant": sql.SQL(TENANT_FILTER.format(a="d")),
}
STORED_DOCUMENT_ACCESS = sql.SQL(_STORED_DOCUMENT_ACCESS).format(**_ACCESS_PARTS)
# The same rows locked in id order, when the check guards a delete or a write.
STORED_DOCUMENT_ACCESS_FOR_UPDATE = sql.SQL(
    _STORED_DOCUMENT_ACCESS + "FOR UPDATE\n"
).format(**_ACCESS_PARTS)
