"""The HTML loader on generated pages: a Sphinx-like page and a DocBook-like site."""

from __future__ import annotations

from pathlib import Path

from retrieval_pipeline.ingest.html import parse_html
from retrieval_pipeline.ingest.job import SMALL_CHUNK_TOKENS, chunk_document
from retrieval_pipeline.ingest.loaders import LoadDefaults, SourceDocument, load_file
from retrieval_pipeline.ingest.site import (
    LINK_RELATION,
    markdown_links,
    page_entity,
    prepare_site,
    resolve_links,
)
from retrieval_pipeline.tools.tokens import default_token_counter

SPHINX = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>json — JSON encoder — Example 1.0 docs</title>
<script>var DOCUMENTATION_OPTIONS = {};</script><style>body {color: red}</style></head>
<body>
<div class="related" role="navigation" aria-label="related navigation">
<h3>Navigation</h3>
<ul><li><a href="genindex.html">index</a></li>
<li><a href="py-modindex.html">modules</a> |</li>
<li><a href="pickle.html" title="pickle">next</a> |</li></ul></div>
<div class="document"><div class="documentwrapper"><div class="bodywrapper">
<div class="body" role="main">
<section id="json"><h1>json — JSON encoder<a class="headerlink" href="#json">¶</a></h1>
<p>JSON is a lightweight <em>data interchange</em> format. See
<a href="pickle.html#module-pickle">pickle</a> and <a href="https://json.org">json.org</a>.</p>
<div class="admonition warning"><p class="admonition-title">Warning</p>
<p>Be cautious when parsing JSON data from untrusted sources.</p></div>
<section id="usage"><h2>Basic Usage<a class="headerlink" href="#usage">¶</a></h2>
<dl class="py function">
<dt class="sig" id="json.dumps">json.dumps(obj, *, indent=None)</dt>
<dd><p>Serialize <em>obj</em> to a JSON formatted str.</p></dd>
<dt>json.loads(s)</dt><dd><p>Deserialize <em>s</em>.</p></dd></dl>
<div class="highlight"><pre><span class="gp">&gt;&gt;&gt; </span>import json
<span class="gp">&gt;&gt;&gt; </span>json.dumps([1, 2])  # a comment
'[1, 2]'
</pre></div>
<table class="docutils"><thead><tr><th>JSON</th><th>Python</th></tr></thead>
<tbody><tr><td>object</td><td>dict</td></tr><tr><td>array</td><td>list</td></tr></tbody>
</table>
</section></section>
<div class="toctree-wrapper"><ul><li><a href="a.html">1. Whetting Your Appetite</a></li>
<li><a href="b.html">2. Using the Interpreter</a>
<ul><li><a href="b.html#x">2.1. Invoking</a></li>
</ul></li></ul></div>
</div></div></div>
<div class="sphinxsidebar" role="navigation" aria-label="main navigation">
<h4>Previous topic</h4><p>Quick search</p>
<div id="searchbox"><form><input></form></div></div>
</div>
<div class="footer">&copy; Copyright 2001-2023. Created using Sphinx.</div>
</body></html>
"""


def docbook_page(title: str, body: str, prev: str, nxt: str) -> str:
    """A page shaped like DocBook's chunked HTML (PostgreSQL, many manuals)."""
    nav = (
        '<table width="100%" summary="Navigation header"><tr><th colspan="5">'
        f'{title}</th></tr><tr><td><a accesskey="p" href="{prev}">Prev</a></td>'
        '<td><a accesskey="u" href="index.html">Up</a></td><th>Chapter 8</th>'
        '<td><a accesskey="h" href="index.html">Home</a></td>'
        f'<td><a accesskey="n" href="{nxt}">Next</a></td></tr></table><hr>'
    )
    return (
        f"<html><head><title>{title}</title></head><body>"
        f'<div class="navheader">{nav}</div>{body}'
        f'<div class="navfooter"><hr>{nav}</div>'
        "<p>Copyright 1996-2024 The Example Group</p></body></html>"
    )


VACUUM = docbook_page(
    "VACUUM",
    '<div class="refentry"><div class="refnamediv"><h2>VACUUM</h2>'
    "<p>VACUUM — garbage-collect and optionally analyze a database</p></div>"
    '<div class="refsynopsisdiv"><h2>Synopsis</h2><pre class="synopsis">'
    "VACUUM [ ( option [, ...] ) ] [ table_and_columns [, ...] ]\n"
    "-- a comment line\nVACUUM FULL;</pre></div>"
    '<div class="refsect1"><h2>Description</h2><p>VACUUM reclaims storage '
    "occupied by dead tuples. In normal operation, tuples that are deleted are not "
    "physically removed from their table until a VACUUM is done.</p>"
    '<div class="tip"><h3 class="title">Tip</h3><p>Plain VACUUM (without FULL) '
    "simply reclaims space and makes it available for re-use.</p></div>"
    "<p>More description after the tip, still under Description.</p></div>"
    '<div class="refsect1"><h2>Parameters</h2><div class="variablelist"><dl>'
    "<dt>FULL</dt><dd><p>Selects full vacuum, which can reclaim more space.</p></dd>"
    "<dt>FREEZE</dt><dd><p>Selects aggressive freezing of tuples.</p></dd>"
    "</dl></div></div></div>",
    "sql-update.html",
    "sql-values.html",
)
CODES = docbook_page(
    "Appendix A. Error Codes",
    '<div class="appendix"><h2 class="title">Appendix A. Error Codes</h2>'
    '<div class="toc"><dl class="toc"><dt><span class="sect1">'
    '<a href="errcodes-table.html">A.1. Error Code Table</a></span></dt>'
    '<dt><span class="sect1"><a href="vacuum.html#params">A.2. Vacuum '
    "parameters</a></span></dt></dl></div>"
    "<p>All messages emitted by the server are assigned five-character codes.</p>"
    '<div class="table"><table summary="Error codes"><thead><tr><th>Error Code</th>'
    "<th>Condition Name</th></tr></thead><tbody><tr><td>40P01</td>"
    "<td>deadlock_detected</td></tr><tr><td>40001</td><td>serialization_failure"
    "</td></tr></tbody></table></div></div>",
    "vacuum.html",
    "index.html",
)
CHROME = ("Prev", "Next", "Home", "Up", "Navigation", "Quick search", "Copyright")


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def load(path: Path, root: Path) -> SourceDocument:
    (doc,) = load_file(path, LoadDefaults(root=root))
    return doc


class TestSphinxPage:
    def test_chrome_is_dropped_and_content_kept(self) -> None:
        parsed = parse_html(SPHINX)
        text = parsed.text
        for chrome in ("Navigation", "modules", "Quick search", "Created using", "¶"):
            assert chrome not in text
        assert "DOCUMENTATION_OPTIONS" not in text and "color: red" not in text
        assert "JSON is a lightweight data interchange format." in " ".join(
            text.split()
        )

    def test_title_is_the_root_heading(self) -> None:
        parsed = parse_html(SPHINX)
        # The <title> carries a site suffix; the body's h1 is the page's own name.
        assert parsed.title == "json — JSON encoder"
        assert parsed.text.startswith("# json — JSON encoder\n")
        assert "\n## Basic Usage\n" in parsed.text

    def test_admonition_is_a_labelled_block_not_a_heading(self) -> None:
        text = parse_html(SPHINX).text
        assert "Warning: Be cautious when parsing JSON data" in text
        assert "# Warning" not in text

    def test_pre_keeps_line_breaks_in_a_fence(self) -> None:
        text = parse_html(SPHINX).text
        assert (
            "```\n>>> import json\n>>> json.dumps([1, 2])  # a comment\n'[1, 2]'\n```"
            in text
        )

    def test_tables_are_row_by_row_with_the_header(self) -> None:
        text = parse_html(SPHINX).text
        assert (
            "| JSON | Python |\n| --- | --- |\n| object | dict |\n| array | list |"
            in text
        )

    def test_definitions_and_toc_are_one_entry_per_line(self) -> None:
        text = parse_html(SPHINX).text
        assert (
            "\n\njson.dumps(obj, *, indent=None)\n\n"
            "Serialize obj to a JSON formatted str." in text
        )
        assert (
            "- 1. Whetting Your Appetite\n- 2. Using the Interpreter\n  - 2.1. Invoking"
            in text
        )

    def test_content_links_are_returned_and_chrome_links_are_not(self) -> None:
        links = parse_html(SPHINX).links
        assert "pickle.html#module-pickle" in links
        assert "https://json.org" in links
        assert "genindex.html" not in links  # from the related bar

    def test_deep_nesting_is_read_without_crashing(self) -> None:
        html = "<html><body>" + "<div>" * 5000 + "deep text" + "</div>" * 5000
        assert "deep text" in parse_html(html + "</body></html>").text

    def test_markdown_like_text_is_escaped(self) -> None:
        text = parse_html("<p># not a heading</p><p>```not a fence</p>").text
        assert "\\# not a heading" in text and "\\```not a fence" in text


class TestDocBookSite:
    def site(self, tmp_path: Path) -> list[SourceDocument]:
        root = tmp_path / "site"
        write(root / "vacuum.html", VACUUM)
        write(root / "errcodes.html", CODES)
        for n in range(3):  # more pages sharing the same footer
            write(
                root / f"page{n}.html",
                docbook_page(
                    f"Page {n}",
                    f"<h2>Page {n}</h2><p>Body {n} about storage engine {n}.</p>",
                    "vacuum.html",
                    "errcodes.html",
                ),
            )
        docs = [load(p, root) for p in sorted(root.glob("*.html"))]
        return prepare_site(docs)

    def test_navigation_and_repeated_footer_are_gone(self, tmp_path: Path) -> None:
        for doc in self.site(tmp_path):
            words = set(doc.content.replace("|", " ").split())
            assert not words & {"Prev", "Next", "Home", "Up"}, doc.content
            assert "Copyright 1996-2024" not in doc.content

    def test_reference_page_heading_paths_carry_the_command(
        self, tmp_path: Path
    ) -> None:
        vacuum = next(d for d in self.site(tmp_path) if d.source_id == "vacuum.html")
        chunks = chunk_document(vacuum, default_token_counter())
        paths = [c.heading_path for c in chunks]
        assert all(p[0] == "VACUUM" for p in paths), paths
        params = next(c for c in chunks if "FREEZE" in c.body)
        assert params.heading_path == ("VACUUM", "Parameters")
        # The tip is a block inside Description, never a heading that captures it.
        after = next(c for c in chunks if "More description after the tip" in c.body)
        assert after.heading_path == ("VACUUM", "Description")
        assert all("Tip" not in p for p in paths)

    def test_code_keeps_comment_lines_apart(self, tmp_path: Path) -> None:
        vacuum = next(d for d in self.site(tmp_path) if d.source_id == "vacuum.html")
        assert "-- a comment line\nVACUUM FULL;" in vacuum.content

    def test_no_title_only_chunks(self, tmp_path: Path) -> None:
        counter = default_token_counter()
        for doc in self.site(tmp_path):
            chunks = chunk_document(doc, counter)
            # A short section is merged forward; only a page's last one may stay.
            assert all(c.token_count >= SMALL_CHUNK_TOKENS for c in chunks[:-1]), [
                (c.heading_path, c.body) for c in chunks
            ]
            for chunk in chunks:  # every body is still an exact slice
                assert doc.content[chunk.char_start : chunk.char_end] == chunk.body

    def test_table_cells_are_separated(self, tmp_path: Path) -> None:
        codes = next(d for d in self.site(tmp_path) if d.source_id == "errcodes.html")
        assert "| 40P01 | deadlock_detected |" in codes.content
        assert "| Error Code | Condition Name |" in codes.content
        assert "A.1. Error Code Table\n\nA.2. Vacuum parameters" in codes.content

    def test_links_become_relations_between_page_entities(self, tmp_path: Path) -> None:
        docs = {d.source_id: d for d in self.site(tmp_path)}
        codes = docs["errcodes.html"]
        assert page_entity("errcodes.html") in [e.name for e in codes.entities]
        targets = {r.target for r in codes.relations if r.type == LINK_RELATION}
        # vacuum.html#params resolves to the page; the nav bar's links are chrome.
        assert targets == {page_entity("vacuum.html")}
        assert page_entity("vacuum.html") in [
            e.name for e in docs["vacuum.html"].entities
        ]

    def test_links_can_be_turned_off(self, tmp_path: Path) -> None:
        root = tmp_path / "site"
        write(root / "vacuum.html", VACUUM)
        write(root / "errcodes.html", CODES)
        docs = [load(p, root) for p in sorted(root.glob("*.html"))]
        assert all(not d.relations for d in prepare_site(docs, links=False))


class TestLinkResolution:
    def test_relative_fragment_external_and_self_links(self, tmp_path: Path) -> None:
        root = tmp_path / "site"
        write(
            root / "guide" / "a.md",
            "# A\n\nSee [b](../ref/b.md#usage), [b again](../ref/b.md), "
            "[self](a.md#top), [web](https://example.com/b.md), [gone](missing.md) "
            "and ![img](pic.png).\n\n```\n[in code](../ref/c.md)\n```\n",
        )
        write(root / "ref" / "b.md", "# B\n\nBody.\n")
        write(root / "ref" / "c.md", "# C\n\nBody.\n")
        docs = [load(p, root) for p in sorted(root.rglob("*.md"))]
        by_id = {d.source_id: i for i, d in enumerate(docs)}
        graph = resolve_links(docs)
        assert graph == {by_id["guide/a.md"]: {("", "ref/b.md"): 2}}
        (linked,) = [d for d in prepare_site(docs) if d.source_id == "guide/a.md"]
        (relation,) = linked.relations
        assert relation.target == page_entity("ref/b.md")
        assert relation.weight == 2 / 3

    def test_markdown_links_skip_images_and_code(self) -> None:
        text = "[a](x.md) ![i](y.png)\n```\n[b](z.md)\n```\n[c](<w w.md>)"
        assert markdown_links(text) == ("x.md", "w w.md")  # <...> may hold spaces
        assert markdown_links("[t](<a.md> \"Title\") [u](b.md 'T')") == ("a.md", "b.md")


# GNU Texinfo's HTML (the Octave, Emacs, Guile ... manuals): a node header with rel
# and accesskey links, and the same bar repeated at the foot with plain links whose
# targets are the page's own <link rel=next|prev|up|contents|index>.
TEXINFO = """<!DOCTYPE html><html><head><title>Anonymous Functions (GNU Octave)</title>
<link href="index.html#SEC_Contents" rel="contents" title="Table of Contents">
<link href="Function-Handles-and-Anonymous-Functions.html" rel="up" title="Up">
<link href="Function-Handles.html" rel="prev" title="Function Handles">
</head><body><div class="section" id="Anonymous-Functions">
<div class="header"><p>Previous: <a href="Function-Handles.html" accesskey="p"
rel="prev">Function Handles</a>, Up: <a
href="Function-Handles-and-Anonymous-Functions.html" accesskey="u" rel="up">Function
Handles and Anonymous Functions</a> &nbsp; [<a href="index.html#SEC_Contents"
rel="contents">Contents</a>][<a href="Concept-Index.html" rel="index">Index</a>]</p>
</div><hr><h4 class="subsection">11.12.2 Anonymous Functions</h4>
<p>Anonymous functions are defined using the syntax <code>@(arg) expr</code>; see
<a href="Function-Handles.html">Function Handles</a> for handles to named
functions.</p>
<hr><div class="header"><p>Previous: <a href="Function-Handles.html">Function
Handles</a>, Up: <a href="Function-Handles-and-Anonymous-Functions.html">Function
Handles and Anonymous Functions</a> &nbsp; [<a href="index.html#SEC_Contents"
title="Table of contents" rel="contents">Contents</a>][<a href="Concept-Index.html"
title="Index" rel="index">Index</a>]</p></div></div></body></html>"""


class TestTexinfoPage:
    def test_node_header_and_its_plain_link_repeat_at_the_foot_are_dropped(
        self,
    ) -> None:
        text = " ".join(parse_html(TEXINFO).text.split())
        for chrome in ("Previous:", "Up:", "[Contents]", "[Index]"):
            assert chrome not in text
        assert "Anonymous functions are defined using the syntax" in text
        # A link in the prose to the same page as the "Previous" bar stays prose.
        assert "see Function Handles for handles to named functions" in text


SINGLE_PAGE_WITH_BANNERS = """<!doctype html><html><head><title>Refunds</title></head>
<body>
<div id="onetrust-banner-sdk"><p>Privacy preference center ONETRUSTLEAK</p></div>
<div id="cookie-notice" class="cc-window"><p>We use cookies COOKIELEAK</p></div>
<div role="dialog" aria-label="cookie consent"><p>Accept all DIALOGLEAK</p></div>
<div class="newsletter-signup"><p>Subscribe to our newsletter NEWSLEAK</p></div>
<h1>Refunds</h1>
<p>A refund is posted to the ledger within two days.</p>
<div class="note"><p>Partial refunds keep the original payment id.</p></div>
<div class="site-footer-bottom"><p>Terms | Privacy BOTTOMLEAK</p></div>
<ul class="footer-links"><li><a href="/t">Terms FOOTLEAK</a></li></ul>
</body></html>"""


class TestBannersOnALonePage:
    """Chrome a single page shows with no repetition across pages to reveal it."""

    def test_consent_newsletter_and_footer_parts_are_dropped(self) -> None:
        text = " ".join(parse_html(SINGLE_PAGE_WITH_BANNERS).text.split())
        for leak in (
            "ONETRUSTLEAK",
            "COOKIELEAK",
            "DIALOGLEAK",
            "NEWSLEAK",
            "BOTTOMLEAK",
            "FOOTLEAK",
        ):
            assert leak not in text, leak
        assert "A refund is posted to the ledger within two days." in text
        assert "Partial refunds keep the original payment id." in text

    def test_sections_whose_heading_ids_look_like_banners_are_kept(self) -> None:
        # Sphinx and mkdocs derive section ids from headings: python3-doc's
        # http.cookies page has <section id="cookie-objects">.
        page = (
            "<html><body><main><h1>http.cookies</h1>"
            '<section id="cookie-objects"><h2>Cookie Objects</h2>'
            "<p>BaseCookie.value_decode(val) returns a decoded value.</p></section>"
            '<section id="footer-configuration"><h2>Footer configuration</h2>'
            "<p>The footer template is read from footer.html.</p></section>"
            "</main></body></html>"
        )
        text = parse_html(page).text
        assert "BaseCookie.value_decode(val) returns a decoded value." in text
        assert "The footer template is read from footer.html." in text
