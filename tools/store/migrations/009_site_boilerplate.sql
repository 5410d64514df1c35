-- Site boilerplate remembered per ingested directory (ingest/site.py): the prose
-- lines that recurred on most HTML pages the last time a directory was ingested
-- whole. A later ingest of fewer pages under it (one edited page, a subdirectory)
-- removes the same lines, so the page keeps the text and revision it had, instead of
-- being stored with the site's footer and navigation bar again.
CREATE TABLE site_boilerplate (
    root_uri   text NOT NULL,               -- file: URI of the directory, ending in '/'
    tenant     text NOT NULL DEFAULT '',
    lines      jsonb NOT NULL,              -- normalised lines (html.repeated_lines)
    pages      integer NOT NULL,            -- HTML pages they were counted on
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (root_uri, tenant)
);
