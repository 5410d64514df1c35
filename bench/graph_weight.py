"""Graph score weight chosen on dev splits (issue 18).

Runs the shipped pipeline (limit 10, default Context) on each set's dev split with
``graph_score_weight`` in {1.0, 0.75, 0.5, 0.25} and reports page/document-level
nDCG@10 per weight and the mean over the sets. The multi-hop sets are read from the
evaluation home (ingested with title entities, as ``eval`` does); a documentation
site from the store bench/documents.py built for it. The choice is the weight with
the best dev mean; the test splits are not read.

    python bench/graph_weight.py [--datasets hotpotqa musique python3doc]
        [--weights 1.0,0.75,0.5,0.25] [--home DIR]

Writes bench/results/graph_weight.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import documents  # noqa: E402
from quality import DATASETS, TITLE_ENTITIES  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results" / "graph_weight.json"
EVAL_HOME = Path.home() / ".local" / "share" / "retrieval-pipeline"


def _questions(name: str, home: Path) -> tuple[Path, str, dict[str, str], Any]:
    from retrieval_pipeline.eval.datasets import load_beir

    if name in documents.SITES:
        site = documents.SITES[name]
        rows = [q for q in documents.load_questions(site) if q["split"] == "dev"]
        queries = {q["id"]: q["question"] for q in rows}
        return site.home, "", queries, documents.question_qrels(rows)
    dataset = load_beir(
        DATASETS[name], name=name, split="dev", title_entities=name in TITLE_ENTITIES
    )
    return home, dataset.tenant, dataset.queries, dataset.qrels


def run(name: str, weights: list[float], home: Path) -> dict[str, float]:
    from dataclasses import replace

    from retrieval_pipeline.eval.metrics import chunks_to_documents, evaluate
    from retrieval_pipeline.graph.builder import build_pipeline
    from retrieval_pipeline.graph.context import Context
    from retrieval_pipeline.graph.resources import PipelineResources
    from retrieval_pipeline.tools.embeddings import resolve_embedder
    from retrieval_pipeline.tools.retrieve import Retriever
    from retrieval_pipeline.tools.store import EmbeddedPostgres, Store

    store_home, tenant, queries, qrels = _questions(name, home)
    server = EmbeddedPostgres(store_home, keep_running=True)
    out: dict[str, float] = {}
    with Store(server.start()) as store:
        graph = build_pipeline(
            PipelineResources(retriever=Retriever(store, resolve_embedder("local")))
        )
        for weight in weights:
            context = replace(
                Context(),
                graph_score_weight=weight,
                embed_deadline_s=documents.QUALITY_DEADLINE_S,
            )
            ranked = {}
            for qid, text in queries.items():
                output = graph.invoke(
                    {"question": text, "limit": 10, "tenant": tenant}, context=context
                )
                ranked[qid] = chunks_to_documents(
                    [c["document_id"] for c in output["chunks"]]
                )
            per = evaluate(ranked, qrels, ks=(10,), metrics=("ndcg",))["ndcg@10"]
            out[str(weight)] = statistics.fmean(per[q] for q in queries)
            print(f"{name} dev graph_score_weight {weight}: {out[str(weight)]:.4f}")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--datasets", nargs="+", default=["hotpotqa", "musique", "python3doc"]
    )
    parser.add_argument("--weights", default="1.0,0.75,0.5,0.25")
    parser.add_argument("--home", type=Path, default=EVAL_HOME)
    args = parser.parse_args()
    weights = [float(w) for w in args.weights.split(",")]
    per_set = {name: run(name, weights, args.home) for name in args.datasets}
    means = {
        str(w): statistics.fmean(per_set[n][str(w)] for n in per_set) for w in weights
    }
    chosen = max(means, key=lambda w: (means[w], float(w)))
    result = {"split": "dev", "ndcg@10": per_set, "mean": means, "chosen": chosen}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=1) + "\n")
    print(f"chosen on dev: graph_score_weight {chosen} (mean {means[chosen]:.4f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
