"""Retrieval latency on SciFact: warm, single client, query embedding excluded.

Times, over every SciFact test query and several rounds (medians and p95 of all
calls): the lexical channel (BM25 SQL), the dense channel (HNSW), and the full hybrid
retrieve of 40 candidates (both channels + fusion + provenance fetch), with the query
embedding precomputed and reported separately. Baselines run in the same process on
the same database: PostgreSQL's own `websearch_to_tsquery` + `ts_rank_cd` (AND, as the
spec's text reads) and an OR of lexemes + `ts_rank_cd`, and an exact (sequential) dense
scan. Goal (issue 3): hybrid p50 <= 15 ms, p95 <= 40 ms.

    python bench/latency.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SCIFACT = REPO.parent / "shared" / "data" / "scifact"
CACHE_HOME = REPO / "bench" / ".cache" / "home"
RESULTS = REPO / "bench" / "results" / "latency.json"

TS_RANK_AND = """
SELECT c.id, ts_rank_cd(c.tsv_prose, query) AS score
FROM chunks c, websearch_to_tsquery('english', %(q)s) AS query
WHERE c.tenant = %(tenant)s AND c.tsv_prose @@ query
ORDER BY score DESC, c.id LIMIT %(depth)s
"""
TS_RANK_OR = """
SELECT c.id, ts_rank_cd(c.tsv_prose, query) AS score
FROM chunks c,
     (SELECT to_tsquery('english', coalesce(string_agg(quote_literal(lexeme), ' | '), ''))
        AS query
      FROM unnest(to_tsvector('english', %(q)s))) AS q
WHERE c.tenant = %(tenant)s AND c.tsv_prose @@ q.query
ORDER BY score DESC, c.id LIMIT %(depth)s
"""


def _percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50": statistics.median(ordered),
        "p95": ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))],
        "calls": len(ordered),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    from retrieval_pipeline.eval.datasets import load_beir
    from retrieval_pipeline.eval.runner import ensure_ingested
    from retrieval_pipeline.ingest.chunker import extract_identifiers
    from retrieval_pipeline.ingest.job import Ingestor
    from retrieval_pipeline.tools.embeddings import resolve_embedder
    from retrieval_pipeline.tools.retrieve import Retriever
    from retrieval_pipeline.tools.store import EmbeddedPostgres, Store
    from retrieval_pipeline.tools.store import sql as q

    server = EmbeddedPostgres(CACHE_HOME, keep_running=True)
    embedder = resolve_embedder("local")
    dataset = load_beir(SCIFACT)
    samples: dict[str, list[float]] = {}
    try:
        with Store(server.start()) as store:
            ensure_ingested(dataset, Ingestor(store, embedder))
            retriever = Retriever(store, embedder)
            scope = retriever.scope(tenant=dataset.tenant)
            queries = [dataset.queries[k] for k in sorted(dataset.queries)]
            embed_ms = []
            vectors = []
            for text in queries:
                started = time.perf_counter()
                vectors.append(embedder.embed_query(text))
                embed_ms.append((time.perf_counter() - started) * 1000)
            samples["query embedding (MiniLM, CPU)"] = embed_ms
            params = {"tenant": dataset.tenant, "depth": 40}

            def run_sql(statement: str, text: str) -> None:
                with store.connection() as conn:
                    conn.execute(statement, params | {"q": text}).fetchall()

            dense_exact = q.DENSE_EXACT.format(filters=scope.filters())

            def run_exact(vector: list[float]) -> None:
                literal = "[" + ",".join(map(repr, vector)) + "]"
                with store.connection() as conn:
                    conn.execute(
                        dense_exact,
                        scope.params() | {"embedding": literal, "depth": 40},
                    ).fetchall()

            operations: dict[str, Callable[[str, list[float]], Any]] = {
                "hybrid retrieve, 40 candidates (depth 100/channel)": lambda t, v: (
                    retriever.retrieve(
                        t, limit=40, query_embedding=v, tenant=dataset.tenant
                    )
                ),
                "hybrid retrieve, 40 candidates (depth 40/channel)": lambda t, v: (
                    retriever.retrieve(
                        t, limit=40, depth=40, query_embedding=v, tenant=dataset.tenant
                    )
                ),
                "lexical channel: BM25 SQL, depth 40": lambda t, v: (
                    store.search_lexical(
                        t,
                        extract_identifiers(t),
                        scope,
                        depth=40,
                        k1=retriever.k1,
                        b=retriever.b,
                    )
                ),
                "dense channel: HNSW, depth 40": lambda t, v: store.search_dense(
                    v, scope, depth=40, ef_search=100
                ),
                "baseline: websearch_to_tsquery + ts_rank_cd (AND)": lambda t, v: (
                    run_sql(TS_RANK_AND, t)
                ),
                "baseline: OR of lexemes + ts_rank_cd": lambda t, v: run_sql(
                    TS_RANK_OR, t
                ),
                "baseline: exact dense scan, depth 40": lambda t, v: run_exact(v),
            }
            for text, vector in list(zip(queries, vectors, strict=True))[
                :30
            ]:  # warm-up
                for op in operations.values():
                    op(text, vector)
            for _ in range(args.rounds):
                for text, vector in zip(queries, vectors, strict=True):
                    for name, op in operations.items():
                        started = time.perf_counter()
                        op(text, vector)
                        elapsed = (time.perf_counter() - started) * 1000
                        samples.setdefault(name, []).append(elapsed)
            chunks = store.counts()["chunks"]
            with store.connection() as conn:
                tenant_chunks = conn.execute(
                    "SELECT count(*) FROM chunks WHERE tenant = %s", (dataset.tenant,)
                ).fetchone()[0]
    finally:
        server.stop()
    report = {name: _percentiles(values) for name, values in samples.items()}
    result = {
        "benchmark": "latency",
        "date": time.strftime("%Y-%m-%d"),
        "dataset": "scifact",
        "chunks": tenant_chunks,
        # Every tenant in the database shares one HNSW graph (filtered by tenant).
        "database_chunks": chunks,
        "queries": len(queries),
        "rounds": args.rounds,
        "operations": report,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=1) + "\n")
    for name, stats in report.items():
        print(f"{name:60s} p50 {stats['p50']:7.2f} ms  p95 {stats['p95']:7.2f} ms")
    sys.path.insert(0, str(Path(__file__).parent))
    from report import write_benchmarks_md

    write_benchmarks_md()
    return 0


if __name__ == "__main__":
    sys.exit(main())
