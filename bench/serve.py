"""Serving: HTTP overhead over an in-process call; 1 vs 2 workers under 32 clients.

Starts `retrieval-pipeline serve --workers N` as a subprocess on a loopback port over
a fresh embedded database holding examples/sample_corpus (local embedding model),
then:

1. overhead (one worker): the same questions through `graph.ainvoke` in this process
   (the async path the server runs) and through `POST /retrieve/invoke` (keep-alive
   client), interleaved, several rounds; the goal (issue 17) is HTTP p50 minus
   in-process p50 under 5 ms;
2. load: 32 concurrent asyncio clients against `/retrieve/invoke`, for one worker and
   for two, in ABBA order (1, 2, 2, 1) so drifting machine load weighs on both; counts
   errors, reports p50/p95 and throughput per run, and the ratio of the medians (goal:
   two workers >= 1.7x one on 2 cores). Each run also records the server's database
   pools (summed over workers by /metrics), the PostgreSQL backends and the RSS of
   each worker before (after a 5 s warm-up burst) and after.

3. remote: the same load with a remote embedder answering in 200 ms (an
   OpenAI-compatible peer in its own process) and a new question per request, so
   every request waits on one embedding call; goal: >= 60 req/s at p95 < 1 s with
   32 clients. The load runs record the CPU seconds of the server, PostgreSQL and
   the client against the cores' capacity.

    python bench/serve.py [--seconds 30] [--clients 32] [--rounds 5]
        [--parts overhead workers remote]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
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
PARTS = ("overhead", "workers", "remote")
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


def _workers(proc: Any, expected: int) -> list[Any]:
    """The processes that serve requests: the workers, or the server itself."""
    if expected == 1:
        return [proc]
    children = [
        c
        for c in proc.children(recursive=True)
        if "multiprocessing" in " ".join(c.cmdline())
        and "resource_tracker" not in " ".join(c.cmdline())
    ]
    return children


def _letters(n: int) -> str:
    """A request number spelled in letters (as bench/wrk/invoke.lua does)."""
    out = ""
    while True:
        out = chr(97 + n % 26) + out
        n //= 26
        if n == 0:
            return "zq" + out


def _cpu_seconds(server: Any, peer_pid: int | None = None) -> dict[str, float]:
    """CPU seconds so far: the server's process tree, PostgreSQL, this process, and
    the embedding peer (``peer_pid``) when one shares the cores."""
    import psutil

    def used(p: Any) -> float:
        try:
            t = p.cpu_times()
            return float(t.user + t.system)
        except psutil.Error:
            return 0.0

    proc = psutil.Process(server.pid)
    tree = [proc, *proc.children(recursive=True)]
    postgres = [
        p for p in psutil.process_iter(["name"]) if p.info["name"] == "postgres"
    ]
    me = psutil.Process().cpu_times()
    peer = psutil.Process(peer_pid) if peer_pid is not None else None
    return {
        "peer": sum(used(p) for p in [peer, *peer.children(True)]) if peer else 0.0,
        "server": sum(used(p) for p in tree),
        "postgres": sum(used(p) for p in postgres),
        "client": used(psutil.Process()),
        "children": me.children_user + me.children_system,  # finished wrk runs
    }


def _cpu_used(
    before: dict[str, float] | None,
    server: Any,
    elapsed: float,
    *,
    client: str,
    peer_pid: int | None = None,
) -> dict[str, float] | None:
    """CPU seconds since ``before``; the load client is this process (``client``)
    or its finished children (``children``: wrk); ``peer``: the embedding peer's."""
    import psutil

    if before is None:
        return None
    after = _cpu_seconds(server, peer_pid)
    used = {k: round(after[k] - before[k], 1) for k in ("server", "postgres")}
    used["client"] = round(after[client] - before[client], 1)
    if peer_pid is not None:
        used["peer"] = round(after["peer"] - before["peer"], 1)
    used["capacity"] = round(elapsed * len(psutil.Process().cpu_affinity()), 1)
    return used


def _snapshot(url: str, store: Any, proc: Any, workers: int) -> dict[str, Any]:
    """The servers' DB pools (summed), the PostgreSQL backends, each worker's RSS."""
    import httpx

    with httpx.Client(base_url=url, timeout=30) as http:
        metrics = http.get("/metrics").text
    rss = [w.memory_info().rss / 2**20 for w in _workers(proc, workers)]
    return {
        "pool_size": _metric(metrics, "rp_db_pool_connections", 'state="pool_size"'),
        "backends": _backends(store),
        "worker_rss_mb": rss,
    }


def _start(cli: str, env: dict[str, str], home: Path, workers: int) -> tuple[Any, str]:
    import httpx

    port = _free_port()
    log = (home / f"serve-{workers}.log").open("a")
    server = subprocess.Popen(
        [cli, "serve", "--port", str(port), "--workers", str(workers)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while True:
        try:
            text = httpx.get(f"{url}/metrics", timeout=2).text
            if _metric(text, "rp_workers") == workers:
                return server, url
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline or server.poll() is not None:
            raise RuntimeError("server did not start; see " + str(home))
        time.sleep(0.5)


def _stop(server: Any) -> None:
    os.killpg(server.pid, signal.SIGTERM)
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--parts",
        nargs="+",
        choices=PARTS,
        default=list(PARTS),
        help="what to run (the others keep their previous results)",
    )
    args = parser.parse_args()
    sys.path.insert(0, str(REPO / "bench"))
    from report import cpu_model

    home = Path(tempfile.mkdtemp(prefix="rp-bench-serve-"))
    os.environ["RETRIEVAL_PIPELINE_HOME"] = str(home)
    os.environ.pop("DATABASE_URL", None)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    env.pop("RETRIEVAL_PIPELINE_API_KEYS", None)
    env.pop("RETRIEVAL_PIPELINE_EMBEDDINGS", None)
    cli = str(Path(sys.executable).with_name("retrieval-pipeline"))
    subprocess.run([cli, "ingest", str(SAMPLE)], check=True, env=env)

    from retrieval_pipeline.graph.builder import graph
    from retrieval_pipeline.graph.resources import default_resources
    from retrieval_pipeline.tools.embeddings import resolve_embedder

    store = default_resources().store
    embedder = resolve_embedder()
    previous = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    results: dict[str, Any] = {
        **previous,
        "benchmark": "serve",
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{os.cpu_count()} cores ({cpu_model()})",
        "embedder": f"{embedder.model} ({type(embedder.embeddings).__name__})",
        "load_avg_before": os.getloadavg()[0],
    }
    try:
        if "overhead" in args.parts:
            server, url = _start(cli, env, home, 1)
            try:
                results["overhead"] = overhead(graph, url, args.rounds)
                print(json.dumps(results["overhead"], indent=2), file=sys.stderr)
            finally:
                _stop(server)
        if "workers" in args.parts:
            results.update(workers_abba(cli, env, home, store, args))
    finally:
        store.close()
        subprocess.run([cli, "db", "stop"], env=env, check=False)
    if "remote" in args.parts:
        results["remote"] = remote(cli, env, args)
        print(json.dumps(results["remote"], indent=2), file=sys.stderr)
    results["load_avg_after"] = os.getloadavg()[0]
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2))
    sys.path.insert(0, str(REPO / "bench"))
    from report import write_benchmarks_md

    print(write_benchmarks_md())
    return 0


def workers_abba(
    cli: str, env: dict[str, str], home: Path, store: Any, args: Any
) -> dict[str, Any]:
    """1, 2, 2, 1 workers under ``args.clients`` clients; medians and the ratio."""
    import psutil

    runs: list[dict[str, Any]] = []
    for workers in (1, 2, 2, 1):
        server, url = _start(cli, env, home, workers)
        try:
            proc = psutil.Process(server.pid)
            # A short burst first, so "before" is the warm steady state (pools
            # at their working size, model and caches loaded).
            run_load(url, args.clients, 5)
            before = _snapshot(url, store, proc, workers)
            run = run_load(url, args.clients, args.seconds, server=server)
            time.sleep(1)
            after = _snapshot(url, store, proc, workers)
        finally:
            _stop(server)
        run.update(workers=workers, before=before, after=after)
        runs.append(run)
        print(json.dumps(run), file=sys.stderr)
    throughput = _median_by_workers(runs, "throughput_rps")
    return {
        "runs": runs,
        "throughput_rps": throughput,
        "speedup_2_over_1": throughput["2"] / throughput["1"],
        "p50_ms": _median_by_workers(runs, "p50_ms"),
        "p95_ms": _median_by_workers(runs, "p95_ms"),
    }


def _median_by_workers(runs: list[dict[str, Any]], key: str) -> dict[str, float]:
    """The median of ``key`` over the runs of 1 worker and of 2 (keys "1", "2")."""
    return {
        str(n): statistics.median(r[key] for r in runs if r["workers"] == n)
        for n in (1, 2)
    }


def remote(cli: str, env: dict[str, str], args: Any) -> dict[str, Any]:
    """A remote embedder at 200 ms: ``args.clients`` clients, every question new.

    The embeddings peer (OpenAI protocol, hashed-word vectors, 200 ms per call) runs
    in its own process; the sample corpus is ingested through it into a database
    of its own, then the server (1 and 2 workers) answers distinct questions, so
    each request waits on one real 200 ms embedding call.
    """
    sys.path.insert(0, str(REPO / "bench"))
    from embedders import PEER_DELAY_S, Peer

    peer = Peer("slow", PEER_DELAY_S)
    home = Path(tempfile.mkdtemp(prefix="rp-bench-serve-remote-"))
    renv = {
        **env,
        "RETRIEVAL_PIPELINE_HOME": str(home),
        "RETRIEVAL_PIPELINE_EMBEDDINGS": "openai:text-embedding-3-small",
        "OPENAI_BASE_URL": f"{peer.url}/v1",
        "OPENAI_API_KEY": "sk-bench-local",
        "RETRIEVAL_PIPELINE_JUDGE_MODEL": "none",  # the embedder alone is remote
    }
    runs: list[dict[str, Any]] = []
    try:
        subprocess.run([cli, "ingest", str(SAMPLE)], check=True, env=renv)
        for workers in (1, 2, 2, 1):
            server, url = _start(cli, renv, home, workers)
            try:
                run_load(url, args.clients, 5, distinct=True)
                run = run_load(
                    url,
                    args.clients,
                    args.seconds,
                    distinct=True,
                    server=server,
                    peer_pid=peer.process.pid,
                )
            finally:
                _stop(server)
            run["workers"] = workers
            runs.append(run)
            print(json.dumps(run), file=sys.stderr)
    finally:
        subprocess.run([cli, "db", "stop"], env=renv, check=False)
        peer.close()
    return {
        "peer_delay_s": PEER_DELAY_S,
        "embedder": "openai:text-embedding-3-small (OpenAIEmbeddings, local peer)",
        "runs": runs,
        "throughput_rps": _median_by_workers(runs, "throughput_rps"),
        "p95_ms": _median_by_workers(runs, "p95_ms"),
        "goal": {"throughput_rps": 60, "p95_ms": 1000},
    }


def overhead(graph: Any, url: str, rounds: int) -> dict[str, Any]:
    """In-process `graph.invoke` and `graph.ainvoke`, and HTTP, interleaved.

    The overhead is HTTP minus the sync `invoke` (the definition earlier runs used);
    `ainvoke`, the path the server itself runs, splits it into the async execution's
    share and the HTTP layer's.
    """
    import httpx

    samples: dict[str, list[float]] = {"sync": [], "async": [], "http": []}
    loop = asyncio.new_event_loop()
    try:
        with httpx.Client(base_url=url, timeout=30) as http:

            def call_sync(q: str) -> None:
                graph.invoke({"question": q, "limit": 8})

            def call_async(q: str) -> None:
                loop.run_until_complete(graph.ainvoke({"question": q, "limit": 8}))

            def call_http(q: str) -> None:
                response = http.post(
                    "/retrieve/invoke", json={"input": {"question": q, "limit": 8}}
                )
                response.raise_for_status()

            calls = {"sync": call_sync, "async": call_async, "http": call_http}
            for q in QUESTIONS:  # warm every path (model, caches, pages)
                for call in calls.values():
                    call(q)
            for round_ in range(rounds):
                for i, q in enumerate(QUESTIONS):
                    order = list(calls)
                    shift = (round_ + i) % len(order)  # rotate who goes first
                    for name in order[shift:] + order[:shift]:
                        started = time.perf_counter()
                        calls[name](q)
                        samples[name].append((time.perf_counter() - started) * 1000)
    finally:
        loop.close()
    p50 = {name: statistics.median(values) for name, values in samples.items()}
    return {
        "calls": len(samples["http"]),
        "in_process_p50_ms": p50["sync"],
        "in_process_async_p50_ms": p50["async"],
        "http_p50_ms": p50["http"],
        "overhead_p50_ms": p50["http"] - p50["sync"],
        "overhead_vs_async_p50_ms": p50["http"] - p50["async"],
        "in_process_p95_ms": _percentile(samples["sync"], 0.95),
        "in_process_async_p95_ms": _percentile(samples["async"], 0.95),
        "http_p95_ms": _percentile(samples["http"], 0.95),
    }


def run_load(
    url: str,
    clients: int,
    seconds: float,
    *,
    distinct: bool = False,
    server: Any = None,
    peer_pid: int | None = None,
) -> dict[str, Any]:
    """The load: wrk when installed (a C client: its own CPU stays small on the
    cores the server shares), else asyncio httpx clients (``RP_BENCH_CLIENT=httpx``
    forces these)."""
    if shutil.which("wrk") and os.environ.get("RP_BENCH_CLIENT") != "httpx":
        return load_wrk(
            url, clients, seconds, distinct=distinct, server=server, peer_pid=peer_pid
        )
    run = asyncio.run(
        load(url, clients, seconds, distinct=distinct, server=server, peer_pid=peer_pid)
    )
    run["client_tool"] = "httpx (asyncio)"
    return run


def load_wrk(
    url: str,
    clients: int,
    seconds: float,
    *,
    distinct: bool = False,
    server: Any = None,
    peer_pid: int | None = None,
) -> dict[str, Any]:
    """``clients`` wrk connections (2 threads) for ``seconds``; the same record."""

    env = {
        **os.environ,
        "RP_QUESTIONS": "\n".join(QUESTIONS),
        "RP_DISTINCT": "1" if distinct else "0",
    }
    cpu_before = _cpu_seconds(server, peer_pid) if server is not None else None
    started = time.monotonic()
    done = subprocess.run(
        [
            "wrk",
            "-t2",
            f"-c{clients}",
            f"-d{max(1, round(seconds))}s",
            "--timeout",
            "30s",
            "-s",
            str(REPO / "bench" / "wrk" / "invoke.lua"),
            url,
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    elapsed = time.monotonic() - started
    line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
    r = json.loads(line.removeprefix("RESULT "))
    cpu = _cpu_used(cpu_before, server, elapsed, client="children", peer_pid=peer_pid)
    duration = r["duration_us"] / 1e6
    socket_errors = r["connect"] + r["read"] + r["write"] + r["timeout"]
    good = r["requests"] - r["bad"]
    return {
        "client_tool": "wrk",
        "cpu_seconds": cpu,
        "clients": clients,
        "seconds": round(duration, 1),
        "requests": good,
        "errors": r["bad"] + socket_errors,
        "error_kinds": {
            k: r[k]
            for k in ("bad", "non2xx", "connect", "read", "write", "timeout")
            if r[k]
        },
        "throughput_rps": good / duration,
        "p50_ms": r["p50_us"] / 1000,
        "p95_ms": r["p95_us"] / 1000,
    }


async def load(
    url: str,
    clients: int,
    seconds: float,
    *,
    distinct: bool = False,
    server: Any = None,
    peer_pid: int | None = None,
) -> dict[str, Any]:
    """``clients`` keep-alive clients posting questions for ``seconds``.

    ``distinct``: every request's question is new (a request number appended), so
    no query embedding is ever served from the embedder's cache (the remote run).
    ``server``: the server's process; the run then records the CPU seconds spent
    by the server (all its processes), PostgreSQL and this client, so a ratio can
    be read against the cores' capacity.
    """
    import httpx

    counter = iter(range(10**9))
    cpu_before = _cpu_seconds(server, peer_pid) if server is not None else None

    latencies: list[float] = []
    errors: dict[str, int] = {}
    stop = time.monotonic() + seconds

    async def client(index: int) -> None:
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            i = index
            while time.monotonic() < stop:
                q = QUESTIONS[i % len(QUESTIONS)]
                if distinct:  # a new word (letters, not an identifier) per request
                    q = f"{q} {_letters(index * 1000003 + next(counter))}"
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
    cpu = _cpu_used(cpu_before, server, elapsed, client="client", peer_pid=peer_pid)
    return {
        "cpu_seconds": cpu,
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
