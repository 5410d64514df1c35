"""Soak: concurrent ingest and query against the served endpoint on loopback.

For a bounded time (``RP_SOAK_SECONDS``, 12 s here; ``bench/reliability.py`` holds it
longer), query clients hit ``/retrieve/invoke`` while a writer ingests new documents
and revises old ones. Afterwards:

- zero errors: every request answered 200;
- server connections and pool size did not grow past the pool's bound;
- process memory grew less than a stated bound after warm-up;
- every ingested document is retrievable by its own marker words.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import httpx
import psutil
from figures import record_figure
from helpers import assert_stats_consistent
from http_server import running

from retrieval_pipeline.graph.builder import build_pipeline
from retrieval_pipeline.graph.resources import PipelineResources
from retrieval_pipeline.ingest.job import Ingestor
from retrieval_pipeline.serve import create_app
from retrieval_pipeline.tools.retrieve import Retriever
from retrieval_pipeline.tools.store import Store

SOAK_S = float(os.environ.get("RP_SOAK_SECONDS", "12"))
CLIENTS = 4
RSS_BOUND_MB = 150.0  # growth after warm-up; the model and caches are warm by then
QUESTIONS = [
    "Who owns the service that failed with ERR_CONN_RESET?",
    "kafka consumer lag partitions",
    "ledger double posting refunds",
    "how do we rotate credentials",
]


def _backends(store: Store) -> int:
    with store.connection() as conn:
        return int(
            conn.execute(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database()"
                " AND backend_type = 'client backend'"
            ).fetchone()[0]
        )


def test_concurrent_ingest_and_query_hold_steady(
    ingestor: Ingestor,
    retriever: Retriever,
    store: Store,
    sample_corpus: Path,
    tmp_path: Path,
) -> None:
    ingestor.ingest_paths([sample_corpus])
    pipeline = build_pipeline(PipelineResources(retriever=retriever))
    process = psutil.Process()
    written: list[tuple[str, str]] = []  # (source id, marker)
    errors: list[str] = []
    latencies: list[float] = []
    stop = threading.Event()

    def writer() -> None:
        n = 0
        while not stop.is_set():
            marker = f"soakmarker{n:05d}"
            path = tmp_path / f"soak-{n % 40:03d}.md"  # revisions after 40 writes
            path.write_text(
                f"# Soak note {n}\n\nThe {marker} incident touched the "
                f"zz{marker} subsystem during load.\n"
            )
            try:
                summary = ingestor.ingest_paths([path])
                if summary.failures:
                    errors.append(f"ingest: {summary.failures}")
                else:
                    written.append((path.name, marker))
            except Exception as exc:  # noqa: BLE001 - counted as an error
                errors.append(f"ingest: {exc!r}")
            n += 1
            time.sleep(0.05)

    def client(url: str, k: int) -> None:
        with httpx.Client(base_url=url, timeout=60) as http:
            i = k
            while not stop.is_set():
                question = QUESTIONS[i % len(QUESTIONS)]
                if written and i % 3 == 0:
                    question = f"what did {written[-1][1]} touch"
                started = time.perf_counter()
                response = http.post(
                    "/retrieve/invoke", json={"input": {"question": question}}
                )
                latencies.append(time.perf_counter() - started)
                if response.status_code != 200:
                    errors.append(f"{response.status_code}: {response.text[:200]}")
                i += 1

    with running(create_app(pipeline, pool_stats=store.pool_stats)) as url:
        with httpx.Client(base_url=url, timeout=60) as http:  # warm-up
            for question in QUESTIONS * 3:
                http.post("/retrieve/invoke", json={"input": {"question": question}})
        rss_before = process.memory_info().rss / 2**20
        backends_before = _backends(store)
        threads = [threading.Thread(target=writer)] + [
            threading.Thread(target=client, args=(url, k)) for k in range(CLIENTS)
        ]
        for thread in threads:
            thread.start()
        time.sleep(SOAK_S)
        stop.set()
        for thread in threads:
            thread.join(timeout=120)
        rss_after = process.memory_info().rss / 2**20
        backends_after = _backends(store)
        pool = store.pool_stats()

    assert not errors, errors[:5]
    assert len(latencies) > CLIENTS and written
    assert backends_after <= max(backends_before, 0) + pool["pool_max"]
    assert pool["pool_size"] <= pool["pool_max"]
    assert rss_after - rss_before < RSS_BOUND_MB, (rss_before, rss_after)
    # Every document as last written is retrievable by its own marker.
    latest = dict(written)
    for source, marker in latest.items():
        hits = retriever.retrieve(f"zz{marker}", limit=1)
        assert hits and f"zz{marker}" in hits[0].text, (source, marker)
        assert hits[0].source_uri.endswith(source), (source, hits[0].source_uri)
    assert_stats_consistent(store)
    latencies.sort()
    record_figure(
        "soak",
        round(SOAK_S, 1),
        unit="seconds",
        clients=CLIENTS,
        requests=len(latencies),
        errors=len(errors),
        documents_written=len(written),
        p50_ms=round(latencies[len(latencies) // 2] * 1000, 1),
        p95_ms=round(latencies[int(len(latencies) * 0.95)] * 1000, 1),
        rss_growth_mb=round(rss_after - rss_before, 1),
        rss_bound_mb=RSS_BOUND_MB,
        backends_before=backends_before,
        backends_after=backends_after,
        pool_max=pool["pool_max"],
    )
