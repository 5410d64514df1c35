"""Query text: validation, web-search syntax, and the lexical channel's prose form.

Every entry point validates a question once with :func:`clean_query` (the pipeline
keeps the clean text in its state); :func:`check_limit` and
:func:`check_scope_values` reject an answer budget or access values no stored row
can hold.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from retrieval_pipeline.errors import InvalidQueryError
from retrieval_pipeline.graph.context import MAX_LIMIT, MAX_QUERY_CHARS


def clean_query(question: object) -> str:
    """Validate and normalise a query; raise :class:`InvalidQueryError` with the fix."""
    if not isinstance(question, str):
        raise InvalidQueryError(
            f"the question must be a string, not {type(question).__name__}"
        )
    # PostgreSQL text cannot hold NUL, and lone surrogates cannot be encoded as UTF-8.
    text = question.replace("\x00", " ").encode("utf-8", "replace").decode("utf-8")
    text = text.strip()
    if not text:
        raise InvalidQueryError("the question is empty; ask something in words")
    if len(text) > MAX_QUERY_CHARS:
        raise InvalidQueryError(
            f"the question is {len(text):,} characters; the limit is "
            f"{MAX_QUERY_CHARS:,}. "
            "Shorten it to the information need, or retrieve per passage."
        )
    return text


@dataclass(frozen=True)
class WebQuery:
    """A query split into ranking text, phrases to favour and exclusions."""

    text: str  # what BM25 and the embedder see: exclusions removed, quotes dropped
    phrases: str | None  # quoted phrases ('"a b" "c d"'): matching chunks rank first
    constraint: str | None  # -exclusions: no result of any channel may match them


_PHRASE = re.compile(r'(?<![\w-])"([^"]+)"')
# An exclusion is one dash before a quoted phrase or a word of two or more
# characters starting with a letter. Command-line syntax is text, not negation:
# "octave --eval", "mkoctfile --mex" and "python -m venv" ask about those options
# (issue 18: read as exclusions, they removed every chunk that documents them), and
# "-10" is a number. A run of dashes is punctuation, never nested negations
# (websearch_to_tsquery overflows its stack on a few dozen of them).
_EXCLUSION = re.compile(r'(?<!\S)-(?!-)("[^"]*\w[^"]*"|[^\W\d_][^\s"]+)')


def parse_websearch(query: str) -> WebQuery:
    """Read web-search syntax as ``websearch_to_tsquery`` does, softened for questions.

    ``-term`` and ``-"phrase"`` exclude, in every channel. ``"quoted phrases"`` rank
    the chunks that contain them first in the lexical channel but exclude nothing:
    questions quote titles, and in multi-hop questions the second passage does not
    repeat the quoted title (a hard phrase filter cost 0.03 nDCG@10 on HotpotQA).
    ``OR`` needs nothing: candidates are already an OR over the terms.
    """
    exclusions = [m.group(1) for m in _EXCLUSION.finditer(query)]
    remaining = _EXCLUSION.sub(" ", query)
    phrases = [
        m.group(1).strip()
        for m in _PHRASE.finditer(remaining)
        if re.search(r"\w", m.group(1))
    ]
    text = (
        " ".join(remaining.replace('"', " ").split()) or query.replace('"', " ").strip()
    )
    return WebQuery(
        text=text,
        phrases=" ".join(f'"{p}"' for p in phrases) or None,
        constraint=" ".join(f"-{e}" for e in exclusions) or None,
    )


# PostgreSQL's parser reads "AMP-activated" as the compound "amp-activ" beside its
# parts, and the "-85" of "76-85" as a signed number. Left in a query, a compound is
# one more rare term that only the very same spelling matches (so it outweighs the
# words themselves), and "-85" never meets the "85" of another writing. bm25s and
# Lucene split at hyphens; so does the prose field's query (issue 18: SciFact dev
# nDCG@10 0.6998 -> 0.7078 for the lexical channel; bench/lexical_parity.py). The
# identifier field still matches the whole token (IL-2, 76-85, ERR-CONN-RESET).
_INNER_HYPHEN = re.compile(r"(?<=\w)-(?=\w)")


def prose_query(text: str) -> str:
    """The lexical channel's prose text: inner hyphens read as spaces."""
    return _INNER_HYPHEN.sub(" ", text)


def check_scope_values(
    principals: object = (), tenant: object = None, doc_ids: object = None
) -> None:
    """Reject access values no stored row can hold, with a clear error.

    NUL bytes, unpaired surrogates and non-text would otherwise fail in the database.
    """

    def bad(value: object) -> bool:
        if not isinstance(value, str):
            return True
        if "\x00" in value:
            return True
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return True
        return False

    if principals is None:
        raise InvalidQueryError(
            "principals must be a list of strings; pass [] for public documents only"
        )
    for name, values in (("principals", principals), ("doc_ids", doc_ids)):
        if values is None:
            continue
        if isinstance(values, str) or not isinstance(
            values, list | tuple | set | frozenset
        ):
            raise InvalidQueryError(f"{name} must be a list of strings")
        if any(bad(v) for v in values):
            raise InvalidQueryError(
                f"{name} must be strings without NUL bytes or unpaired surrogates"
            )
    if tenant is not None and bad(tenant):
        raise InvalidQueryError(
            "tenant must be a string without NUL bytes or unpaired surrogates"
        )


def check_limit(limit: object) -> int:
    """Validate an answer budget (number of chunks)."""
    if (
        isinstance(limit, bool)
        or not isinstance(limit, int)
        or not 1 <= limit <= MAX_LIMIT
    ):
        raise InvalidQueryError(
            f"limit must be an integer from 1 to {MAX_LIMIT}, got {limit!r}"
        )
    return limit
