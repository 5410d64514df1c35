"""Serving: HTTP overhead over an in-process call, and 32 concurrent clients for 60 s.

Starts `retrieval-pipeline serve` as a subprocess on a loopback port over a fresh
embedded database holding examples/sample_corpus, then:

1. overhead: the same questions through `pipeline.invoke` in this process and through
   `POST /retrieve/invoke` (keep-alive client), interleaved, several rounds; the goal
   (issue 5) is HTTP p50 minus in-process p50 under 5 ms;
2. load: 32 concurrent asyncio clients for 60 s against `/retrieve/invoke`; counts
   errors, reports p50/p95 and throughput, and compares the server's database pool
   (from /metrics), the PostgreSQL backends and the server's RSS before (after a 5 s
   warm-up burst) and after.

    python bench/serve.py [--seconds 60] [--clients 32] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results" / "serve.json"
SAMPLE = REPO / "examples" / "sample_corpus"
QUESTIONS = [
    "Who owns the service that failed with ERR_CONN_RESET in v2.3.1?",
    "How do I rotate merchant API keys?",
    "What causes Kafka consumer lag on the event bus?",
    "Which team is on call for the ledger database?",
    "Why were refunds posted twice?",
    "How does the fraud detector score payments?",
    "What does the session store keep and for how long?",
    "Who owns the notification service?",
    "How do we reconcile the ledger after an incident?",
    "What did the auth gateway outage affect?",
    "payments API rate limits",
    "platform team responsibilities",
]


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _metric(text: str, name: str, labels: str = "") -> float:
    pattern = re.escape(name + (f"{{{labels}}}" if labels else "")) + r" ([0-9.e+-]+)"
    match = re.search(pattern, text)
    return float(match.group(1)) if match else float("nan")


def _backends(store: Any) -> int:
    with store.connection() as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
        ).fetchone()
    return int(row[0]) - 1  # minus this probe's own connection


def _snapshot(url: str, store: Any, proc: Any) -> dict[str, float]:
    """The server's DB pool size, the PostgreSQL backends and the server's RSS."""
    import httpx

    with httpx.Client(base_url=url, timeout=30) as http:
        metrics = http.get("/metrics").text
    return {
        "pool_size": _metric(metrics, "rp_db_pool_connections", 'state="pool_size"'),
        "backends": _backends(store),
        "rss_mb": proc.memory_info().rss / 2**20,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    import httpx
    import psutil

    home = Path(tempfile.mkdtemp(prefix="rp-bench-serve-"))
    os.environ["RETRIEVAL_PIPELINE_HOME"] = str(home)
    os.environ.pop("DATABASE_URL", None)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    cli = str(Path(sys.executable).with_name("retrieval-pipeline"))
    subprocess.run([cli, "ingest", str(SAMPLE)], check=True, env=env)

    from retrieval_pipeline.graph.builder import graph
    from retrieval_pipeline.graph.resources import default_resources

    store = default_resources().store
    port = _free_port()
    log = (home / "serve.log").open("w")
    server = subprocess.Popen(
        [cli, "serve", "--port", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    results: dict[str, Any] = {
        "benchmark": "serve",
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{os.cpu_count()} cores",
    }
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or server.poll() is not None:
                raise RuntimeError("server did not start; see " + str(home))
            time.sleep(0.5)
        results["overhead"] = overhead(graph, url, args.rounds)
        print(json.dumps(results["overhead"], indent=2), file=sys.stderr)
        proc = psutil.Process(server.pid)
        # A short burst first, so "before" is the warm steady state (pool at its
        # working size, model and caches loaded) and "after" shows only growth.
        asyncio.run(load(url, args.clients, 5))
        before = _snapshot(url, store, proc)
        load_result = asyncio.run(load(url, args.clients, args.seconds))
        time.sleep(2)
        after = _snapshot(url, store, proc)
        load_result.update(before=before, after=after)
        results["load"] = load_result
        print(json.dumps(results["load"], indent=2), file=sys.stderr)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
        log.close()
        store.close()
        subprocess.run([cli, "db", "stop"], env=env, check=False)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2))
    sys.path.insert(0, str(REPO / "bench"))
    from report import write_benchmarks_md

    print(write_benchmarks_md())
    return 0


def overhead(graph: Any, url: str, rounds: int) -> dict[str, Any]:
    import httpx

    local: list[float] = []
    remote: list[float] = []
    with httpx.Client(base_url=url, timeout=30) as http:

        def call_local(q: str) -> None:
            graph.invoke({"question": q, "limit": 8})

        def call_remote(q: str) -> None:
            response = http.post(
                "/retrieve/invoke", json={"input": {"question": q, "limit": 8}}
            )
            response.raise_for_status()

        for q in QUESTIONS:  # warm both sides (model, caches, pages)
            call_local(q)
            call_remote(q)
        for _ in range(rounds):
            for q in QUESTIONS:
                for call, samples in ((call_local, local), (call_remote, remote)):
                    started = time.perf_counter()
                    call(q)
                    samples.append((time.perf_counter() - started) * 1000)
    return {
        "calls": len(local),
        "in_process_p50_ms": statistics.median(local),
        "http_p50_ms": statistics.median(remote),
        "overhead_p50_ms": statistics.median(remote) - statistics.median(local),
        "in_process_p95_ms": _percentile(local, 0.95),
        "http_p95_ms": _percentile(remote, 0.95),
    }


async def load(url: str, clients: int, seconds: float) -> dict[str, Any]:
    import httpx

    latencies: list[float] = []
    errors: dict[str, int] = {}
    stop = time.monotonic() + seconds

    async def client(index: int) -> None:
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            i = index
            while time.monotonic() < stop:
                q = QUESTIONS[i % len(QUESTIONS)]
                i += 1
                started = time.perf_counter()
                try:
                    response = await http.post(
                        "/retrieve/invoke", json={"input": {"question": q, "limit": 8}}
                    )
                    ok = (
                        response.status_code == 200
                        and response.json()["output"]["chunks"]
                    )
                    if not ok:
                        key = f"status {response.status_code}"
                        errors[key] = errors.get(key, 0) + 1
                        continue
                except httpx.HTTPError as exc:
                    key = type(exc).__name__
                    errors[key] = errors.get(key, 0) + 1
                    continue
                latencies.append((time.perf_counter() - started) * 1000)

    started = time.monotonic()
    await asyncio.gather(*(client(i) for i in range(clients)))
    elapsed = time.monotonic() - started
    return {
        "clients": clients,
        "seconds": round(elapsed, 1),
        "requests": len(latencies),
        "errors": sum(errors.values()),
        "error_kinds": errors,
        "throughput_rps": len(latencies) / elapsed,
        "p50_ms": statistics.median(latencies) if latencies else None,
        "p95_ms": _percentile(latencies, 0.95) if latencies else None,
    }


if __name__ == "__main__":
    sys.exit(main())
