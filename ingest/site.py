"""Passes over all the pages of one ingest: shared boilerplate, and the link graph.

A site is more than its pages one by one. Two things need the whole set:

- **Boilerplate**: a prose line that recurs on most HTML pages of the ingest (a
  footer, a "Prev Up Next Home" bar without markup hints) is chrome, and is removed
  from every page (``retrieval_pipeline.ingest.html.repeated_lines``).
- **Links**: ``<a href>`` between pages and markdown ``[text](other.md)`` links become
  relations that graph fusion follows. Every page that links or is linked gets an
  entity of its own, named ``page:<document id>``, declared by that page alone (so
  graph fusion resolves it to that page with its full weight: its home). A link is a
  ``links_to`` relation from the linking page's entity to the target's, weighted by
  how often the page links there (``min(count, 3) / 3``, the weight graph fusion
  gives a page's repeated mentions). Relative targets (``../x.html#frag``) are
  resolved against the linking file; external links, links to files outside the
  ingest and links of a page to itself are ignored.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING
from urllib.parse import unquote, urldefrag, urljoin, urlsplit

from retrieval_pipeline.ingest.html import drop_lines, repeated_lines
from retrieval_pipeline.tools.store.records import EntitySpec, RelationSpec

if TYPE_CHECKING:  # the loaders import this module
    from retrieval_pipeline.ingest.loaders import SourceDocument

LINK_RELATION = "links_to"
PAGE_ENTITY_PREFIX = "page:"
_MARKDOWN_LINK = re.compile(
    r"(?<!!)\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)"
)
_FENCE = re.compile(r"^[ \t]{0,3}(```+|~~~+).*?^[ \t]{0,3}\1[ \t]*$", re.M | re.S)
_EXTERNAL = ("http:", "https:", "mailto:", "ftp:", "javascript:", "data:", "tel:")


def markdown_links(text: str) -> tuple[str, ...]:
    """The targets of ``[text](target)`` links outside code fences, in order."""
    return tuple(m.group(1) for m in _MARKDOWN_LINK.finditer(_FENCE.sub("", text)))


def page_entity(source_id: str) -> str:
    """The entity name of a page: unique per document, never found in prose."""
    return PAGE_ENTITY_PREFIX + source_id


def _page_uri(uri: str) -> str:
    return unquote(urldefrag(uri)[0]).split("?", 1)[0]


def resolve_links(sources: Sequence[SourceDocument]) -> dict[int, Counter[int]]:
    """For each source (by index), how often it links to each other source."""
    by_uri = {
        _page_uri(s.source_uri): i
        for i, s in enumerate(sources)
        if s.source_uri.startswith("file:") and "#" not in s.source_uri
    }
    graph: dict[int, Counter[int]] = {}
    for index, source in enumerate(sources):
        base = source.source_uri
        for href in source.links:
            target = href.strip()
            if (
                not target
                or target.startswith("#")
                or target.lower().startswith(_EXTERNAL)
                or target.startswith("//")
                or urlsplit(target).scheme not in ("", "file")
            ):
                continue
            found = by_uri.get(_page_uri(urljoin(base, target)))
            if found is None or found == index:
                continue
            graph.setdefault(index, Counter())[found] += 1
    return graph


def prepare_site(
    sources: Sequence[SourceDocument], *, links: bool = True
) -> list[SourceDocument]:
    """Strip shared HTML boilerplate; add page entities and link relations."""
    result = list(sources)
    html = [i for i, s in enumerate(result) if s.kind == "html"]
    doomed = repeated_lines([result[i].content for i in html])
    if doomed:
        for i in html:
            source = result[i]
            cleaned = drop_lines(source.content, doomed)
            result[i] = dataclasses.replace(source, content=cleaned)
    if not links:
        return result
    graph = resolve_links(result)
    linked = set(graph) | {t for targets in graph.values() for t in targets}
    for index in sorted(linked):
        source = result[index]
        name = page_entity(source.source_id)
        relations = tuple(
            RelationSpec(
                source=name,
                target=page_entity(result[t].source_id),
                type=LINK_RELATION,
                weight=min(n, 3) / 3,
            )
            for t, n in sorted(graph.get(index, Counter()).items())
        )
        result[index] = dataclasses.replace(
            source,
            entities=(*source.entities, EntitySpec(name=name)),
            relations=(*source.relations, *relations),
        )
    return result
