"""Retrieval quality: our channels and hybrid against baselines run in the same process.

On each data set (SciFact, NFCorpus, HotpotQA and MuSiQue slices from ../shared/data),
with the same all-MiniLM-L6-v2 embeddings everywhere:

- ours: lexical (BM25 in PostgreSQL), dense (pgvector HNSW), hybrid (default fusion:
  convex combination of min-max normalised scores), hybrid-rrf (the spec's RRF k = 60)
- bm25s: Lucene BM25 with the Snowball English stemmer and English stop words
- dense-exact: brute-force cosine over the very embeddings stored in PostgreSQL
- rrf(bm25s, dense-exact): equal-weight RRF, k = 60, at document level
- langchain-ensemble: LangChain's EnsembleRetriever over BM25Retriever (rank_bm25) and
  a vector retriever on dense-exact, weights 0.5/0.5

Reports nDCG@10 (and Recall@20) means with 95 % bootstrap CIs, and paired
randomization tests of our hybrid against rrf(bm25s, dense-exact) and of our lexical
arm against bm25s. Writes bench/results/quality.json and regenerates BENCHMARKS.md.

    python bench/quality.py [--datasets scifact nfcorpus hotpotqa musique]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"
DATASETS = {
    "scifact": SHARED / "scifact",
    "nfcorpus": SHARED / "nfcorpus",
    "hotpotqa": SHARED / "multihop" / "hotpotqa",
    "musique": SHARED / "multihop" / "musique",
}
# The multi-hop sets are ingested with title entities (their graph): an explicit
# option of each set (eval --title-entities), never guessed from a folder name.
TITLE_ENTITIES = frozenset({"hotpotqa", "musique"})
CACHE_HOME = REPO / "bench" / ".cache" / "home"
RESULTS = REPO / "bench" / "results" / "quality.json"
DEPTH = 100
RRF_K = 60


def _corpus(path: Path) -> tuple[list[str], list[str]]:
    ids, texts = [], []
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                record = json.loads(line)
                ids.append(str(record["_id"]))
                title = record.get("title") or ""
                texts.append(f"{title}\n{record['text']}" if title else record["text"])
    return ids, texts


def _rrf(lists: list[list[str]], k: int = RRF_K) -> list[str]:
    scores: dict[str, float] = {}
    for ranked in lists:
        for rank, doc in enumerate(ranked, start=1):
            scores[doc] = scores.get(doc, 0.0) + 1.0 / (k + rank)
    return [d for d, _ in sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))]


class DenseExact:
    """Exact cosine search over the chunk embeddings stored for one tenant."""

    def __init__(self, store: Any, tenant: str) -> None:
        with store.connection() as conn:
            rows = conn.execute(
                "SELECT id, source_id, embedding::text FROM chunks WHERE tenant = %s"
                " ORDER BY id",
                (tenant,),
            ).fetchall()
        self.chunk_ids = [r[0] for r in rows]
        self.doc_ids = [r[1] for r in rows]
        self.matrix = np.array([json.loads(r[2]) for r in rows], dtype=np.float32)

    def search(self, vector: list[float], depth: int = DEPTH) -> list[str]:
        scores = self.matrix @ np.asarray(vector, dtype=np.float32)
        top = np.argsort(-scores, kind="stable")[: depth * 3]
        seen: dict[str, None] = {}
        for i in top:
            seen.setdefault(self.doc_ids[i], None)
            if len(seen) >= depth:
                break
        return list(seen)


def _bm25s_runs(
    ids: list[str], texts: list[str], queries: dict[str, str]
) -> dict[str, list[str]]:
    import bm25s
    import Stemmer

    stemmer = Stemmer.Stemmer("english")
    retriever = bm25s.BM25()  # Lucene variant, k1 = 1.5, b = 0.75
    retriever.index(
        bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False),
        show_progress=False,
    )
    qids = sorted(queries)
    tokens = bm25s.tokenize(
        [queries[q] for q in qids], stopwords="en", stemmer=stemmer, show_progress=False
    )
    docs, _ = retriever.retrieve(
        tokens, k=min(DEPTH, len(ids)), show_progress=False, n_threads=1
    )
    return {q: [ids[int(i)] for i in docs[n]] for n, q in enumerate(qids)}


def _ensemble_runs(
    ids: list[str],
    texts: list[str],
    queries: dict[str, str],
    dense_runs: dict[str, list[str]],
) -> dict[str, list[str]]:
    """LangChain EnsembleRetriever (weighted RRF): BM25Retriever + a vector arm."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from langchain_classic.retrievers import EnsembleRetriever
        from langchain_community.retrievers import BM25Retriever
    from langchain_core.callbacks import CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever

    by_id = dict(zip(ids, texts, strict=True))

    class PrecomputedDense(BaseRetriever):
        """The vector arm: the exact dense ranking computed once per query."""

        runs: dict[str, list[str]]
        texts: dict[str, str]
        query_ids: dict[str, str]

        def _get_relevant_documents(
            self, query: str, *, run_manager: CallbackManagerForRetrieverRun
        ) -> list[Document]:
            ranked = self.runs[self.query_ids[query]]
            return [
                Document(page_content=self.texts[d], metadata={"id": d}) for d in ranked
            ]

    bm25 = BM25Retriever.from_texts(texts, metadatas=[{"id": i} for i in ids], k=DEPTH)
    query_ids = {text: qid for qid, text in queries.items()}
    dense = PrecomputedDense(runs=dense_runs, texts=by_id, query_ids=query_ids)
    ensemble = EnsembleRetriever(
        retrievers=[bm25, dense], weights=[0.5, 0.5], id_key="id"
    )
    return {
        qid: [d.metadata["id"] for d in ensemble.invoke(text)][:DEPTH]
        for qid, text in sorted(queries.items())
    }


def evaluate_dataset(
    name: str, path: Path, store: Any, embedder: Any
) -> dict[str, Any]:
    from retrieval_pipeline.eval.datasets import load_beir
    from retrieval_pipeline.eval.metrics import evaluate
    from retrieval_pipeline.eval.runner import (
        CONFIGS,
        ensure_ingested,
        run_channel_configs,
    )
    from retrieval_pipeline.eval.stats import bootstrap_ci, paired_test
    from retrieval_pipeline.ingest.job import Ingestor
    from retrieval_pipeline.tools.retrieve import Retriever

    dataset = load_beir(path, name=name, title_entities=name in TITLE_ENTITIES)
    started = time.perf_counter()
    ingest = ensure_ingested(dataset, Ingestor(store, embedder))
    print(
        f"{name}: ingest {ingest.documents} new, {ingest.skipped} cached "
        f"({time.perf_counter() - started:.0f}s)",
        file=sys.stderr,
    )
    retriever = Retriever(store, embedder)
    ours = run_channel_configs(
        dataset,
        retriever,
        [CONFIGS[c] for c in ("lexical", "dense", "hybrid", "hybrid-rrf")],
    )
    runs = {f"ours:{r.name}": r.run for r in ours.results}

    ids, texts = _corpus(dataset.corpus_path)
    exact = DenseExact(store, dataset.tenant)
    qvecs = {q: embedder.embed_query(t) for q, t in dataset.queries.items()}
    runs["dense-exact"] = {q: exact.search(qvecs[q]) for q in sorted(dataset.queries)}
    runs["bm25s"] = _bm25s_runs(ids, texts, dataset.queries)
    runs["rrf(bm25s,dense-exact)"] = {
        q: _rrf([runs["bm25s"][q], runs["dense-exact"][q]]) for q in dataset.queries
    }
    runs["langchain-ensemble"] = _ensemble_runs(
        ids, texts, dataset.queries, runs["dense-exact"]
    )

    metrics = {
        system: evaluate(run, dataset.qrels, ks=(10, 20), metrics=("ndcg", "recall"))
        for system, run in runs.items()
    }
    qids = sorted(dataset.qrels)

    def values(system: str, metric: str = "ndcg@10") -> list[float]:
        return [metrics[system][metric][q] for q in qids]

    summary = {
        system: {
            m: bootstrap_ci(values(system, m)).to_dict()
            for m in ("ndcg@10", "recall@20")
        }
        for system in runs
    }
    comparisons = {
        "ours:hybrid vs rrf(bm25s,dense-exact)": paired_test(
            values("rrf(bm25s,dense-exact)"), values("ours:hybrid")
        ).to_dict(),
        "ours:lexical vs bm25s": paired_test(
            values("bm25s"), values("ours:lexical")
        ).to_dict(),
        "ours:hybrid vs ours:dense": paired_test(
            values("ours:dense"), values("ours:hybrid")
        ).to_dict(),
        "ours:hybrid vs ours:hybrid-rrf": paired_test(
            values("ours:hybrid-rrf"), values("ours:hybrid")
        ).to_dict(),
        "ours:hybrid vs ours:lexical": paired_test(
            values("ours:lexical"), values("ours:hybrid")
        ).to_dict(),
    }
    return {
        "queries": len(qids),
        "documents": len(ids),
        "summary": summary,
        "comparisons": comparisons,
        "channel_latency_ms_p50": ours.timings_ms,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--datasets", nargs="+", default=list(DATASETS), choices=list(DATASETS)
    )
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from retrieval_pipeline.tools.embeddings import resolve_embedder
    from retrieval_pipeline.tools.store import EmbeddedPostgres, Store

    server = EmbeddedPostgres(CACHE_HOME, keep_running=True)
    embedder = resolve_embedder("local")
    previous = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    results: dict[str, Any] = previous.get("datasets", {})
    try:
        with Store(server.start()) as store:
            for name in args.datasets:
                results[name] = evaluate_dataset(name, DATASETS[name], store, embedder)
                hybrid = results[name]["summary"]["ours:hybrid"]["ndcg@10"]["mean"]
                print(f"{name}: ours:hybrid nDCG@10 {hybrid:.3f}", file=sys.stderr)
    finally:
        server.stop()
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "benchmark": "quality",
                "date": time.strftime("%Y-%m-%d"),
                "embedder": embedder.model,
                "datasets": results,
            },
            indent=1,
        )
        + "\n"
    )
    sys.path.insert(0, str(Path(__file__).parent))
    from report import write_benchmarks_md

    write_benchmarks_md()
    return 0


if __name__ == "__main__":
    sys.exit(main())
