"""Voyage and Cohere rerank over their REST protocols (httpx, bounded by a deadline).

Voyage: ``POST {base}/rerank`` with ``{"query", "documents", "model", "top_k"}``,
answering ``{"data": [{"index", "relevance_score"}]}``. Cohere: ``POST
{base}/v2/rerank`` with ``{"model", "query", "documents", "top_n"}``, answering
``{"results": [{"index", "relevance_score"}]}``. Both scores are in [0, 1]. Any
transport error, non-2xx status, malformed body or wrong result count raises
:class:`RerankError` with a reason that never contains the API key.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import httpx

from retrieval_pipeline.errors import ConfigurationError
from retrieval_pipeline.tools.deadline import DeadlineExceeded, call_with_deadline
from retrieval_pipeline.tools.rerankers import RerankError, RerankScore

VOYAGE_BASE_URL = "https://api.voyageai.com/v1"
COHERE_BASE_URL = "https://api.cohere.com"
MAX_DOCUMENT_CHARS = 16_000  # providers truncate anyway; bounds the request size


class _HttpReranker:
    provider = ""
    path = ""
    results_key = ""

    def __init__(self, *, api_key: str, model: str, base_url: str) -> None:
        if not api_key:
            raise ConfigurationError(f"{self.provider} reranking needs an API key")
        self._api_key = api_key
        self.model = model
        self.base_url = base_url.rstrip("/")

    @property
    def kind(self) -> str:
        """Provider and model, e.g. ``voyage:rerank-2.5``."""
        return f"{self.provider}:{self.model}"

    active = True

    def _payload(self, query: str, documents: list[str]) -> dict[str, Any]:
        raise NotImplementedError

    def __repr__(self) -> str:  # never print the key
        return (
            f"{type(self).__name__}(model={self.model!r}, base_url={self.base_url!r})"
        )

    def rerank(
        self, query: str, documents: Sequence[str], *, deadline_s: float
    ) -> list[RerankScore]:
        """Score every document; raise :class:`RerankError` on any failure."""
        if not documents:
            return []
        docs = [d[:MAX_DOCUMENT_CHARS] for d in documents]
        try:
            response = call_with_deadline(
                lambda: httpx.post(
                    self.base_url + self.path,
                    json=self._payload(query, docs),
                    headers={"Authorization": f"Bearer {self._api_key}"},
                    timeout=httpx.Timeout(deadline_s),
                ),
                deadline_s,
            )
        except (httpx.TimeoutException, DeadlineExceeded):
            raise RerankError(f"timeout after {deadline_s:.1f}s") from None
        except httpx.HTTPError as exc:
            raise RerankError(f"transport error: {type(exc).__name__}") from None
        if response.status_code == 429:
            retry = response.headers.get("Retry-After", "?")
            raise RerankError(f"rate limited (429, Retry-After {retry})")
        if not response.is_success:
            raise RerankError(f"HTTP {response.status_code}")
        try:
            rows = response.json()[self.results_key]
            scores = [
                RerankScore(int(r["index"]), float(r["relevance_score"])) for r in rows
            ]
        except (ValueError, KeyError, TypeError) as exc:
            raise RerankError(f"malformed response ({type(exc).__name__})") from None
        indexes = sorted(s.index for s in scores)
        if indexes != list(range(len(docs))):
            raise RerankError(f"expected {len(docs)} results, got {len(scores)}")
        if not all(0.0 <= s.score <= 1.0 for s in scores):
            raise RerankError("scores outside [0, 1]")
        return scores


class VoyageReranker(_HttpReranker):
    """Voyage ``rerank-2.5`` (default model)."""

    provider = "voyage"
    path = "/rerank"
    results_key = "data"

    def __init__(
        self,
        *,
        api_key: str,
        model: str = "rerank-2.5",
        base_url: str | None = None,
    ) -> None:
        super().__init__(
            api_key=api_key,
            model=model,
            base_url=base_url or os.environ.get("VOYAGE_BASE_URL") or VOYAGE_BASE_URL,
        )

    def _payload(self, query: str, documents: list[str]) -> dict[str, Any]:
        return {
            "query": query,
            "documents": documents,
            "model": self.model,
            "top_k": len(documents),
            "truncation": True,
        }


class CohereReranker(_HttpReranker):
    """Cohere ``rerank-v3.5`` (default model)."""

    provider = "cohere"
    path = "/v2/rerank"
    results_key = "results"

    def __init__(
        self,
        *,
        api_key: str,
        model: str = "rerank-v3.5",
        base_url: str | None = None,
    ) -> None:
        super().__init__(
            api_key=api_key,
            model=model,
            base_url=base_url or os.environ.get("COHERE_BASE_URL") or COHERE_BASE_URL,
        )

    def _payload(self, query: str, documents: list[str]) -> dict[str, Any]:
        return {
            "model": self.model,
            "query": query,
            "documents": documents,
            "top_n": len(documents),
        }
