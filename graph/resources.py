"""What the nodes call, bundled: store, retriever, judge, reranker, token counter.

Built once per compiled pipeline. ``default_resources()`` resolves everything from the
environment lazily, which is what the module-level ``graph`` (LangGraph Studio,
LangServe) uses.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from retrieval_pipeline.tools.rerankers import Reranker, resolve_reranker
from retrieval_pipeline.tools.retrieve import Retriever
from retrieval_pipeline.tools.store.store import Store
from retrieval_pipeline.tools.tokens import TokenCounter, default_token_counter


@dataclass
class PipelineResources:
    """Adapters shared by the nodes of one pipeline."""

    retriever: Retriever
    judge: Any | None = None
    """A LangChain chat model with structured output, or None (understanding off)."""
    reranker: Reranker | None = None
    """An explicit reranker; None resolves ``context.reranker`` from the environment."""
    counter: TokenCounter = field(default_factory=default_token_counter)
    _rerankers: dict[str, Reranker] = field(default_factory=dict, repr=False)

    @property
    def store(self) -> Store:
        """The PostgreSQL store."""
        return self.retriever.store

    def reranker_for(self, kind: str) -> Reranker:
        """The explicit reranker, else the one ``kind`` resolves to (cached)."""
        if self.reranker is not None:
            return self.reranker
        if kind not in self._rerankers:
            self._rerankers[kind] = resolve_reranker(kind)
        return self._rerankers[kind]


_default: PipelineResources | None = None
_lock = threading.Lock()


def default_resources() -> PipelineResources:
    """Resources from the environment: DATABASE_URL or embedded store, local model."""
    global _default
    with _lock:
        if _default is None:
            from retrieval_pipeline.tools.judge import resolve_judge
            from retrieval_pipeline.tools.retrieve import default_retriever

            _default = PipelineResources(
                retriever=default_retriever(), judge=resolve_judge()
            )
        return _default
