"""Capacity model for sharding by tenant (issue 20), measured on one PostgreSQL.

Three measurements, each on a private embedded PostgreSQL started for the run:

1. **Storage per chunk**: a real corpus (SciFact by default) ingested through the
   pipeline's own writes, then ``pg_total_relation_size`` of every corpus table
   (indexes and TOAST included) over the chunk count. Vectors come from a
   deterministic 384-d stand-in embedder: a stored vector's size does not depend on
   which model made it, and embedding with the real model would only make the run
   slower (bench/ingest.py measures that).
2. **HNSW build per shard**: synthetic 384-d vectors (uniform random, the worst
   case for the graph) in a table of their own at several sizes; ``CREATE INDEX ...
   USING hnsw (embedding vector_cosine_ops)`` with pgvector's defaults (m = 16,
   ef_construction = 64), one process (no parallel maintenance workers), with
   ``maintenance_work_mem`` large enough for an in-memory build. Recorded: seconds,
   index bytes, and the peak anonymous memory of the building backend.
3. **Query cost against shard size**: top-10 cosine queries through each of those
   indexes (``SET LOCAL hnsw.ef_search = 40``), median latency per shard size. A
   tenant's query on a cluster touches one shard; a query without the tenant runs
   on every shard, so its cost is the shard count times one shard's.

Projections to 10M and 100M chunks are extrapolations of these measurements, and
``markdown`` says which number is which.

    .venv/bin/python bench/capacity.py            # writes bench/results/capacity.json
    .venv/bin/python bench/capacity.py --sizes 12500,25000 --repeat 1   # quick
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results" / "capacity.json"
DEFAULT_CORPUS = REPO.parent / "shared" / "data" / "scifact" / "corpus.jsonl"
DIMENSION = 384
CORPUS_TABLES = (
    "documents",
    "chunks",
    "chunk_terms",
    "term_stats",
    "corpus_stats",
    "entities",
    "mentions",
    "relations",
    "entity_curation",
)
PROJECTED_CHUNKS = (10_000_000, 100_000_000)
SHARD_COUNTS = (1, 8, 32, 128)
EF_SEARCH = 40
QUERIES = 60
GIB = 2**30


# --- 1. storage per chunk -----------------------------------------------------------
def _stand_in_embedder() -> Any:
    """A deterministic 384-d embedder: real vector sizes, no model run."""
    from langchain_core.embeddings import DeterministicFakeEmbedding

    from retrieval_pipeline.tools.embeddings import Embedder

    return Embedder(
        DeterministicFakeEmbedding(size=DIMENSION),
        model="capacity:deterministic-384",
        version="langchain-core",
        dimension=DIMENSION,
        concurrency=None,
    )


def measure_storage(url: str, corpus: Path, tenant: str) -> dict[str, Any]:
    """Ingest ``corpus`` and return table sizes per chunk."""
    from retrieval_pipeline.ingest.job import Ingestor
    from retrieval_pipeline.tools.store import Store

    with Store(url) as store:
        started = time.perf_counter()
        summary = Ingestor(store, _stand_in_embedder()).ingest_paths(
            [corpus], tenant=tenant
        )
        seconds = time.perf_counter() - started
        assert summary.failed == 0, summary.failures[:3]
        store.vacuum_analyze(CORPUS_TABLES)
        with store.connection() as conn:
            sizes = {
                table: int(size)
                for table, size in conn.execute(
                    "SELECT t, pg_total_relation_size(to_regclass(t))"
                    " FROM unnest(%s::text[]) AS t",
                    (list(CORPUS_TABLES),),
                )
            }
            hnsw = conn.execute(
                "SELECT pg_relation_size('chunks_embedding_hnsw')"
            ).fetchone()
            chunks, text_bytes = conn.execute(
                "SELECT count(*), sum(octet_length(body)) FROM chunks"
            ).fetchone() or (0, 0)
    total = sum(sizes.values())
    return {
        "corpus": str(corpus.resolve().relative_to(REPO.parent)),
        "documents": summary.documents,
        "chunks": int(chunks),
        "ingest_seconds": seconds,
        "chunk_text_bytes": int(text_bytes or 0),
        "table_bytes": sizes,
        "total_bytes": total,
        "hnsw_bytes": int(hnsw[0]) if hnsw else 0,
        "bytes_per_chunk": total / max(int(chunks), 1),
        "chunks_per_gib": GIB * int(chunks) / max(total, 1),
    }


# --- 2. HNSW build per shard --------------------------------------------------------
class PeakAnon:
    """The peak anonymous (private) memory of one backend, sampled every 20 ms."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> int:
        try:
            text = Path(f"/proc/{self.pid}/status").read_text()
        except OSError:
            return 0
        for line in text.splitlines():
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
        return 0

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._sample())
            self._stop.wait(0.02)

    def __enter__(self) -> PeakAnon:
        self.peak = self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _fill(conn: Any, table: str, rows: int) -> None:
    from psycopg import sql

    name = sql.Identifier(table)
    conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(name))
    conn.execute(
        sql.SQL(
            "CREATE TABLE {} (id integer PRIMARY KEY, embedding vector({}))"
        ).format(name, sql.Literal(DIMENSION))
    )
    # A per-row subquery (it references i), so every row gets its own vector.
    conn.execute(
        sql.SQL(
            "INSERT INTO {} SELECT i, (SELECT array_agg(random() - 0.5)"
            " FROM generate_series(1, {}) WHERE i IS NOT NULL)::vector"
            " FROM generate_series(1, %s) AS i"
        ).format(name, sql.Literal(DIMENSION)),
        (rows,),
    )
    conn.execute(sql.SQL("VACUUM ANALYZE {}").format(name))


def build_index(url: str, table: str) -> dict[str, Any]:
    """Build the HNSW index on ``table`` once, in one process, in memory."""
    import psycopg
    from psycopg import sql

    notices: list[str] = []
    with psycopg.connect(url, autocommit=True) as conn:
        conn.add_notice_handler(lambda d: notices.append(str(d.message_primary)))
        index = sql.Identifier(f"{table}_hnsw")
        conn.execute(sql.SQL("DROP INDEX IF EXISTS {}").format(index))
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]  # type: ignore[index]
        with conn.transaction():
            conn.execute("SET LOCAL maintenance_work_mem = '2GB'")
            conn.execute("SET LOCAL max_parallel_maintenance_workers = 0")
            with PeakAnon(pid) as memory:
                started = time.perf_counter()
                conn.execute(
                    sql.SQL(
                        "CREATE INDEX {} ON {} USING hnsw (embedding vector_cosine_ops)"
                    ).format(index, sql.Identifier(table))
                )
                seconds = time.perf_counter() - started
        size = conn.execute(
            "SELECT pg_relation_size(%s::regclass)", (f"{table}_hnsw",)
        ).fetchone()
    return {
        "seconds": seconds,
        "index_bytes": int(size[0]) if size else 0,
        "peak_anon_bytes": memory.peak,
        "spilled": any("no longer fits" in n for n in notices),
    }


def query_latency(url: str, table: str, queries: int, seed: int) -> list[float]:
    """Seconds per top-10 cosine query through ``table``'s HNSW index."""
    import random

    import psycopg
    from psycopg import sql

    rng = random.Random(seed)
    statement = sql.SQL(
        "SELECT id FROM {} ORDER BY embedding <=> %s::vector LIMIT 10"
    ).format(sql.Identifier(table))
    times: list[float] = []
    with psycopg.connect(url) as conn:
        for i in range(queries + 5):
            vector = (
                "["
                + ",".join(f"{rng.random() - 0.5:.5f}" for _ in range(DIMENSION))
                + "]"
            )
            with conn.transaction():
                conn.execute(
                    "SELECT set_config('hnsw.ef_search', %s, true)", (str(EF_SEARCH),)
                )
                started = time.perf_counter()
                rows = conn.execute(statement, (vector,), prepare=True).fetchall()
                elapsed = time.perf_counter() - started
            assert len(rows) == 10
            if i >= 5:  # the first few warm the cache and the prepared plan
                times.append(elapsed)
    return times


def measure_shards(url: str, sizes: list[int], repeat: int) -> list[dict[str, Any]]:
    """Per shard size: HNSW build (``repeat`` times) and query latency."""
    import psycopg

    shards = []
    for size in sizes:
        table = f"shard_{size}"
        with psycopg.connect(url, autocommit=True) as conn:
            _fill(conn, table, size)
        builds = [build_index(url, table) for _ in range(repeat)]
        latencies = [query_latency(url, table, QUERIES, seed) for seed in range(repeat)]
        flat = sorted(t for run in latencies for t in run)
        shards.append(
            {
                "vectors": size,
                "builds": builds,
                "build_seconds": statistics.median(b["seconds"] for b in builds),
                "index_bytes": builds[-1]["index_bytes"],
                "peak_anon_bytes": statistics.median(
                    b["peak_anon_bytes"] for b in builds
                ),
                "query_ms_p50": 1000 * statistics.median(flat),
                "query_ms_p95": 1000 * flat[int(0.95 * (len(flat) - 1))],
                "query_ms_run_medians": [
                    1000 * statistics.median(r) for r in latencies
                ],
            }
        )
        print(json.dumps(shards[-1] | {"builds": len(builds)}), file=sys.stderr)
    return shards


# --- 3. the model -------------------------------------------------------------------
def _fit_nlogn(points: list[tuple[int, float]]) -> float:
    """Least-squares ``a`` in seconds = a * n * ln(n) through the origin."""
    xs = [n * math.log(n) for n, _ in points]
    return sum(x * y for x, (_, y) in zip(xs, points, strict=True)) / sum(
        x * x for x in xs
    )


def _fit_log(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Least-squares (c0, c1) in ms = c0 + c1 * ln(n)."""
    xs = [math.log(n) for n, _ in points]
    ys = [y for _, y in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    var = sum((x - mx) ** 2 for x in xs)
    c1 = (
        sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var
        if var
        else 0.0
    )
    c1 = max(c1, 0.0)  # a walk never gets cheaper as the graph grows: noise, not a fit
    return my - c1 * mx, c1


def _bytes(setting: str) -> int:
    """A PostgreSQL memory setting as bytes ('128MB' -> 134217728)."""
    units = {"kB": 2**10, "MB": 2**20, "GB": 2**30, "TB": 2**40}
    for unit, factor in units.items():
        if setting.endswith(unit):
            return int(float(setting[: -len(unit)]) * factor)
    return int(setting) * 8192  # a bare number of 8 kB pages


def model(
    storage: dict[str, Any], shards: list[dict[str, Any]], shared_buffers: str
) -> dict[str, Any]:
    """Extrapolate the measurements to 10M and 100M chunks over several shard counts.

    The query fit uses only the shard sizes whose index fits in shared_buffers: past
    that, a query reads index pages from the OS (measured, and shown separately), and
    a shard sized for its workload keeps its index in memory; the projection says how
    much memory that takes per shard.
    """
    build_a = _fit_nlogn([(s["vectors"], s["build_seconds"]) for s in shards])
    cached = [s for s in shards if s["index_bytes"] <= _bytes(shared_buffers)]
    q0, q1 = _fit_log([(s["vectors"], s["query_ms_p50"]) for s in cached or shards])
    largest = max(shards, key=lambda s: s["vectors"])
    index_per_vector = largest["index_bytes"] / largest["vectors"]
    memory_per_vector = largest["peak_anon_bytes"] / largest["vectors"]
    projections = []
    for chunks in PROJECTED_CHUNKS:
        for count in SHARD_COUNTS:
            per_shard = chunks / count
            query_ms = q0 + q1 * math.log(per_shard)
            projections.append(
                {
                    "chunks": chunks,
                    "shards": count,
                    "chunks_per_shard": per_shard,
                    "storage_gib_total": chunks * storage["bytes_per_chunk"] / GIB,
                    "storage_gib_per_shard": per_shard
                    * storage["bytes_per_chunk"]
                    / GIB,
                    "hnsw_build_hours_per_shard": build_a
                    * per_shard
                    * math.log(per_shard)
                    / 3600,
                    "hnsw_memory_gib_per_shard": per_shard * memory_per_vector / GIB,
                    "hnsw_index_gib_per_shard": per_shard * index_per_vector / GIB,
                    "router_query_ms": query_ms,
                    "fan_out_query_cpu_ms": count * query_ms,
                }
            )
    return {
        "build_seconds_per_n_ln_n": build_a,
        "query_ms_fit": {
            "c0": q0,
            "c1_per_ln_n": q1,
            "fitted_on_vectors": [s["vectors"] for s in cached or shards],
            "shared_buffers": shared_buffers,
        },
        "hnsw_index_bytes_per_vector": index_per_vector,
        "hnsw_build_memory_bytes_per_vector": memory_per_vector,
        "hnsw_build_seconds_per_million_extrapolated": build_a * 1e6 * math.log(1e6),
        "hnsw_build_memory_gib_per_million": memory_per_vector * 1e6 / GIB,
        "hnsw_index_gib_per_million": index_per_vector * 1e6 / GIB,
        "projections": projections,
    }


def run(corpus: Path, sizes: list[int], repeat: int) -> dict[str, Any]:
    """All three measurements on a fresh embedded PostgreSQL, and the model."""
    from retrieval_pipeline.tools.store import EmbeddedPostgres

    with tempfile.TemporaryDirectory(prefix="rp-capacity-") as tmp:
        server = EmbeddedPostgres(Path(tmp) / "home", keep_running=True)
        url = server.start()
        try:
            storage = measure_storage(url, corpus, tenant="capacity")
            print(
                json.dumps({k: v for k, v in storage.items() if k != "table_bytes"}),
                file=sys.stderr,
            )
            shards = measure_shards(url, sizes, repeat)
            import psycopg

            with psycopg.connect(url) as conn:
                versions = conn.execute(
                    "SELECT current_setting('server_version'),"
                    " (SELECT extversion FROM pg_extension WHERE extname = 'vector'),"
                    " current_setting('shared_buffers')"
                ).fetchone()
        finally:
            server.stop()
    return {
        "benchmark": "capacity",
        "command": "python bench/capacity.py "
        f"--sizes {','.join(map(str, sizes))} --repeat {repeat}",
        "machine": {
            "platform": platform.platform(),
            "cpus": __import__("os").cpu_count(),
            "postgres": versions[0] if versions else "",
            "pgvector": versions[1] if versions else "",
            "shared_buffers": versions[2] if versions else "",
        },
        "date": time.strftime("%Y-%m-%d"),
        "dimension": DIMENSION,
        "ef_search": EF_SEARCH,
        "queries_per_run": QUERIES,
        "repeat": repeat,
        "storage": storage,
        "shards": shards,
        "model": model(storage, shards, versions[2] if versions else "128MB"),
    }


# --- report -------------------------------------------------------------------------
def _size(n: float) -> str:
    return f"{n / 1e6:g}M" if n >= 1e6 else f"{n / 1e3:g}k"


def markdown(results: dict[str, Any]) -> str:
    """The BENCHMARKS.md section: measured figures first, then the projection."""
    s = results["storage"]
    m = results["model"]
    cmd = results["command"]
    lines = [
        "## Capacity model for sharding by tenant (bench/capacity.py)",
        "",
        f"`{cmd}` on {results['machine']['cpus']} CPUs, PostgreSQL "
        f"{results['machine']['postgres']}, pgvector {results['machine']['pgvector']}, "
        f"{results['dimension']}-d vectors. See docs/scaling.md.",
        "",
        "**Measured, storage** (" + s["corpus"] + f", {s['documents']:,} documents, "
        f"{s['chunks']:,} chunks, all corpus tables with indexes and TOAST): "
        f"{s['total_bytes'] / 2**20:.1f} MiB, **{s['bytes_per_chunk']:,.0f} bytes per "
        f"chunk = {s['chunks_per_gib']:,.0f} chunks per GiB**; the HNSW index is "
        f"{s['hnsw_bytes'] / 2**20:.1f} MiB of it.",
        "",
        "**Measured, one shard** (synthetic vectors; HNSW m=16, ef_construction=64, "
        f"one process, in-memory build; top-10 queries at ef_search={results['ef_search']}, "
        f"{results['queries_per_run']} per run x {results['repeat']} runs):",
        "",
        "| vectors | build s (median) | index MiB | build peak memory MiB | query p50 ms | query p95 ms |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    fit = m["query_ms_fit"]
    for shard in results["shards"]:
        lines.append(
            f"| {shard['vectors']:,} | {shard['build_seconds']:.1f} | "
            f"{shard['index_bytes'] / 2**20:.1f} | {shard['peak_anon_bytes'] / 2**20:.0f} | "
            f"{shard['query_ms_p50']:.2f} | {shard['query_ms_p95']:.2f} |"
        )
    lines += [
        "",
        f"shared_buffers was {fit['shared_buffers']}: the shard sizes whose index fits "
        f"in it ({', '.join(f'{n:,}' for n in fit['fitted_on_vectors'])} vectors) "
        "answer from memory; a larger index is read partly from the OS, which is what "
        "the larger sizes' query times show (and the load of the shared 2-CPU machine "
        "makes p95 noisy).",
        "",
        "**Extrapolated** (build time fitted as a*n*ln(n) over all sizes; query p50 as "
        f"c0 + c1*ln(n) over the in-memory sizes, c1 = {fit['c1_per_ln_n']:.2f} ms, "
        "clamped at 0 when the noise makes it negative; storage, index and memory "
        "linear in chunks). HNSW build "
        f"{m['hnsw_build_seconds_per_million_extrapolated'] / 60:.0f} min per million "
        f"vectors in one process, {m['hnsw_build_memory_gib_per_million']:.2f} GiB of "
        "maintenance_work_mem per million (index "
        f"{m['hnsw_index_gib_per_million']:.2f} GiB per million).",
        "",
        "Query times assume each shard's HNSW index is in memory (the index GiB/shard "
        "column is the memory that takes).",
        "",
        "| chunks | shards | chunks/shard | storage GiB/shard | HNSW index GiB/shard | "
        "HNSW build h/shard (1 process) | build memory GiB/shard | tenant query ms | "
        "fan-out query CPU ms |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for p in m["projections"]:
        lines.append(
            f"| {_size(p['chunks'])} | {p['shards']} | {_size(p['chunks_per_shard'])} | "
            f"{p['storage_gib_per_shard']:,.1f} | {p['hnsw_index_gib_per_shard']:.2f} | "
            f"{p['hnsw_build_hours_per_shard']:.2f} | "
            f"{p['hnsw_memory_gib_per_shard']:.2f} | {p['router_query_ms']:.2f} | "
            f"{p['fan_out_query_cpu_ms']:.1f} |"
        )
    lines += [
        "",
        "A tenant's query is routed to one shard, so its cost follows the shard's size, "
        "not the shard count; a query without the tenant runs on every shard (fan-out "
        "CPU = shards x one shard's cost, before the coordinator's merge). The HNSW "
        "query figures are the index walk alone (no BM25, no fusion, no network hop to "
        "a worker).",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Run the measurements and write bench/results/capacity.json."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--sizes", default="12500,25000,50000,100000")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--remodel",
        action="store_true",
        help="recompute the model from the measurements already in --out",
    )
    args = parser.parse_args(argv)
    if args.remodel:
        results = json.loads(args.out.read_text(encoding="utf-8"))
        results["model"] = model(
            results["storage"], results["shards"], results["machine"]["shared_buffers"]
        )
    else:
        sizes = [int(s) for s in args.sizes.split(",")]
        results = run(args.corpus, sizes, args.repeat)
    args.out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
