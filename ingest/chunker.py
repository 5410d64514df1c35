"""Structural chunking: headings first, then a token cap with a small overlap.

Markdown headings become the heading path; paragraphs, lists and fenced code blocks
are kept whole. A section that exceeds the token cap is packed greedily block by
block; a single block that alone exceeds it is cut at whitespace with an overlap.
Every chunk body is an exact slice ``content[char_start:char_end]`` of the source,
so a citation can point back into it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from retrieval_pipeline.graph.context import CHUNK_MAX_TOKENS, CHUNK_OVERLAP_TOKENS
from retrieval_pipeline.tools.tokens import TokenCounter

_HEADING = re.compile(r"^(#{1,6})[ \t]+(.*?)[ \t#]*$")
_FENCE = re.compile(r"^[ \t]{0,3}(```+|~~~+)")
_LIST_ITEM = re.compile(r"^[ \t]*(?:[-*+]|\d{1,9}[.)])[ \t]+")
_IDENTIFIER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-/:]*[A-Za-z0-9_]")
_PLAIN_NUMBER = re.compile(r"\d+(?:\.\d+)+")


@dataclass(frozen=True)
class Chunk:
    """A span of the source with its structural context."""

    ordinal: int
    heading_path: tuple[str, ...]
    char_start: int
    char_end: int
    body: str
    token_count: int

    def indexed_text(self) -> str:
        """Heading path + body: the text that is embedded and indexed (spec)."""
        return "\n".join([*self.heading_path, self.body])


@dataclass(frozen=True)
class _Block:
    start: int
    end: int
    headings: tuple[str, ...]


def _blocks(text: str, start: int, structured: bool) -> Iterator[_Block]:
    """Split ``text[start:]`` into blocks (paragraphs, lists, code) with headings."""
    headings: list[tuple[int, str]] = []
    pos = start
    block_start: int | None = None
    block_end = start
    fence: str | None = None
    in_list = False

    def path() -> tuple[str, ...]:
        return tuple(h for _, h in headings)

    lines = text[start:].split("\n")
    for line in lines:
        line_start, line_end = pos, pos + len(line)
        pos = line_end + 1
        if fence is not None:
            block_end = line_end
            if line.strip().startswith(fence):
                fence = None
            continue
        stripped = line.strip()
        heading = _HEADING.match(line) if structured else None
        if heading:
            if block_start is not None:
                yield _Block(block_start, block_end, path())
                block_start = None
            level, title = len(heading.group(1)), heading.group(2).strip()
            while headings and headings[-1][0] >= level:
                headings.pop()
            if title:
                headings.append((level, title))
            in_list = False
            continue
        fence_match = _FENCE.match(line) if structured else None
        indented = line[:1] in (" ", "\t")
        gap = block_start is not None and text[block_end:line_start].count("\n") > 1
        if fence_match:
            if block_start is not None and (not in_list or (gap and not indented)):
                yield _Block(block_start, block_end, path())
                block_start = None
            block_start = line_start if block_start is None else block_start
            block_end = line_end
            fence = fence_match.group(1)
            continue
        if not stripped:
            if block_start is not None and not in_list:
                yield _Block(block_start, block_end, path())
                block_start = None
            continue
        is_item = bool(_LIST_ITEM.match(line)) if structured else False
        if block_start is not None and in_list and gap and not (is_item or indented):
            # A blank line ended the list and a new paragraph begins.
            yield _Block(block_start, block_end, path())
            block_start = None
        if block_start is None:
            block_start = line_start
            in_list = is_item
        elif is_item:
            in_list = True
        block_end = line_end
    if block_start is not None:
        yield _Block(block_start, block_end, path())


def chunk_text(
    text: str,
    *,
    counter: TokenCounter,
    start: int = 0,
    structured: bool = True,
    base_headings: tuple[str, ...] = (),
    max_tokens: int = CHUNK_MAX_TOKENS,
    overlap_tokens: int = CHUNK_OVERLAP_TOKENS,
) -> list[Chunk]:
    """Chunk ``text[start:]``; ``structured`` enables markdown headings, lists, code."""
    if max_tokens < 16 or not 0 <= overlap_tokens < max_tokens // 2:
        raise ValueError(
            "need max_tokens >= 16 and 0 <= overlap_tokens < max_tokens / 2"
        )
    spans: list[tuple[int, int, tuple[str, ...]]] = []
    section: list[_Block] = []

    def flush() -> None:
        if section:
            spans.extend(_pack(text, section, counter, max_tokens, overlap_tokens))
            section.clear()

    for block in _blocks(text, start, structured):
        if section and block.headings != section[-1].headings:
            flush()
        section.append(block)
    flush()
    chunks = []
    for ordinal, (lo, hi, headings) in enumerate(spans):
        body = text[lo:hi]
        full_path = base_headings + tuple(
            h for h in headings if h not in base_headings[-1:]
        )
        chunks.append(Chunk(ordinal, full_path, lo, hi, body, counter.count(body)))
    return chunks


def _pack(
    text: str,
    blocks: list[_Block],
    counter: TokenCounter,
    max_tokens: int,
    overlap: int,
) -> Iterator[tuple[int, int, tuple[str, ...]]]:
    headings = blocks[0].headings
    current: tuple[int, int] | None = None
    for block in blocks:
        tokens = counter.count(text[block.start : block.end])
        if tokens > max_tokens:
            if current is not None:
                yield (*current, headings)
                current = None
            for lo, hi in _split_long(
                text, block.start, block.end, counter, max_tokens, overlap
            ):
                yield lo, hi, headings
            continue
        if current is None:
            current = (block.start, block.end)
            continue
        if counter.count(text[current[0] : block.end]) <= max_tokens:
            current = (current[0], block.end)
        else:
            yield (*current, headings)
            current = (block.start, block.end)
    if current is not None:
        yield (*current, headings)


def _split_long(
    text: str,
    start: int,
    end: int,
    counter: TokenCounter,
    max_tokens: int,
    overlap: int,
) -> Iterator[tuple[int, int]]:
    """Cut an oversized block into windows at whitespace, overlapping ~``overlap``."""
    words = [
        (m.start() + start, m.end() + start)
        for m in re.finditer(r"\S+", text[start:end])
    ]
    i = 0
    while i < len(words):
        # Grow the window by word until it would exceed the cap (binary search).
        lo, hi = i + 1, len(words)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if counter.count(text[words[i][0] : words[mid - 1][1]]) <= max_tokens:
                lo = mid
            else:
                hi = mid - 1
        j = max(lo, i + 1)
        yield words[i][0], words[j - 1][1]
        if j >= len(words):
            break
        # Step back so the next window repeats about `overlap` tokens of this one.
        k = j
        while (
            k > i + 1
            and counter.count(text[words[k - 1][0] : words[j - 1][1]]) <= overlap
        ):
            k -= 1
        i = max(k, i + 1) if overlap else j


def extract_identifiers(text: str, limit: int = 256) -> tuple[str, ...]:
    """Identifier-like tokens (ERR_CONN_RESET, v2.3.1, getUserById), lowercased.

    A token qualifies when it mixes letters and digits, contains an underscore, is
    camelCase, or is dotted/hyphenated with digits: the tokens that stemming and
    word-splitting would otherwise break apart.
    """
    found: dict[str, None] = {}
    for match in _IDENTIFIER.finditer(text):
        token = match.group(0).strip(".-/:")
        if len(token) < 2 or len(token) > 64:
            continue
        if _PLAIN_NUMBER.fullmatch(token):
            # 2.5, 0.05, 2.3.1: the prose field already holds such a number whole
            # (PostgreSQL's float/version tokens); as an identifier too it would
            # count twice (issue 18: a technical collection full of decimals).
            continue
        has_digit = any(c.isdigit() for c in token)
        has_alpha = any(c.isalpha() for c in token)
        camel = re.search(r"[a-z][A-Z]", token) is not None
        if (
            "_" in token
            or (has_digit and has_alpha)
            or camel
            or (has_digit and re.search(r"\d[.\-]\d", token))
        ):
            found.setdefault(token.lower(), None)
            if len(found) >= limit:
                break
    return tuple(found)
