"""pgvector values in their text form, the form vectors travel in (no type adapters)."""

from __future__ import annotations

import functools
from collections.abc import Sequence

LITERAL_CACHE_SIZE = 512
"""Query vectors whose literal is kept: one request sends its vector several times
(each branch's dense search, graph fusion's passages), and a repeated question
sends the same one again. Formatting 384 floats costs about 0.5 ms of CPU."""


def parse_vector(text: str) -> tuple[float, ...]:
    """A pgvector value in its text form (``[0.1,0.2]``) as floats."""
    return tuple(float(v) for v in text.strip("[]").split(","))


def format_vector(values: Sequence[float]) -> str:
    """Floats as a pgvector text literal (uncached: for writes, each vector once)."""
    return "[" + ",".join(map(repr, map(float, values))) + "]"


@functools.lru_cache(maxsize=LITERAL_CACHE_SIZE)
def _literal(values: tuple[float, ...]) -> str:
    return format_vector(values)


def vector_literal(values: Sequence[float]) -> str:
    """A query vector as a pgvector text literal, for a ``%s::vector`` parameter."""
    return _literal(tuple(map(float, values)))
