"""Page chrome: what on an HTML page is navigation, banner or boilerplate, not content.

Inside the main content (:func:`main_content`), chrome is dropped
(:func:`remove_chrome`): scripts, styles, forms, ``<nav>``, banner
``<header>``/``<footer>``, ``<aside>`` that is not a note, ARIA landmark roles,
elements whose class or id names chrome or whose ``summary``/``aria-label`` says
navigation, and prev/next/up link bars. Lines repeated across most pages of one
ingest are site boilerplate with no markup hint; :func:`repeated_lines` finds them
and :func:`drop_lines` removes them.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence

from selectolax.lexbor import LexborHTMLParser, LexborNode

MAX_DEPTH = 160  # deeper markup is read as flat text (hostile or broken pages)

_DROP_TAGS = frozenset(
    {
        "script",
        "style",
        "noscript",
        "template",
        "nav",
        "form",
        "button",
        "input",
        "select",
        "textarea",
        "iframe",
        "svg",
        "canvas",
        "object",
        "embed",
        "link",
        "meta",
        "head",
        "title",
        "dialog",
    }
)
_DROP_ROLES = frozenset(
    {
        "navigation",
        "banner",
        "contentinfo",
        "search",
        "complementary",
        "menu",
        "dialog",  # cookie and newsletter pop-ups that are not <dialog> elements
        "alertdialog",
    }
)
# Class and id tokens that name page chrome (compared whole, case-insensitively).
_CHROME_TOKENS = frozenset(
    {
        "nav",
        "navbar",
        "navheader",
        "navfooter",
        "navigation",
        "navlinks",
        "menu",
        "menubar",
        "breadcrumb",
        "breadcrumbs",
        "sidebar",
        "sphinxsidebar",
        "sphinxsidebarwrapper",
        "related",
        "footer",
        "masthead",
        "topbar",
        "toolbar",
        "pager",
        "pagination",
        "skiplink",
        "skip-link",
        "skip-links",
        "cookie",
        "cookies",
        "cookie-banner",
        "searchbox",
        "search-box",
        "headerlink",
        "anchorlink",
        "anchor-link",
        "edit-this-page",
        "social",
        "share",
        "advertisement",
        "mobile-nav",
        "site-header",
        "site-footer",
        "page-footer",
    }
)
_CHROME_PREFIXES = ("navbar-", "breadcrumb", "sidebar-", "skip-to")
# Consent and sign-up banners (OneTrust, cookieconsent's cc-window, GDPR notices) and
# the parts of a site's footer or header (footer-links, site-footer-bottom), matched
# on *class* words only: documentation generators derive section ids from headings
# (a "Cookie Objects" section is id="cookie-objects"), so an id counts only when it
# is one of the banner ids those widgets use.
_BANNER_CLASS_PREFIXES = (
    "cookie",
    "onetrust",
    "cc-",
    "consent",
    "gdpr",
    "newsletter",
    "site-footer",
    "site-header",
    "footer-",
)
_BANNER_IDS = frozenset(
    {
        "onetrust-banner-sdk",
        "onetrust-consent-sdk",
        "cookie-notice",
        "cookie-banner",
        "cookie-consent",
        "cookie-law-info-bar",
        "cybotcookiebotdialog",
        "newsletter-signup",
    }
)
_CHROME_SUFFIXES = ("-nav", "-navigation", "-navbar", "-menu", "-sidebar")

_ADMONITION_TOKENS = frozenset(
    {
        "admonition",
        "note",
        "tip",
        "hint",
        "warning",
        "caution",
        "important",
        "attention",
        "danger",
        "error",
        "seealso",
        "callout",
        "alert",
        "notice",
        "versionadded",
        "versionchanged",
        "deprecated",
    }
)

_NAV_RELS = frozenset(
    {
        "prev",
        "previous",
        "next",
        "up",
        "home",
        "start",
        "first",
        "last",
        "index",
        "contents",
        "toc",
    }
)


def class_tokens(node: LexborNode) -> list[str]:
    """The element's class and id words, lower-cased."""
    attrs = node.attributes
    words = f"{attrs.get('class') or ''} {attrs.get('id') or ''}".lower().split()
    return words


def is_admonition(node: LexborNode) -> bool:
    """A note, tip, warning, ... box (kept as content even in a chrome role)."""
    return any(t in _ADMONITION_TOKENS for t in class_tokens(node))


def _is_chrome(node: LexborNode) -> bool:
    tag = node.tag or ""
    if tag in _DROP_TAGS:
        return True
    attrs = node.attributes
    if (attrs.get("role") or "").strip().lower() in _DROP_ROLES:
        return not is_admonition(node)
    if tag == "aside":
        return not is_admonition(node) and not any(
            "footnote" in t for t in class_tokens(node)
        )
    if tag in ("header", "footer") and not _inside_content(node):
        return True
    if attrs.get("hidden") is not None or attrs.get("aria-hidden") == "true":
        return True
    for token in class_tokens(node):
        if (
            token in _CHROME_TOKENS
            or token.startswith(_CHROME_PREFIXES)
            or token.endswith(_CHROME_SUFFIXES)
        ):
            return True
    if (attrs.get("id") or "").strip().lower() in _BANNER_IDS or any(
        word.startswith(_BANNER_CLASS_PREFIXES)
        for word in (attrs.get("class") or "").lower().split()
    ):
        return True
    label = f"{attrs.get('summary') or ''} {attrs.get('aria-label') or ''}".lower()
    if any(word in label for word in ("navigation", "breadcrumb", "cookie", "consent")):
        return True
    return False


def _nav_link_block(node: LexborNode, targets: frozenset[str] = frozenset()) -> bool:
    """A block whose links are prev/next/up/home navigation.

    A link is navigation when it says so (``rel``, ``accesskey``) or when it points
    where the page's own ``<link rel=next|prev|up|...>`` elements point: Texinfo
    repeats its node header at the foot of a page with plain links.
    """
    anchors = node.css("a")
    if len(anchors) < 2 or len(anchors) > 12:
        return False
    nav = sum(1 for a in anchors if _nav_anchor(a, targets))
    return nav >= 2 and nav * 2 >= len(anchors)


def _nav_anchor(anchor: LexborNode, targets: frozenset[str]) -> bool:
    """A link that says it navigates (rel, accesskey) or points at a nav target."""
    rel = (anchor.attributes.get("rel") or "").lower().split()
    return bool(
        anchor.attributes.get("accesskey")
        or any(r in _NAV_RELS for r in rel)
        or (anchor.attributes.get("href") or "").strip() in targets
    )


def nav_targets(tree: LexborHTMLParser) -> frozenset[str]:
    """Where the page's ``<link rel=next|prev|up|contents|...>`` elements point."""
    targets = set()
    for link in tree.css("link[rel][href]"):
        rels = (link.attributes.get("rel") or "").lower().split()
        href = (link.attributes.get("href") or "").strip()
        if href and any(r in _NAV_RELS for r in rels):
            targets.add(href)
    return frozenset(targets)


def main_content(tree: LexborHTMLParser) -> LexborNode | None:
    """``<main>`` or ``[role=main]``, else the single ``<article>``, else body."""
    for selector in ("main", "[role=main]"):
        found = tree.css(selector)
        if len(found) == 1:
            return found[0]
    articles = tree.css("article")
    if len(articles) == 1:
        return articles[0]
    return tree.body


_NAV_BLOCKS = ("table", "div", "p", "ul", "ol")


def remove_chrome(root: LexborNode, targets: frozenset[str] = frozenset()) -> None:
    """Drop chrome elements and navigation link bars from ``root``, in place.

    ``targets``: where the page's ``<link rel=next|prev|...>`` point
    (:func:`nav_targets`).
    """
    doomed: list[LexborNode] = []
    stack: list[tuple[LexborNode, int]] = [(root, 0)]
    while stack:
        node, depth = stack.pop()
        for child in node.iter():
            if _is_chrome(child):
                doomed.append(child)
            elif depth < MAX_DEPTH:
                stack.append((child, depth + 1))
    for node in doomed:
        node.decompose()
    # Navigation bars: the nearest block around links marked rel=next/accesskey=n
    # (one pass from those links up, not a scan of every block's subtree).
    checked: set[int] = set()
    nav: list[LexborNode] = []
    selector = "a[accesskey], a[rel]" + (", a[href]" if targets else "")
    for anchor in root.css(selector):
        # Any rel seeds a look at the block around it, as the selector did alone.
        if not (anchor.attributes.get("rel") or _nav_anchor(anchor, targets)):
            continue
        block = anchor.parent
        for _ in range(4):
            if block is None or block.mem_id == root.mem_id:
                break
            if block.tag in _NAV_BLOCKS:
                if block.mem_id not in checked:
                    checked.add(block.mem_id)
                    if _nav_link_block(block, targets):
                        nav.append(block)
                break
            block = block.parent
    for node in nav:
        node.decompose()


def _inside_content(node: LexborNode) -> bool:
    """Whether a header/footer belongs to an article or section (kept), not the page."""
    parent = node.parent
    while parent is not None:
        if parent.tag in ("article", "section", "main") or (
            parent.attributes.get("role") == "main"
        ):
            return True
        parent = parent.parent
    return False


# --- boilerplate across the pages of one ingest -----------------------------------
REPEATED_SHARE = 0.5
"""A line on at least this share of an ingest's HTML pages is boilerplate."""
REPEATED_MIN_PAGES = 4
"""...and on at least this many pages (fewer pages say nothing about a site)."""


def _content_lines(text: str) -> Iterable[tuple[int, int, str]]:
    """(start, end, normalised line) of each prose line outside fences and headings."""
    fence: str | None = None
    pos = 0
    for line in text.split("\n"):
        start, pos = pos, pos + len(line) + 1
        stripped = line.strip()
        if fence is not None:
            if stripped.startswith(fence):
                fence = None
            continue
        match = re.match(r"(`{3,}|~{3,})", stripped)
        if match:
            fence = match.group(1)
            continue
        if (
            not stripped
            or stripped.startswith("#")
            or re.fullmatch(r"\|( --- \|)+", stripped)
        ):
            continue
        yield start, start + len(line), stripped.casefold()


def repeated_lines(texts: Sequence[str]) -> set[str]:
    """Normalised prose lines that recur on most of these pages (site boilerplate)."""
    if len(texts) < REPEATED_MIN_PAGES:
        return set()
    counts: Counter[str] = Counter()
    for text in texts:
        counts.update({line for _, _, line in _content_lines(text)})
    floor = max(REPEATED_MIN_PAGES, REPEATED_SHARE * len(texts))
    return {line for line, n in counts.items() if n >= floor}


def drop_lines(text: str, doomed: set[str]) -> str:
    """``text`` without the given prose lines; tables left with no rows go too."""
    if not doomed:
        return text
    cut = [(s, e) for s, e, line in _content_lines(text) if line in doomed]
    if not cut:
        return text
    pieces: list[str] = []
    pos = 0
    for start, end in cut:
        pieces.append(text[pos:start])
        pos = min(len(text), end + 1)
    pieces.append(text[pos:])
    kept = "".join(pieces)
    blocks = [b for b in re.split(r"\n{2,}", kept) if b.strip()]
    blocks = [b for b in blocks if not re.fullmatch(r"\|( --- \|)+", b.strip())]
    return "\n\n".join(blocks).strip() + "\n"
