"""Lexical parity with bm25s, diagnosed per query on development splits (issue 18).

Our lexical channel (BM25 over PostgreSQL postings, the ``english`` text-search
configuration, an identifier field) against bm25s (Lucene BM25, k1 = 1.5, b = 0.75,
Snowball English stemmer and English stop words, as in bench/quality.py), per query,
on the dev split of each set (SciFact: its train claims; NFCorpus: its dev queries;
the multi-hop slices: their carved dev third). Also our channel without the
identifier field and at bm25s's k1/b, to attribute the gap. Prints the queries we
lose most on with their tsquery lexemes and bm25s's tokens.

The lexical channel does not depend on the embeddings, so the corpora are ingested
with a deterministic fake embedder into their own store (bench/.cache/lexical-home):
no model runs, and the real vectors elsewhere are untouched.

    python bench/lexical_parity.py [--datasets scifact nfcorpus] [--split dev]

Writes bench/results/lexical_parity.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))
from quality import DATASETS, DEPTH, _bm25s_runs, _corpus  # noqa: E402

HOME = REPO / "bench" / ".cache" / "lexical-home"
RESULTS = REPO / "bench" / "results" / "lexical_parity.json"


def _fake_embedder() -> Any:
    from langchain_core.embeddings import DeterministicFakeEmbedding

    from retrieval_pipeline.tools.embeddings import Embedder

    return Embedder(
        DeterministicFakeEmbedding(size=384),
        model="fake-for-lexical-parity",
        version="0",
        dimension=384,
    )


def _ours(
    store: Any,
    tenant: str,
    queries: dict[str, str],
    *,
    k1: float,
    b: float,
    ids: bool,
    split_hyphens: bool = False,
) -> dict[str, list[str]]:
    """Our lexical channel's document ranking (first occurrence of each document).

    ``split_hyphens`` reads a query's inner hyphens as spaces for the prose field
    (PostgreSQL's parser otherwise adds the whole compound, "amp-activ", beside its
    parts, and reads the "-85" of "76-85" as a signed number).
    """
    from retrieval_pipeline.ingest.chunker import extract_identifiers
    from retrieval_pipeline.tools.query import parse_websearch, prose_query
    from retrieval_pipeline.tools.store.store import AccessScope

    scope = AccessScope(principals=(), tenant=tenant, doc_keys=None)
    sources = store.chunk_sources(tenant)
    runs = {}
    for qid, text in sorted(queries.items()):
        parsed = parse_websearch(text)
        prose = prose_query(parsed.text) if split_hyphens else parsed.text
        hits = store.search_lexical(
            prose,
            extract_identifiers(parsed.text) if ids else [],
            scope,
            depth=DEPTH,
            k1=k1,
            b=b,
            phrases=parsed.phrases,
            exhaustive_postings=None,
        )
        seen: dict[str, None] = {}
        for chunk_id, _, _ in hits:
            seen.setdefault(sources[chunk_id], None)
        runs[qid] = list(seen)
    return runs


def _explain(store: Any, text: str) -> dict[str, Any]:
    from retrieval_pipeline.ingest.chunker import extract_identifiers

    with store.connection() as conn:
        lexemes = conn.execute(
            "SELECT array_agg(lexeme ORDER BY lexeme)"
            " FROM unnest(to_tsvector('english'::regconfig, %s))",
            (text,),
        ).fetchone()[0]
    import bm25s
    import Stemmer

    tokens = bm25s.tokenize(
        [text], stopwords="en", stemmer=Stemmer.Stemmer("english"), show_progress=False
    )
    vocab = {v: k for k, v in tokens.vocab.items()}
    return {
        "tsvector": lexemes or [],
        "identifiers": extract_identifiers(text),
        "bm25s_tokens": sorted(vocab[i] for i in tokens.ids[0]),
    }


def run(name: str, split: str, store: Any) -> dict[str, Any]:
    from retrieval_pipeline.eval.datasets import load_beir
    from retrieval_pipeline.eval.metrics import evaluate
    from retrieval_pipeline.eval.runner import ensure_ingested
    from retrieval_pipeline.eval.stats import paired_test
    from retrieval_pipeline.graph.context import BM25_B, BM25_K1
    from retrieval_pipeline.ingest.job import Ingestor

    dataset = load_beir(DATASETS[name], name=name, split=split)
    started = time.perf_counter()
    ensure_ingested(dataset, Ingestor(store, _fake_embedder()))
    print(f"{name}: ingested in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    ids, texts = _corpus(dataset.corpus_path)
    # "ours" is the shipped channel (k1/b from the context, inner hyphens read as
    # spaces, the identifier field); each other row changes one thing.
    shipped = {"k1": BM25_K1, "b": BM25_B, "ids": True, "split_hyphens": True}
    variants: dict[str, dict[str, Any]] = {
        "ours": {},
        "ours, no identifier field": {"ids": False},
        "ours, hyphens as PostgreSQL reads them": {"split_hyphens": False},
        "ours at k1=0.9 b=0.4 (the old default)": {"k1": 0.9, "b": 0.4},
    }
    systems = {"bm25s": _bm25s_runs(ids, texts, dataset.queries)}
    for label, change in variants.items():
        systems[label] = _ours(
            store, dataset.tenant, dataset.queries, **(shipped | change)
        )
    per_query = {
        s: evaluate(run, dataset.qrels, ks=(10,))["ndcg@10"]
        for s, run in systems.items()
    }
    qids = sorted(dataset.queries)
    base = [per_query["bm25s"][q] for q in qids]
    out: dict[str, Any] = {
        "dataset": name,
        "split": split,
        "split_source": dataset.split_source,
        "queries": len(qids),
        "ndcg@10": {
            s: statistics.fmean(v[q] for q in qids) for s, v in per_query.items()
        },
        "vs_bm25s": {},
    }
    for s in systems:
        if s == "bm25s":
            continue
        cmp = paired_test(base, [per_query[s][q] for q in qids])
        wins = sum(per_query[s][q] > per_query["bm25s"][q] + 1e-9 for q in qids)
        losses = sum(per_query[s][q] < per_query["bm25s"][q] - 1e-9 for q in qids)
        out["vs_bm25s"][s] = {
            "delta": cmp.delta,
            "p": cmp.p_value,
            "wins": wins,
            "losses": losses,
        }
    worst = sorted(qids, key=lambda q: per_query["ours"][q] - per_query["bm25s"][q])
    out["worst"] = [
        {
            "query": q,
            "text": dataset.queries[q],
            "ours": per_query["ours"][q],
            "bm25s": per_query["bm25s"][q],
            **_explain(store, dataset.queries[q]),
        }
        for q in worst[:15]
    ]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", nargs="+", default=["scifact", "nfcorpus"])
    parser.add_argument("--split", default="dev")
    args = parser.parse_args()
    from retrieval_pipeline.tools.store import EmbeddedPostgres, Store

    server = EmbeddedPostgres(HOME, keep_running=True)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    with Store(server.start()) as store:
        for name in args.datasets:
            result = run(name, args.split, store)
            summary = {k: result[k] for k in ("dataset", "ndcg@10", "vs_bm25s")}
            print(json.dumps(summary))
            # Written per data set, so a long run keeps what it finished.
            previous = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
            previous[f"{result['dataset']}-{result['split']}"] = result
            RESULTS.write_text(json.dumps(previous, indent=1) + "\n")
            print(f"wrote {RESULTS}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
