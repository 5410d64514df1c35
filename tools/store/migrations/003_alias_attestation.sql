-- Graph fusion follows an entity reached through an 'extracted' mention (its name found
-- in chunk text) only when a document the caller may see attests it: a title or
-- explicit mention, or a relation. Aliases are attested by an explicit mention with
-- count 0 from the declaring document; backfill that from the canonical's declarers.
INSERT INTO mentions (entity_id, document_id, chunk_id, count, origin)
SELECT a.id, m.document_id, NULL, 0, 'explicit'
FROM entities a
JOIN mentions m ON m.entity_id = a.canonical_id AND m.origin = 'explicit'
ON CONFLICT DO NOTHING;
