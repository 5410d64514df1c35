"""Everything measured on one data set: the ladder, its slices and its diagnosis."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from retrieval_pipeline.eval.datasets import BeirDataset
from retrieval_pipeline.eval.report.diagnosis import (
    assembly_metrics,
    build_slices,
    diagnose,
    near_duplicate_slice,
    negatives,
    permission,
)
from retrieval_pipeline.eval.report.ladder import (
    HEADLINE,
    KS,
    Step,
    StepResult,
    compare,
    ladder,
    run_pipeline_step,
)
from retrieval_pipeline.eval.runner import run_channel_configs
from retrieval_pipeline.graph.context import Context
from retrieval_pipeline.tools.retrieve import Retriever

NEGATIVES = 50  # borrowed queries per data set for the negative slice
# Negatives when only one data set is evaluated: everyday questions no scientific,
# medical or encyclopedic passage set here answers.
OFF_TOPIC = (
    "how long should I proof sourdough in a cold kitchen",
    "best way to remove a stripped screw from a laptop hinge",
    "what time does the bakery on my street open on sundays",
    "how do I reset the password of my home router",
    "recommend a board game for four players under ten",
    "why does my bicycle chain click in the lowest gear",
    "how many stitches to cast on for a baby blanket",
    "which houseplant survives a north facing windowsill",
    "how do I stop my dog from barking at the doorbell",
    "what should I pack for a weekend of winter camping",
)


@dataclass
class DatasetReport:
    """Everything measured on one data set."""

    dataset: BeirDataset
    steps: list[StepResult]
    slices: dict[str, dict[str, Any]]
    failures: dict[str, Any]
    assembly: dict[str, Any]
    negatives: dict[str, Any]
    permission: dict[str, Any]
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        """JSON form: summaries, step comparisons, slices, failures, per-query."""
        steps = []
        for i, s in enumerate(self.steps):
            entry: dict[str, Any] = {
                "name": s.step.name,
                "description": s.step.description,
                "summary": s.result.summary(),
                "per_query": {HEADLINE: s.result.per_query[HEADLINE]},
            }
            if i:
                entry["vs_previous"] = compare(self.steps[i - 1], s)
            if s.latency_ms:
                entry["latency_ms_p50"] = statistics.median(s.latency_ms)
                entry["stage_ms_p50"] = _stage_medians(s.debug)
            steps.append(entry)
        return {
            "dataset": self.dataset.name,
            "split": self.dataset.split,
            "split_source": self.dataset.split_source,
            "title_entities": self.dataset.title_entities,
            "queries": len(self.dataset.queries),
            "steps": steps,
            "slices": self.slices,
            "failures": self.failures,
            "assembly": self.assembly,
            "negatives": self.negatives,
            "permission": self.permission,
            "seconds": round(self.seconds, 1),
        }


def _stage_medians(debug: Mapping[str, Mapping[str, Any]]) -> dict[str, float]:
    stages: dict[str, list[float]] = {}
    for d in debug.values():
        for stage, ms in (d.get("stage_ms") or {}).items():
            stages.setdefault(stage, []).append(float(ms))
    return {k: round(statistics.median(v), 2) for k, v in sorted(stages.items())}


def _corpus_text(dataset: BeirDataset) -> dict[str, str]:
    out = {}
    with dataset.corpus_path.open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                r = json.loads(line)
                out[str(r["_id"])] = f"{r.get('title', '')} {r.get('text', '')}"
    return out


def _slices(
    dataset: BeirDataset,
    corpus: Mapping[str, str],
    final: StepResult,
    hybrid: StepResult,
) -> dict[str, dict[str, Any]]:
    """The automatic slices, each scored at the final and hybrid steps (5+ queries)."""
    slices = build_slices(dataset, corpus)
    for spec in slices.values():
        ids = spec["ids"]
        spec["queries"] = len(ids)
        if len(ids) >= 5:
            spec["final"] = final.result.summary(ids)[HEADLINE]
            spec["hybrid"] = hybrid.result.summary(ids)[HEADLINE]
            spec["final_vs_hybrid"] = compare(hybrid, final, ids)
    pressure = near_duplicate_slice(final)
    if pressure["queries"] >= 5:
        pressure["final"] = final.result.summary(pressure["ids"])[HEADLINE]
    slices["near_duplicate_pressure"] = pressure
    return slices


def run_dataset(
    dataset: BeirDataset,
    retriever: Retriever,
    *,
    judge: Any | None = None,
    reranker_available: bool = False,
    borrowed: Sequence[str] = (),
    steps: Sequence[Step] | None = None,
) -> DatasetReport:
    """Run the ladder, slices, diagnosis and assembly metrics on one data set."""
    from retrieval_pipeline.graph.builder import build_pipeline
    from retrieval_pipeline.graph.resources import PipelineResources

    started = time.perf_counter()
    steps = list(steps or ladder(reranker=reranker_available, judge=judge is not None))
    channel_configs = [s.channel for s in steps if s.channel is not None]
    channels = run_channel_configs(dataset, retriever, channel_configs, ks=KS)
    by_name = {r.name: r for r in channels.results}
    graph = build_pipeline(PipelineResources(retriever=retriever, judge=judge))
    results: list[StepResult] = []
    for step in steps:
        if step.channel is not None:
            results.append(StepResult(step, by_name[step.channel.name]))
        else:
            results.append(run_pipeline_step(graph, dataset, step))
    final = results[-1]
    hybrid = next(r for r in results if r.step.name == "hybrid")
    context = final.step.context or Context()
    corpus = _corpus_text(dataset)
    return DatasetReport(
        dataset=dataset,
        steps=results,
        slices=_slices(dataset, corpus, final, hybrid),
        failures=diagnose(final, hybrid, dataset, context.candidate_pool),
        assembly=assembly_metrics(final, dataset, context.token_budget),
        negatives=negatives(graph, dataset, borrowed, context),
        permission=permission(graph, dataset, context, list(corpus)),
        seconds=time.perf_counter() - started,
    )
