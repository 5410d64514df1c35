"""Stage 1: query understanding, one structured judge call."""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from retrieval_pipeline.graph.resources import PipelineResources
from retrieval_pipeline.graph.state import PipelineState, RetrievalDebug
from retrieval_pipeline.nodes._common import context_of, fallback, stage_timer
from retrieval_pipeline.observability import new_trace_key
from retrieval_pipeline.tools.judge import JudgeError, understand
from retrieval_pipeline.tools.retrieve import clean_query


def understand_query(
    state: PipelineState, runtime: Runtime[Any], resources: PipelineResources
) -> dict[str, Any]:
    """One structured judge call; on any judge failure the question is run as is.

    The run's first stage: it gets the validated question (``query``) from the start
    router and keeps it in the state for every later stage.
    """
    question = state["query"]
    # The first stage of the run: it opens the operator trace's timing entry.
    trace_key = state.get("trace_key") or new_trace_key()
    debug: RetrievalDebug = {}
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
    update: dict[str, Any] = {
        "query": question,
        "run_key": state["run_key"],
        "retrieval_debug": debug,
        "trace_key": trace_key,
    }
    if understanding is None:
        debug.update({"rewrite": None, "sub_queries": [], "is_ambiguous": False})
        return {**update, "understanding": None, "effective_query": question}
    # The judge's text is new input: validated like a question.
    rewrite = clean_query(understanding.rewrite) if understanding.rewrite else question
    debug.update(
        {
            "rewrite": rewrite if rewrite != question else None,
            "sub_queries": understanding.sub_queries,
            "is_ambiguous": understanding.is_ambiguous,
            "freshness": understanding.freshness,
            "filters": understanding.filters.model_dump(),
        }
    )
    return {
        **update,
        "understanding": understanding.model_dump(),
        "effective_query": rewrite,
    }
