"""Routers: which stages run, decided per run from the context and what is available.

Inactive means unavailable, not only switched off: understanding without a judge
model, a reranker that resolves to ``none``, graph fusion disabled. With all three
inactive the run goes to ``plain_retrieve`` and skips the assembler.

:func:`route_start` validates the input once; the validated question travels to the
first stage (in its ``Send``), which keeps it in the state as ``query``.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, Literal

from langgraph.runtime import Runtime
from langgraph.types import Send

from retrieval_pipeline.auth import bind_state
from retrieval_pipeline.errors import InvalidQueryError
from retrieval_pipeline.graph.context import Context
from retrieval_pipeline.graph.resources import PipelineResources
from retrieval_pipeline.graph.state import BranchInput, PipelineState
from retrieval_pipeline.nodes._common import context_of
from retrieval_pipeline.observability import new_trace_key
from retrieval_pipeline.tools.query import check_limit, check_scope_values, clean_query
from retrieval_pipeline.tools.retrieve import CHANNELS


@dataclass(frozen=True)
class ActiveStages:
    """Which optional stages will run."""

    understanding: bool
    graph_fusion: bool
    rerank: bool

    @property
    def any(self) -> bool:
        """True when at least one optional stage is active."""
        return self.understanding or self.graph_fusion or self.rerank


def active_stages(resources: PipelineResources, ctx: Context) -> ActiveStages:
    """Resolve availability: a toggle and the resource it needs."""
    return ActiveStages(
        understanding=ctx.understanding and resources.judge is not None,
        graph_fusion=ctx.graph_fusion,
        rerank=resources.reranker_for(ctx.reranker).active,
    )


def route_start(
    state: PipelineState, runtime: Runtime[Any], resources: PipelineResources
) -> Literal["plain_retrieve"] | list[Send]:
    """Validate the input, then pick the first stage (understanding or the branches).

    Sends go to ``understand_query`` or ``hybrid_retrieve`` with the validated
    question and a fresh run key; the plain path's ``retrieve`` validates its own
    input.
    """
    query = validate_input(state)
    stages = active_stages(resources, context_of(runtime))
    if not stages.any:
        return "plain_retrieve"
    started: PipelineState = {**state, "query": query, "run_key": uuid.uuid4().hex}
    if stages.understanding:
        return [Send("understand_query", started)]
    return branches(started)


def route_after_retrieve(
    state: PipelineState, runtime: Runtime[Any], resources: PipelineResources
) -> Literal["fuse_graph", "rerank", "assemble_context"]:
    """Graph fusion when active, else reranking when active, else assembly."""
    stages = active_stages(resources, context_of(runtime))
    if stages.graph_fusion:
        return "fuse_graph"
    return "rerank" if stages.rerank else "assemble_context"


def route_after_graph(
    state: PipelineState, runtime: Runtime[Any], resources: PipelineResources
) -> Literal["rerank", "assemble_context"]:
    """Reranking when active, else assembly."""
    stages = active_stages(resources, context_of(runtime))
    return "rerank" if stages.rerank else "assemble_context"


def branches(state: PipelineState) -> list[Send]:
    """Fan out retrieval: effective query, the original as lexical, sub-queries.

    The original question stays a lexical branch whenever the rewrite differs, so a
    rare identifier the rewrite dropped still matches (spec: "Preserve the original
    query as one branch").
    """
    state = bind_state(state)  # type: ignore[assignment]
    question = state["query"]
    effective = state.get("effective_query") or question
    understanding: dict[str, Any] = state.get("understanding") or {}
    filters: dict[str, Any] = understanding.get("filters") or {}
    # Without query understanding the branches are the run's first stage.
    trace_key = state.get("trace_key") or new_trace_key()

    def branch(query: str, channels: list[str], name: str) -> BranchInput:
        return BranchInput(
            query=query,
            channels=channels,
            branch=name,
            question=question,
            doc_ids=state.get("doc_ids"),
            principals=state.get("principals") or [],
            tenant=state.get("tenant"),
            recency=understanding.get("freshness"),
            boost_path_prefix=filters.get("path_prefix"),
            boost_title=filters.get("doc_title_contains"),
            boost_entity_types=list(filters.get("entity_types") or []),
            debug=state.get("debug") is True,
            trace_key=trace_key,
            run_key=state["run_key"],
        )

    planned = [branch(effective, list(CHANNELS), "main")]
    if effective != question:
        planned.append(branch(question, ["lexical"], "original"))
    for n, sub_query in enumerate(understanding.get("sub_queries") or [], start=1):
        # The judge's sub-queries are new input: validated like a question.
        planned.append(branch(clean_query(sub_query), list(CHANNELS), f"sub_query_{n}"))
    return [Send("hybrid_retrieve", branch) for branch in planned]


def validate_input(state: PipelineState) -> str:
    """Fail fast on a bad question, limit or scope; return the validated question."""
    state = bind_state(state)  # type: ignore[assignment]
    query = clean_query(state.get("question"))
    if "debug" in state and not isinstance(state["debug"], bool):
        raise InvalidQueryError("debug must be true or false")
    if "limit" in state:
        check_limit(state["limit"])
    check_scope_values(
        state.get("principals") or [], state.get("tenant"), state.get("doc_ids")
    )
    return query
