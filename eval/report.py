"""The evaluation report: per-stage ablation, slices, failure diagnosis, plots.

For each data set the ablation ladder adds one stage at a time (lexical only, dense
only, hybrid, + wide pool and assembler, + graph fusion, + reranker when one is
available, + query understanding when a judge is available); every step carries a
bootstrap 95 % CI and a paired randomization test against the step before it.

Slices are built from the data itself (how each is made is written beside it in the
report): identifiers and quoted phrases, paraphrases with little lexical overlap,
multi-passage questions, negative queries (questions from another data set, which
have no supporting evidence here), a permission boundary (half of each query's
relevant documents withheld by the SQL scope filter), and near-duplicate pressure
(queries whose candidate pool held near-duplicates the assembler dropped).

Failure diagnosis, for every relevant document missing from a query's top 10 at the
final step: *absent* (in no candidate list), *ranked low* (a candidate, but below
the pool cut), *omitted* (inside the pool, left out of the assembled context's top
10 by budget, duplicate drop, per-document share or order).
"""

from __future__ import annotations

import base64
import html
import io
import re
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from retrieval_pipeline.eval.datasets import BeirDataset
from retrieval_pipeline.eval.metrics import chunks_to_documents, evaluate
from retrieval_pipeline.eval.runner import (
    CONFIGS,
    ChannelConfig,
    ConfigResult,
    run_channel_configs,
)
from retrieval_pipeline.eval.stats import bootstrap_ci, paired_test
from retrieval_pipeline.graph.context import Context
from retrieval_pipeline.observability import duplicate_share
from retrieval_pipeline.tools.retrieve import Retriever

HEADLINE = "ndcg@10"
KS = (1, 5, 10, 20, 100)
LIMIT = 20  # the assembler's cap: enough for @10 and @20
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
_WORD = re.compile(r"[a-z0-9]+")
_IDENTIFIER = re.compile(r"\w*[_\d]\w*|[a-z]+[A-Z]\w*|\"[^\"]+\"")


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
                entry["vs_previous"] = _compare(self.steps[i - 1], s)
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


def _compare(a: StepResult, b: StepResult, ids: Sequence[str] | None = None) -> dict:  # type: ignore[type-arg]
    qa, qb = a.result.per_query[HEADLINE], b.result.per_query[HEADLINE]
    ids = sorted(ids if ids is not None else qa)
    return paired_test([qa[q] for q in ids], [qb[q] for q in ids]).to_dict()


def _stage_medians(debug: Mapping[str, Mapping[str, Any]]) -> dict[str, float]:
    stages: dict[str, list[float]] = {}
    for d in debug.values():
        for stage, ms in (d.get("stage_ms") or {}).items():
            stages.setdefault(stage, []).append(float(ms))
    return {k: round(statistics.median(v), 2) for k, v in sorted(stages.items())}


# --- slices -----------------------------------------------------------------------


def _words(text: str) -> set[str]:
    return {w[:6] for w in _WORD.findall(text.lower()) if len(w) > 2}  # crude stem


def build_slices(dataset: BeirDataset, corpus_text: Mapping[str, str]) -> dict:  # type: ignore[type-arg]
    """Query-id lists for the automatic slices, with how each was made."""
    overlap = {}
    for qid, text in dataset.queries.items():
        relevant = [d for d, g in dataset.qrels[qid].items() if g > 0]
        q = _words(text)
        best = (
            max(
                (len(q & _words(corpus_text.get(d, ""))) / len(q) for d in relevant),
                default=0.0,
            )
            if q
            else 0.0
        )
        overlap[qid] = best
    cut = statistics.quantiles(sorted(overlap.values()), n=4)[0] if overlap else 0
    return {
        "identifiers_and_quotes": {
            "how": "query holds a quoted phrase, digits, underscores or camelCase",
            "ids": sorted(
                q for q, t in dataset.queries.items() if _IDENTIFIER.search(t)
            ),
        },
        "low_overlap_paraphrase": {
            "how": f"best share of query words found in a relevant document "
            f"<= {cut:.2f} (the lowest quartile)",
            "ids": sorted(q for q, v in overlap.items() if v <= cut),
        },
        "multi_passage": {
            "how": "two or more relevant documents",
            "ids": sorted(
                q
                for q, d in dataset.qrels.items()
                if q in dataset.queries and sum(g > 0 for g in d.values()) >= 2
            ),
        },
    }


# --- running ----------------------------------------------------------------------


def _run_pipeline_step(graph: Any, dataset: BeirDataset, step: Step) -> StepResult:
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


def _assembly_metrics(
    final: StepResult, dataset: BeirDataset, budget: int
) -> dict[str, Any]:
    used, dup, in_context, distinct, first = [], [], [], [], []
    for qid, d in final.debug.items():
        used.append(d.get("assembled_tokens", 0) / budget)
        pool = max(d.get("candidate_pool", 0), 1)
        dup.append(d.get("duplicates_dropped", 0) / pool)
        in_context.append(d["_duplicate_share"])
        docs = d["_documents"][:10]
        distinct.append(len(set(docs)))
        relevant = {x for x, g in dataset.qrels[qid].items() if g > 0}
        pos = next(
            (i + 1 for i, x in enumerate(d["_documents"]) if x in relevant), None
        )
        if pos is not None:
            first.append(pos)
    return {
        "budget_tokens": budget,
        "tokens_used_share": bootstrap_ci(used).to_dict(),
        "duplicate_share_of_pool": bootstrap_ci(dup).to_dict(),
        "duplicate_share_in_context": bootstrap_ci(in_context).to_dict(),
        "distinct_documents_top10": bootstrap_ci(distinct).to_dict(),
        "first_relevant_position_median": statistics.median(first) if first else None,
        "first_relevant_found": len(first),
    }


CAUSES = ("absent", "ranked_low", "omitted")


def _diagnose(
    final: StepResult, hybrid: StepResult, dataset: BeirDataset, pool: int
) -> dict[str, Any]:
    """Why each relevant document missing from the final top 10 is missing.

    Per missing (query, relevant document): *absent* from the deep fused candidate
    list (100 chunks per channel), *ranked_low* (a candidate below the pool cut), or
    *omitted* (inside the pool, left out of the top 10 of the assembled context).
    """
    missing = dict.fromkeys(CAUSES, 0)
    examples: dict[str, list[str]] = {k: [] for k in CAUSES}
    per_query: dict[str, dict[str, str]] = {}
    complete = 0
    for qid in sorted(dataset.queries):
        relevant = sorted(x for x, g in dataset.qrels[qid].items() if g > 0)
        top = set(final.result.run.get(qid, [])[:10])
        candidates = hybrid.result.run.get(qid, [])  # deep, fused
        rank = {doc: i + 1 for i, doc in reversed(list(enumerate(candidates)))}
        causes = {}
        for doc in relevant:
            if doc in top:
                continue
            if doc not in rank:
                cause = "absent"
            elif rank[doc] > pool:
                cause = "ranked_low"
            else:
                cause = "omitted"
            causes[doc] = cause
            missing[cause] += 1
            if qid not in examples[cause] and len(examples[cause]) < 5:
                examples[cause].append(qid)
        if causes:
            per_query[qid] = causes
        else:
            complete += 1
    return {
        "queries_complete": complete,
        "queries_with_missing": len(per_query),
        "missing_by_cause": missing,
        "examples": examples,
        "per_query": per_query,
    }


def _negatives(
    graph: Any, dataset: BeirDataset, borrowed: Sequence[str], context: Context
) -> dict[str, Any]:
    empty = 0
    for text in borrowed:
        out = graph.invoke(
            {"question": text, "limit": LIMIT, "tenant": dataset.tenant},
            context=context,
        )
        if not out["chunks"]:
            empty += 1
    n = max(len(borrowed), 1)
    return {
        "how": "questions from another data set: nothing here supports them",
        "queries": len(borrowed),
        "empty_result_rate": empty / n,
        "false_positive_rate": (len(borrowed) - empty) / n,
        "note": "the pipeline has no abstention threshold, so every negative query "
        "returns context; the rate is reported so a threshold can be judged",
    }


def _permission(
    graph: Any,
    dataset: BeirDataset,
    context: Context,
    corpus_ids: Sequence[str],
    max_queries: int = 60,
) -> dict[str, Any]:
    """Withhold every other relevant document through the SQL scope filter."""
    leaks = 0
    recall_visible = []
    tried = 0
    for qid in sorted(q for q in dataset.queries if len(dataset.qrels[q]) >= 2)[
        :max_queries
    ]:
        relevant = sorted(x for x, g in dataset.qrels[qid].items() if g > 0)
        withheld = set(relevant[1::2])
        if not withheld:
            continue
        tried += 1
        allowed = [d for d in corpus_ids if d not in withheld]
        out = graph.invoke(
            {
                "question": dataset.queries[qid],
                "limit": LIMIT,
                "tenant": dataset.tenant,
                "doc_ids": allowed,
            },
            context=context,
        )
        docs = {c["document_id"] for c in out["chunks"]}
        leaks += len(docs & withheld)
        visible = set(relevant) - withheld
        recall_visible.append(len(docs & visible) / len(visible))
    return {
        "how": "every other relevant document withheld by the document-scope filter "
        "(the same SQL predicate position as the ACL filter)",
        "queries": tried,
        "withheld_documents_returned": leaks,
        "recall_of_visible_evidence": bootstrap_ci(recall_visible).to_dict()
        if recall_visible
        else None,
    }


def _corpus_text(dataset: BeirDataset) -> dict[str, str]:
    import json

    out = {}
    with dataset.corpus_path.open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                r = json.loads(line)
                out[str(r["_id"])] = f"{r.get('title', '')} {r.get('text', '')}"
    return out


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
            results.append(_run_pipeline_step(graph, dataset, step))
    final = results[-1]
    hybrid = next(r for r in results if r.step.name == "hybrid")
    context = final.step.context or Context()
    corpus = _corpus_text(dataset)
    slices = build_slices(dataset, corpus)
    for spec in slices.values():
        ids = spec["ids"]
        spec["queries"] = len(ids)
        if len(ids) >= 5:
            spec["final"] = final.result.summary(ids)[HEADLINE]
            spec["hybrid"] = hybrid.result.summary(ids)[HEADLINE]
            spec["final_vs_hybrid"] = _compare(hybrid, final, ids)
    dup_ids = sorted(
        q for q, d in final.debug.items() if d.get("duplicates_dropped", 0) > 0
    )
    slices["near_duplicate_pressure"] = {
        "how": "queries whose candidate pool held near-duplicates (Jaccard >= 0.9) "
        "that the assembler dropped",
        "ids": dup_ids,
        "queries": len(dup_ids),
        "duplicates_dropped_mean": statistics.mean(
            final.debug[q]["duplicates_dropped"] for q in dup_ids
        )
        if dup_ids
        else 0.0,
        "duplicate_share_in_context": statistics.mean(
            final.debug[q]["_duplicate_share"] for q in dup_ids
        )
        if dup_ids
        else 0.0,
    }
    if len(dup_ids) >= 5:
        slices["near_duplicate_pressure"]["final"] = final.result.summary(dup_ids)[
            HEADLINE
        ]
    return DatasetReport(
        dataset=dataset,
        steps=results,
        slices=slices,
        failures=_diagnose(final, hybrid, dataset, context.candidate_pool),
        assembly=_assembly_metrics(final, dataset, context.token_budget),
        negatives=_negatives(graph, dataset, borrowed, context),
        permission=_permission(graph, dataset, context, list(corpus)),
        seconds=time.perf_counter() - started,
    )


# --- rendering --------------------------------------------------------------------


def _png(fig: Any) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def plots(reports: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Four figures as base64 PNG: ladder with CIs, slice deltas, latency, failures."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figures = {}
    fig, ax = plt.subplots(figsize=(9, 4))
    names = [s["name"] for s in reports[0]["steps"]] if reports else []
    width = 0.8 / max(len(reports), 1)
    for i, r in enumerate(reports):
        means = [s["summary"][HEADLINE]["mean"] for s in r["steps"]]
        lows = [
            m - s["summary"][HEADLINE]["low"]
            for m, s in zip(means, r["steps"], strict=True)
        ]
        highs = [
            s["summary"][HEADLINE]["high"] - m
            for m, s in zip(means, r["steps"], strict=True)
        ]
        xs = [j + i * width for j in range(len(means))]
        ax.bar(xs, means, width, yerr=[lows, highs], capsize=2, label=r["dataset"])
    ax.set_xticks([j + width * (len(reports) - 1) / 2 for j in range(len(names))])
    ax.set_xticklabels(names, rotation=20)
    ax.set_ylabel("nDCG@10 (95 % CI)")
    ax.set_title("Ablation ladder")
    ax.legend(fontsize=8)
    figures["ladder"] = _png(fig)

    fig, ax = plt.subplots(figsize=(9, 3.5))
    labels, deltas = [], []
    for r in reports:
        for name, spec in r["slices"].items():
            if "final_vs_hybrid" in spec:
                labels.append(f"{r['dataset']}\n{name}")
                deltas.append(spec["final_vs_hybrid"]["delta"])
    ax.bar(
        range(len(deltas)),
        deltas,
        color=["tab:green" if d >= 0 else "tab:red" for d in deltas],
    )
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=60, fontsize=7, ha="right")
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_ylabel("Δ nDCG@10, final vs hybrid")
    ax.set_title("Per-slice deltas")
    figures["slices"] = _png(fig)

    stages: list[str] = []
    for r in reports:
        for stage in r["steps"][-1].get("stage_ms_p50", {}):
            if stage not in stages:
                stages.append(stage)
    figures["latency"] = _grouped_bars(
        reports,
        stages,
        lambda r, s: r["steps"][-1].get("stage_ms_p50", {}).get(s, 0.0),
        ylabel="median ms",
        title="Latency per stage (final step)",
    )
    figures["failures"] = _grouped_bars(
        reports,
        list(CAUSES),
        lambda r, c: (
            r["failures"]["missing_by_cause"][c]
            / max(sum(r["failures"]["missing_by_cause"].values()), 1)
        ),
        ylabel="share of missing relevant documents",
        title="Failure diagnosis (final step): why relevant documents miss the top 10",
    )
    return figures


def _grouped_bars(
    reports: Sequence[Mapping[str, Any]],
    groups: Sequence[str],
    value: Any,
    *,
    ylabel: str,
    title: str,
) -> str:
    """One bar per data set within each group; returns the PNG (base64)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 3.5))
    width = 0.8 / max(len(reports), 1)
    for i, r in enumerate(reports):
        ax.bar(
            [j + i * width for j in range(len(groups))],
            [value(r, g) for g in groups],
            width,
            label=r["dataset"],
        )
    ax.set_xticks([j + width * (len(reports) - 1) / 2 for j in range(len(groups))])
    ax.set_xticklabels(list(groups), rotation=15)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)
    return _png(fig)


def _fmt(s: Mapping[str, float]) -> str:
    return f"{s['mean']:.3f} [{s['low']:.3f}, {s['high']:.3f}]"


def markdown(reports: Sequence[Mapping[str, Any]], meta: Mapping[str, Any]) -> str:
    """The markdown summary."""
    lines = [
        "# Retrieval evaluation report",
        "",
        f"Generated {meta['date']} by `retrieval-pipeline eval report`; "
        f"reranker: {meta['reranker']}; judge: {meta['judge']}. "
        "Means with 95 % bootstrap CIs; p from a paired randomization test of each "
        "step against the one before it. The pipeline steps return at most 20 "
        "chunks (the assembler's cap), which can hold fewer than 20 distinct "
        "documents, so their recall@20 can sit below the channel steps' (which rank "
        "100 chunks per channel).",
        "",
    ]
    for r in reports:
        # Every number below comes from this split (older reports: the test file).
        split = r.get("split", "test")
        source = r.get("split_source", "qrels/test.tsv")
        graph = "on" if r.get("title_entities") else "off"
        lines += [
            f"## {r['dataset']} ({r['queries']} queries)",
            "",
            f"Split: **{split}** ({source}); title entities: {graph}.",
            "",
        ]
        lines += [
            "| step | nDCG@10 | recall@20 | Δ vs previous | p |",
            "|---|---|---|---|---|",
        ]
        for s in r["steps"]:
            cmp = s.get("vs_previous")
            lines.append(
                f"| {s['name']} | {_fmt(s['summary'][HEADLINE])} | "
                f"{_fmt(s['summary']['recall@20'])} | "
                + (f"{cmp['delta']:+.3f} | {cmp['p_value']:.4f} |" if cmp else " | |")
            )
        lines += [
            "",
            "| slice | queries | how | final | hybrid | Δ | p |",
            "|---|---|---|---|---|---|---|",
        ]
        for name, spec in r["slices"].items():
            if "final_vs_hybrid" in spec:
                c = spec["final_vs_hybrid"]
                lines.append(
                    f"| {name} | {spec['queries']} | {spec['how']} | "
                    f"{_fmt(spec['final'])} | {_fmt(spec['hybrid'])} | "
                    f"{c['delta']:+.3f} | {c['p_value']:.4f} |"
                )
            else:
                lines.append(f"| {name} | {spec['queries']} | {spec['how']} | | | | |")
        f = r["failures"]
        lines += [
            "",
            f"Failure diagnosis (final step): {f['queries_complete']} queries have "
            f"every relevant document in the top 10, {f['queries_with_missing']} "
            "miss at least one. Missing relevant documents by cause: "
            + ", ".join(f"{k} {v}" for k, v in f["missing_by_cause"].items())
            + " (absent: in no candidate list; ranked_low: a candidate below the "
            "pool cut; omitted: in the pool, not in the top 10 of the context)"
            + (
                "; example queries: "
                + "; ".join(
                    f"{k}: {', '.join(v)}" for k, v in f["examples"].items() if v
                )
                if any(f["examples"].values())
                else ""
            )
            + ".",
            "",
        ]
        a = r["assembly"]
        lines.append(
            f"Context assembly: tokens used {_fmt(a['tokens_used_share'])} of "
            f"{a['budget_tokens']}; near-duplicates dropped per pool chunk "
            f"{_fmt(a['duplicate_share_of_pool'])}; near-duplicate share of the "
            f"assembled context {_fmt(a['duplicate_share_in_context'])}; distinct "
            "documents in the top 10 "
            f"{_fmt(a['distinct_documents_top10'])}; first relevant position (median) "
            f"{a['first_relevant_position_median']}."
        )
        n = r["negatives"]
        p = r["permission"]
        lines += [
            "",
            f"Negative queries ({n['queries']}, {n['how']}): empty-result rate "
            f"{n['empty_result_rate']:.2f}, false-positive rate "
            f"{n['false_positive_rate']:.2f} ({n['note']}).",
            "",
            f"Permission boundary ({p['queries']} queries, {p['how']}): withheld "
            f"documents returned: {p['withheld_documents_returned']}"
            + (
                "; recall of the visible evidence "
                f"{_fmt(p['recall_of_visible_evidence'])}."
                if p["recall_of_visible_evidence"]
                else "."
            ),
            "",
        ]
        final = r["steps"][-1]
        if "stage_ms_p50" in final:
            lines.append(
                "Latency per stage, final step (median ms): "
                + ", ".join(f"{k} {v}" for k, v in final["stage_ms_p50"].items())
                + f"; whole query {final['latency_ms_p50']:.1f} ms."
            )
            lines.append("")
    return "\n".join(lines)


def html_page(md: str, figures: Mapping[str, str]) -> str:
    """A self-contained page: the summary as preformatted text and inline figures."""
    images = "\n".join(
        f'<figure><img alt="{name}" src="data:image/png;base64,{data}"/>'
        f"<figcaption>{name}</figcaption></figure>"
        for name, data in figures.items()
    )
    body = "\n".join(_md_line_to_html(line) for line in md.splitlines())
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        "<title>Retrieval evaluation report</title><style>"
        "body{font-family:sans-serif;max-width:1100px;margin:2em auto}"
        "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;"
        "padding:3px 6px}figure{margin:1em 0}img{max-width:100%}</style></head><body>"
        f"{images}\n{body}</body></html>"
    )


def _md_line_to_html(line: str) -> str:
    if line.startswith("# "):
        return f"<h1>{html.escape(line[2:])}</h1>"
    if line.startswith("## "):
        return f"<h2>{html.escape(line[3:])}</h2>"
    if line.startswith("|---"):
        return ""
    if line.startswith("|"):
        cells = [html.escape(c.strip()) for c in line.strip("|").split("|")]
        return "<table><tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr></table>"
    return f"<p>{html.escape(line)}</p>" if line else ""


def write_report(
    reports: Sequence[DatasetReport], out: Path, meta: Mapping[str, Any]
) -> dict[str, Path]:
    """Write report.md, report.html and report.json under ``out``."""
    return write_outputs([r.to_dict() for r in reports], meta, out)


def write_outputs(
    data: Sequence[Mapping[str, Any]], meta: Mapping[str, Any], out: Path
) -> dict[str, Path]:
    """Render the JSON form of the per-data-set reports into the three files."""
    import json

    out.mkdir(parents=True, exist_ok=True)
    md = markdown(data, meta)
    paths = {
        "md": out / "report.md",
        "html": out / "report.html",
        "json": out / "report.json",
    }
    paths["md"].write_text(md, encoding="utf-8")
    paths["html"].write_text(html_page(md, plots(data)), encoding="utf-8")
    paths["json"].write_text(
        json.dumps({"meta": dict(meta), "datasets": list(data)}, indent=1, default=str),
        encoding="utf-8",
    )
    return paths


def rerender(out: Path) -> dict[str, Path]:
    """Re-render report.md and report.html from an existing report.json."""
    import json

    saved = json.loads((out / "report.json").read_text(encoding="utf-8"))
    return write_outputs(saved["datasets"], saved["meta"], out)


# --- regression gate --------------------------------------------------------------


def check_against_baseline(
    current: Mapping[str, Any], baseline: Mapping[str, Any], *, alpha: float = 0.05
) -> list[str]:
    """Steps whose nDCG@10 dropped significantly against the committed baseline."""
    problems = []
    base_steps = {s["name"]: s for s in baseline["steps"]}
    for step in current["steps"]:
        old = base_steps.get(step["name"])
        if old is None:
            continue
        a, b = old["per_query"][HEADLINE], step["per_query"][HEADLINE]
        ids = sorted(set(a) & set(b))
        if not ids:
            continue
        cmp = paired_test([a[q] for q in ids], [b[q] for q in ids])
        if cmp.delta < 0 and cmp.p_value < alpha:
            problems.append(
                f"{current['dataset']} {step['name']}: nDCG@10 {cmp.delta:+.4f} "
                f"(p = {cmp.p_value:.4f}, {len(ids)} queries) against the baseline"
            )
    return problems
