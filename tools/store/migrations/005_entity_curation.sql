-- Entity curation (type, lifecycle, alias-of) per declaring document (issue 15).
-- The columns on `entities` hold whatever the last ingest wrote, whoever may see the
-- document that wrote it, and outlive that document. Graph fusion and the entity-type
-- filter read curation from here instead: a declaration applies to a caller only when
-- the caller may see its document (the rule name attestation already follows,
-- migration 003), and it disappears with that document (ON DELETE CASCADE).
CREATE TABLE entity_curation (
    entity_id    text NOT NULL REFERENCES entities (id) ON DELETE CASCADE,
    document_id  text NOT NULL REFERENCES documents (id) ON DELETE CASCADE,
    type         text,                            -- NULL: this document declares none
    lifecycle    text CHECK (lifecycle IN ('draft', 'pending_review', 'served', 'deleted')),
    canonical_id text REFERENCES entities (id) ON DELETE CASCADE, -- declared alias of
    PRIMARY KEY (entity_id, document_id)
);
CREATE INDEX entity_curation_document ON entity_curation (document_id);
CREATE INDEX entity_curation_canonical ON entity_curation (canonical_id)
    WHERE canonical_id IS NOT NULL;

-- Backfill from what ingest recorded: an explicit mention is a document's entity
-- declaration (an alias's has count 0). Which of its values that document declared
-- was not kept, so each declarer is credited with the entity's current values, the
-- defaults left out; re-ingesting a document records exactly what it declares.
INSERT INTO entity_curation (entity_id, document_id, type, lifecycle, canonical_id)
SELECT DISTINCT ON (e.id, m.document_id)
       e.id, m.document_id,
       nullif(e.type, 'thing'), nullif(e.lifecycle, 'served'), e.canonical_id
FROM mentions m
JOIN entities e ON e.id = m.entity_id
WHERE m.origin = 'explicit'
  AND (e.type <> 'thing' OR e.lifecycle <> 'served' OR e.canonical_id IS NOT NULL)
ORDER BY e.id, m.document_id
ON CONFLICT DO NOTHING;
