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
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urldefrag, urljoin, urlsplit

from retrieval_pipeline.ingest.html import drop_lines, repeated_lines
from retrieval_pipeline.ingest.html_chrome import REPEATED_MIN_PAGES
from retrieval_pipeline.tools.store.records import EntitySpec, RelationSpec

if TYPE_CHECKING:  # the loaders import this module
    from retrieval_pipeline.ingest.loaders import SourceDocument

LINK_RELATION = "links_to"
PAGE_ENTITY_PREFIX = "page:"
# A destination is bare (no spaces) or in angle brackets, which may hold spaces
# (CommonMark: `[t](<my page.md>)`).
_MARKDOWN_LINK = re.compile(
    r"(?<!!)\[[^\]\n]*\]\(\s*(?:<([^<>\n]+)>|([^)\s<>]+))"
    r"(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)"
)
_FENCE = re.compile(r"^[ \t]{0,3}(```+|~~~+).*?^[ \t]{0,3}\1[ \t]*$", re.M | re.S)
_EXTERNAL = ("http:", "https:", "mailto:", "ftp:", "javascript:", "data:", "tel:")


def markdown_links(text: str) -> tuple[str, ...]:
    """The targets of ``[text](target)`` links outside code fences, in order."""
    return tuple(
        m.group(1) or m.group(2) for m in _MARKDOWN_LINK.finditer(_FENCE.sub("", text))
    )


def page_entity(source_id: str) -> str:
    """The entity name of a page: unique per document, never found in prose."""
    return PAGE_ENTITY_PREFIX + source_id


def _page_uri(uri: str) -> str:
    return unquote(urldefrag(uri)[0]).split("?", 1)[0]


def is_page(source: SourceDocument) -> bool:
    """A file of its own (a JSONL record's URI carries ``#id``)."""
    return source.source_uri.startswith("file:") and "#" not in source.source_uri


def _page_key(source: SourceDocument) -> tuple[str, str]:
    return source.tenant, _page_uri(source.source_uri)


def _hrefs(source: SourceDocument) -> Iterator[tuple[str, str]]:
    """(tenant, page URI) of each local link target of ``source``, in order."""
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
        yield source.tenant, _page_uri(urljoin(source.source_uri, target))


def resolve_links(
    sources: Sequence[SourceDocument],
    stored: Mapping[tuple[str, str], str] | None = None,
) -> dict[int, Counter[tuple[str, str]]]:
    """For each source (by index), how often it links to each page.

    Targets are (tenant, source id): pages of this run, or ``stored`` pages
    ((tenant, page URI) -> source id) of earlier ones. Links never cross tenants.
    """
    stored = stored or {}
    by_uri = {_page_key(s): s.source_id for s in sources if is_page(s)}
    graph: dict[int, Counter[tuple[str, str]]] = {}
    for index, source in enumerate(sources):
        for key in _hrefs(source):
            found = by_uri.get(key, stored.get(key))
            if found is None or (key[0], found) == (source.tenant, source.source_id):
                continue
            graph.setdefault(index, Counter())[key[0], found] += 1
    return graph


def outside_links(sources: Sequence[SourceDocument]) -> set[tuple[str, str]]:
    """(tenant, page URI) of link targets that are not pages of this run."""
    here = {_page_key(s) for s in sources if is_page(s)}
    return {key for s in sources for key in _hrefs(s)} - here


def directory_uri(path: Path) -> str:
    """The ``file:`` URI of a directory, ending in ``/`` (a prefix of its pages)."""
    return path.resolve().as_uri().rstrip("/") + "/"


@dataclasses.dataclass(frozen=True)
class SiteMemory:
    """What earlier ingests stored that an ingest of part of a site needs."""

    boilerplate: Mapping[tuple[str, str], frozenset[str]] = dataclasses.field(
        default_factory=dict
    )
    """(tenant, directory URI) -> the boilerplate lines counted under it."""
    pages: Mapping[tuple[str, str], str] = dataclasses.field(default_factory=dict)
    """(tenant, page URI) -> source id of stored pages this run links to."""
    linked: frozenset[tuple[str, str]] = frozenset()
    """(tenant, source id) of this run's pages that stored pages link to."""


@dataclasses.dataclass(frozen=True)
class PreparedSite:
    """The prepared sources, and the boilerplate to remember per directory."""

    sources: list[SourceDocument]
    boilerplate: dict[tuple[str, str], tuple[frozenset[str], int]]
    """(tenant, directory URI) -> (lines, HTML pages they were counted on), for
    each directory ingested with enough HTML pages to count."""


def _boilerplate(
    sources: list[SourceDocument],
    html: list[int],
    roots: Sequence[str],
    remembered: Mapping[tuple[str, str], frozenset[str]],
) -> tuple[dict[int, set[str]], dict[tuple[str, str], tuple[frozenset[str], int]]]:
    fresh = frozenset(repeated_lines([sources[i].content for i in html]))
    pages: Counter[tuple[str, str]] = Counter()
    for i in html:
        uri = sources[i].source_uri
        pages.update((sources[i].tenant, r) for r in roots if uri.startswith(r))
    renewed = {k: (fresh, n) for k, n in pages.items() if n >= REPEATED_MIN_PAGES}
    doomed: dict[int, set[str]] = {}
    for i in html:
        source = sources[i]
        lines = set(fresh)
        for (tenant, root), known in remembered.items():
            if (
                tenant == source.tenant
                and source.source_uri.startswith(root)
                and (tenant, root) not in renewed
            ):
                lines |= known
        doomed[i] = lines
    return doomed, renewed


def prepare_site(
    sources: Sequence[SourceDocument], *, links: bool = True
) -> list[SourceDocument]:
    """Strip shared HTML boilerplate; add page entities and link relations.

    One run on its own: :func:`prepare_pages` with nothing remembered.
    """
    return prepare_pages(sources, links=links).sources


def prepare_pages(
    sources: Sequence[SourceDocument],
    *,
    links: bool = True,
    roots: Sequence[str] = (),
    memory: SiteMemory | None = None,
) -> PreparedSite:
    """Strip shared HTML boilerplate; add page entities and link relations.

    ``roots`` are the directory URIs this run ingests (:func:`directory_uri`).
    ``memory`` holds what earlier ingests stored: a page ingested alone loses the
    boilerplate its directory was found to have, links to stored pages become
    relations, and a page other pages link to keeps declaring its page entity.
    """
    memory = memory or SiteMemory()
    result = list(sources)
    html = [i for i, s in enumerate(result) if s.kind == "html"]
    doomed, renewed = _boilerplate(result, html, roots, memory.boilerplate)
    for i, lines in doomed.items():
        if lines:
            source = result[i]
            result[i] = dataclasses.replace(
                source, content=drop_lines(source.content, lines)
            )
    if not links:
        return PreparedSite(result, renewed)
    graph = resolve_links(result, memory.pages)
    index_of = {(s.tenant, s.source_id): i for i, s in enumerate(result)}
    linked = set(graph) | {
        index_of[key]
        for key in {*memory.linked, *(t for c in graph.values() for t in c)}
        if key in index_of
    }
    for index in sorted(linked):
        source = result[index]
        name = page_entity(source.source_id)
        relations = tuple(
            RelationSpec(
                source=name,
                target=page_entity(target),
                type=LINK_RELATION,
                weight=min(n, 3) / 3,
            )
            for (_, target), n in sorted(graph.get(index, Counter()).items())
        )
        result[index] = dataclasses.replace(
            source,
            entities=(*source.entities, EntitySpec(name=name)),
            relations=(*source.relations, *relations),
        )
    return PreparedSite(result, renewed)
