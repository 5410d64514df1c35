"""Residual side channels (issue 15): what a public caller learns about hidden documents.

Measured on a small synthetic corpus in a fresh embedded PostgreSQL:

(a) Timing. A caller who sees only public documents asks about a word and tries to
    tell "the word exists only in hidden documents" from "the word exists nowhere".
    Paired trials: each pair is one hidden-only word and one absent word of the same
    length, asked the same number of times, interleaved; the classifier calls the
    slower one hidden (chance: 50 %). Before: the per-branch ``lexical_ms`` a caller
    got in every debug block (now only with a debug grant). After: the wall-clock time
    of the public call alone, in process (the attacker's best case: no network
    jitter; the query embedding is cached after the first call, as in the server).
(b) Collection statistics. BM25 idf is computed over the tenant, hidden chunks
    included (the design the README defends). For queries made of one rare and one
    common public word, the largest shift in the fused score of a public result when
    one hidden document containing the query's words is added, on the plain path and
    on the pipeline; the hidden document is removed again after each query.

    python bench/side_channels.py [--pairs 40] [--requests 11]

Writes bench/results/side_channels.json, prints a markdown table and regenerates
BENCHMARKS.md. Runs in about a minute on two cores.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results" / "side_channels.json"
SEED = 15
PUBLIC_DOCS = 400
SMALL_TENANT = "small"  # statistics over few chunks move most when one is added
SMALL_TENANT_DOCS = 20
SMALL_TENANT_QUERIES = 5
HIDDEN_PRINCIPAL = "hr"
HIDDEN_DOCS_PER_WORD = 100  # hidden chunks containing each hidden-only word
WORDS_PER_HIDDEN_DOC = 5
SYLLABLES = "ba be bi bo bu da de di do du ka ke ki ko ku la le li lo lu ma me mi mo mu"
VOCABULARY = (
    "river mountain forest valley harbor bridge market garden tower castle village "
    "island desert canyon meadow glacier lagoon orchard quarry prairie summit tunnel "
    "vineyard windmill lighthouse cathedral library museum station factory workshop "
    "kitchen bakery pottery weaving carving sailing fishing farming mining trading "
    "copper silver granite marble timber cotton linen wool amber salt spice tea "
    "coffee grain barley wheat olive lemon apple cherry plum honey cheese bread "
    "winter summer autumn spring morning evening storm thunder rain snow frost mist "
    "north south east west ancient modern quiet busy narrow wide steep gentle"
).split()


def pseudo_words(rng: random.Random, count: int, taken: set[str]) -> list[str]:
    """Eight-letter made-up words that occur nowhere else (same length: same cost)."""
    syllables = SYLLABLES.split()
    words: list[str] = []
    while len(words) < count:
        word = "".join(rng.choice(syllables) for _ in range(4))
        if word not in taken:
            taken.add(word)
            words.append(word)
    return words


def public_corpus(rng: random.Random, count: int) -> list[tuple[str, str]]:
    """(id, text) of the public documents: sentences over a common vocabulary."""
    docs = []
    for i in range(count):
        words = rng.sample(VOCABULARY, 12)
        docs.append((f"pub{i:04d}", f"Notes {i}: " + " ".join(words) + "."))
    return docs


def source(
    doc_id: str, text: str, principals: Sequence[str] = (), tenant: str = ""
) -> Any:
    from retrieval_pipeline.ingest.loaders import SourceDocument

    return SourceDocument(
        tenant=tenant,
        source_id=doc_id,
        title=doc_id,
        path=doc_id,
        source_uri=f"bench://side-channels/{doc_id}",
        content=text,
        body_start=0,
        kind="text",
        principals=tuple(principals),
    )


def wilson(correct: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95 % Wilson score interval of a proportion."""
    if n == 0:
        return (math.nan, math.nan)
    p = correct / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (round(centre - half, 3), round(centre + half, 3))


def classifier(
    pairs: Sequence[tuple[list[float], list[float]]],
    statistic: Callable[[list[float]], float],
) -> dict[str, Any]:
    """Accuracy of "the slower word is the hidden one" over paired trials."""
    correct = sum(statistic(hidden) > statistic(absent) for hidden, absent in pairs)
    return {
        "correct": correct,
        "pairs": len(pairs),
        "accuracy": round(correct / len(pairs), 3),
        "ci95": wilson(correct, len(pairs)),
        "median_hidden_ms": round(statistics.median(statistic(h) for h, _ in pairs), 3),
        "median_absent_ms": round(statistics.median(statistic(a) for _, a in pairs), 3),
    }


def timing_attack(
    graph: Any, context: Any, hidden: list[str], absent: list[str], requests: int
) -> dict[str, Any]:
    """Ask about each word ``requests`` times, both words of a pair interleaved."""
    debug_pairs, wall_pairs = [], []

    def ask(word: str, debug: bool) -> tuple[float, float]:
        started = time.perf_counter()
        out = graph.invoke(
            {"question": f"what is {word}", "limit": 5, "debug": debug},
            context=context,
        )
        wall = (time.perf_counter() - started) * 1000
        lexical = sum(
            b.get("lexical_ms", 0.0) for b in out["retrieval_debug"].get("branches", [])
        )
        return wall, lexical

    for word in [*hidden[:2], *absent[:2]]:  # warm the caches and the plans
        ask(word, True)
        ask(word, False)
    for n, (h, a) in enumerate(zip(hidden, absent, strict=True)):
        samples: dict[tuple[str, bool], list[float]] = {
            (w, d): [] for w in (h, a) for d in (True, False)
        }
        for r in range(requests):
            order = [(h, True), (a, True), (h, False), (a, False)]
            order = (
                order[(n + r) % 4 :] + order[: (n + r) % 4]
            )  # rotate: no position bias
            for word, debug in order:
                wall, lexical = ask(word, debug)
                samples[(word, debug)].append(lexical if debug else wall)
        debug_pairs.append((samples[(h, True)], samples[(a, True)]))
        wall_pairs.append((samples[(h, False)], samples[(a, False)]))
    return {
        "before_debug_lexical_ms": classifier(debug_pairs, statistics.median),
        "after_wall_clock_median": classifier(wall_pairs, statistics.median),
        "after_wall_clock_min": classifier(wall_pairs, min),
    }


def score_shift(
    graph: Any,
    ingestor: Any,
    store: Any,
    contexts: dict[str, Any],
    queries: list[tuple[str, str]],
    tenant: str,
) -> dict[str, Any]:
    """Fused-score shift of public results when one hidden document with the
    query's words is added (then removed again)."""
    from retrieval_pipeline.tools.store.records import document_key

    shifts: dict[str, list[float]] = {name: [] for name in contexts}
    rank_changes: dict[str, int] = dict.fromkeys(contexts, 0)
    compared: dict[str, int] = dict.fromkeys(contexts, 0)

    def run(context: Any, question: str) -> dict[str, tuple[int, float]]:
        state = {"question": question, "limit": 10, "tenant": tenant}
        out = graph.invoke(state, context=context)
        return {
            c["chunk_id"]: (rank, c["score"])
            for rank, c in enumerate(out["chunks"], start=1)
        }

    for n, (rare, common) in enumerate(queries):
        question = f"{rare} {common}"
        before = {name: run(ctx, question) for name, ctx in contexts.items()}
        hidden_id = f"hidden-probe-{n}"
        text = f"{rare} {common} {rare}."
        ingestor.ingest_documents([source(hidden_id, text, [HIDDEN_PRINCIPAL], tenant)])
        after = {name: run(ctx, question) for name, ctx in contexts.items()}
        store.delete_document(document_key(tenant, hidden_id))
        for name in contexts:
            for chunk_id, (rank, score) in before[name].items():
                if chunk_id in after[name]:
                    new_rank, new_score = after[name][chunk_id]
                    shifts[name].append(abs(new_score - score))
                    rank_changes[name] += new_rank != rank
                    compared[name] += 1
    return {
        name: {
            "queries": len(queries),
            "results_compared": compared[name],
            "max_abs_shift": round(max(values), 4),
            "median_abs_shift": round(statistics.median(values), 4),
            "rank_changes": rank_changes[name],
        }
        for name, values in shifts.items()
    }


def shift_queries(
    rng: random.Random, docs: list[tuple[str, str]], count: int
) -> list[tuple[str, str]]:
    """(rare, common) word pairs: a word in two public documents, and one in about a
    tenth of them. One of the two has the rare word alone, so its fused score sits
    between the extremes that min-max normalisation pins (where idf moves it most)."""
    rare_words = pseudo_words(rng, count, set())
    queries = []
    for n, rare in enumerate(rare_words):
        common = rng.choice(VOCABULARY)
        queries.append((rare, common))
        doc_id, text = docs[n]
        docs[n] = (doc_id, f"{text.replace(common, 'and')} {rare}.")
        doc_id, text = docs[n + count]
        docs[n + count] = (doc_id, f"{text} {rare} and {common}.")
    return queries


def markdown(result: dict[str, Any]) -> str:
    t, s = result["timing"], result["score_shift"]
    rows = [
        "| channel | measure | value |",
        "|---|---|---|",
    ]
    for key, label in (
        ("before_debug_lexical_ms", "before: debug `lexical_ms` (median)"),
        ("after_wall_clock_median", "after: wall clock only (median)"),
        ("after_wall_clock_min", "after: wall clock only (minimum)"),
    ):
        c = t[key]
        rows.append(
            f"| timing, hidden-only vs absent word ({label}) | accuracy, "
            f"{c['pairs']} pairs (chance 0.5) | {c['accuracy']:.2f} "
            f"[{c['ci95'][0]:.2f}, {c['ci95'][1]:.2f}] |"
        )
    for corpus, paths in s.items():
        for name, v in paths.items():
            rows.append(
                f"| collection statistics, one hidden document added ({corpus}; "
                f"{name}) | max / median fused-score shift, rank changes over "
                f"{v['results_compared']} public results | {v['max_abs_shift']:.4f}"
                f" / {v['median_abs_shift']:.4f}, {v['rank_changes']} |"
            )
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=40, help="timing trials")
    parser.add_argument(
        "--requests", type=int, default=11, help="requests per word and mode"
    )
    parser.add_argument("--shift-queries", type=int, default=20)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from retrieval_pipeline.graph.builder import build_pipeline
    from retrieval_pipeline.graph.context import Context
    from retrieval_pipeline.graph.resources import PipelineResources
    from retrieval_pipeline.ingest.job import Ingestor
    from retrieval_pipeline.tools.embeddings import resolve_embedder
    from retrieval_pipeline.tools.retrieve import Retriever
    from retrieval_pipeline.tools.store import EmbeddedPostgres, Store

    rng = random.Random(SEED)
    docs = public_corpus(rng, PUBLIC_DOCS)
    queries = shift_queries(rng, docs, args.shift_queries)
    small_docs = public_corpus(rng, SMALL_TENANT_DOCS)
    small_queries = shift_queries(rng, small_docs, SMALL_TENANT_QUERIES)
    taken = {w for q in [*queries, *small_queries] for w in q}
    hidden_words = pseudo_words(rng, args.pairs, taken)
    absent_words = pseudo_words(rng, args.pairs, taken)
    hidden_docs = []
    per_doc = WORDS_PER_HIDDEN_DOC
    for i in range(args.pairs * HIDDEN_DOCS_PER_WORD // per_doc):
        words = [hidden_words[(i * per_doc + j) % args.pairs] for j in range(per_doc)]
        filler = " ".join(rng.sample(VOCABULARY, 8))
        hidden_docs.append((f"hid{i:05d}", f"Memo {i}: {' '.join(words)} {filler}."))

    started = time.monotonic()
    embedder = resolve_embedder("local")
    with tempfile.TemporaryDirectory(prefix="rp-side-channels-") as home:
        server = EmbeddedPostgres(Path(home), keep_running=False)
        try:
            with Store(server.start()) as store:
                ingestor = Ingestor(store, embedder)
                ingestor.ingest_documents(source(i, t) for i, t in docs)
                ingestor.ingest_documents(
                    source(i, t, tenant=SMALL_TENANT) for i, t in small_docs
                )
                ingestor.ingest_documents(
                    source(i, t, [HIDDEN_PRINCIPAL]) for i, t in hidden_docs
                )
                store.analyze()
                retriever = Retriever(store, embedder)
                graph = build_pipeline(PipelineResources(retriever=retriever))
                pipeline = Context(understanding=False, reranker="none")
                plain = Context(
                    understanding=False, graph_fusion=False, reranker="none"
                )
                timing = timing_attack(
                    graph, pipeline, hidden_words, absent_words, args.requests
                )
                paths = {"plain path": plain, "pipeline": pipeline}
                shift = {
                    f"{len(docs)} public + {len(hidden_docs)} hidden documents": (
                        score_shift(graph, ingestor, store, paths, queries, "")
                    ),
                    f"a small tenant: {len(small_docs)} public documents": (
                        score_shift(
                            graph, ingestor, store, paths, small_queries, SMALL_TENANT
                        )
                    ),
                }
        finally:
            server.stop()
    result = {
        "benchmark": "side_channels",
        "date": time.strftime("%Y-%m-%d"),
        "machine": {"cpus": os.cpu_count()},
        "seconds": round(time.monotonic() - started, 1),
        "corpus": {
            "public_documents": len(docs),
            "small_tenant_public_documents": len(small_docs),
            "hidden_documents": len(hidden_docs),
            "hidden_documents_per_hidden_word": HIDDEN_DOCS_PER_WORD,
        },
        "timing": {"requests_per_word": args.requests, **timing},
        "score_shift": shift,
        "statistics": "tenant-wide BM25 statistics (hidden chunks included)",
    }
    RESULTS.write_text(json.dumps(result, indent=1) + "\n")
    print(markdown(result))
    sys.path.insert(0, str(REPO / "bench"))
    from report import write_benchmarks_md

    write_benchmarks_md()
    return 0


if __name__ == "__main__":
    sys.exit(main())
