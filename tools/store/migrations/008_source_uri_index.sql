-- One stored copy per file (issue 17 follow-up): ingest looks up each batch's files
-- by (tenant, source_uri) to refuse a second copy of a file it already holds under
-- another id (the same file ingested from another root, or its front matter id
-- changed). Not unique: documents handed to Ingestor.ingest_documents and LangChain
-- imports may share a source URI by design.
CREATE INDEX IF NOT EXISTS documents_tenant_source_uri ON documents (tenant, source_uri);
