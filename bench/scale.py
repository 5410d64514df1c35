"""Retrieval latency as the index grows: 5k -> 50k -> 250k chunks (issue 3).

The corpus is SciFact replicated with perturbation: every replica of a chunk drops
about a tenth of its words at random, swaps a pair, and carries a replica tag; its
vector is the original's plus Gaussian noise (sigma 0.01 per dimension, cosine ~0.98
to the original), renormalised. The vectors come from the SciFact chunks already
embedded in the bench database (``make bench-quality`` or ``make eval-report`` put
them there), and enter through the normal ingest path as imported rows whose stored
vector is reused (no embedding call), so postings, BM25 statistics and the HNSW index
are maintained exactly as for any ingest.

At each size, warm, single client, query embedding excluded (reported separately),
over the 300 SciFact test queries: the lexical channel (BM25 SQL, depth 40), the dense
channel (HNSW, depth 40) and the full hybrid retrieve of 40 candidates. Medians and
p95. Goal: hybrid p50 <= 50 ms at 250k chunks.

    python bench/scale.py [--sizes 5000 50000 250000]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SCIFACT = REPO.parent / "shared" / "data" / "scifact"
SOURCE_HOME = REPO / "bench" / ".cache" / "home"
SCALE_HOME = REPO / "bench" / ".cache" / "scale-home"
RESULTS = REPO / "bench" / "results" / "scale.json"
TENANT = "scale"
SIGMA = 0.01


def _percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50": round(statistics.median(ordered), 3),
        "p95": round(ordered[int(round(0.95 * (len(ordered) - 1)))], 3),
        "calls": len(ordered),
    }


def _perturb(text: str, vector: list[float], replica: int, seed: int) -> tuple:  # type: ignore[type-arg]
    rng = random.Random(seed * 1000 + replica)
    words = [w for w in text.split() if rng.random() > 0.1] or text.split()
    if len(words) > 3:
        i = rng.randrange(len(words) - 1)
        words[i], words[i + 1] = words[i + 1], words[i]
    noisy = [x + rng.gauss(0.0, SIGMA) for x in vector]
    norm = math.sqrt(sum(x * x for x in noisy)) or 1.0
    return " ".join(words) + f" variant{replica}", tuple(x / norm for x in noisy)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[5000, 50000, 250000])
    args = parser.parse_args()
    from retrieval_pipeline.eval.datasets import load_beir
    from retrieval_pipeline.ingest.chunker import extract_identifiers
    from retrieval_pipeline.ingest.job import Ingestor
    from retrieval_pipeline.ingest.loaders import SourceDocument
    from retrieval_pipeline.tools.embeddings import resolve_embedder
    from retrieval_pipeline.tools.retrieve import Retriever
    from retrieval_pipeline.tools.store import EmbeddedPostgres, Store
    from retrieval_pipeline.tools.store.store import parse_vector

    dataset = load_beir(SCIFACT)
    embedder = resolve_embedder("local")
    source_server = EmbeddedPostgres(SOURCE_HOME, keep_running=True)
    with Store(source_server.start()) as source, source.connection() as conn:
        rows = conn.execute(
            "SELECT id, content, embedding::text FROM chunks WHERE tenant = %s"
            " ORDER BY id",
            (f"eval:{dataset.name}",),
        ).fetchall()
    if not rows:
        print("no SciFact chunks in the bench database: run make eval-report first")
        return 1
    base = [(cid, text, list(parse_vector(vec))) for cid, text, vec in rows]
    print(f"{len(base)} SciFact chunks with vectors", file=sys.stderr)

    queries = [dataset.queries[k] for k in sorted(dataset.queries)]
    embed_ms, vectors = [], []
    for text in queries:
        started = time.perf_counter()
        vectors.append(embedder.embed_query(text))
        embed_ms.append((time.perf_counter() - started) * 1000)

    server = EmbeddedPostgres(SCALE_HOME, keep_running=True)
    levels: list[dict[str, Any]] = []
    try:
        with Store(server.start()) as store:
            ingestor = Ingestor(store, embedder)
            retriever = Retriever(store, embedder)
            scope = retriever.scope(tenant=TENANT)
            have = store.counts()["chunks"]
            for size in sorted(args.sizes):
                started = time.perf_counter()
                sources = []
                for n in range(have, size):
                    replica, index = divmod(n, len(base))
                    cid, text, vector = base[index]
                    if replica:
                        text, embedding = _perturb(text, vector, replica, index)
                    else:
                        embedding = tuple(vector)
                    sources.append(
                        SourceDocument(
                            source_id=f"{cid}-r{replica}",
                            title="",
                            path=f"scale/{replica}",
                            source_uri=f"bench://scale/{cid}/{replica}",
                            content=text,
                            body_start=0,
                            kind="langchain",
                            tenant=TENANT,
                            embedding=embedding,
                            embedding_origin="bench:scale",
                        )
                    )
                    if len(sources) == 2000:
                        ingestor.ingest_documents(sources)
                        sources = []
                        print(f"  {n + 1} chunks", file=sys.stderr)
                if sources:
                    ingestor.ingest_documents(sources)
                store.analyze()
                load_s = time.perf_counter() - started
                have = store.counts()["chunks"]
                operations = {
                    "lexical": lambda t, v: store.search_lexical(
                        t,
                        extract_identifiers(t),
                        scope,
                        depth=40,
                        k1=retriever.k1,
                        b=retriever.b,
                    ),
                    "dense": lambda t, v: store.search_dense(
                        v, scope, depth=40, ef_search=100
                    ),
                    "hybrid": lambda t, v: retriever.retrieve(
                        t, limit=40, query_embedding=v, tenant=TENANT
                    ),
                }
                pairs = list(zip(queries, vectors, strict=True))
                for text, vector in pairs[:30]:  # warm-up
                    for op in operations.values():
                        op(text, vector)
                samples: dict[str, list[float]] = {k: [] for k in operations}
                for text, vector in pairs:
                    for name, op in operations.items():
                        t0 = time.perf_counter()
                        op(text, vector)
                        samples[name].append((time.perf_counter() - t0) * 1000)
                level = {
                    "chunks": have,
                    "load_seconds": round(load_s, 1),
                    **{k: _percentiles(v) for k, v in samples.items()},
                }
                levels.append(level)
                print(json.dumps(level), file=sys.stderr)
    finally:
        server.stop()
    first = levels[0]
    result = {
        "benchmark": "scale",
        "date": time.strftime("%Y-%m-%d"),
        "queries": len(queries),
        "query_embedding_ms": _percentiles(embed_ms),
        "levels": levels,
        "growth_p50": {
            k: round(levels[-1][k]["p50"] / first[k]["p50"], 2)
            for k in ("lexical", "dense", "hybrid")
        },
        "goal_hybrid_p50_ms_at_250k": 50,
    }
    RESULTS.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    sys.path.insert(0, str(Path(__file__).parent))
    from report import write_benchmarks_md

    write_benchmarks_md()
    return 0


if __name__ == "__main__":
    sys.exit(main())
