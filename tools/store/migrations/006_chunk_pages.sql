-- Page provenance (issue 16): the first and last 1-based page a chunk spans, for
-- sources with pages (PDF). NULL for formats without pages and for chunks written
-- before this migration; a citation then names the source without a page.
ALTER TABLE chunks
    ADD COLUMN page_start integer,
    ADD COLUMN page_end integer,
    ADD CONSTRAINT chunks_pages_valid CHECK (
        (page_start IS NULL AND page_end IS NULL)
        OR (page_start >= 1 AND page_end >= page_start)
    );
