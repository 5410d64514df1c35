"""Fusion study: which way of combining the two channels ranks best, per data set.

Computes each query's lexical and dense candidate lists once (depth 100, cached in
bench/.cache/channels-<dataset>.json) and evaluates fusion functions over them:
chunk-level RRF (the spec's), document-aware RRF, weighted RRF, and convex
combinations of normalised scores (Bruch, Gai & Ingber 2023, "An Analysis of Fusion
Functions for Hybrid Retrieval"). Reports nDCG@10 with paired tests against RRF.
This is how the default fusion was chosen; it writes bench/results/fusion.json.

    python bench/fusion.py [--datasets ...] [--split test]
    python bench/fusion.py --datasets ... --select dev --split test [--home DIR]

With ``--select dev`` (issue 18) the choice is made where it should be: the variant
with the best mean nDCG@10 on the dev splits is reported on the test splits, and
leave-one-dataset-out picks, for each set, the variant best on the *other* sets'
dev splits and reports it on the held-out set's test split against RRF k = 60.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))
from quality import CACHE_HOME, DATASETS, TITLE_ENTITIES  # noqa: E402

CACHE = REPO / "bench" / ".cache"
RESULTS = REPO / "bench" / "results" / "fusion.json"
Channels = dict[str, list[tuple[str, float]]]


def collect(name: str, split: str, home: Path = CACHE_HOME) -> dict[str, Any]:
    path = CACHE / f"channels-{name}-{split}.json"
    if path.exists():
        return json.loads(path.read_text())
    from retrieval_pipeline.eval.datasets import load_beir
    from retrieval_pipeline.eval.runner import ensure_ingested
    from retrieval_pipeline.ingest.job import Ingestor
    from retrieval_pipeline.tools.embeddings import resolve_embedder
    from retrieval_pipeline.tools.retrieve import Retriever
    from retrieval_pipeline.tools.store import EmbeddedPostgres, Store

    dataset = load_beir(
        DATASETS[name], name=name, split=split, title_entities=name in TITLE_ENTITIES
    )
    embedder = resolve_embedder("local")
    server = EmbeddedPostgres(home, keep_running=True)
    with Store(server.start()) as store:
        ensure_ingested(dataset, Ingestor(store, embedder))
        retriever = Retriever(store, embedder)
        scope = retriever.scope(tenant=dataset.tenant)
        docs = store.chunk_sources(dataset.tenant)
        queries = {
            qid: retriever.channels(text, scope, depth=100)
            for qid, text in sorted(dataset.queries.items())
        }
    data = {"qrels": dataset.qrels, "docs": docs, "queries": queries}
    CACHE.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return data


def rrf(
    channels: Channels, k: int = 60, weights: dict[str, float] | None = None
) -> list[str]:
    scores: dict[str, float] = {}
    for channel, hits in channels.items():
        w = (weights or {}).get(channel, 1.0)
        for rank, (chunk, _) in enumerate(hits, start=1):
            scores[chunk] = scores.get(chunk, 0.0) + w / (k + rank)
    return [c for c, _ in sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))]


def convex(channels: Channels, alpha: float, norm: str) -> list[str]:
    """alpha * dense + (1 - alpha) * lexical over normalised scores; absent = 0."""
    fused: dict[str, float] = {}
    for channel, hits in channels.items():
        if not hits:
            continue
        values = [s for _, s in hits]
        if norm == "minmax":
            lo, hi = min(values), max(values)
        elif norm == "tmm":  # theoretical minimum: 0 for BM25, -1 for cosine
            lo, hi = (0.0 if channel == "lexical" else -1.0), max(values)
        else:
            raise ValueError(norm)
        span = hi - lo
        weight = alpha if channel == "dense" else 1 - alpha
        for chunk, score in hits:
            # As in the library: a channel whose hits all tie scores them all 1.
            normalised = (score - lo) / span if span > 0 else 1.0
            fused[chunk] = fused.get(chunk, 0.0) + weight * normalised
    return [c for c, _ in sorted(fused.items(), key=lambda kv: (-kv[1], kv[0]))]


def doc_rrf(channels: Channels, docs: dict[str, str], k: int = 60) -> list[str]:
    """RRF on document ranks (a document's best chunk), chunks ordered within."""
    doc_scores: dict[str, float] = {}
    for hits in channels.values():
        seen: dict[str, None] = {}
        for chunk, _ in hits:
            seen.setdefault(docs[chunk], None)
        for rank, doc in enumerate(seen, start=1):
            doc_scores[doc] = doc_scores.get(doc, 0.0) + 1.0 / (k + rank)
    chunk_order = {c: i for i, c in enumerate(rrf(channels, k))}
    chunks = sorted(chunk_order, key=lambda c: (-doc_scores[docs[c]], chunk_order[c]))
    return chunks


def variants(docs: dict[str, str]) -> dict[str, Callable[[Channels], list[str]]]:
    out: dict[str, Callable[[Channels], list[str]]] = {
        "lexical": lambda ch: [c for c, _ in ch["lexical"]],
        "dense": lambda ch: [c for c, _ in ch["dense"]],
        "rrf k60": lambda ch: rrf(ch),
        "doc-rrf k60": lambda ch: doc_rrf(ch, docs),
        "rrf k60 dense x1.5": lambda ch: rrf(ch, weights={"dense": 1.5}),
    }
    for alpha in (0.3, 0.4, 0.5, 0.6, 0.7):
        out[f"minmax a={alpha}"] = lambda ch, a=alpha: convex(ch, a, "minmax")
        out[f"tmm a={alpha}"] = lambda ch, a=alpha: convex(ch, a, "tmm")
    return out


def per_query(data: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Each variant's nDCG@10 per query over cached channel lists."""
    from retrieval_pipeline.eval.metrics import chunks_to_documents, evaluate

    docs = data["docs"]
    out = {}
    for label, fn in variants(docs).items():
        run = {
            qid: chunks_to_documents([docs[c] for c in fn(ch) if c in docs])
            for qid, ch in data["queries"].items()
        }
        out[label] = evaluate(run, data["qrels"], ks=(10,), metrics=("ndcg",))[
            "ndcg@10"
        ]
    return out


def _mean(values: dict[str, float]) -> float:
    return sum(values.values()) / len(values)


def select_and_report(
    names: list[str], select: str, split: str, home: Path
) -> dict[str, Any]:
    """Choose on ``select`` splits, report on ``split``; leave-one-dataset-out too."""
    from retrieval_pipeline.eval.stats import paired_test

    dev = {n: per_query(collect(n, select, home)) for n in names}
    test = {n: per_query(collect(n, split, home)) for n in names}
    labels = [v for v in next(iter(dev.values())) if v not in ("lexical", "dense")]

    def best(on: list[str]) -> str:
        return max(labels, key=lambda v: (sum(_mean(dev[n][v]) for n in on), v))

    def cell(name: str, variant: str) -> dict[str, Any]:
        qids = sorted(test[name][variant])
        rrf_values = [test[name]["rrf k60"][q] for q in qids]
        values = [test[name][variant][q] for q in qids]
        cmp = paired_test(rrf_values, values)
        return {
            "variant": variant,
            "test_ndcg@10": sum(values) / len(values),
            "test_rrf_ndcg@10": sum(rrf_values) / len(rrf_values),
            "delta_vs_rrf": cmp.delta,
            "p_vs_rrf": cmp.p_value,
        }

    chosen = best(names)
    return {
        "select_split": select,
        "report_split": split,
        "dev_ndcg@10": {n: {v: _mean(dev[n][v]) for v in dev[n]} for n in names},
        "test_ndcg@10": {n: {v: _mean(test[n][v]) for v in test[n]} for n in names},
        "chosen_on_all_dev": chosen,
        "chosen_on_test": {n: cell(n, chosen) for n in names},
        "leave_one_dataset_out": {
            n: cell(n, best([m for m in names if m != n])) for n in names
        },
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS))
    parser.add_argument("--split", default="test")
    parser.add_argument(
        "--select", default=None, help="choose on this split (dev), report on --split"
    )
    parser.add_argument("--home", type=Path, default=CACHE_HOME)
    args = parser.parse_args()
    from retrieval_pipeline.eval.metrics import chunks_to_documents, evaluate
    from retrieval_pipeline.eval.stats import paired_test

    if args.select:
        study = select_and_report(args.datasets, args.select, args.split, args.home)
        print(f"chosen on {args.select}: {study['chosen_on_all_dev']}")
        for kind in ("chosen_on_test", "leave_one_dataset_out"):
            for n, c in study[kind].items():
                print(
                    f"{kind} {n}: {c['variant']} {c['test_ndcg@10']:.4f} vs rrf "
                    f"{c['test_rrf_ndcg@10']:.4f} ({c['delta_vs_rrf']:+.4f}, "
                    f"p {c['p_vs_rrf']:.3f})"
                )
        out = RESULTS.with_name("fusion_splits.json")
        out.write_text(json.dumps(study, indent=1) + "\n")
        print(f"wrote {out}", file=sys.stderr)
        return 0
    table: dict[str, dict[str, Any]] = {}
    for name in args.datasets:
        data = collect(name, args.split, args.home)
        docs = data["docs"]
        per_variant = {}
        for label, fn in variants(docs).items():
            run = {
                qid: chunks_to_documents([docs[c] for c in fn(ch) if c in docs])
                for qid, ch in data["queries"].items()
            }
            per_variant[label] = evaluate(
                run, data["qrels"], ks=(10,), metrics=("ndcg",)
            )["ndcg@10"]
        qids = sorted(data["qrels"])
        base = [per_variant["rrf k60"][q] for q in qids]
        table[name] = {}
        for label, values in per_variant.items():
            vals = [values[q] for q in qids]
            test = paired_test(base, vals)
            table[name][label] = {
                "ndcg@10": sum(vals) / len(vals),
                "p_vs_rrf": test.p_value,
            }
    labels = list(next(iter(table.values())))
    print("variant".ljust(22) + "".join(n.rjust(16) for n in table))
    for label in labels:
        row = label.ljust(22)
        for name in table:
            cell = table[name][label]
            row += f"{cell['ndcg@10']:.3f} (p{cell['p_vs_rrf']:.2f})".rjust(16)
        print(row)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps({"split": args.split, "ndcg@10": table}, indent=1) + "\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
