"""The ablation ladder: its steps, and one pipeline step run over a data set.

The ladder adds one stage at a time (lexical only, dense only, hybrid, + wide pool and
assembler, + graph fusion, + reranker when one is available, + query understanding
when a judge is available); every step carries a bootstrap 95 % CI and a paired
randomization test against the step before it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from retrieval_pipeline.eval.datasets import BeirDataset
from retrieval_pipeline.eval.metrics import chunks_to_documents, evaluate
from retrieval_pipeline.eval.runner import CONFIGS, ChannelConfig, ConfigResult
from retrieval_pipeline.eval.stats import paired_test
from retrieval_pipeline.graph.context import Context
from retrieval_pipeline.observability import duplicate_share

HEADLINE = "ndcg@10"
KS = (1, 5, 10, 20, 100)
LIMIT = 20  # the assembler's cap: enough for @10 and @20


@dataclass(frozen=True)
class Step:
    """One rung of the ablation ladder."""

    name: str
    description: str
    channel: ChannelConfig | None = None
    context: Context | None = None


def ladder(*, reranker: bool, judge: bool) -> list[Step]:
    """The ablation ladder; optional steps only when their component exists."""
    steps = [
        Step("lexical", "BM25 in PostgreSQL", channel=_channel("lexical")),
        Step("dense", "pgvector cosine", channel=_channel("dense")),
        Step("hybrid", "both channels fused", channel=_channel("hybrid")),
        Step(
            "+pool+assembler",
            "wide candidate pool (40) and token-budget assembly",
            context=Context(understanding=False, graph_fusion=False, reranker="none"),
        ),
        Step(
            "+graph",
            "entity-graph local search",
            context=Context(understanding=False, graph_fusion=True, reranker="none"),
        ),
    ]
    if reranker:
        steps.append(
            Step(
                "+rerank",
                "cross-encoder reranking",
                context=Context(
                    understanding=False, graph_fusion=True, reranker="auto"
                ),
            )
        )
    if judge:
        steps.append(
            Step(
                "+understanding",
                "query rewrite and sub-queries",
                context=Context(understanding=True, graph_fusion=True, reranker="auto"),
            )
        )
    return steps


def _channel(name: str) -> ChannelConfig:
    config = CONFIGS[name]
    assert isinstance(config, ChannelConfig)
    return config


@dataclass
class StepResult:
    """Per-query metrics and diagnostics of one step on one data set."""

    step: Step
    result: ConfigResult
    debug: dict[str, dict[str, Any]] = field(default_factory=dict)  # qid -> debug
    latency_ms: list[float] = field(default_factory=list)


def compare(
    a: StepResult, b: StepResult, ids: Sequence[str] | None = None
) -> dict[str, Any]:
    """Paired randomization test of ``b`` against ``a`` on nDCG@10 (all or ``ids``)."""
    qa, qb = a.result.per_query[HEADLINE], b.result.per_query[HEADLINE]
    ids = sorted(ids if ids is not None else qa)
    return paired_test([qa[q] for q in ids], [qb[q] for q in ids]).to_dict()


def run_pipeline_step(graph: Any, dataset: BeirDataset, step: Step) -> StepResult:
    """Every query of ``dataset`` through the pipeline under the step's context."""
    run: dict[str, list[str]] = {}
    debug: dict[str, dict[str, Any]] = {}
    latencies = []
    for qid, text in sorted(dataset.queries.items()):
        started = time.perf_counter()
        out = graph.invoke(
            # debug: the report's per-stage medians come from the debug block.
            {"question": text, "limit": LIMIT, "tenant": dataset.tenant, "debug": True},
            context=step.context,
        )
        latencies.append((time.perf_counter() - started) * 1000)
        docs = [c["document_id"] for c in out["chunks"]]
        run[qid] = chunks_to_documents(docs)
        d = dict(out["retrieval_debug"])
        d["_documents"] = docs
        d["_duplicate_share"] = duplicate_share(
            [c.get("text", "") for c in out["chunks"]]
        )
        debug[qid] = d
    result = ConfigResult(
        step.name, step.description, evaluate(run, dataset.qrels, ks=KS), run
    )
    return StepResult(step, result, debug, latencies)
