-- Citus readiness (issue 20): every table that grows with the corpus carries the
-- tenant, every primary key and unique index includes it, and every foreign key
-- between them is composite with the tenant at the same position on both sides. The
-- corpus tables can then be distributed by tenant and co-located (docs/scaling.md):
-- a tenant's rows, and every join between them, live on one shard.
--
-- Keys are (id, tenant), not (tenant, id): ids are already globally unique hashes
-- that include the tenant, so an id-led key stays as selective as before for the
-- lookups by id, and the tenant in it is what Citus requires. index_settings and
-- schema_version hold no corpus rows: they become reference tables.
--
-- Citus refuses ON DELETE SET NULL on a foreign key that includes the distribution
-- column, so entities.home_document_id and entities.canonical_id become NO ACTION;
-- deleting documents clears home_document_id first (tools/store/writes.py), and
-- entities are never deleted one by one.

-- 1. The tenant on the graph tables, from the document that is their evidence.
ALTER TABLE mentions ADD COLUMN tenant text;
ALTER TABLE relations ADD COLUMN tenant text;
ALTER TABLE entity_curation ADD COLUMN tenant text;
UPDATE mentions m SET tenant = d.tenant FROM documents d WHERE d.id = m.document_id;
UPDATE relations r SET tenant = d.tenant FROM documents d WHERE d.id = r.document_id;
UPDATE entity_curation c SET tenant = d.tenant
FROM documents d WHERE d.id = c.document_id;
ALTER TABLE mentions ALTER COLUMN tenant SET DEFAULT '',
    ALTER COLUMN tenant SET NOT NULL;
ALTER TABLE relations ALTER COLUMN tenant SET DEFAULT '',
    ALTER COLUMN tenant SET NOT NULL;
ALTER TABLE entity_curation ALTER COLUMN tenant SET DEFAULT '',
    ALTER COLUMN tenant SET NOT NULL;

-- 2. Single-column foreign keys go before the keys they reference.
ALTER TABLE chunks DROP CONSTRAINT chunks_document_id_fkey;
ALTER TABLE chunk_terms DROP CONSTRAINT chunk_terms_chunk_id_fkey;
ALTER TABLE entities DROP CONSTRAINT entities_canonical_id_fkey,
    DROP CONSTRAINT entities_home_document_id_fkey;
ALTER TABLE mentions DROP CONSTRAINT mentions_entity_id_fkey,
    DROP CONSTRAINT mentions_document_id_fkey,
    DROP CONSTRAINT mentions_chunk_id_fkey;
ALTER TABLE relations DROP CONSTRAINT relations_source_id_fkey,
    DROP CONSTRAINT relations_target_id_fkey,
    DROP CONSTRAINT relations_document_id_fkey;
ALTER TABLE entity_curation DROP CONSTRAINT entity_curation_entity_id_fkey,
    DROP CONSTRAINT entity_curation_document_id_fkey,
    DROP CONSTRAINT entity_curation_canonical_id_fkey;

-- 3. Primary keys and unique indexes with the tenant.
SET LOCAL maintenance_work_mem = '512MB';
ALTER TABLE documents DROP CONSTRAINT documents_pkey,
    ADD CONSTRAINT documents_pkey PRIMARY KEY (id, tenant);
ALTER TABLE chunks DROP CONSTRAINT chunks_pkey,
    ADD CONSTRAINT chunks_pkey PRIMARY KEY (id, tenant);
ALTER TABLE entities DROP CONSTRAINT entities_pkey,
    ADD CONSTRAINT entities_pkey PRIMARY KEY (id, tenant);
ALTER TABLE relations DROP CONSTRAINT relations_pkey,
    ADD CONSTRAINT relations_pkey
        PRIMARY KEY (source_id, tenant, target_id, type, document_id);
ALTER TABLE entity_curation DROP CONSTRAINT entity_curation_pkey,
    ADD CONSTRAINT entity_curation_pkey PRIMARY KEY (entity_id, tenant, document_id);
DROP INDEX mentions_unique;
CREATE UNIQUE INDEX mentions_unique
    ON mentions (entity_id, tenant, document_id, coalesce(chunk_id, ''), origin);
-- What the delete path clears before documents go (see the header).
CREATE INDEX entities_home_document ON entities (home_document_id, tenant)
    WHERE home_document_id IS NOT NULL;

-- 4. Composite foreign keys, the tenant second on both sides.
ALTER TABLE chunks ADD CONSTRAINT chunks_document_fkey
    FOREIGN KEY (document_id, tenant) REFERENCES documents (id, tenant)
    ON DELETE CASCADE;
ALTER TABLE chunk_terms ADD CONSTRAINT chunk_terms_chunk_fkey
    FOREIGN KEY (chunk_id, tenant) REFERENCES chunks (id, tenant) ON DELETE CASCADE;
ALTER TABLE entities
    ADD CONSTRAINT entities_canonical_fkey
        FOREIGN KEY (canonical_id, tenant) REFERENCES entities (id, tenant),
    ADD CONSTRAINT entities_home_document_fkey
        FOREIGN KEY (home_document_id, tenant) REFERENCES documents (id, tenant);
ALTER TABLE mentions
    ADD CONSTRAINT mentions_entity_fkey
        FOREIGN KEY (entity_id, tenant) REFERENCES entities (id, tenant)
        ON DELETE CASCADE,
    ADD CONSTRAINT mentions_document_fkey
        FOREIGN KEY (document_id, tenant) REFERENCES documents (id, tenant)
        ON DELETE CASCADE,
    ADD CONSTRAINT mentions_chunk_fkey
        FOREIGN KEY (chunk_id, tenant) REFERENCES chunks (id, tenant)
        ON DELETE CASCADE;
ALTER TABLE relations
    ADD CONSTRAINT relations_source_fkey
        FOREIGN KEY (source_id, tenant) REFERENCES entities (id, tenant)
        ON DELETE CASCADE,
    ADD CONSTRAINT relations_target_fkey
        FOREIGN KEY (target_id, tenant) REFERENCES entities (id, tenant)
        ON DELETE CASCADE,
    ADD CONSTRAINT relations_document_fkey
        FOREIGN KEY (document_id, tenant) REFERENCES documents (id, tenant)
        ON DELETE CASCADE;
ALTER TABLE entity_curation
    ADD CONSTRAINT entity_curation_entity_fkey
        FOREIGN KEY (entity_id, tenant) REFERENCES entities (id, tenant)
        ON DELETE CASCADE,
    ADD CONSTRAINT entity_curation_document_fkey
        FOREIGN KEY (document_id, tenant) REFERENCES documents (id, tenant)
        ON DELETE CASCADE,
    ADD CONSTRAINT entity_curation_canonical_fkey
        FOREIGN KEY (canonical_id, tenant) REFERENCES entities (id, tenant)
        ON DELETE CASCADE;
