"""Read replicas on loopback: one server against primary + one streaming standby.

A scratch primary and a standby made with the packaged ``pg_basebackup -R``
(:class:`LoopbackCluster` from ``tests/integration/test_replicas.py``) hold the
sample corpus. The same workload, hybrid retrieves of SciFact's test questions with
the query embedding precomputed (so the database path is what is timed), runs
against

- **one server**: a store on the primary without replicas (direct connections), and
- **primary + replica**: the same primary with the standby as its read replica,

interleaved round by round: p50/p95 latency from one client, throughput from two.
The routing overhead is the p50 of a routed borrow-and-``SELECT 1`` minus that of a
direct one, and the p50 difference of the full retrieve. Failover: a 60 s load from
two clients while the replica is killed (``pg_ctl stop -m immediate``) and restarted
twice; every error counts. On 2 cores both servers share the CPUs, so this measures
routing overhead and correctness, not the speedup a second machine gives.

    python bench/replicas.py [--rounds 3] [--failover-s 60]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import date
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SCIFACT = REPO.parent / "shared" / "data" / "scifact"
SAMPLE_CORPUS = REPO / "examples" / "sample_corpus"
RESULTS = REPO / "bench" / "results" / "replicas.json"
QUERIES = 100
LIMIT = 10
OVERHEAD_GOAL_MS = 1.0


def _percentile(samples: list[float], share: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(round(share * (len(ordered) - 1))))]


def _latencies(run: Callable[[int], Any], count: int) -> list[float]:
    """Milliseconds of each of ``count`` calls, one client."""
    out = []
    for i in range(count):
        started = time.perf_counter()
        run(i)
        out.append((time.perf_counter() - started) * 1000)
    return out


def _paired(
    runs: dict[str, Callable[[int], Any]], count: int
) -> dict[str, list[float]]:
    """Milliseconds per call of each setup, call by call, in alternating order.

    Setup A and B run the same call back to back (A first on even calls, B first on
    odd ones), so load from elsewhere on the machine falls on both alike.
    """
    out: dict[str, list[float]] = {name: [] for name in runs}
    names = list(runs)
    for i in range(count):
        for name in names if i % 2 == 0 else names[::-1]:
            started = time.perf_counter()
            runs[name](i)
            out[name].append((time.perf_counter() - started) * 1000)
    return out


def _throughput(run: Callable[[int], Any], clients: int, seconds: float) -> float:
    """Calls per second from ``clients`` threads over ``seconds``."""
    done = [0] * clients
    stop = threading.Event()

    def client(slot: int) -> None:
        i = slot
        while not stop.is_set():
            run(i)
            done[slot] += 1
            i += clients

    threads = [threading.Thread(target=client, args=(s,)) for s in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join()
    return sum(done) / (time.perf_counter() - started)


def _select_one(borrow: Callable[[], Any]) -> Callable[[int], Any]:
    def run(_: int) -> None:
        with borrow() as conn:
            conn.execute("SELECT 1").fetchone()

    return run


def _failover(
    cluster: Any, retriever: Any, vectors: list[Any], seconds: float
) -> dict[str, Any]:
    """Two clients for ``seconds``; kill and restart the replica twice meanwhile."""
    from retrieval_pipeline.tools.store.replicas import recording_servers

    served: Counter[str] = Counter()
    errors: list[str] = []
    stop = threading.Event()
    timeline: list[tuple[float, str]] = []

    def client(slot: int) -> None:
        i = slot
        while not stop.is_set():
            text, vector = vectors[i % len(vectors)]
            try:
                with recording_servers() as servers:
                    retriever.retrieve(text, limit=LIMIT, query_embedding=vector)
                served.update(servers)
                served["(queries)"] += 1
            except Exception as exc:  # noqa: BLE001 - every error is counted
                errors.append(f"{type(exc).__name__}: {exc}")
            i += 2

    started = time.monotonic()
    threads = [threading.Thread(target=client, args=(s,)) for s in range(2)]
    for thread in threads:
        thread.start()
    events = [(0.2, "kill"), (0.4, "restart"), (0.6, "kill"), (0.8, "restart")]
    for share, event in events:
        time.sleep(max(0.0, started + share * seconds - time.monotonic()))
        if event == "kill":
            cluster.kill_standby()
        else:
            cluster.start_standby()
        timeline.append((round(time.monotonic() - started, 2), event))
    time.sleep(max(0.0, started + seconds - time.monotonic()))
    stop.set()
    for thread in threads:
        thread.join()
    return {
        "seconds": round(time.monotonic() - started, 1),
        "queries": served.pop("(queries)", 0),
        "served_by": dict(served),  # queries that each server answered reads of
        "errors": len(errors),
        "error_samples": errors[:3],
        "events": timeline,
    }


def _measure(args: argparse.Namespace) -> dict[str, Any]:
    sys.path.insert(0, str(REPO / "tests" / "integration"))
    from test_replicas import LoopbackCluster

    from retrieval_pipeline.eval.datasets import load_beir
    from retrieval_pipeline.ingest.job import Ingestor
    from retrieval_pipeline.tools.embeddings import resolve_embedder
    from retrieval_pipeline.tools.retrieve import Retriever
    from retrieval_pipeline.tools.store import Store

    embedder = resolve_embedder("local")
    dataset = load_beir(SCIFACT)
    texts = [dataset.queries[k] for k in sorted(dataset.queries)][:QUERIES]
    vectors = [(t, embedder.embed_query(t)) for t in texts]
    cluster = LoopbackCluster()
    try:
        cluster.start()
        direct = Store(cluster.primary_url, replica_urls=[])
        Ingestor(direct, embedder).ingest_paths([SAMPLE_CORPUS])
        # The steady state autovacuum reaches: hint bits and the visibility map set
        # on the primary and replayed (a standby cannot set them durably itself).
        with direct.connection() as conn:
            conn.execute("VACUUM (ANALYZE)")
        cluster.wait_caught_up()
        routed = Store(cluster.primary_url, replica_urls=[cluster.standby_url])
        setups = {"one server": direct, "primary + replica": routed}
        retrievers = {name: Retriever(s, embedder) for name, s in setups.items()}

        def retrieve(name: str) -> Callable[[int], Any]:
            def run(i: int) -> None:
                text, vector = vectors[i % len(vectors)]
                retrievers[name].retrieve(text, limit=LIMIT, query_embedding=vector)

            return run

        for name in setups:  # warm both pools and caches
            _latencies(retrieve(name), len(vectors))
        samples: dict[str, list[float]] = {name: [] for name in setups}
        qps: dict[str, list[float]] = {name: [] for name in setups}
        borrow: dict[str, list[float]] = {name: [] for name in setups}
        for _ in range(args.rounds):
            paired = _paired({n: retrieve(n) for n in setups}, len(vectors))
            selects = _paired(
                {n: _select_one(s.read_connection) for n, s in setups.items()},
                2 * len(vectors),
            )
            for name in setups:
                samples[name] += paired[name]
                borrow[name] += selects[name]
                qps[name].append(_throughput(retrieve(name), 2, args.throughput_s))
        from retrieval_pipeline.tools.store.replicas import recording_servers

        with recording_servers() as servers:
            retrieve("primary + replica")(0)
        failover = _failover(
            cluster, retrievers["primary + replica"], vectors, args.failover_s
        )
        routed.close()
        direct.close()
    finally:
        cluster.stop()
    setups_out = {
        name: {
            "p50_ms": round(statistics.median(samples[name]), 3),
            "p95_ms": round(_percentile(samples[name], 0.95), 3),
            "calls": len(samples[name]),
            "qps_2_clients": round(statistics.median(qps[name]), 1),
            "select1_p50_ms": round(statistics.median(borrow[name]), 3),
        }
        for name in setups
    }
    one, two = setups_out["one server"], setups_out["primary + replica"]
    names = list(setups)
    pair_delta = {
        kind: round(
            statistics.median(
                b - a for a, b in zip(data[names[0]], data[names[1]], strict=True)
            ),
            3,
        )
        for kind, data in (("retrieve", samples), ("select1", borrow))
    }
    return {
        "date": date.today().isoformat(),
        "machine": f"{platform.machine()}, {__import__('os').cpu_count()} cores",
        "corpus": "examples/sample_corpus (18 documents), one primary + one standby",
        "workload": f"{len(vectors)} SciFact test questions, hybrid retrieve "
        f"limit {LIMIT}, query embedding precomputed",
        "rounds": args.rounds,
        "served_by_in_routed_setup": sorted(servers),
        "setups": setups_out,
        "routing_overhead_p50_ms": {
            "select1": round(two["select1_p50_ms"] - one["select1_p50_ms"], 3),
            "retrieve": round(two["p50_ms"] - one["p50_ms"], 3),
            "select1_paired_median": pair_delta["select1"],
            "retrieve_paired_median": pair_delta["retrieve"],
        },
        "failover": failover,
        "goals": {
            "overhead_p50_under_1ms": max(
                two["select1_p50_ms"] - one["select1_p50_ms"], pair_delta["select1"]
            )
            < OVERHEAD_GOAL_MS,
            "zero_errors_kill_and_restart": failover["errors"] == 0,
        },
    }


def markdown(results: dict[str, Any]) -> str:
    """The BENCHMARKS.md section for these results."""
    lines = [
        "## Read replicas (issue 20)",
        "",
        f"`python bench/replicas.py` ({results['date']}, {results['machine']}; "
        f"{results['corpus']}; {results['workload']}; {results['rounds']} rounds, "
        "interleaved). Both servers share the same CPUs, so this measures routing "
        "overhead and correctness, not the speedup a second machine gives. "
        "All figures measured; none extrapolated.",
        "",
        "| setup | p50 ms | p95 ms | queries/s (2 clients) | borrow + SELECT 1 p50 ms |",
        "|---|---|---|---|---|",
    ]
    for name, row in results["setups"].items():
        lines.append(
            f"| {name} | {row['p50_ms']:.2f} | {row['p95_ms']:.2f} | "
            f"{row['qps_2_clients']:.1f} | {row['select1_p50_ms']:.3f} |"
        )
    overhead = results["routing_overhead_p50_ms"]
    failover = results["failover"]
    served = ", ".join(f"{k}: {v}" for k, v in sorted(failover["served_by"].items()))
    events = ", ".join(f"{e} at {t:.0f} s" for t, e in failover["events"])
    lines += [
        "",
        f"Routing overhead (routed minus direct): {overhead['select1']:+.3f} ms "
        "between the p50s of a borrowed connection + `SELECT 1` (median of paired "
        f"calls {overhead['select1_paired_median']:+.3f} ms; goal < "
        f"{OVERHEAD_GOAL_MS:.0f} ms: "
        f"{'met' if results['goals']['overhead_p50_under_1ms'] else 'NOT met'}), "
        f"{overhead['retrieve']:+.3f} ms between the p50s of a hybrid retrieve "
        f"(three reads; paired median {overhead['retrieve_paired_median']:+.3f} ms; "
        "the replica is another server with its own caches, so this also holds "
        "their difference). "
        f"Reads in the routed setup answered by: "
        f"{', '.join(results['served_by_in_routed_setup'])}.",
        "",
        f"Failover: {failover['seconds']:.0f} s of load from 2 clients; {events}. "
        f"{failover['queries']} queries, with reads answered by {served}; "
        f"**{failover['errors']} query errors** (goal 0: "
        f"{'met' if results['goals']['zero_errors_kill_and_restart'] else 'NOT met'}).",
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    """Run the bench, write ``bench/results/replicas.json`` and print the section."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--throughput-s", type=float, default=5.0)
    parser.add_argument("--failover-s", type=float, default=60.0)
    args = parser.parse_args()
    results = _measure(args)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(markdown(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
