"""Embedding providers: parallel remote calls, faults, and ONNX against torch.

(a) Remote embedder at 200 ms (an OpenAI-compatible peer on 127.0.0.1, in its own
    process): 8 concurrent distinct query embeddings, wall time. Before: every call
    under one process-wide lock (the old ``Embedder``), reproduced in-process around
    the same client; after: the current ``Embedder``. Interleaved rounds, medians.
(b) Provider faults: the peer answers 500, or hangs; each query runs the whole
    pipeline (lexical + dense) with ``embed_deadline_s``; every answer must come from
    the lexical channel within the deadline + 50 ms, with the fallback recorded.
(c) ONNX (``local``) and its int8 copy (``local-int8``) against torch
    (``local-torch``), same run: nDCG@10 of the
    hybrid channel on SciFact, NFCorpus, HotpotQA and MuSiQue (test queries, as
    bench/quality.py), embedding throughput on the same chunk texts (chunks/s,
    interleaved rounds), query-embedding p50 (distinct queries, cache cleared) and
    the RSS of a fresh process that has loaded the embedder and the pipeline.

    python bench/embedders.py [--parts a b c] [--datasets scifact nfcorpus ...]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # the protocol peers live with the tests
from quality import DATASETS  # noqa: E402 (the four shared sets, one list)

CACHE_HOME = REPO / "bench" / ".cache" / "embedders"
RESULTS = REPO / "bench" / "results" / "embedders.json"
PEER_DELAY_S = 0.2
CONCURRENT = 8
ROUNDS = 7
FAULT_DEADLINE_S = 0.5
FAULT_QUERIES = 20
THROUGHPUT_CHUNKS = 128
QUERY_SAMPLES = 100
GOALS = {
    "concurrent_embed_s": 0.3,
    "fault_margin_ms": 50.0,
    "ndcg_delta": 0.003,
    "ingest_speedup": 2.0,
    "query_p50_ms": 5.0,
    "rss_mb": 350.0,
}


def _serve_peer(delay: float, mode: str, queue: Any) -> None:
    from provider_peers import PeerBehaviour, rerank_peer

    with rerank_peer(PeerBehaviour(mode=mode, delay_s=delay)) as (url, _):
        queue.put(url)
        threading.Event().wait()


class Peer:
    """An embeddings peer in its own process (its GIL is not the client's)."""

    def __init__(self, mode: str, delay_s: float) -> None:
        context = multiprocessing.get_context("spawn")
        queue = context.Queue()
        self.process = context.Process(
            target=_serve_peer, args=(delay_s, mode, queue), daemon=True
        )
        self.process.start()
        self.url = queue.get(timeout=60)

    def close(self) -> None:
        self.process.terminate()
        self.process.join(5)


def _openai_embedder(url: str) -> Any:
    os.environ["OPENAI_BASE_URL"] = f"{url}/v1"
    os.environ["OPENAI_API_KEY"] = "sk-bench-local"
    from retrieval_pipeline.tools.embeddings import _remote

    return _remote("openai", "text-embedding-3-small")


def part_a() -> dict[str, Any]:
    peer = Peer("slow", PEER_DELAY_S)
    try:
        embedder = _openai_embedder(peer.url)
        embedder.embed_query_within("warm up the client", 30.0)
        old_lock = threading.Lock()

        def before(text: str) -> None:  # the old Embedder: one lock around the call
            with old_lock:
                embedder.embeddings.embed_query(text)

        def after(text: str) -> None:
            embedder.embed_query_within(text, 10.0)

        walls: dict[str, list[float]] = {"before_global_lock": [], "after": []}
        for r in range(ROUNDS):
            for name, fn in (("before_global_lock", before), ("after", after)):
                threads = [
                    threading.Thread(target=fn, args=(f"{name} round {r} query {i}",))
                    for i in range(CONCURRENT)
                ]
                started = time.perf_counter()
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                walls[name].append(time.perf_counter() - started)
        single = []
        for i in range(ROUNDS):
            started = time.perf_counter()
            embedder.embeddings.embed_query(f"single {i}")
            single.append(time.perf_counter() - started)
    finally:
        peer.close()
    med = {k: statistics.median(v) for k, v in walls.items()}
    return {
        "peer_delay_s": PEER_DELAY_S,
        "concurrent": CONCURRENT,
        "rounds": ROUNDS,
        "wall_s_median": {k: round(v, 4) for k, v in med.items()},
        "wall_s_all": {k: [round(x, 4) for x in v] for k, v in walls.items()},
        "single_call_s_median": round(statistics.median(single), 4),
        "speedup": round(med["before_global_lock"] / med["after"], 2),
        "goal_s": GOALS["concurrent_embed_s"],
    }


def _fresh_database(server_url: str, name: str) -> str:
    import psycopg
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.execute(f"CREATE DATABASE {name}")
    params = conninfo_to_dict(server_url)
    params["dbname"] = name
    return make_conninfo(**params)


def _database(server_url: str, name: str) -> str:
    """Connection string of database ``name`` (created if missing, kept if present)."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    with psycopg.connect(server_url, autocommit=True) as conn:
        exists = conn.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", (name,)
        ).fetchone()
        if not exists:
            conn.execute(f"CREATE DATABASE {name}")
    params = conninfo_to_dict(server_url)
    params["dbname"] = name
    return make_conninfo(**params)


def part_b(server_url: str) -> dict[str, Any]:
    from retrieval_pipeline.graph.builder import build_pipeline
    from retrieval_pipeline.graph.context import Context
    from retrieval_pipeline.graph.resources import PipelineResources
    from retrieval_pipeline.ingest.job import Ingestor
    from retrieval_pipeline.tools.retrieve import Retriever
    from retrieval_pipeline.tools.store import Store

    corpus = REPO / "examples" / "sample_corpus"
    questions = [
        "kafka consumer lag partitions",
        "who owns payments-api",
        "ERR_CONN_RESET in v2.3.1",
        "refund policy",
        "on-call rotation for the platform team",
    ]
    out: dict[str, Any] = {"deadline_s": FAULT_DEADLINE_S, "queries": FAULT_QUERIES}
    healthy = Peer("ok", 0.0)
    store = Store(_fresh_database(server_url, "bench_embed_faults"))
    try:
        embedder = _openai_embedder(healthy.url)
        summary = Ingestor(store, embedder).ingest_paths([corpus])
        out["ingested_documents"] = summary.documents
    finally:
        healthy.close()
    context = Context(
        understanding=False, reranker="none", embed_deadline_s=FAULT_DEADLINE_S
    )
    peers = {"http500": Peer("http500", 0.0), "hang": Peer("slow", 30.0)}
    try:
        graphs = {
            mode: build_pipeline(
                PipelineResources(
                    retriever=Retriever(store, _openai_embedder(peer.url))
                )
            )
            for mode, peer in peers.items()
        }
        stats: dict[str, dict[str, Any]] = {
            m: {"elapsed": [], "excess": [], "errors": 0, "recorded": 0, "answered": 0}
            for m in graphs
        }
        for i in range(FAULT_QUERIES):
            question = f"{questions[i % len(questions)]} {i}"
            for mode, graph in graphs.items():
                started = time.perf_counter()
                try:
                    result = graph.invoke(
                        {"question": question, "limit": 5}, context=context
                    )
                except Exception as exc:  # noqa: BLE001 - counted
                    stats[mode]["errors"] += 1
                    print(f"{mode}: {type(exc).__name__}: {exc}", file=sys.stderr)
                    continue
                stats[mode]["elapsed"].append(time.perf_counter() - started)
                fallbacks = result["retrieval_debug"].get("fallbacks") or []
                stats[mode]["recorded"] += any(
                    "dense skipped" in f["reason"] for f in fallbacks
                )
                stats[mode]["answered"] += bool(result["chunks"])
    finally:
        for peer in peers.values():
            peer.close()
    limit = FAULT_DEADLINE_S + GOALS["fault_margin_ms"] / 1000
    http500 = stats["http500"]["elapsed"]
    for mode, st in stats.items():
        elapsed = st["elapsed"]
        # The wait the fault added: this query's latency minus the same query's
        # latency when the provider fails at once (the lexical-only pipeline).
        excess = [e - f for e, f in zip(elapsed, http500, strict=False)]
        out[mode] = {
            "errors": st["errors"],
            "fallback_recorded": st["recorded"],
            "answered_with_chunks": st["answered"],
            "latency_ms_p50": round(statistics.median(elapsed) * 1000, 1),
            "latency_ms_max": round(max(elapsed) * 1000, 1),
            "within_deadline_plus_50ms": sum(e <= limit for e in elapsed),
            "added_over_fail_fast_ms_p50": round(statistics.median(excess) * 1000, 1),
            "added_over_fail_fast_ms_max": round(max(excess) * 1000, 1),
        }
    store.close()
    return out


_RSS_SCRIPT = """
import json, sys, resource
from retrieval_pipeline.tools.embeddings import resolve_embedder
import retrieval_pipeline.graph.builder  # the pipeline a server process loads
e = resolve_embedder(sys.argv[1])
e.embed_query("how much memory does this process use")
e.embed_documents(["a passage of text to embed"] * 64)
status = dict(
    line.split(":", 1) for line in open("/proc/self/status") if ":" in line
)
print(json.dumps({
    "rss_mb": int(status["VmRSS"].split()[0]) / 1024,
    "peak_rss_mb": int(status["VmHWM"].split()[0]) / 1024,
    "torch_imported": "torch" in sys.modules,
}))
"""


def _rss(spec: str, home: Path) -> dict[str, Any]:
    env = {**os.environ, "RETRIEVAL_PIPELINE_HOME": str(home)}
    done = subprocess.run(
        [sys.executable, "-c", _RSS_SCRIPT, spec],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def _chunk_texts(limit: int) -> list[str]:
    from retrieval_pipeline.ingest.job import chunk_document
    from retrieval_pipeline.ingest.loaders import LoadDefaults, load_file
    from retrieval_pipeline.tools.tokens import default_token_counter

    counter = default_token_counter()
    path = DATASETS["scifact"] / "corpus.jsonl"
    texts: list[str] = []
    for source in load_file(path, LoadDefaults(root=path.parent)):
        texts.extend(c.indexed_text() for c in chunk_document(source, counter))
        if len(texts) >= limit:
            break
    return texts[:limit]


def part_c(
    server_url: str,
    datasets: list[str],
    home: Path,
    previous: dict[str, Any],
    speed: bool,
    save: Any,
    quality_of: tuple[str, ...] = ("onnx", "torch"),
) -> dict[str, Any]:
    from retrieval_pipeline.tools.embeddings import (
        local_minilm_onnx,
        local_minilm_torch,
    )

    embedders = {
        "onnx": local_minilm_onnx(),
        "torch": local_minilm_torch(),
        "int8": local_minilm_onnx(int8=True),
    }
    for e in embedders.values():
        e.warm_up()
        e.embed_documents(["warm up"] * 8)
    out: dict[str, Any] = dict(previous)
    if speed:
        out.update(_speed(embedders, home))
        save(out)
    out["quality"] = dict(out.get("quality", {}))
    if not quality_of:
        return out
    chosen = {k: v for k, v in embedders.items() if k in quality_of}
    _quality(server_url, datasets, chosen, out["quality"], lambda: save(out))
    return out


def _speed(embedders: dict[str, Any], home: Path) -> dict[str, Any]:
    from retrieval_pipeline.eval.datasets import load_beir

    out: dict[str, Any] = {}
    # Throughput and query latency, interleaved so both see the same machine load.
    texts = _chunk_texts(THROUGHPUT_CHUNKS)
    rates: dict[str, list[float]] = {k: [] for k in embedders}
    for _ in range(3):
        for name, e in embedders.items():
            started = time.perf_counter()
            e.embeddings.embed_documents(texts)
            rates[name].append(len(texts) / (time.perf_counter() - started))
    out["throughput"] = {
        "chunks": len(texts),
        "source": "first SciFact chunks, as ingest cuts them",
        "chunks_per_s_median": {
            k: round(statistics.median(v), 1) for k, v in rates.items()
        },
    }
    out["throughput"]["speedup"] = round(
        statistics.median(rates["onnx"]) / statistics.median(rates["torch"]), 2
    )
    if "int8" in rates:
        out["throughput"]["speedup_int8"] = round(
            statistics.median(rates["int8"]) / statistics.median(rates["torch"]), 2
        )
    queries = list(load_beir(DATASETS["scifact"]).queries.values())[:QUERY_SAMPLES]
    latency: dict[str, list[float]] = {k: [] for k in embedders}
    for q in queries:
        for name, e in embedders.items():
            started = time.perf_counter()
            e.embeddings.embed_query(q)
            latency[name].append((time.perf_counter() - started) * 1000)
    out["query_embed_ms"] = {
        k: {
            "p50": round(statistics.median(v), 2),
            "p95": round(sorted(v)[int(0.95 * len(v))], 2),
        }
        for k, v in latency.items()
    }
    out["query_embed_ms"]["samples"] = len(queries)
    out["rss"] = {
        "onnx": _rss("local", home),
        "torch": _rss("local-torch", home),
        "int8": _rss("local-int8", home),
    }
    return out


def _quality(
    server_url: str,
    datasets: list[str],
    embedders: dict[str, Any],
    quality: dict[str, Any],
    checkpoint: Any,
) -> None:
    """Each data set ingested once per embedder, under its own tenant (in place).

    A database holds one vector space, so each embedder gets its own, named after
    its model and version: a changed graph (a new export format, another runtime)
    is ingested afresh instead of reusing vectors another graph wrote.
    """
    from retrieval_pipeline.eval.datasets import load_beir
    from retrieval_pipeline.eval.runner import CONFIGS, run_channel_configs
    from retrieval_pipeline.ingest.job import Ingestor
    from retrieval_pipeline.tools.retrieve import Retriever
    from retrieval_pipeline.tools.store import Store

    stores: dict[str, Any] = {}

    def store_for(e: Any) -> Any:
        key = f"{e.model} {e.version}"
        if key not in stores:
            digest = hashlib.sha256(key.encode()).hexdigest()[:10]
            name = f"bench_embed_quality_{digest}"
            stores[key] = Store(_database(server_url, name))
        return stores[key]

    try:
        for ds in datasets:
            quality[ds] = dict(quality.get(ds, {}))
            for name, e in embedders.items():
                store = store_for(e)
                dataset = load_beir(DATASETS[ds], name=f"{ds}-{name}")
                started = time.perf_counter()
                summary = Ingestor(store, e).ingest_paths(
                    [dataset.corpus_path],
                    tenant=dataset.tenant,
                    title_entities="multihop" in dataset.root.parts,
                )
                ingest_s = time.perf_counter() - started
                for text in dataset.queries.values():  # cached: no deadline applies
                    e.embed_query(text)
                report = run_channel_configs(
                    dataset, Retriever(store, e), [CONFIGS["hybrid"], CONFIGS["dense"]]
                )
                ingest = {
                    "chunks": summary.chunks,
                    "embed_s": round(summary.embed_seconds, 1),
                    "ingest_s": round(ingest_s, 1),
                    "ingest_chunks_per_s": round(summary.chunks / ingest_s, 1),
                    "embed_chunks_per_s": round(
                        summary.chunks / max(summary.embed_seconds, 1e-9), 1
                    ),
                }
                earlier = quality[ds].get(name, {})
                if not summary.chunks and earlier.get("chunks"):
                    # Every document unchanged (nothing embedded): keep the figures
                    # of the run that ingested them.
                    ingest = {k: earlier[k] for k in ingest} | {"ingest_reused": True}
                quality[ds][name] = {
                    "queries": len(dataset.queries),
                    **ingest,
                    **{
                        f"{r.name}_ndcg@10": round(
                            statistics.fmean(r.per_query["ndcg@10"].values()), 4
                        )
                        for r in report.results
                    },
                }
                print(f"{ds} {name}: {quality[ds][name]}", file=sys.stderr)
            for name in embedders:
                if name == "torch" or "torch" not in quality[ds]:
                    continue
                key = "hybrid_delta" if name == "onnx" else f"hybrid_delta_{name}"
                quality[ds][key] = round(
                    quality[ds][name]["hybrid_ndcg@10"]
                    - quality[ds]["torch"]["hybrid_ndcg@10"],
                    4,
                )
            checkpoint()
    finally:
        for store in stores.values():
            store.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--parts", nargs="+", default=["a", "b", "c"])
    parser.add_argument(
        "--datasets", nargs="+", default=list(DATASETS), choices=list(DATASETS)
    )
    parser.add_argument(
        "--quality-of",
        nargs="*",
        default=["onnx", "torch"],
        choices=["onnx", "torch", "int8"],
        help="part c: the embedders whose retrieval quality is measured (none: speed)",
    )
    parser.add_argument(
        "--no-speed",
        action="store_true",
        help="part c: quality only (keep the stored throughput, latency, RSS)",
    )
    args = parser.parse_args()
    from report import cpu_model

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ["RETRIEVAL_PIPELINE_HOME"] = str(CACHE_HOME)
    from retrieval_pipeline.tools.store import EmbeddedPostgres

    previous = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    results: dict[str, Any] = previous.get("parts", {})

    def save(part_c: dict[str, Any] | None = None) -> None:
        """Write the results so far (each step lands even if a later one stops)."""
        if part_c is not None:
            results["c_onnx_vs_torch"] = part_c
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(
            json.dumps(
                {
                    "benchmark": "embedders",
                    "date": time.strftime("%Y-%m-%d"),
                    "machine": {
                        "cpus": os.cpu_count(),
                        "cpu": cpu_model(),
                        "load_avg_1m": round(os.getloadavg()[0], 1),
                    },
                    "goals": GOALS,
                    "parts": results,
                },
                indent=1,
            )
            + "\n"
        )

    server = EmbeddedPostgres(CACHE_HOME, keep_running=True)
    url = server.start()
    try:
        if "a" in args.parts:
            results["a_remote_concurrency"] = part_a()
            print(results["a_remote_concurrency"], file=sys.stderr)
            save()
        if "b" in args.parts:
            results["b_faults"] = part_b(url)
            print(results["b_faults"], file=sys.stderr)
            save()
        if "c" in args.parts:
            results["c_onnx_vs_torch"] = part_c(
                url,
                args.datasets,
                CACHE_HOME,
                results.get("c_onnx_vs_torch", {}),
                speed=not args.no_speed,
                save=save,
                quality_of=tuple(args.quality_of),
            )
    finally:
        server.stop()
    save()
    from report import write_benchmarks_md

    write_benchmarks_md()
    return 0


if __name__ == "__main__":
    sys.exit(main())
