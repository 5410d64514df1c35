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
over the 300 SciFact test queries: the lexical channel (BM25 SQL, depth 40) as shipped
(exhaustive while a query's postings fit the budget, impact-ordered bounded read past
it) and, as the same-process baseline, always exhaustive; the dense channel (HNSW,
depth 40); the full hybrid retrieve of 40 candidates, shipped and with the exhaustive
lexical channel. Medians and p95. Goal: hybrid p50 <= 50 ms at 250k chunks.

Quality at scale: each replica maps back to its SciFact document, so nDCG@10 against
the SciFact qrels (document level, first occurrence ranks the document) is computed
for the bounded and the exhaustive lexical channel and hybrid retrieve, with the
overlap of their top-40 chunk lists and the share of queries each mode served.

The database keeps what was loaded, so a run at a size already reached measures
without loading; levels measured in earlier runs stay in the results, each with the
date it was measured.

    python bench/scale.py [--sizes 5000 50000 250000] [--home DIR]
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


def _quality(
    store: Any,
    dataset: Any,
    qids: list[str],
    outputs: dict[str, list[list[str]]],
    original_doc: dict[str, str],
) -> dict[str, Any]:
    """Document-level nDCG@10 (replicas map to their SciFact document) and the
    top-40 overlap of each shipped list with its exhaustive baseline."""
    from retrieval_pipeline.eval.metrics import ndcg_at_k

    ids = {c for lists in outputs.values() for out in lists for c in out}
    with store.connection() as conn:
        replica_of = dict(
            conn.execute(
                "SELECT id, source_id FROM chunks WHERE id = ANY(%s)", (sorted(ids),)
            ).fetchall()
        )

    def documents(chunks: list[str]) -> list[str]:
        ranked: list[str] = []
        for chunk in chunks:
            doc = original_doc[replica_of[chunk].rsplit("-r", 1)[0]]
            if doc not in ranked:
                ranked.append(doc)
        return ranked

    report: dict[str, Any] = {}
    for name, lists in outputs.items():
        values = [
            ndcg_at_k(documents(out), dataset.qrels.get(qid, {}), 10)
            for qid, out in zip(qids, lists, strict=True)
            if qid in dataset.qrels
        ]
        report[f"{name}_ndcg@10"] = round(statistics.mean(values), 4)
    for name in ("lexical", "hybrid"):
        pairs = zip(outputs[name], outputs[f"{name}_exhaustive"], strict=True)
        overlap = [len(set(a) & set(b)) / max(len(b), 1) for a, b in pairs]
        report[f"{name}_overlap@40"] = round(statistics.mean(overlap), 4)
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[5000, 50000, 250000])
    parser.add_argument(
        "--home",
        type=Path,
        default=SCALE_HOME,
        help="data directory of the scale database (kept between runs)",
    )
    args = parser.parse_args()
    from retrieval_pipeline.eval.datasets import load_beir
    from retrieval_pipeline.ingest.chunker import extract_identifiers
    from retrieval_pipeline.ingest.job import Ingestor
    from retrieval_pipeline.ingest.loaders import SourceDocument
    from retrieval_pipeline.tools.embeddings import resolve_embedder
    from retrieval_pipeline.tools.retrieve import Retriever
    from retrieval_pipeline.tools.store import EmbeddedPostgres, Store
    from retrieval_pipeline.tools.store.store import (
        LEXICAL_EXHAUSTIVE_POSTINGS,
        LEXICAL_READ_BUDGET,
        parse_vector,
    )

    dataset = load_beir(SCIFACT)
    embedder = resolve_embedder("local")
    source_server = EmbeddedPostgres(SOURCE_HOME, keep_running=True)
    with Store(source_server.start()) as source, source.connection() as conn:
        rows = conn.execute(
            "SELECT id, content, embedding::text, source_id FROM chunks"
            " WHERE tenant = %s ORDER BY id",
            (f"eval:{dataset.name}",),
        ).fetchall()
    if not rows:
        print("no SciFact chunks in the bench database: run make eval-report first")
        return 1
    base = [(cid, text, list(parse_vector(vec))) for cid, text, vec, _ in rows]
    original_doc = {cid: source_id for cid, _, _, source_id in rows}
    print(f"{len(base)} SciFact chunks with vectors", file=sys.stderr)

    qids = sorted(dataset.queries)
    queries = [dataset.queries[k] for k in qids]
    embed_ms, vectors = [], []
    for text in queries:
        started = time.perf_counter()
        vectors.append(embedder.embed_query(text))
        embed_ms.append((time.perf_counter() - started) * 1000)

    server = EmbeddedPostgres(args.home, keep_running=True)
    levels: list[dict[str, Any]] = []
    try:
        with Store(server.start()) as store:
            ingestor = Ingestor(store, embedder)
            retriever = Retriever(store, embedder)
            exhaustive = Retriever(store, embedder, lexical_exhaustive_postings=None)
            scope = retriever.scope(tenant=TENANT)
            have = store.counts()["chunks"]
            modes: dict[str, int] = {}  # lexical modes served, per level
            skipped: set[int] = set()
            for size in sorted(args.sizes):
                if size < have:
                    # The database cannot shrink: a smaller level needs its own home.
                    print(
                        f"skip {size}: {args.home} already holds {have}",
                        file=sys.stderr,
                    )
                    skipped.add(size)
                    continue
                started = time.perf_counter()
                loaded = have < size
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
                store.vacuum_analyze()
                load_s = time.perf_counter() - started
                have = store.counts()["chunks"]

                def lexical(t: str, budget: int | None) -> list[str]:
                    stats: dict[str, Any] = {}
                    rows = store.search_lexical(
                        t,
                        extract_identifiers(t),
                        scope,
                        depth=40,
                        k1=retriever.k1,
                        b=retriever.b,
                        exhaustive_postings=budget,
                        stats=stats,
                    )
                    if budget is not None:
                        modes[stats["mode"]] = modes.get(stats["mode"], 0) + 1
                    return [r[0] for r in rows]

                operations = {
                    "lexical": lambda t, v: lexical(t, LEXICAL_EXHAUSTIVE_POSTINGS),
                    "lexical_exhaustive": lambda t, v: lexical(t, None),
                    "dense": lambda t, v: store.search_dense(
                        v, scope, depth=40, ef_search=100
                    ),
                    "hybrid": lambda t, v: [
                        c.chunk_id
                        for c in retriever.retrieve(
                            t, limit=40, query_embedding=v, tenant=TENANT
                        )
                    ],
                    "hybrid_exhaustive": lambda t, v: [
                        c.chunk_id
                        for c in exhaustive.retrieve(
                            t, limit=40, query_embedding=v, tenant=TENANT
                        )
                    ],
                }
                pairs = list(zip(queries, vectors, strict=True))
                for text, vector in pairs[:30]:  # warm-up
                    for op in operations.values():
                        op(text, vector)
                modes.clear()
                samples: dict[str, list[float]] = {k: [] for k in operations}
                outputs: dict[str, list[list[str]]] = {
                    k: [] for k in operations if k != "dense"
                }
                for text, vector in pairs:
                    for name, op in operations.items():
                        t0 = time.perf_counter()
                        out = op(text, vector)
                        samples[name].append((time.perf_counter() - t0) * 1000)
                        if name != "dense":
                            outputs[name].append(out)
                level = {
                    "chunks": have,
                    "measured": time.strftime("%Y-%m-%d"),
                    "load_seconds": round(load_s, 1) if loaded else None,
                    **{k: _percentiles(v) for k, v in samples.items()},
                    "lexical_modes": modes.copy(),
                    "quality": _quality(store, dataset, qids, outputs, original_doc),
                }
                levels.append(level)
                print(json.dumps(level), file=sys.stderr)
    finally:
        server.stop()
    previous = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    measured = {level["chunks"] for level in levels}
    wanted = set(args.sizes) - skipped
    for level in previous.get("levels", []):
        if level["chunks"] not in measured and level["chunks"] not in wanted:
            levels.append(level)
    levels.sort(key=lambda level: level["chunks"])
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
            if k in first and k in levels[-1]
        },
        "lexical_exhaustive_postings": LEXICAL_EXHAUSTIVE_POSTINGS,
        "lexical_read_budget": LEXICAL_READ_BUDGET,
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
