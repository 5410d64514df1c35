"""Helpers every node uses: resources, context, timing, and closing a run.

A node is a plain function ``verb_noun(state, runtime, resources)``; the builder binds
the pipeline's resources (:mod:`retrieval_pipeline.graph.builder`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from langgraph.runtime import Runtime

from retrieval_pipeline.auth import bind_state
from retrieval_pipeline.graph.context import Context, resolve_context
from retrieval_pipeline.graph.resources import PipelineResources
from retrieval_pipeline.graph.state import Fallback, RetrievalDebug
from retrieval_pipeline.observability import (
    emit_trace,
    record_timings,
    stage_event,
    take_timings,
    trace_record,
)
from retrieval_pipeline.tools.store.replicas import recording_servers
from retrieval_pipeline.tools.store.store import AccessScope


def query_of(state: Mapping[str, Any]) -> str:
    """The query the later stages run: the rewrite, else the validated question."""
    return str(state.get("effective_query") or state["query"])


def context_of(runtime: Runtime[Any] | None) -> Context:
    """The run's :class:`Context` (dict and foreign contexts resolved to defaults)."""
    return resolve_context(runtime.context if runtime is not None else None)


def shows_debug(state: Mapping[str, Any]) -> bool:
    """Whether the caller asked for (and may see) timings, raw scores and revisions."""
    return bind_state(state).get("debug") is True


@contextmanager
def stage_timer(
    debug: RetrievalDebug, stage: str, state: Mapping[str, Any]
) -> Iterator[None]:
    """Time a stage for the operator trace, and for the caller only with debug.

    The time goes into ``debug["stage_ms"][stage]`` only when the caller asked for
    debug, and always into the operator trace (when one is being collected).

    Also streams ``{"retrieval_pipeline": {"stage", "status"}}`` custom events at the
    start and end, so a UI can show which stage runs; the end event carries ``ms``
    only with debug (a stage's time depends on documents the caller cannot see).
    With debug, ``debug["served_by"]`` names the servers that answered its reads.
    """
    stage_event(stage, "start")
    started = time.perf_counter()
    with recording_servers() as servers:
        try:
            yield
        finally:
            elapsed = round((time.perf_counter() - started) * 1000, 3)
            record_timings(state.get("trace_key"), stage=stage, ms=elapsed)
            if shows_debug(state):
                debug.setdefault("stage_ms", {})[stage] = elapsed
                if servers:  # which server (primary, replica N) answered the reads
                    served = {*debug.get("served_by", []), *servers}
                    debug["served_by"] = sorted(served)
                stage_event(stage, "end", elapsed)
            else:
                stage_event(stage, "end")


def fallback(stage: str, reason: str) -> Fallback:
    """A fallback record for the debug block."""
    return {"stage": stage, "reason": reason}


def reranker_fallbacks(reranker: object) -> list[Fallback]:
    """A fallback when the reranker asked for by name is not available (else none)."""
    why = getattr(reranker, "unavailable", "")
    return [fallback("rerank", why)] if why else []


def access_scope(resources: PipelineResources, state: Mapping[str, Any]) -> AccessScope:
    """The caller's access scope (principals, tenant, document scope) from the state.

    Bound through :func:`~retrieval_pipeline.auth.bind_state` (the Agent Server's
    authenticated caller, when there is one).
    """
    state = bind_state(state)
    return resources.retriever.scope(
        principals=state.get("principals") or [],
        tenant=state.get("tenant"),
        doc_ids=state.get("doc_ids"),
    )


def run_revision(
    resources: PipelineResources,
    state: Mapping[str, Any],
    tracing: bool,
    known: str | None = None,
) -> str | None:
    """The index revision, only when someone will see it.

    A debug caller sees it in the debug block; the operator trace always holds it.
    ``known`` is the revision the run's lexical channel read with its weights (no
    statement); without it (no channel ran: nothing is indexed yet), one SQL call.
    """
    if not tracing and not shows_debug(state):
        return None
    if known:
        return known
    return resources.store.index_revision(bind_state(state).get("tenant") or "")


def emit_run_trace(
    state: Mapping[str, Any],
    debug: RetrievalDebug,
    chunks: Sequence[Mapping[str, Any]],
    trace_key: str | None,
    revision: str | None,
) -> None:
    """Send the finished run's operator trace record (never returned to a caller)."""
    emit_trace(trace_record(state, operator_debug(debug, trace_key, revision), chunks))


def operator_debug(
    debug: RetrievalDebug, trace_key: str | None, revision: str | None
) -> dict[str, Any]:
    """The debug block as the operator trace sees it (never returned to a caller).

    It holds the run's timings and the index revision, whatever the caller was shown.
    """
    timings = take_timings(trace_key)
    return {
        **debug,
        "stage_ms": timings["stage_ms"] or debug.get("stage_ms", {}),
        "branches": timings["branches"] or debug.get("branches", []),
        "index_revision": revision,
    }
