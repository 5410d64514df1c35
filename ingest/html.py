"""HTML to markdown that reads like the page a person sees.

The page is parsed with selectolax's lexbor engine (an HTML5 parser: fast, and it
repairs real-world markup the way a browser does). On the parsed tree:

1. **Main content only.** ``<main>`` or ``[role=main]`` when the page has one, else
   its single ``<article>``, else ``<body>``. Inside it, chrome is dropped: scripts,
   styles, forms, ``<nav>``, banner ``<header>``/``<footer>``, ``<aside>`` that is
   not a note, ARIA landmark roles (navigation, banner, contentinfo, search,
   complementary), elements whose class or id names chrome (``navheader``,
   ``sphinxsidebar``, ``related``, ``breadcrumbs``, ``footer``, ...) or whose
   ``summary``/``aria-label`` says navigation, and heading permalinks (``¶``).
   Lines repeated across most pages of one ingest are removed afterwards
   (:func:`~retrieval_pipeline.ingest.html_chrome.repeated_lines`): boilerplate
   that carries no markup hint.
2. **Headings** come from the real heading hierarchy with the page title as the
   root (``# Title``); the page's own headings sit below it, so a reference page
   whose command name is a sibling heading of "Parameters" still carries it. A body
   heading that is the title (or the start of ``<title>``, as in
   "json — ... — Python documentation") becomes the root.
3. **Admonitions** (note, tip, warning, ... boxes) are blocks: their title becomes a
   label ("Note:") on their first paragraph, never a heading.
4. **Code** (``<pre>``) keeps its line breaks as a fenced block; a long listing is
   cut at line boundaries into several fences, so the chunker never splits a line.
5. **Tables** are serialised row by row with ``|`` between cells and the header row
   first; a long table is cut at row boundaries, each part repeating the header.
6. **Lists** come out one item per line (nested items indented); definition lists
   give the term and its description as separate blocks, never glued.

Links inside the main content are returned too (``href`` values, in order), so an
ingest can turn links between its own pages into graph relations.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from selectolax.lexbor import LexborHTMLParser, LexborNode

from retrieval_pipeline.ingest.html_chrome import (
    MAX_DEPTH,
    REPEATED_MIN_PAGES,
    REPEATED_SHARE,
    class_tokens,
    drop_lines,
    is_admonition,
    main_content,
    nav_targets,
    remove_chrome,
    repeated_lines,
)

__all__ = [  # chrome and site boilerplate are re-exported from ingest/html_chrome.py
    "CODE_PART_CHARS",
    "LAYOUT_CELL_CHARS",
    "LIST_PART_CHARS",
    "MAX_DEPTH",
    "REPEATED_MIN_PAGES",
    "REPEATED_SHARE",
    "TABLE_PART_CHARS",
    "ParsedHTML",
    "drop_lines",
    "html_to_markdown",
    "parse_html",
    "repeated_lines",
]

_ADMONITION_WORDS = frozenset(
    {
        "note",
        "notes",
        "tip",
        "tips",
        "hint",
        "warning",
        "caution",
        "important",
        "attention",
        "danger",
        "see also",
    }
)
_HEADINGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}
_BLOCKS = frozenset(
    {
        "p",
        "div",
        "section",
        "article",
        "main",
        "body",
        "blockquote",
        "figure",
        "figcaption",
        "address",
        "center",
        "details",
        "summary",
        "fieldset",
        "header",
        "footer",
        "aside",
        "hr",
        "caption",
        "tbody",
        "thead",
        "tfoot",
        "colgroup",
    }
)
CODE_PART_CHARS = 700  # a fenced part of a long listing (~200 tokens of code)
TABLE_PART_CHARS = 900  # rows per table part, the header repeated on each
LIST_PART_CHARS = 900  # a longer list is written in parts of about this size
LAYOUT_CELL_CHARS = 600  # a table with a cell this long (or with blocks) is layout
_LONG_LIST_MARKER = re.compile(r"^(\s*)(-|\d+\.) ")


def _long_marker(match: re.Match[str]) -> str:
    marker = match.group(2)
    return match.group(1) + ("• " if marker == "-" else f"({marker[:-1]}) ")


_SPACE = re.compile(r"\s+")
_MARKDOWN_START = re.compile(r"^(#|```|~~~)")


@dataclass
class ParsedHTML:
    """A page read into markdown: text, title, ``<meta name>`` tags and links."""

    text: str
    title: str
    meta: list[tuple[str, str]] = field(default_factory=list)
    links: list[str] = field(default_factory=list)
    # (attribute, value) of <meta property|http-equiv|itemprop=...>: not read as
    # metadata, but an access-control one must not pass in silence.
    other_meta: list[tuple[str, str]] = field(default_factory=list)


def _clean(text: str) -> str:
    return _SPACE.sub(" ", text).strip()


def _escape(line: str) -> str:
    """Keep a text line from reading as a markdown heading or fence."""
    return "\\" + line if _MARKDOWN_START.match(line) else line


class _Renderer:
    """Walks the cleaned main content and emits markdown blocks."""

    def __init__(self) -> None:
        self.blocks: list[tuple[str, str, int]] = []  # (kind, text, level)
        self._inline: list[str] = []
        self._label = ""  # an admonition title waiting for its first paragraph

    # -- inline text -----------------------------------------------------------------
    def _flush(self) -> None:
        raw = "".join(self._inline)
        self._inline.clear()
        lines = [_clean(line) for line in raw.split("\n")]
        text = "\n".join(_escape(line) for line in lines if line)
        if not text:
            return
        if self._label:
            text = f"{self._label}: {text}"
            self._label = ""
        self.blocks.append(("p", text, 0))

    def _set_label(self, label: str) -> None:
        self._flush()
        if self._label:  # a label with nothing under it still shows
            self.blocks.append(("p", self._label + ":", 0))
        self._label = label.rstrip(":").strip()

    # -- the walk --------------------------------------------------------------------
    def walk(self, node: LexborNode, depth: int = 0, admonition: bool = False) -> None:
        for child in node.iter(include_text=True):
            tag = child.tag or ""
            if tag == "-text":
                self._inline.append(_SPACE.sub(" ", child.text_content or ""))
                continue
            if tag.startswith("-"):
                continue
            if depth > MAX_DEPTH:
                self._inline.append(" " + (child.text(deep=True) or "") + " ")
                continue
            self._element(child, tag, depth, admonition)

    def _element(
        self, child: LexborNode, tag: str, depth: int, admonition: bool
    ) -> None:
        if tag in _HEADINGS:
            text = _clean(_flat(child))
            if not text:
                return
            if admonition or text.casefold().rstrip(":") in _ADMONITION_WORDS:
                self._set_label(text)
                return
            self._flush()
            self.blocks.append(("h", text, _HEADINGS[tag]))
        elif tag == "pre":
            self._flush()
            self._code(child.text(deep=True) or "")
        elif tag == "br":
            self._inline.append("\n")
        elif tag == "table":
            self._flush()
            self._table(child, depth)
        elif tag in ("ul", "ol", "menu"):
            self._flush()
            self._list(_list_lines(child, 0, depth))
        elif tag == "dl":
            self._flush()
            self._definitions(child, depth, admonition)
        elif tag in _BLOCKS or tag == "li":
            self._flush()
            classes = class_tokens(child)
            if "admonition-title" in classes or (admonition and "title" in classes):
                self._set_label(_clean(_flat(child)))
                return
            inner = admonition or is_admonition(child)
            self.walk(child, depth + 1, inner)
            self._flush()
        elif tag == "img":
            return
        else:
            self.walk(child, depth + 1, admonition)

    def _list(self, lines: list[str]) -> None:
        """One block for a short list; a long one in parts the chunker can pack.

        The chunker keeps a markdown list whole (one block), so a long list (a table
        of contents, an index) is written as groups of lines with bullets it does not
        read as list items ("•", "(1)"), a blank line between groups.
        """
        if sum(len(line) + 1 for line in lines) <= LIST_PART_CHARS:
            if lines:
                self.blocks.append(("list", "\n".join(lines), 0))
            return
        part: list[str] = []
        size = 0
        for line in lines:
            line = _LONG_LIST_MARKER.sub(_long_marker, line, count=1)
            if part and size + len(line) > LIST_PART_CHARS:
                self.blocks.append(("list", "\n".join(part), 0))
                part, size = [], 0
            part.append(line)
            size += len(line) + 1
        if part:
            self.blocks.append(("list", "\n".join(part), 0))

    def _code(self, raw: str) -> None:
        lines = raw.replace("\r\n", "\n").replace("\t", "    ").split("\n")
        while lines and not lines[0].strip():
            lines.pop(0)
        while lines and not lines[-1].strip():
            lines.pop()
        if not lines:
            return
        lines = [line.rstrip() for line in lines]
        longest = max((len(m) for m in re.findall(r"`{3,}", raw)), default=2)
        fence = "`" * max(3, longest + 1)
        part: list[str] = []
        size = 0
        for line in lines:
            if part and size + len(line) > CODE_PART_CHARS:
                self.blocks.append(("code", _fenced(fence, part), 0))
                part, size = [], 0
            part.append(line)
            size += len(line) + 1
        self.blocks.append(("code", _fenced(fence, part), 0))

    def _table(self, table: LexborNode, depth: int) -> None:
        rows: list[list[str]] = []
        header: list[str] | None = None
        for tr in table.css("tr"):
            if _owner_table(tr) != table.mem_id:
                continue  # a nested table's row: read with its cell's text
            cells = [c for c in tr.iter() if c.tag in ("td", "th")]
            texts = [_clean(_flat(c)).replace("|", "\\|") for c in cells]
            if not any(texts):
                continue
            in_head = tr.parent is not None and tr.parent.tag == "thead"
            if (
                header is None
                and not rows
                and (in_head or all(c.tag == "th" for c in cells))
            ):
                header = texts
                continue
            rows.append(texts)
        if any(len(cell) > LAYOUT_CELL_CHARS for row in rows for cell in row) or (
            table.css_first("td ul, td ol, td dl, td pre, td table, td p + p")
        ):
            # A layout table (an index in columns, a page grid): read its cells as
            # ordinary blocks rather than as rows of one giant line each.
            for cell in table.css("td, th"):
                if _owner_table(cell) == table.mem_id:
                    self.walk(cell, depth + 1)
                    self._flush()
            return
        caption = table.css_first("caption")
        if caption is not None and _clean(_flat(caption)):
            self.blocks.append(("p", _escape(_clean(_flat(caption))), 0))
        if header is None and len(rows) <= 1 and sum(len(r) for r in rows) <= 1:
            # A one-cell layout table: read its content as ordinary blocks.
            for cell in table.css("td, th"):
                self.walk(cell, depth + 1)
                self._flush()
            return
        head = (
            ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
            if header
            else []
        )
        part: list[str] = []
        size = 0
        for row in rows:
            line = "| " + " | ".join(row) + " |"
            if part and size + len(line) > TABLE_PART_CHARS:
                self.blocks.append(("table", "\n".join(head + part), 0))
                part, size = [], 0
            part.append(line)
            size += len(line) + 1
        if part or head:
            self.blocks.append(("table", "\n".join(head + part), 0))

    def _definitions(self, dl: LexborNode, depth: int, admonition: bool) -> None:
        for child in dl.iter():
            if child.tag == "dt":
                text = _clean(_flat(child))
                if text:
                    self.blocks.append(("p", _escape(text), 0))
            elif child.tag == "dd":
                self.walk(child, depth + 1, admonition)
                self._flush()
            elif child.tag == "div":  # HTML allows <div> groups of dt/dd
                self._definitions(child, depth + 1, admonition)

    def finish(self) -> list[tuple[str, str, int]]:
        self._flush()
        if self._label:
            self.blocks.append(("p", self._label + ":", 0))
            self._label = ""
        return self.blocks


def _fenced(fence: str, lines: list[str]) -> str:
    return fence + "\n" + "\n".join(lines) + "\n" + fence


def _owner_table(node: LexborNode) -> int | None:
    """The ``mem_id`` of the table a row belongs to (wrappers are not unique)."""
    parent = node.parent
    while parent is not None and parent.tag != "table":
        parent = parent.parent
    return parent.mem_id if parent is not None else None


_FLAT_BREAKS = _BLOCKS | {"li", "tr", "td", "th", "dt", "dd", "pre", "br", "table"}


def _flat(node: LexborNode, depth: int = 0) -> str:
    """All text of ``node``, with a space wherever a block or cell boundary falls."""
    if depth > MAX_DEPTH:
        return node.text(deep=True) or ""
    parts: list[str] = []
    for child in node.iter(include_text=True):
        tag = child.tag or ""
        if tag == "-text":
            parts.append(child.text_content or "")
        elif not tag.startswith("-"):
            gap = " " if tag in _FLAT_BREAKS or tag in _HEADINGS else ""
            parts.append(gap + _flat(child, depth + 1) + gap)
    return "".join(parts)


def _list_lines(node: LexborNode, level: int, depth: int) -> list[str]:
    ordered = node.tag == "ol"
    lines: list[str] = []
    number = 0
    for item in node.iter():
        if item.tag != "li":
            continue
        number += 1
        nested = [c for c in item.iter() if c.tag in ("ul", "ol")]
        own: list[str] = []
        for child in item.iter(include_text=True):
            if child.tag in ("ul", "ol"):
                continue
            if child.tag == "-text":
                own.append(child.text_content or "")
            elif not (child.tag or "").startswith("-"):
                own.append(" " + _flat(child, depth + 1) + " ")
        text = _clean("".join(own))
        marker = f"{number}." if ordered else "-"
        if text:
            lines.append("  " * level + f"{marker} {text}")
        for sub in nested:
            if depth < MAX_DEPTH:
                lines.extend(_list_lines(sub, level + (1 if text else 0), depth + 1))
    return lines


_OTHER_META = ("property", "http-equiv", "itemprop")


def parse_html(html: str) -> ParsedHTML:
    """Read a page: main content as markdown, title, meta tags and content links."""
    tree = LexborHTMLParser(html)
    title_node = tree.css_first("title")
    title = _clean(title_node.text(deep=True) or "") if title_node else ""
    meta = [
        (str(m.attributes.get("name")), m.attributes.get("content") or "")
        for m in tree.css("meta[name]")
        if m.attributes.get("name")
    ]
    other_meta = [
        (attribute, str(m.attributes.get(attribute)))
        for attribute in _OTHER_META
        for m in tree.css(f"meta[{attribute}]")
        if m.attributes.get(attribute) and not m.attributes.get("name")
    ]
    root = main_content(tree)
    if root is None:
        return ParsedHTML("", title, meta, other_meta=other_meta)
    remove_chrome(root, nav_targets(tree))
    links = [
        str(a.attributes.get("href")).strip()
        for a in root.css("a[href]")
        if a.attributes.get("href")
    ]
    renderer = _Renderer()
    renderer.walk(root)
    blocks = renderer.finish()
    title, blocks = _root_title(title, blocks)
    return ParsedHTML(_render(title, blocks), title, meta, links, other_meta)


def _root_title(
    title: str, blocks: list[tuple[str, str, int]]
) -> tuple[str, list[tuple[str, str, int]]]:
    """The page title, and the blocks with that title's own heading removed.

    The first body heading is the title when it equals ``<title>`` or starts it
    ("json — JSON encoder" of "json — JSON encoder — Python 3.11 documentation");
    with no ``<title>``, the first heading is the title.
    """
    first = next((i for i, b in enumerate(blocks) if b[0] == "h"), None)
    if first is None:
        return title, blocks
    heading = blocks[first][1]
    folded, head = title.casefold(), heading.casefold().rstrip(" ¶#")
    if not title or folded == head or (len(head) >= 3 and folded.startswith(head)):
        return heading.rstrip(" ¶"), blocks[:first] + blocks[first + 1 :]
    return title, blocks


def _render(title: str, blocks: list[tuple[str, str, int]]) -> str:
    levels = [level for kind, _, level in blocks if kind == "h"]
    shift = 2 - min(levels) if levels else 0
    out: list[str] = [f"# {title}"] if title else []
    for kind, text, level in blocks:
        if kind == "h":
            out.append("#" * min(6, max(2, level + shift)) + " " + text)
        else:
            out.append(text)
    return "\n\n".join(out).strip() + "\n"


def html_to_markdown(html: str) -> tuple[str, str]:
    """Convert HTML to markdown (main content, headings kept); return (text, title)."""
    parsed = parse_html(html)
    return parsed.text, parsed.title
