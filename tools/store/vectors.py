"""pgvector values in their text form, the form vectors travel in (no type adapters)."""

from __future__ import annotations

from collections.abc import Sequence


def parse_vector(text: str) -> tuple[float, ...]:
    """A pgvector value in its text form (``[0.1,0.2]``) as floats."""
    return tuple(float(v) for v in text.strip("[]").split(","))


def vector_literal(values: Sequence[float]) -> str:
    """Floats as a pgvector text literal, for a ``%s::vector`` parameter."""
    return "[" + ",".join(map(repr, map(float, values))) + "]"
