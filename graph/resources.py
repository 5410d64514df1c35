"""What the nodes call, bundled: store, retriever, judge, reranker, token counter.

Built once per compiled pipeline. ``default_resources()`` resolves everything from the
environment lazily, which is what the module-level ``graph`` (LangGraph Studio,
LangServe) uses.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from retrieval_pipeline.tools.rerankers import Reranker, resolve_reranker
from retrieval_pipeline.tools.retrieve import Retriever
from retrieval_pipeline.tools.store.store import AccessScope, Store
from retrieval_pipeline.tools.tokens import TokenCounter, default_token_counter

RowsKey = tuple[str, AccessScope, frozenset[str]]
HANDED_ROWS = 64
"""Row sets kept between two stages of concurrent runs; an older one (a run that
failed between the stages) is dropped. A run that finds none fetches its rows."""


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
    _handed_rows: OrderedDict[RowsKey, dict[str, dict[str, Any]]] = field(
        default_factory=OrderedDict, repr=False
    )
    _rows_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

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

    def hand_on_rows(
        self,
        run_key: str,
        scope: AccessScope,
        pool: Collection[str],
        rows: dict[str, dict[str, Any]],
    ) -> None:
        """Keep the rows a stage fetched for the same run's next stage.

        The reranker fetches the pool's rows and the assembler takes them, so a run
        fetches them once. They stay out of the graph state: node updates stream to
        callers (``/stream``), and a pool's rows are far more than its output.
        """
        with self._rows_lock:
            self._handed_rows[(run_key, scope, frozenset(pool))] = rows
            while len(self._handed_rows) > HANDED_ROWS:
                self._handed_rows.popitem(last=False)

    def take_rows(
        self, run_key: str, scope: AccessScope, pool: Collection[str]
    ) -> dict[str, dict[str, Any]] | None:
        """The rows handed on for this run, scope and pool (taken once), or None."""
        with self._rows_lock:
            return self._handed_rows.pop((run_key, scope, frozenset(pool)), None)


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
