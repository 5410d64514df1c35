"""Helpers every node uses: resources, context and timing."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from langgraph.runtime import Runtime

from retrieval_pipeline.graph.context import Context, resolve_context
from retrieval_pipeline.graph.resources import PipelineResources
from retrieval_pipeline.observability import stage_event
from retrieval_pipeline.tools.retrieve import clean_query
from retrieval_pipeline.tools.store.store import AccessScope


def query_of(state: Mapping[str, Any]) -> str:
    """The query the later stages run: the rewrite, else the cleaned question.

    Cleaned as every channel cleans it (NUL bytes and lone surrogates replaced).
    """
    return state.get("effective_query") or clean_query(state["question"])


def context_of(runtime: Runtime[Any] | None) -> Context:
    """The run's :class:`Context` (dict and foreign contexts resolved to defaults)."""
    return resolve_context(runtime.context if runtime is not None else None)


@contextmanager
def stage_timer(debug: dict[str, Any], stage: str) -> Iterator[None]:
    """Record a stage's wall time (ms) into ``debug["stage_ms"][stage]``.

    Also streams ``{"retrieval_pipeline": {"stage", "status", "ms"}}`` custom events
    at the start and end, so a UI can show which stage runs.
    """
    stage_event(stage, "start")
    started = time.perf_counter()
    try:
        yield
    finally:
        elapsed = round((time.perf_counter() - started) * 1000, 3)
        debug.setdefault("stage_ms", {})[stage] = elapsed
        stage_event(stage, "end", elapsed)


def fallback(stage: str, reason: str) -> dict[str, str]:
    """A fallback record for the debug block."""
    return {"stage": stage, "reason": reason}


def access_scope(resources: PipelineResources, state: Mapping[str, Any]) -> AccessScope:
    """The caller's access scope (principals, tenant, document scope) from the state."""
    return resources.retriever.scope(
        principals=state.get("principals") or [],
        tenant=state.get("tenant"),
        doc_ids=state.get("doc_ids"),
    )
