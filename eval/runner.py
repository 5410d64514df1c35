"""Run retrieval configurations over a BEIR data set and compare them.

Each query's channels are computed once; every channel-based configuration (lexical
only, dense only, hybrid RRF) is derived from the same candidate lists, so the
comparison is paired by construction. Chunk results map to documents by first
occurrence. Results keep per-query values for paired tests and slices.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from retrieval_pipeline.eval.datasets import BeirDataset
from retrieval_pipeline.eval.metrics import chunks_to_documents, evaluate
from retrieval_pipeline.eval.stats import bootstrap_ci, paired_test
from retrieval_pipeline.graph.context import FUSION, Context
from retrieval_pipeline.ingest.job import Ingestor, IngestSummary
from retrieval_pipeline.tools.retrieve import RetrievalTrace, Retriever, fuse

DEFAULT_KS = (1, 5, 10, 20, 100)
HEADLINE = "ndcg@10"
RUN_DEPTH = 100  # chunks per channel and per ranked list
PIPELINE_LIMIT = 20  # the assembler's hard cap: enough for @10 and @20 metrics


@dataclass(frozen=True)
class ChannelConfig:
    """A ranking made from the channels' candidate lists."""

    name: str
    channels: tuple[str, ...]
    fusion: str = FUSION
    weights: Mapping[str, float] | None = None
    description: str = ""

    def rank(
        self, scored: Mapping[str, Sequence[tuple[str, float]]], rrf_k: int
    ) -> list[str]:
        """Return chunk ids in this configuration's order."""
        if len(self.channels) == 1:
            return [chunk_id for chunk_id, _ in scored[self.channels[0]]]
        fused = fuse(
            {c: scored[c] for c in self.channels},
            method=self.fusion,
            k=rrf_k,
            weights=self.weights,
        )
        return [chunk_id for chunk_id, _ in fused]


@dataclass(frozen=True)
class PipelineConfig:
    """The LangGraph pipeline with given stage toggles; its output is evaluated."""

    name: str
    context: Context
    description: str = ""
    limit: int = PIPELINE_LIMIT


CONFIGS: dict[str, ChannelConfig | PipelineConfig] = {
    "lexical": ChannelConfig("lexical", ("lexical",), description="BM25 in PostgreSQL"),
    "dense": ChannelConfig("dense", ("dense",), description="pgvector cosine (HNSW)"),
    "hybrid": ChannelConfig(
        "hybrid",
        ("lexical", "dense"),
        description="convex combination of min-max normalised scores (default)",
    ),
    "hybrid-rrf": ChannelConfig(
        "hybrid-rrf",
        ("lexical", "dense"),
        fusion="rrf",
        description="RRF(lexical, dense), k = 60 (the spec's fusion)",
    ),
    "pipeline": PipelineConfig(
        "pipeline",
        Context(understanding=False, graph_fusion=True, reranker="none"),
        "deterministic pipeline: wide hybrid + graph fusion + assembly",
    ),
    "pipeline+rerank": PipelineConfig(
        "pipeline+rerank",
        Context(understanding=False, graph_fusion=True, reranker="auto"),
        "pipeline with the reranker the environment provides",
    ),
    "pipeline+understanding": PipelineConfig(
        "pipeline+understanding",
        Context(understanding=True, graph_fusion=True, reranker="auto"),
        "every stage the environment provides",
    ),
}


def resolve_configs(
    names: Sequence[str] | None,
) -> list[ChannelConfig | PipelineConfig]:
    """Look up configurations by name; raise a ValueError listing the valid ones."""
    chosen = list(names) if names else ["lexical", "dense", "hybrid"]
    unknown = [n for n in chosen if n not in CONFIGS]
    if unknown:
        raise ValueError(f"unknown config {unknown}; valid: {', '.join(CONFIGS)}")
    return [CONFIGS[n] for n in chosen]


def ensure_ingested(
    dataset: BeirDataset, ingestor: Ingestor, *, title_entities: bool | None = None
) -> IngestSummary:
    """Ingest the corpus under the data set's tenant; unchanged documents are skipped.

    Title entities (a paragraph's title is its entity, the graph that graph fusion
    follows in the multi-hop sets) are the data set's explicit option
    (``BeirDataset.title_entities``, ``eval --title-entities NAME``), never guessed
    from where the folder lies; ``title_entities`` overrides it.
    """
    if title_entities is None:
        title_entities = dataset.title_entities
    return ingestor.ingest_paths(
        [dataset.corpus_path], tenant=dataset.tenant, title_entities=title_entities
    )


@dataclass
class ConfigResult:
    """Per-query metrics, runs and timings of one configuration."""

    name: str
    description: str
    per_query: dict[str, dict[str, float]]  # metric -> qid -> value
    run: dict[str, list[str]]  # qid -> ranked document ids
    scores: dict[str, list[float]] = field(default_factory=dict)

    def summary(self, query_ids: Sequence[str] | None = None) -> dict[str, Any]:
        """Mean with a 95 % bootstrap CI per metric, optionally over a slice."""
        out = {}
        for metric, values in self.per_query.items():
            ids = query_ids if query_ids is not None else sorted(values)
            out[metric] = bootstrap_ci(
                [values[q] for q in ids if q in values]
            ).to_dict()
        return out


@dataclass
class EvalReport:
    """Everything one evaluation produced."""

    dataset: str
    queries: int
    results: list[ConfigResult]
    timings_ms: dict[str, float]
    slices: dict[str, list[str]] = field(default_factory=dict)

    def comparisons(self, metric: str = HEADLINE) -> dict[str, dict[str, Any]]:
        """Paired test of every configuration against the first one listed."""
        if len(self.results) < 2:
            return {}
        base = self.results[0]
        ids = sorted(base.per_query[metric])
        return {
            result.name: paired_test(
                [base.per_query[metric][q] for q in ids],
                [result.per_query[metric][q] for q in ids],
            ).to_dict()
            for result in self.results[1:]
        }

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form (summaries, comparisons, slices, per-query values)."""
        return {
            "dataset": self.dataset,
            "queries": self.queries,
            "timings_ms": self.timings_ms,
            "configs": {
                r.name: {
                    "description": r.description,
                    "summary": r.summary(),
                    "slices": {
                        name: r.summary(ids) for name, ids in self.slices.items()
                    },
                    "per_query": r.per_query,
                }
                for r in self.results
            },
            "baseline": self.results[0].name if self.results else None,
            "comparisons": {HEADLINE: self.comparisons(HEADLINE)},
        }

    def table(self, metrics: Sequence[str] = ("ndcg@10", "recall@10", "mrr@10")) -> str:
        """Return a plain-text table: mean [95 % CI] per metric, delta and p vs base."""
        comparisons = self.comparisons(HEADLINE)
        header = ["config", *metrics, f"Δ{HEADLINE} vs {self.results[0].name}", "p"]
        rows = [header]
        for result in self.results:
            summary = result.summary()
            cells = [result.name]
            for metric in metrics:
                s = summary[metric]
                cells.append(f"{s['mean']:.3f} [{s['low']:.3f}, {s['high']:.3f}]")
            comparison = comparisons.get(result.name)
            if comparison:
                cells += [f"{comparison['delta']:+.3f}", f"{comparison['p_value']:.4f}"]
            else:
                cells += ["", ""]
            rows.append(cells)
        widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
        lines = [
            "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True))
            for row in rows
        ]
        return f"{self.dataset}: {self.queries} queries\n" + "\n".join(lines)


def run_configs(
    dataset: BeirDataset,
    retriever: Retriever,
    configs: Sequence[ChannelConfig | PipelineConfig],
    *,
    judge: Any | None = None,
    ks: Sequence[int] = DEFAULT_KS,
) -> EvalReport:
    """Evaluate channel and pipeline configurations, in the order given."""
    channel = [c for c in configs if isinstance(c, ChannelConfig)]
    report = run_channel_configs(dataset, retriever, channel, ks=ks)
    results = {r.name: r for r in report.results}
    pipeline = [c for c in configs if isinstance(c, PipelineConfig)]
    if pipeline:
        from retrieval_pipeline.graph.builder import build_pipeline
        from retrieval_pipeline.graph.resources import PipelineResources

        graph = build_pipeline(PipelineResources(retriever=retriever, judge=judge))
        for config in pipeline:
            run: dict[str, list[str]] = {}
            latencies = []
            for qid, text in sorted(dataset.queries.items()):
                started = time.perf_counter()
                output = graph.invoke(
                    {"question": text, "limit": config.limit, "tenant": dataset.tenant},
                    context=config.context,
                )
                latencies.append((time.perf_counter() - started) * 1000)
                run[qid] = chunks_to_documents(
                    [c["document_id"] for c in output["chunks"]]
                )
            results[config.name] = ConfigResult(
                config.name,
                config.description,
                evaluate(run, dataset.qrels, ks=ks),
                run,
            )
            report.timings_ms[f"{config.name}_p50"] = statistics.median(latencies)
    report.results = [results[c.name] for c in configs]
    return report


def run_channel_configs(
    dataset: BeirDataset,
    retriever: Retriever,
    configs: Sequence[ChannelConfig],
    *,
    depth: int = RUN_DEPTH,
    ks: Sequence[int] = DEFAULT_KS,
    progress: Callable[[int, int], None] | None = None,
) -> EvalReport:
    """Evaluate channel-based configurations on every judged query of a data set."""
    chunk_docs = retriever.store.chunk_sources(dataset.tenant)
    scope = retriever.scope(tenant=dataset.tenant)
    runs: dict[str, dict[str, list[str]]] = {c.name: {} for c in configs}
    timings: dict[str, list[float]] = {"lexical": [], "dense": [], "embed": []}
    for i, (qid, text) in enumerate(sorted(dataset.queries.items())):
        trace = RetrievalTrace()
        channels = retriever.channels(text, scope, depth=depth, trace=trace)
        ranked = channels
        timings["lexical"].append(trace.lexical_ms)
        timings["dense"].append(trace.dense_ms)
        timings["embed"].append(trace.embed_ms)
        for config in configs:
            chunk_ids = config.rank(ranked, retriever.rrf_k)
            runs[config.name][qid] = chunks_to_documents(
                [chunk_docs[c] for c in chunk_ids if c in chunk_docs]
            )
        if progress is not None:
            progress(i + 1, len(dataset.queries))
    results = [
        ConfigResult(
            c.name,
            c.description,
            evaluate(runs[c.name], dataset.qrels, ks=ks),
            runs[c.name],
        )
        for c in configs
    ]
    return EvalReport(
        dataset=dataset.name,
        queries=len(dataset.queries),
        results=results,
        timings_ms={f"{k}_p50": statistics.median(v) for k, v in timings.items() if v},
    )


def write_trec_run(path: Path, results: Sequence[ConfigResult]) -> None:
    """Write TREC run lines ``qid Q0 docid rank score tag`` (score = 1/rank)."""
    with path.open("w", encoding="utf-8") as fh:
        for result in results:
            for qid in sorted(result.run):
                for rank, doc in enumerate(result.run[qid], start=1):
                    fh.write(f"{qid} Q0 {doc} {rank} {1.0 / rank:.6f} {result.name}\n")
