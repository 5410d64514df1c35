"""One structured trace record per query, and stage-progress events.

The record follows the spec's "Operational measurements" (query id, index revision,
per-stage milliseconds, candidate counts, fallbacks, selected passages). It is built
from what the pipeline already computed; it never holds chunk text, the question's
text, principal names or any secret, so it is safe to ship to a log store:

- ``logging``: logger ``retrieval_pipeline.trace``, one JSON object per INFO line
  (the library installs no handler; ``retrieval-pipeline serve`` logs it to stderr);
- OpenTelemetry: one ``retrieval_pipeline.query`` span with the record as attributes
  when ``opentelemetry`` is installed and an SDK tracer provider is configured;
- LangSmith: LangChain's own tracing covers every node when ``LANGSMITH_TRACING`` is
  set; nothing extra is needed;
- in-process listeners (:func:`add_trace_listener`), which the server's Prometheus
  metrics use.

When none of these is active, no record is built and nothing extra runs.

Timings are operator data: they reveal how much work the caller's query did over
documents the caller cannot see (issue 15). The pipeline returns them to a caller only
with ``debug``; for the trace, nodes report them here under the run's opaque
``trace_key`` (:func:`record_timings`), and the last node collects them
(:func:`take_timings`), so they never enter the graph state a stream exposes.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from retrieval_pipeline.graph.context import DUPLICATE_JACCARD

TRACE_LOGGER = logging.getLogger("retrieval_pipeline.trace")
_log = logging.getLogger(__name__)

TraceListener = Callable[[dict[str, Any]], None]
_listeners: list[TraceListener] = []
_listeners_lock = threading.Lock()


def add_trace_listener(listener: TraceListener) -> Callable[[], None]:
    """Call ``listener(record)`` after every query; returns its remover."""
    with _listeners_lock:
        _listeners.append(listener)

    def remove() -> None:
        with _listeners_lock:
            if listener in _listeners:
                _listeners.remove(listener)

    return remove


def tracing_active() -> bool:
    """Whether anyone consumes trace records (log handler, listener, OTel provider).

    The pipeline builds no record (and runs no extra query) when nobody would read it.
    """
    return (
        TRACE_LOGGER.isEnabledFor(logging.INFO)
        or bool(_listeners)
        or _otel_provider() is not None
    )


_PENDING_RUNS = 1024
"""Runs whose timings wait for their trace record; a run that failed midway never
collects its entry, so the oldest are dropped past this bound."""
_pending: OrderedDict[str, dict[str, Any]] = OrderedDict()
_pending_lock = threading.Lock()


def new_trace_key() -> str | None:
    """A fresh opaque key for one run's timings; None when nobody reads traces."""
    return "t_" + uuid.uuid4().hex if tracing_active() else None


def record_timings(
    key: str | None,
    *,
    stage: str | None = None,
    ms: float = 0.0,
    branch: Mapping[str, Any] | None = None,
    revision: str = "",
) -> None:
    """Add to a run's pending trace timings; a no-op without a key.

    ``stage``/``ms``: a stage's milliseconds (summed over branches); ``branch``: one
    branch's channel timings; ``revision``: the index revision a branch's channels
    read (the first one recorded is kept).
    """
    if not key:
        return
    with _pending_lock:
        timings = _pending.setdefault(key, {"stage_ms": {}, "branches": []})
        _pending.move_to_end(key)
        if stage is not None:
            stage_ms = timings["stage_ms"]
            stage_ms[stage] = round(stage_ms.get(stage, 0.0) + ms, 3)
        if branch is not None:
            timings["branches"].append(dict(branch))
        if revision:
            timings.setdefault("index_revision", revision)
        while len(_pending) > _PENDING_RUNS:
            _pending.popitem(last=False)


def recorded_revision(key: str | None) -> str | None:
    """The index revision a run's channels recorded, if any (the run keeps it)."""
    if not key:
        return None
    with _pending_lock:
        revision = _pending.get(key, {}).get("index_revision")
    return str(revision) if revision else None


def take_timings(key: str | None) -> dict[str, Any]:
    """Remove and return a run's timings: ``stage_ms`` and per-branch channel ms."""
    if not key:
        return {"stage_ms": {}, "branches": []}
    with _pending_lock:
        return _pending.pop(key, None) or {"stage_ms": {}, "branches": []}


def _otel_provider() -> Any | None:
    try:
        from opentelemetry import trace
    except ImportError:
        return None
    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return None  # no SDK configured: spans would go nowhere
    return provider


def stage_event(stage: str, status: str, ms: float | None = None) -> None:
    """Stream a stage-progress event (``stream_mode="custom"``) when one can be sent.

    Outside a LangGraph run, or when the caller did not ask for custom events, this
    does nothing.
    """
    try:
        from langgraph.config import get_stream_writer

        writer = get_stream_writer()
    except (RuntimeError, ImportError):
        return
    event: dict[str, Any] = {"stage": stage, "status": status}
    if ms is not None:
        event["ms"] = ms
    writer({"retrieval_pipeline": event})


def duplicate_share(
    texts: Sequence[str], threshold: float = DUPLICATE_JACCARD
) -> float:
    """Share of passages that near-duplicate (Jaccard >= threshold) an earlier one."""
    from retrieval_pipeline.tools.assembly import jaccard, shingles

    if not texts:
        return 0.0
    seen: list[frozenset[int]] = []
    duplicates = 0
    for text in texts:
        current = shingles(text)
        if any(jaccard(current, other) >= threshold for other in seen):
            duplicates += 1
        seen.append(current)
    return duplicates / len(texts)


def _query_id() -> str:
    try:
        from langgraph.config import get_config

        metadata = get_config().get("metadata") or {}
    except (RuntimeError, ImportError):
        metadata = {}
    for key in ("query_id", "run_id"):
        value = metadata.get(key)
        if value:
            return str(value)
    return "q_" + uuid.uuid4().hex[:16]


def trace_record(
    state: Mapping[str, Any],
    debug: Mapping[str, Any],
    chunks: Sequence[Mapping[str, Any]],
) -> dict[str, Any]:
    """The trace record for one finished query (no chunk text, no question text)."""
    stage_ms = dict(debug.get("stage_ms") or {})
    branches = list(debug.get("branches") or [])
    principals = state.get("principals") or []
    return {
        "event": "retrieval_pipeline.query",
        "query_id": _query_id(),
        "ts": datetime.now(UTC).isoformat(timespec="milliseconds"),
        "path": debug.get("path"),
        "index_revision": debug.get("index_revision"),
        "tenant": state.get("tenant"),
        "principal_count": len(principals),
        "scoped": state.get("doc_ids") is not None,
        "question_chars": len(state.get("question") or ""),
        "limit": state.get("limit"),
        "stage_ms": stage_ms,
        "total_ms": round(sum(stage_ms.values()), 3),
        "lexical_ms": round(sum(b.get("lexical_ms", 0.0) for b in branches), 3),
        "dense_ms": round(sum(b.get("dense_ms", 0.0) for b in branches), 3),
        "embed_ms": round(sum(b.get("embed_ms", 0.0) for b in branches), 3),
        "branches": len(branches),
        "fusion_candidates": debug.get("candidate_pool", 0),
        "graph_added": debug.get("graph_added", 0),
        "reranked": debug.get("reranked", False),
        "reranker_kind": debug.get("reranker_kind"),
        "rewritten": debug.get("rewrite") is not None,
        "sub_queries": len(debug.get("sub_queries") or []),
        "fallbacks": [
            {"stage": f.get("stage"), "reason": f.get("reason")}
            for f in debug.get("fallbacks") or []
        ],
        "assembled_tokens": debug.get("assembled_tokens", 0),
        "token_method": debug.get("token_method"),
        "duplicates_dropped": debug.get("duplicates_dropped", 0),
        # The assembler drops every chunk that near-duplicates a selected one, so an
        # assembled context has none by construction; the plain path is measured.
        "duplicate_share": 0.0
        if debug.get("path") == "pipeline"
        else round(duplicate_share([str(c.get("text", "")) for c in chunks]), 4),
        "selected_passages": len(chunks),
        "selected": [
            {
                "chunk_id": c.get("chunk_id"),
                "document_id": c.get("document_id"),
                "score": c.get("score"),
                **({"rerank_score": c["rerank_score"]} if "rerank_score" in c else {}),
            }
            for c in chunks
        ],
        "empty": not chunks,
    }


def emit_trace(record: dict[str, Any]) -> None:
    """Send one record to the log, OpenTelemetry and the listeners; never raises."""
    if TRACE_LOGGER.isEnabledFor(logging.INFO):
        TRACE_LOGGER.info(json.dumps(record, sort_keys=True, default=str))
    _emit_span(record)
    with _listeners_lock:
        listeners = list(_listeners)
    for listener in listeners:
        try:
            listener(record)
        except Exception:  # a metrics bug must never fail a query
            _log.exception("trace listener failed")


def _emit_span(record: Mapping[str, Any]) -> None:
    provider = _otel_provider()
    if provider is None:
        return
    try:
        tracer = provider.get_tracer("retrieval_pipeline")
        end = time.time_ns()
        start = end - int(float(record.get("total_ms", 0.0)) * 1_000_000)
        span = tracer.start_span("retrieval_pipeline.query", start_time=start)
        for key, value in _span_attributes(record).items():
            span.set_attribute(key, value)
        span.end(end_time=end)
    except Exception:  # tracing must never fail a query
        _log.exception("OpenTelemetry span failed")


def _span_attributes(record: Mapping[str, Any]) -> dict[str, Any]:
    attributes: dict[str, Any] = {}
    for key, value in record.items():
        if key == "stage_ms":
            for stage, ms in value.items():
                attributes[f"rp.stage_ms.{stage}"] = float(ms)
        elif key == "selected":
            attributes["rp.selected_chunk_ids"] = [str(s["chunk_id"]) for s in value]
        elif key == "fallbacks":
            attributes["rp.fallbacks"] = [f"{f['stage']}: {f['reason']}" for f in value]
        elif isinstance(value, bool | int | float | str):
            attributes[f"rp.{key}"] = value
    return attributes
