"""Ingest benchmark: SciFact (5,183 documents) with the local embedding model.

Reports documents/s, chunks/s, and the database side's cost (chunking, COPY, postings,
statistics, index maintenance: everything but embedding) as a share of the embedding
time measured in the same run. Goal (issue 2): under 15 % of embedding time, and peak
memory under 2 GB. Each repetition ingests into a fresh embedded database.

    python bench/ingest.py [--dataset DIR] [--limit N] [--repeat R]
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATASET = REPO.parent / "shared" / "data" / "scifact"
RESULTS = REPO / "bench" / "results" / "ingest.json"


class PeakMemory:
    """Samples the resident memory of this process and the PostgreSQL server tree."""

    def __init__(self, interval: float = 0.25) -> None:
        self.interval = interval
        self.python_peak = 0
        self.postgres_peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.postmaster_pid: int | None = None

    def _run(self) -> None:
        me = psutil.Process()
        while not self._stop.is_set():
            self.python_peak = max(self.python_peak, me.memory_info().rss)
            if self.postmaster_pid is not None:
                try:
                    root = psutil.Process(self.postmaster_pid)
                    procs = [root, *root.children(recursive=True)]
                    # Shared buffers are counted once: take USS where available.
                    total = 0
                    for proc in procs:
                        try:
                            total += proc.memory_full_info().uss
                        except (psutil.AccessDenied, psutil.NoSuchProcess):
                            continue
                    self.postgres_peak = max(self.postgres_peak, total)
                except psutil.NoSuchProcess:
                    pass
            self._stop.wait(self.interval)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


CACHE_HOME = REPO / "bench" / ".cache" / "home"


def run_once(dataset: Path, limit: int | None, keep: bool) -> dict[str, float]:
    from retrieval_pipeline.ingest.job import Ingestor
    from retrieval_pipeline.tools.embeddings import resolve_embedder
    from retrieval_pipeline.tools.store import EmbeddedPostgres, Store

    corpus = dataset / "corpus.jsonl"
    with tempfile.TemporaryDirectory(prefix="rp-bench-") as tmp:
        source = corpus
        if limit is not None:
            source = Path(tmp) / "corpus.jsonl"
            with corpus.open() as fh, source.open("w") as out:
                for i, line in enumerate(fh):
                    if i >= limit:
                        break
                    out.write(line)
        # --keep ingests into the shared bench database (fresh each time) so that
        # bench/quality.py can reuse the embedded corpus instead of embedding it again.
        home = CACHE_HOME if keep else Path(tmp) / "home"
        server = EmbeddedPostgres(home, keep_running=True)
        if keep:
            server.reset()
        url = server.start()
        try:
            embedder = resolve_embedder("local")
            with Store(url) as store, PeakMemory() as memory:
                memory.postmaster_pid = server.status().pid
                summary = Ingestor(store, embedder).ingest_paths(
                    [source], tenant=f"eval:{dataset.name}"
                )
            assert summary.failed == 0, summary.failures[:3]
        finally:
            server.stop()
    outside = summary.seconds - summary.embed_seconds
    return {
        "documents": summary.documents,
        "chunks": summary.chunks,
        "seconds": summary.seconds,
        "embed_seconds": summary.embed_seconds,
        "write_seconds": summary.write_seconds,
        "outside_embedding_seconds": outside,
        "outside_share_of_embedding": outside / summary.embed_seconds,
        "docs_per_second": summary.documents / summary.seconds,
        "chunks_per_second": summary.chunks / summary.seconds,
        "python_peak_rss_mb": memory.python_peak / 2**20,
        "python_maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "postgres_peak_uss_mb": memory.postgres_peak / 2**20,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dataset", type=Path, default=DEFAULT_DATASET)
    parser.add_argument(
        "--limit", type=int, default=None, help="first N documents only"
    )
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument(
        "--keep",
        action="store_true",
        help="ingest into bench/.cache/home and keep it for bench/quality.py",
    )
    args = parser.parse_args()
    runs = [run_once(args.dataset, args.limit, args.keep) for _ in range(args.repeat)]
    median = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    result = {
        "benchmark": "ingest",
        "dataset": args.dataset.name,
        "limit": args.limit,
        "repeat": args.repeat,
        "machine": {"cpus": psutil.cpu_count(), "python": platform.python_version()},
        "date": time.strftime("%Y-%m-%d"),
        "median": median,
        "runs": runs,
        "goals": {"outside_share_of_embedding": 0.15, "peak_memory_mb": 2048},
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(median, indent=2))
    from report import write_benchmarks_md

    write_benchmarks_md()
    return 0


if __name__ == "__main__":
    sys.exit(main())
