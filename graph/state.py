"""Pipeline state: declared once, with what each key means.

Everything a server serialises is a ``TypedDict`` of JSON-friendly values, so the
graph runs unchanged under LangServe, LangGraph Studio and as a subgraph.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, NotRequired, cast

from typing_extensions import TypedDict

from retrieval_pipeline.tools.store.records import ChunkOutput


class Candidate(TypedDict):
    """A chunk in the candidate pool (provenance is fetched at assembly)."""

    chunk_id: str
    score: float
    """Fused (RRF) score; the max over every branch that found the chunk."""
    ranks: dict[str, int]
    """Best 1-based rank per channel (``lexical``, ``dense``) over all branches."""
    graph_boosted: bool
    """True when graph fusion contributed the chunk."""
    rerank_score: NotRequired[float]
    """Calibrated cross-encoder score in [0, 1], when a reranker scored the chunk."""
    channel_scores: NotRequired[dict[str, float]]
    """Raw score per channel, best over the branches; only when the caller asked for
    debug (a raw BM25 score is a side channel, issue 15)."""
    document_id: NotRequired[str]
    """The chunk's internal document id, as the channel that found it read it
    (graph fusion seeds from it without another statement)."""


def merge_pool(
    left: dict[str, Candidate] | None, right: dict[str, Candidate] | None
) -> dict[str, Candidate]:
    """Merge candidate pools by chunk id, keeping the max score (safe under fan-out).

    Ranks keep the best rank per channel; ``graph_boosted`` is sticky; a rerank score
    from the right side wins (reranking rewrites the pool it read).
    """
    merged: dict[str, Candidate] = dict(left or {})
    for chunk_id, incoming in (right or {}).items():
        current = merged.get(chunk_id)
        if current is None:
            merged[chunk_id] = incoming
            continue
        ranks = dict(current["ranks"])
        for channel, rank in incoming["ranks"].items():
            ranks[channel] = min(rank, ranks.get(channel, rank))
        combined: Candidate = {
            "chunk_id": chunk_id,
            "score": max(current["score"], incoming["score"]),
            "ranks": ranks,
            "graph_boosted": current["graph_boosted"] or incoming["graph_boosted"],
        }
        rerank = incoming.get("rerank_score", current.get("rerank_score"))
        if rerank is not None:
            combined["rerank_score"] = rerank
        document = incoming.get("document_id", current.get("document_id"))
        if document is not None:
            combined["document_id"] = document
        if "channel_scores" in current or "channel_scores" in incoming:
            scores = dict(current.get("channel_scores", {}))
            for channel, raw in incoming.get("channel_scores", {}).items():
                scores[channel] = max(raw, scores.get(channel, raw))
            combined["channel_scores"] = scores
        merged[chunk_id] = combined
    return merged


class Fallback(TypedDict):
    """A stage that fell back, and why (spec: degrade, never fail silently)."""

    stage: str
    reason: str


class BranchDebug(TypedDict, total=False):
    """One retrieval branch in the debug block; timings only with debug."""

    branch: str
    channels: list[str]
    candidates: int
    lexical_ms: float
    lexical_mode: str
    dense_ms: float
    embed_ms: float


class RetrievalDebug(TypedDict, total=False):
    """The debug block (``retrieval_debug``; ``retrievalDebug`` in JSON).

    Every key is optional: each stage writes its own, and :func:`merge_debug` joins
    them. Timings, raw scores and the index revision appear only with ``debug``.
    """

    path: str
    """``pipeline`` or ``plain_retrieve``."""
    rewrite: str | None
    sub_queries: list[str]
    is_ambiguous: bool
    freshness: str | None
    filters: dict[str, Any]
    candidate_pool: int
    graph_added: int
    graph_boosted: int
    graph_seed_entities: int
    graph_expanded_entities: int
    graph_documents: int
    reranked: bool
    reranker_kind: str
    assembled_tokens: int
    assembled_chunks: int
    token_method: str
    duplicates_dropped: int
    budget_dropped: int
    document_share_dropped: int
    fallbacks: list[Fallback]
    branches: list[BranchDebug]
    stage_ms: dict[str, float]
    index_revision: str | None
    invalid_citations: list[str]
    """Citation markers an agent's answer used that match no evidence passage."""
    served_by: list[str]
    """Servers that answered the run's reads (``primary``, ``replica 1``, ...);
    debug only, since read-your-writes routing reflects other callers' writes."""


def merge_debug(
    left: RetrievalDebug | None, right: RetrievalDebug | None
) -> RetrievalDebug:
    """Merge debug blocks: lists concatenate, timings add up, the rest overwrite."""
    merged: dict[str, Any] = dict(left or {})
    for key, value in (right or {}).items():
        if key in ("fallbacks", "branches") and isinstance(value, list):
            merged[key] = [*merged.get(key, []), *value]
        elif key == "served_by" and isinstance(value, list):
            merged[key] = sorted({*merged.get(key, []), *value})
        elif key == "stage_ms" and isinstance(value, dict):
            stage_ms = dict(merged.get("stage_ms", {}))
            for stage, ms in value.items():
                stage_ms[stage] = round(stage_ms.get(stage, 0.0) + ms, 3)
            merged[key] = stage_ms
        else:
            merged[key] = value
    return cast(RetrievalDebug, merged)


class Scope(TypedDict):
    """The caller's answer budget and access scope (pipeline and agent inputs)."""

    limit: NotRequired[int]
    """Answer budget: how many chunks to return (default 8)."""
    doc_ids: NotRequired[list[str] | None]
    """Optional document scope (the sources' own ids); never widens access."""
    principals: NotRequired[list[str]]
    """ACL principals the caller holds; none means public documents only."""
    tenant: NotRequired[str | None]
    """Tenant scope; a tenant caller never sees another tenant's documents."""


class PipelineInput(Scope):
    """What a caller sends."""

    question: str
    """The user's question."""
    debug: NotRequired[bool]
    """Include timings, raw channel scores and the index revision (default False).

    They are side channels: a timing or a raw BM25 score depends on documents the
    caller cannot see (issue 15). Grant it to operators, never to end users."""


class PipelineOutput(TypedDict):
    """What the pipeline returns: the chunks and the debug block only."""

    chunks: list[ChunkOutput]
    """The final ranked chunks with provenance (one shape on every route)."""
    retrieval_debug: Annotated[RetrievalDebug, merge_debug]
    """Counters, timings, fallbacks (serialised in camelCase by :func:`to_json`)."""


class BranchInput(TypedDict):
    """One retrieval branch (the effective query, a sub-query, the original text)."""

    query: str
    channels: list[str]
    branch: str
    question: str
    """The validated question (see ``PipelineState.query``)."""
    doc_ids: NotRequired[list[str] | None]
    principals: NotRequired[list[str]]
    tenant: NotRequired[str | None]
    recency: NotRequired[str | None]
    boost_path_prefix: NotRequired[str | None]
    boost_title: NotRequired[str | None]
    boost_entity_types: NotRequired[list[str]]
    debug: NotRequired[bool]
    trace_key: NotRequired[str | None]
    run_key: str


def keep_trace_key(left: str | None, right: str | None) -> str | None:
    """Every branch of one run writes the same key; keep the first one seen."""
    return left or right


class PipelineState(PipelineInput, PipelineOutput):
    """The whole state: the input, the output, and the working keys below."""

    query: NotRequired[str]
    """The question validated once, at the start (NUL bytes and lone surrogates
    replaced, stripped); written by the first stage."""
    run_key: NotRequired[str]
    """Opaque key of this run, made at the start; names what one stage hands on to
    the next outside the state (:meth:`PipelineResources.hand_on_rows`)."""
    trace_key: Annotated[str | None, keep_trace_key]
    """Opaque per-run key under which the operator trace collects timings
    (:mod:`retrieval_pipeline.observability`); set only while tracing is active."""
    understanding: NotRequired[dict[str, Any] | None]
    """The judge's structured result, when understanding ran."""
    effective_query: NotRequired[str]
    """The query actually run: the rewrite, or the validated question."""
    candidate_pool: Annotated[dict[str, Candidate], merge_pool]
    """Chunks gathered by every branch and by graph fusion, merged by chunk id."""


def camel(name: str) -> str:
    """snake_case to camelCase (``candidate_pool`` -> ``candidatePool``)."""
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def to_json(output: PipelineOutput | Mapping[str, Any]) -> dict[str, Any]:
    """The JSON form: ``chunks`` plus ``retrievalDebug`` in the spec's camelCase.

    Chunks keep their snake_case fields (they are data, not the spec's debug block).
    """
    debug: Mapping[str, Any] = output.get("retrieval_debug", {})
    converted: dict[str, Any] = {}
    for key, value in debug.items():
        if key == "stage_ms" and isinstance(value, dict):
            value = {camel(stage): ms for stage, ms in value.items()}
        elif key in ("branches", "fallbacks") and isinstance(value, list):
            value = [{camel(k): v for k, v in item.items()} for item in value]
        converted[camel(key)] = value
    return {"chunks": output.get("chunks", []), "retrievalDebug": converted}
