"""Cross-encoder rerankers: Voyage, Cohere, self-hosted ONNX, or none.

One protocol, :class:`Reranker`; :func:`resolve_reranker` picks an implementation by
name. ``auto`` prefers Voyage when ``VOYAGE_API_KEY`` is set, then Cohere when
``COHERE_API_KEY`` is set, then a configured ONNX model, else ``none``. A missing key
or dependency resolves to ``none`` and the stage reports itself inactive; when that
reranker was asked for by name, :attr:`NoReranker.unavailable` says why (the run
records it as a fallback, so a typo'd key is never a silent ``none``); an unknown
name is a :class:`~retrieval_pipeline.errors.ConfigurationError` (a ``ValueError``)
listing the valid choices.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from retrieval_pipeline.errors import ConfigurationError

RERANKER_CHOICES = ("auto", "voyage", "cohere", "onnx", "none")
ONNX_MODEL_ENV = "RETRIEVAL_PIPELINE_RERANKER_ONNX"


class RerankError(Exception):
    """A reranker failed; the pipeline falls back to fused order and records why."""


@dataclass(frozen=True)
class RerankScore:
    """A calibrated relevance score in [0, 1] for the document at ``index``."""

    index: int
    score: float


class Reranker(Protocol):
    """Scores (query, document) pairs jointly."""

    @property
    def kind(self) -> str:
        """Name reported in the debug block (``voyage:rerank-2.5``, ``none``, ...)."""
        ...

    @property
    def active(self) -> bool:
        """False for the identity reranker: the stage is skipped."""
        ...

    def rerank(
        self, query: str, documents: Sequence[str], *, deadline_s: float
    ) -> list[RerankScore]:
        """Return one score per document (any order); raise :class:`RerankError`."""
        ...


class NoReranker:
    """Identity passthrough: keeps the fused order.

    ``unavailable``: why the reranker asked for by name is not there ('' when none
    was asked for, or ``auto`` found none).
    """

    kind = "none"
    active = False

    def __init__(self, unavailable: str = "") -> None:
        self.unavailable = unavailable

    def rerank(
        self, query: str, documents: Sequence[str], *, deadline_s: float
    ) -> list[RerankScore]:
        """Return no scores; callers keep the fused order."""
        return []


def _missing(name: str, why: str) -> str:
    return f"the {name} reranker was asked for but {why}; kept the fused order"


def resolve_reranker(kind: str | None = "auto") -> Reranker:
    """Resolve a reranker by name (see module docstring)."""
    name = (kind or "auto").strip().lower()
    match name:
        case "none":
            return NoReranker()
        case "auto":
            for candidate in ("voyage", "cohere", "onnx"):
                reranker = resolve_reranker(candidate)
                if reranker.active:
                    return reranker
            return NoReranker()
        case "voyage":
            from retrieval_pipeline.tools.rerankers.http import VoyageReranker

            key = os.environ.get("VOYAGE_API_KEY")
            if not key:
                return NoReranker(_missing("voyage", "VOYAGE_API_KEY is not set"))
            return VoyageReranker(api_key=key)
        case "cohere":
            from retrieval_pipeline.tools.rerankers.http import CohereReranker

            key = os.environ.get("COHERE_API_KEY") or os.environ.get("CO_API_KEY")
            if not key:
                return NoReranker(_missing("cohere", "COHERE_API_KEY is not set"))
            return CohereReranker(api_key=key)
        case "onnx":
            path = os.environ.get(ONNX_MODEL_ENV)
            if not path:
                return NoReranker(_missing("onnx", f"{ONNX_MODEL_ENV} is not set"))
            try:
                from retrieval_pipeline.tools.rerankers.onnx import OnnxReranker
            except ImportError:  # onnxruntime or tokenizers absent: inactive
                return NoReranker(
                    _missing("onnx", "onnxruntime or tokenizers is not installed")
                )
            return OnnxReranker(path)
        case _:
            raise ConfigurationError(
                f"unknown reranker '{kind}'; "
                f"choose one of: {', '.join(RERANKER_CHOICES)}"
            )
