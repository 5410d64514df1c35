"""The deterministic pipeline (wide hybrid + graph fusion + assembly) against hybrid.

Quality: on every data set, nDCG@10 and Recall@20 of the pipeline's own output
against the hybrid retrieve run in the same process, with paired randomization tests.
Speed (SciFact): p50 of the plain retrieve, of the same retrieve through the graph's
all-inactive path (the difference is LangGraph's orchestration cost), and of the full
deterministic pipeline. Writes bench/results/pipeline.json and BENCHMARKS.md.

    python bench/pipeline.py [--datasets ...] [--latency-queries 300]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from quality import CACHE_HOME, DATASETS, TITLE_ENTITIES  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results" / "pipeline.json"
ROUNDS = 3  # timed passes over the queries after the warm-up pass


def quality(name: str, store: Any, embedder: Any) -> dict[str, Any]:
    from retrieval_pipeline.eval.datasets import load_beir
    from retrieval_pipeline.eval.runner import CONFIGS, ensure_ingested, run_configs
    from retrieval_pipeline.eval.stats import bootstrap_ci, paired_test
    from retrieval_pipeline.ingest.job import Ingestor
    from retrieval_pipeline.tools.retrieve import Retriever

    dataset = load_beir(DATASETS[name], name=name)
    ensure_ingested(
        dataset, Ingestor(store, embedder), title_entities=name in TITLE_ENTITIES
    )
    report = run_configs(
        dataset, Retriever(store, embedder), [CONFIGS["hybrid"], CONFIGS["pipeline"]]
    )
    hybrid, pipeline = report.results
    qids = sorted(dataset.qrels)
    out: dict[str, Any] = {"queries": len(qids), "summary": {}, "comparisons": {}}
    for metric in ("ndcg@10", "recall@20"):
        a = [hybrid.per_query[metric][q] for q in qids]
        b = [pipeline.per_query[metric][q] for q in qids]
        out["summary"][metric] = {
            "hybrid": bootstrap_ci(a).to_dict(),
            "pipeline": bootstrap_ci(b).to_dict(),
        }
        out["comparisons"][metric] = paired_test(a, b).to_dict()
    out["pipeline_p50_ms"] = report.timings_ms.get("pipeline_p50")
    return out


def latency(store: Any, embedder: Any, queries: int) -> dict[str, Any]:
    from retrieval_pipeline.eval.datasets import load_beir
    from retrieval_pipeline.graph.builder import build_pipeline
    from retrieval_pipeline.graph.context import Context
    from retrieval_pipeline.graph.resources import PipelineResources
    from retrieval_pipeline.tools.retrieve import Retriever

    dataset = load_beir(DATASETS["scifact"], name="scifact")
    retriever = Retriever(store, embedder)
    graph = build_pipeline(PipelineResources(retriever=retriever))
    texts = [dataset.queries[q] for q in sorted(dataset.queries)][:queries]
    for text in texts:  # embed once: the cache makes every run below embedding-free
        embedder.embed_query(text)
    plain_ctx = Context(understanding=False, graph_fusion=False, reranker="none")
    full_ctx = Context(understanding=False, graph_fusion=True, reranker="none")
    state = {"tenant": dataset.tenant, "limit": 8}
    operations = {
        "retrieve (direct call)": lambda t: retriever.retrieve(
            t, limit=8, tenant=dataset.tenant
        ),
        "retrieve through the graph (all stages inactive)": lambda t: graph.invoke(
            {**state, "question": t}, context=plain_ctx
        ),
        "deterministic pipeline (wide + graph + assembly)": lambda t: graph.invoke(
            {**state, "question": t}, context=full_ctx
        ),
    }
    samples: dict[str, list[float]] = {name: [] for name in operations}
    names = list(operations)
    # One full warm-up pass (whichever operation first touches a query's pages would
    # otherwise pay for the others), then ROUNDS passes in which the operations take
    # turns on each query, in an order rotated per query: load that drifts over the
    # run (this machine is shared) then weighs on every operation alike, instead of
    # on whichever one ran during the noisy minute.
    for text in texts:
        for op in operations.values():
            op(text)
    per_round: list[dict[str, float]] = []
    for _ in range(ROUNDS):
        this_round: dict[str, list[float]] = {name: [] for name in operations}
        for i, text in enumerate(texts):
            for name in names[i % len(names) :] + names[: i % len(names)]:
                started = time.perf_counter()
                operations[name](text)
                this_round[name].append((time.perf_counter() - started) * 1000)
        for name, values in this_round.items():
            samples[name].extend(values)
        per_round.append({n: statistics.median(v) for n, v in this_round.items()})
    p50 = {name: statistics.median(values) for name, values in samples.items()}
    direct = p50["retrieve (direct call)"]
    full = "deterministic pipeline (wide + graph + assembly)"
    return {
        "queries": len(texts),
        "rounds": ROUNDS,
        "round_ratios": [r[full] / r["retrieve (direct call)"] for r in per_round],
        "p50_ms": p50,
        "orchestration_ms": p50["retrieve through the graph (all stages inactive)"]
        - direct,
        "pipeline_over_retrieve": p50[
            "deterministic pipeline (wide + graph + assembly)"
        ]
        / direct,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--datasets", nargs="+", default=list(DATASETS), choices=list(DATASETS)
    )
    parser.add_argument("--latency-queries", type=int, default=300)  # < query cache
    parser.add_argument(
        "--latency-only", action="store_true", help="keep the stored quality results"
    )
    args = parser.parse_args()
    from retrieval_pipeline.tools.embeddings import resolve_embedder
    from retrieval_pipeline.tools.store import EmbeddedPostgres, Store

    server = EmbeddedPostgres(CACHE_HOME, keep_running=True)
    embedder = resolve_embedder("local")
    results: dict[str, Any] = {
        "benchmark": "pipeline",
        "date": time.strftime("%Y-%m-%d"),
    }
    try:
        with Store(server.start()) as store:
            previous = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
            results["quality"] = (
                previous.get("quality", {}) if args.latency_only else {}
            )
            for name in [] if args.latency_only else args.datasets:
                results["quality"][name] = quality(name, store, embedder)
                s = results["quality"][name]["summary"]["ndcg@10"]
                print(
                    f"{name}: hybrid {s['hybrid']['mean']:.3f} pipeline "
                    f"{s['pipeline']['mean']:.3f}",
                    file=sys.stderr,
                )
            results["latency"] = latency(store, embedder, args.latency_queries)
    finally:
        server.stop()
    RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    from report import write_benchmarks_md

    write_benchmarks_md()
    return 0


if __name__ == "__main__":
    sys.exit(main())
