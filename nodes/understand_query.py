"""Stage 1: query understanding, one structured judge call."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langgraph.runtime import Runtime

from retrieval_pipeline.graph.resources import PipelineResources
from retrieval_pipeline.graph.state import PipelineState
from retrieval_pipeline.nodes._common import context_of, fallback, stage_timer
from retrieval_pipeline.observability import new_trace_key
from retrieval_pipeline.tools.judge import JudgeError, understand
from retrieval_pipeline.tools.retrieve import clean_query


def make_understand_query(
    resources: PipelineResources,
) -> Callable[[PipelineState, Runtime[Any]], dict[str, Any]]:
    """Build the node; on any judge failure the raw question is used."""

    def understand_query(state: PipelineState, runtime: Runtime[Any]) -> dict[str, Any]:
        question = clean_query(state["question"])
        # The first stage of the run: it opens the operator trace's timing entry.
        trace_key = state.get("trace_key") or new_trace_key()
        debug: dict[str, Any] = {}
        understanding = None
        with stage_timer(debug, "understand_query", {**state, "trace_key": trace_key}):
            try:
                understanding = understand(
                    resources.judge,
                    question,
                    deadline_s=context_of(runtime).judge_deadline_s,
                )
            except JudgeError as exc:
                debug["fallbacks"] = [fallback("understand_query", str(exc))]
        if understanding is None:
            debug.update(rewrite=None, sub_queries=[], is_ambiguous=False)
            return {
                "understanding": None,
                "effective_query": question,
                "retrieval_debug": debug,
                "trace_key": trace_key,
            }
        rewrite = (
            clean_query(understanding.rewrite) if understanding.rewrite else question
        )
        debug.update(
            rewrite=rewrite if rewrite != question else None,
            sub_queries=understanding.sub_queries,
            is_ambiguous=understanding.is_ambiguous,
            freshness=understanding.freshness,
            filters=understanding.filters.model_dump(),
        )
        return {
            "understanding": understanding.model_dump(),
            "effective_query": rewrite,
            "retrieval_debug": debug,
            "trace_key": trace_key,
        }

    return understand_query
