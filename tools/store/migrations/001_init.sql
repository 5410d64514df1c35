-- Documents, chunks with provenance, lexical postings for BM25, and the entity graph.
-- The embedding column is added by the store once the embedding dimension is known
-- (see store.ensure_embedding_index): pgvector's HNSW index needs a fixed dimension.

CREATE EXTENSION IF NOT EXISTS vector;

CREATE TABLE index_settings (
    key   text PRIMARY KEY,
    value text NOT NULL
);

-- One row per source document. `id` is a stable hash of (tenant, source_id), so
-- re-ingesting the same source always yields the same id and tenants cannot collide.
CREATE TABLE documents (
    id             text PRIMARY KEY,
    source_id      text NOT NULL,               -- the source's own id (BEIR _id, path, front matter id)
    tenant         text NOT NULL DEFAULT '',    -- '' = not tenant-scoped
    title          text NOT NULL DEFAULT '',
    path           text NOT NULL DEFAULT '',    -- logical path, for path-prefix scopes
    source_uri     text NOT NULL,
    revision       text NOT NULL,               -- sha256 of content + indexing metadata
    parser_version text NOT NULL,
    acl            text[] NOT NULL DEFAULT '{}', -- principals; empty = public
    metadata       jsonb NOT NULL DEFAULT '{}',
    content        text NOT NULL,               -- the text chunk offsets point into
    embedding_model text NOT NULL,
    created_at     timestamptz,
    updated_at     timestamptz NOT NULL,
    ingested_at    timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX documents_tenant_source ON documents (tenant, source_id);

-- One row per retrieval unit. Tenant and ACL are copied from the document so that
-- every channel filters on the chunk row itself, before any ranking.
CREATE TABLE chunks (
    id                text PRIMARY KEY,
    document_id       text NOT NULL REFERENCES documents (id) ON DELETE CASCADE,
    source_id         text NOT NULL,
    tenant            text NOT NULL,
    acl               text[] NOT NULL,
    ordinal           integer NOT NULL,
    heading_path      text[] NOT NULL,
    body              text NOT NULL,            -- exactly documents.content[char_start:char_end]
    content           text NOT NULL,            -- heading path + body: what is embedded and indexed
    char_start        integer NOT NULL,
    char_end          integer NOT NULL,
    token_count       integer NOT NULL,
    revision          text NOT NULL,
    source_uri        text NOT NULL,
    parser_version    text NOT NULL,
    embedding_model   text NOT NULL,
    embedding_version text NOT NULL,
    updated_at        timestamptz NOT NULL,
    identifiers       text[] NOT NULL DEFAULT '{}', -- exact identifier tokens, lowercased
    lexeme_count      integer NOT NULL DEFAULT 0,   -- BM25 document length
    -- Stemmed English analyzer for prose.
    tsv_prose tsvector GENERATED ALWAYS AS (to_tsvector('english'::regconfig, content)) STORED,
    -- Unstemmed analyzer: keeps words as written (no stemming, no stop words).
    tsv_exact tsvector GENERATED ALWAYS AS (to_tsvector('simple'::regconfig, content)) STORED
);
CREATE INDEX chunks_document ON chunks (document_id);
CREATE INDEX chunks_tenant ON chunks (tenant);
CREATE INDEX chunks_acl ON chunks USING gin (acl);
CREATE INDEX chunks_tsv_prose ON chunks USING gin (tsv_prose);
CREATE INDEX chunks_tsv_exact ON chunks USING gin (tsv_exact);
CREATE INDEX chunks_identifiers ON chunks USING gin (identifiers);

-- Lexical term statistics, maintained at ingest, from which BM25 is computed in SQL.
-- Statistics are kept per tenant: a tenant's ranking never depends on (and so never
-- reveals) another tenant's documents, and each tenant's rows live on one shard.
-- A posting carries what BM25 and the access filters need (chunk length, ACL,
-- document), copied from its chunk, so the lexical channel scores and filters from
-- postings alone. Chunks are immutable (a new revision replaces them), so the copies
-- cannot drift.
CREATE TABLE chunk_terms (
    tenant      text NOT NULL,
    lexeme      text NOT NULL,
    chunk_id    text NOT NULL REFERENCES chunks (id) ON DELETE CASCADE,
    tf          integer NOT NULL,
    doc_len     integer NOT NULL,
    acl         text[] NOT NULL,
    document_id text NOT NULL,
    PRIMARY KEY (tenant, lexeme, chunk_id) INCLUDE (tf, doc_len, acl, document_id)
);
CREATE INDEX chunk_terms_chunk ON chunk_terms (chunk_id);

CREATE TABLE term_stats (
    tenant text NOT NULL,
    lexeme text NOT NULL,
    df     bigint NOT NULL,
    PRIMARY KEY (tenant, lexeme)
);

CREATE TABLE corpus_stats (
    tenant       text PRIMARY KEY,
    chunk_count  bigint NOT NULL,
    total_length bigint NOT NULL
);

-- Entity graph. Aliases are entities whose canonical_id points at the canonical one.
CREATE TABLE entities (
    id           text PRIMARY KEY,              -- stable hash of (tenant, normalised name)
    tenant       text NOT NULL DEFAULT '',
    name         text NOT NULL,
    type         text NOT NULL DEFAULT 'thing',
    lifecycle    text NOT NULL DEFAULT 'served'
                 CHECK (lifecycle IN ('draft', 'pending_review', 'served', 'deleted')),
    canonical_id text REFERENCES entities (id) ON DELETE SET NULL,
    description  text NOT NULL DEFAULT '',
    home_document_id text REFERENCES documents (id) ON DELETE SET NULL, -- e.g. a wiki page's title entity
    updated_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX entities_canonical ON entities (canonical_id);
CREATE INDEX entities_tenant_name ON entities (tenant, lower(name));

CREATE TABLE mentions (
    entity_id   text NOT NULL REFERENCES entities (id) ON DELETE CASCADE,
    document_id text NOT NULL REFERENCES documents (id) ON DELETE CASCADE,
    chunk_id    text REFERENCES chunks (id) ON DELETE CASCADE,
    count       integer NOT NULL DEFAULT 1,
    origin      text NOT NULL DEFAULT 'explicit' CHECK (origin IN ('explicit', 'extracted', 'title'))
);
CREATE UNIQUE INDEX mentions_unique ON mentions (entity_id, document_id, coalesce(chunk_id, ''), origin);
CREATE INDEX mentions_document ON mentions (document_id);

-- Relations carry the document that asserted them, so a traversal can ignore
-- relations whose only evidence is a document the caller may not see.
CREATE TABLE relations (
    source_id   text NOT NULL REFERENCES entities (id) ON DELETE CASCADE,
    target_id   text NOT NULL REFERENCES entities (id) ON DELETE CASCADE,
    type        text NOT NULL,
    weight      real NOT NULL DEFAULT 1.0,
    document_id text NOT NULL REFERENCES documents (id) ON DELETE CASCADE,
    PRIMARY KEY (source_id, target_id, type, document_id)
);
CREATE INDEX relations_target ON relations (target_id);
