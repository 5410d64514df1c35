-- Impact-ordered postings (Anh & Moffat 2006): each lexeme's postings from strongest
-- to weakest BM25 term-frequency factor (k1 = 0.9, b = 0.4, reference length 100;
-- the expression must stay identical to tools/store/sql.py IMPACT). Past the
-- exhaustive budget the lexical channel reads only each lexeme's strongest postings,
-- so its cost is bounded by the budget instead of growing with the corpus. The
-- included columns let that read, and its access filters, use the index alone.
-- A one-off build over existing postings: give it memory for the sort.
SET LOCAL maintenance_work_mem = '512MB';
CREATE INDEX IF NOT EXISTS chunk_terms_impact ON chunk_terms (
    tenant,
    lexeme,
    (tf::float8 / (tf::float8 + 0.54 + 0.0036 * doc_len::float8)) DESC
) INCLUDE (chunk_id, tf, doc_len, acl, document_id);
