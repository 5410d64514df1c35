-- index_revision() reads the newest ingest time per tenant on every query: make it an
-- index lookup instead of a scan of the tenant's documents.
CREATE INDEX documents_tenant_ingested ON documents (tenant, ingested_at);
