"""Regenerate BENCHMARKS.md from bench/results/*.json."""

from __future__ import annotations

import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"


def cpu_model() -> str:
    """The CPU's model name and widest vector unit, from /proc/cpuinfo ('' if unknown).

    Speeds move with the kind of core (an AVX-512 Xeon ran the ONNX embedder twice
    as fast as an AVX2 EPYC), so every speed section names it.
    """
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""
    model = next(
        (ln.split(":", 1)[1].strip() for ln in info.splitlines() if "model name" in ln),
        "",
    )
    flags = next(
        (
            ln.split(":", 1)[1].split()
            for ln in info.splitlines()
            if ln.startswith("flags")
        ),
        [],
    )
    unit = next(
        (
            u
            for f, u in (
                ("amx_int8", "AMX"),
                ("avx512_vnni", "AVX-512 VNNI"),
                ("avx512f", "AVX-512"),
                ("avx2", "AVX2"),
            )
            if f in flags
        ),
        "",
    )
    return ", ".join(x for x in (model, unit) if x)


def _ingest_section(result: dict) -> list[str]:  # type: ignore[type-arg]
    m = result["median"]
    goals = result["goals"]
    peak = max(m["python_peak_rss_mb"], m["python_maxrss_mb"])
    share = m["outside_share_of_embedding"]
    share_ok = "meets" if share <= goals["outside_share_of_embedding"] else "misses"
    both = peak + m["postgres_peak_uss_mb"]
    mem_ok = "meets" if both <= goals["peak_memory_mb"] else "misses"
    subset = f", first {result['limit']} documents" if result.get("limit") else ""
    return [
        "## Ingest (`bench/ingest.py`)",
        "",
        f"Data set: {result['dataset']}{subset}; local all-MiniLM-L6-v2 on CPU; "
        f"{result['machine']['cpus']} cores; {result['repeat']} run(s), medians; "
        f"measured {result['date']}.",
        "The baseline is the embedding time of the same run: everything else "
        "(loading, chunking, COPY, postings, BM25 statistics, HNSW/GIN maintenance, "
        "entity linking) is reported as a share of it.",
        "",
        "| metric | value |",
        "|---|---|",
        f"| documents | {m['documents']:.0f} |",
        f"| chunks | {m['chunks']:.0f} |",
        f"| wall time | {m['seconds']:.1f} s |",
        f"| embedding time (baseline) | {m['embed_seconds']:.1f} s |",
        f"| database writes | {m['write_seconds']:.1f} s |",
        f"| everything outside embedding | {m['outside_embedding_seconds']:.1f} s |",
        f"| outside embedding / embedding | {m['outside_share_of_embedding']:.1%} "
        f"(goal <= 15 %: {share_ok}) |",
        f"| documents/s | {m['docs_per_second']:.1f} |",
        f"| chunks/s | {m['chunks_per_second']:.1f} |",
        f"| peak RSS, Python process | {peak:.0f} MB |",
        f"| peak USS, PostgreSQL processes | {m['postgres_peak_uss_mb']:.0f} MB |",
        f"| peak memory, both | {both:.0f} MB (goal < 2 GB: {mem_ok}) |",
        "",
    ]


def _ingest_formats_section(result: dict) -> list[str]:  # type: ignore[type-arg]
    rows = result["formats"]
    extract = result["pdf_extractors"]
    lines = [
        "## Ingest speed per format (`bench/ingest.py --formats`)",
        "",
        f"One fresh embedded database per format; local all-MiniLM-L6-v2 on CPU; "
        f"{result['machine']['cpus']} cores; one run each; measured {result['date']}. "
        "Parse is `load_file` alone over the same files (no chunking or embedding); "
        "the baseline for the rest is each run's own embedding time. The machine "
        "was shared with other jobs (load average 10-20 on 2 cores), so the seconds "
        "are noisy and comparable only roughly across formats; embedding dominates "
        "every format's total.",
        "",
        "| format | corpus | files | documents | chunks | failed | chunks with "
        "pages | parse s | files/s parsed | embedding s | total s | documents/s "
        "| chunks/s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in rows.items():
        lines.append(
            f"| {name} | {r['corpus']} | {r['files']} | {r['documents']} | "
            f"{r['chunks']} | {r['failed']} | {r['chunks_with_pages']} | "
            f"{r['parse_seconds']:.2f} | {r['parsed_files_per_second']:.1f} | "
            f"{r['embed_seconds']:.1f} | {r['seconds']:.1f} | "
            f"{r['docs_per_second']:.2f} | {r['chunks_per_second']:.1f} |"
        )
    failures = [
        f"{f['path']} ({f['reason'].split(';')[0]})"
        for r in rows.values()
        for f in r["failures"]
    ]
    if failures:
        lines += ["", "Per-file failures, each with its reason: " + "; ".join(failures)]
    lines += [
        "",
        f"PDF text extraction on the same {extract['files']} shared PDFs, same run: "
        f"pypdfium2 (used) {extract['pypdfium2_seconds']:.2f} s, pypdf "
        f"{extract['pypdf_seconds']:.2f} s ({extract['pypdf_over_pypdfium2']:.1f}x "
        "slower).",
        "",
    ]
    return lines


def _pdf_manuals_section(
    result: dict,  # type: ignore[type-arg]
    check: dict | None,  # type: ignore[type-arg]
) -> list[str]:
    lines = [
        "## PDF manuals (`bench/ingest.py --pdf-manuals`)",
        "",
        f"Debian's {' and '.join(result['packages'])}: {', '.join(result['files'])}; "
        f"{result['machine']['cpus']} cores shared with other jobs; measured "
        f"{result['date']}.",
        "",
        "| metric | value |",
        "|---|---|",
        f"| pages | {result['pages']} |",
        f"| parse and chunk (no embedding) | {result['parsed_chunks']} chunks in "
        f"{result['parse_and_chunk_seconds']:.1f} s "
        f"({result['pages'] / result['parse_and_chunk_seconds']:.1f} pages/s); "
        f"failures {len(result['parse_failures'])}, warnings "
        f"{len(result['parse_warnings'])} |",
    ]
    if "documents" in result:
        lines += [
            f"| ingested with embedding into a fresh database (bench/.cache/pdf-home)"
            f" | {', '.join(result['ingested_files'])}: "
            f"{result['ingested_pages']} pages |",
            f"| documents | {result['documents']} "
            f"(failed {result['failed']}, warnings {len(result['warnings'])}) |",
            f"| chunks | {result['chunks']} (with pages: "
            f"{result['chunks_with_pages']}) |",
            f"| wall time | {result['seconds']:.1f} s (embedding "
            f"{result['embed_seconds']:.1f} s) |",
            f"| documents/s | {result['docs_per_second']:.3f} |",
            f"| chunks/s | {result['chunks_per_second']:.1f} |",
            f"| pages/s | {result['pages_per_second']:.1f} |",
        ]
    else:
        lines.append("| ingest with embedding | not completed in this run |")
    if check:
        rows = check["chunks"]
        pages_ok = sum(r["page_ok"] for r in rows)
        heading_ok = sum(r["heading_ok"] for r in rows)
        lines += [
            f"| hand check, {len(rows)} chunks drawn with seed "
            f"{result['sample_seed']}: pages right | {pages_ok}/{len(rows)} "
            f"({pages_ok / len(rows):.0%}) |",
            f"| hand check: heading path right | {heading_ok}/{len(rows)} "
            f"({heading_ok / len(rows):.0%}) |",
            "",
            check["method"] + " The record: `bench/results/pdf_manuals_check.json`.",
        ]
    lines.append("")
    return lines


SYSTEMS = [
    ("ours:lexical", "ours: lexical (BM25 in PostgreSQL)"),
    ("ours:dense", "ours: dense (pgvector HNSW)"),
    ("ours:hybrid", "ours: hybrid (default: convex combination)"),
    ("ours:hybrid-rrf", "ours: hybrid with RRF k = 60 (the spec's fusion)"),
    ("bm25s", "bm25s (Lucene BM25, Snowball stemmer)"),
    ("dense-exact", "dense only, exact (same embeddings)"),
    ("rrf(bm25s,dense-exact)", "RRF(bm25s, dense exact), k = 60"),
    (
        "langchain-ensemble",
        "LangChain EnsembleRetriever (BM25Retriever + vectors, 0.5/0.5)",
    ),
]


def _quality_section(result: dict) -> list[str]:  # type: ignore[type-arg]
    datasets = result["datasets"]
    names = [n for n in ("scifact", "nfcorpus", "hotpotqa", "musique") if n in datasets]
    lines = [
        "## Retrieval quality (`bench/quality.py`)",
        "",
        f"nDCG@10 on the test queries, mean [95 % bootstrap CI]; embedder "
        f"{result['embedder']}; every system run in the same process on the same "
        f"embeddings; measured {result['date']}.",
        "",
        "| system | "
        + " | ".join(f"{n} ({datasets[n]['queries']} q)" for n in names)
        + " |",
        "|---|" + "---|" * len(names),
    ]
    for key, label in SYSTEMS:
        cells = []
        for n in names:
            s = datasets[n]["summary"].get(key, {}).get("ndcg@10")
            cells.append(
                f"{s['mean']:.3f} [{s['low']:.3f}, {s['high']:.3f}]" if s else ""
            )
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Recall@20:",
        "",
        "| system | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for key, label in SYSTEMS:
        cells = [
            f"{datasets[n]['summary'][key]['recall@20']['mean']:.3f}"
            if key in datasets[n]["summary"]
            else ""
            for n in names
        ]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Paired randomization tests (nDCG@10, delta = second minus first):",
        "",
        "| comparison | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for comparison in datasets[names[0]]["comparisons"]:
        cells = []
        for n in names:
            c = datasets[n]["comparisons"].get(comparison)
            cells.append(f"{c['delta']:+.3f} (p = {c['p_value']:.3f})" if c else "")
        lines.append(f"| {comparison} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Channel latency during the quality run (p50 ms, not a latency benchmark):",
        "",
        "| data set | lexical | dense | query embedding |",
        "|---|---|---|---|",
    ]
    for n in names:
        t = datasets[n]["channel_latency_ms_p50"]
        lines.append(
            f"| {n} | {t['lexical_p50']:.1f} | {t['dense_p50']:.1f} | "
            f"{t['embed_p50']:.1f} |"
        )
    return lines + [""]


def _latency_section(result: dict) -> list[str]:  # type: ignore[type-arg]
    ops = result["operations"]
    hybrid = ops["hybrid retrieve, 40 candidates (depth 100/channel)"]
    lines = [
        "## Retrieval latency (`bench/latency.py`)",
        "",
        f"SciFact ({result['chunks']} chunks"
        + (
            f", in a database of {result['database_chunks']} chunks whose four "
            "evaluation tenants share one HNSW graph"
            if result.get("database_chunks", result["chunks"]) != result["chunks"]
            else ""
        )
        + f"), {result['queries']} queries x "
        f"{result['rounds']} rounds, warm, single client, embedded PostgreSQL on the same "
        f"2-core machine; query embedding excluded from the retrieval timings and shown "
        f"separately; measured {result['date']}.",
        "",
        "| operation | p50 ms | p95 ms | p50 vs hybrid |",
        "|---|---|---|---|",
    ]
    for name, stats in ops.items():
        ratio = stats["p50"] / hybrid["p50"]
        lines.append(
            f"| {name} | {stats['p50']:.2f} | {stats['p95']:.2f} | {ratio:.2f}x |"
        )
    met = "meets" if hybrid["p50"] <= 15 and hybrid["p95"] <= 40 else "misses"
    lines += [
        "",
        f"Goal (hybrid, 40 candidates): p50 <= 15 ms and p95 <= 40 ms: {met}.",
        "",
    ]
    return lines


def _pipeline_section(result: dict) -> list[str]:  # type: ignore[type-arg]
    quality = result["quality"]
    names = [n for n in ("scifact", "nfcorpus", "hotpotqa", "musique") if n in quality]
    lines = [
        "## Pipeline (`bench/pipeline.py`)",
        "",
        "The deterministic pipeline (wide hybrid retrieve, graph fusion, token-budget "
        "assembly; no judge, reranker `none`) evaluated on its own output, against the "
        f"hybrid retrieve in the same process; measured {result['date']}.",
        "",
        "| data set | metric | hybrid | pipeline | delta (p) |",
        "|---|---|---|---|---|",
    ]
    for n in names:
        for metric in ("ndcg@10", "recall@20"):
            s = quality[n]["summary"][metric]
            c = quality[n]["comparisons"][metric]
            h, p = s["hybrid"], s["pipeline"]
            lines.append(
                f"| {n} | {metric} | {h['mean']:.3f} [{h['low']:.3f}, {h['high']:.3f}] | "
                f"{p['mean']:.3f} [{p['low']:.3f}, {p['high']:.3f}] | "
                f"{c['delta']:+.3f} (p = {c['p_value']:.3f}) |"
            )
    if "latency" in result:
        lat = result["latency"]
        lines += [
            "",
            f"Speed on SciFact, {lat['queries']} queries x {lat.get('rounds', 2)} "
            "rounds (the paths take turns on each query), query embedding cached "
            "(excluded), p50:",
            "",
            "| path | p50 ms |",
            "|---|---|",
        ]
        for name, value in lat["p50_ms"].items():
            lines.append(f"| {name} | {value:.2f} |")
        lines += [
            "",
            f"LangGraph orchestration (graph path minus direct call): "
            f"{lat['orchestration_ms']:.2f} ms (goal < 2 ms). Full deterministic "
            f"pipeline / plain retrieve: {lat['pipeline_over_retrieve']:.2f}x (goal <= 2x)"
            + (
                "; per round: "
                + ", ".join(f"{r:.2f}x" for r in lat["round_ratios"])
                + "."
                if lat.get("round_ratios")
                else "."
            ),
        ]
    return lines + [""]


def _fusion_section(result: dict) -> list[str]:  # type: ignore[type-arg]
    table = result["ndcg@10"]
    names = [n for n in ("scifact", "nfcorpus", "hotpotqa", "musique") if n in table]
    lines = [
        "## Fusion study (`bench/fusion.py`)",
        "",
        "nDCG@10 of fusion functions over the same per-query channel lists (depth 100), "
        "with the paired-test p-value against the spec's RRF k = 60. How the default "
        "fusion (convex combination, min-max, equal weights: `minmax a=0.5`) was chosen.",
        "",
        "| variant | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for variant in table[names[0]]:
        cells = [
            f"{table[n][variant]['ndcg@10']:.3f} (p {table[n][variant]['p_vs_rrf']:.2f})"
            for n in names
        ]
        lines.append(f"| {variant} | " + " | ".join(cells) + " |")
    return lines + [""]


def _fusion_splits_section(result: dict) -> list[str]:  # type: ignore[type-arg]
    lines = [
        "## Fusion chosen on dev, held out on test (`bench/fusion.py --select dev`)",
        "",
        f"The variant with the best mean nDCG@10 on the {result['select_split']} splits "
        f"(`{result['chosen_on_all_dev']}`), reported on the {result['report_split']} "
        "splits against RRF k = 60 over the same channel lists; then leave-one-dataset-"
        "out: the variant best on the other sets' dev splits, on the held-out set's "
        "test split. Splits as in `eval/datasets.py` (`reports/eval/splits.md`).",
        "",
        "| held-out set | chosen on | variant | test nDCG@10 | RRF k = 60 | Δ | p |",
        "|---|---|---|---|---|---|---|",
    ]
    for kind, label in (
        ("chosen_on_test", "every dev split"),
        ("leave_one_dataset_out", "the other sets' dev"),
    ):
        for name, cell in result[kind].items():
            lines.append(
                f"| {name} | {label} | {cell['variant']} | {cell['test_ndcg@10']:.3f} "
                f"| {cell['test_rrf_ndcg@10']:.3f} | {cell['delta_vs_rrf']:+.3f} "
                f"| {cell['p_vs_rrf']:.3f} |"
            )
    return lines + [""]


def _graph_weight_section(result: dict) -> list[str]:  # type: ignore[type-arg]
    sets = list(result["ndcg@10"])
    weights = list(result["mean"])
    lines = [
        "## Graph score weight chosen on dev (`bench/graph_weight.py`)",
        "",
        "nDCG@10 of the shipped pipeline (limit 10) on each set's dev split per "
        f"`graph_score_weight`; chosen: **{result['chosen']}** (best dev mean). "
        "The test splits were not read.",
        "",
        "| weight | " + " | ".join(sets) + " | mean |",
        "|---|" + "---|" * (len(sets) + 1),
    ]
    for w in weights:
        cells = [f"{result['ndcg@10'][s][w]:.4f}" for s in sets]
        lines.append(f"| {w} | " + " | ".join(cells) + f" | {result['mean'][w]:.4f} |")
    return lines + [""]


def _lexical_parity_section(result: dict) -> list[str]:  # type: ignore[type-arg]
    keys = sorted(result)
    systems = list(result[keys[0]]["ndcg@10"])
    lines = [
        "## Lexical parity with bm25s (`bench/lexical_parity.py`)",
        "",
        "nDCG@10 of our lexical channel and its variants against bm25s (Lucene BM25, "
        "k1 1.5, b 0.75, Snowball English, English stop words) on dev splits; p from "
        "a paired randomization test against bm25s. `ours` is what ships (BM25 "
        "k1 1.5, b 0.75, inner hyphens read as spaces, the identifier field); "
        "each other column changes one thing.",
        "",
        "| set (split, queries) | " + " | ".join(systems) + " |",
        "|---|" + "---|" * len(systems),
    ]
    for key in keys:
        entry = result[key]
        cells = [f"{entry['ndcg@10']['bm25s']:.4f}"] + [
            f"{entry['ndcg@10'][s]:.4f} (p {entry['vs_bm25s'][s]['p']:.2f})"
            for s in systems
            if s != "bm25s"
        ]
        lines.append(
            f"| {entry['dataset']} ({entry['split']}: {entry['split_source']}, "
            f"{entry['queries']}) | " + " | ".join(cells) + " |"
        )
    return lines + [""]


def _serve_section(result: dict) -> list[str]:  # type: ignore[type-arg]
    o = result["overhead"]
    lines = [
        "## Serving (`bench/serve.py`)",
        "",
        f"`retrieval-pipeline serve` (LangServe, uvicorn) on loopback over the sample "
        f"corpus, embedder {result.get('embedder', 'local')}; {result['machine']}, "
        f"measured {result['date']} (1-minute load average "
        f"{result.get('load_avg_before', float('nan')):.1f} before, "
        f"{result.get('load_avg_after', float('nan')):.1f} after: other work shared "
        "the cores).",
        "",
        f"Overhead, one worker, {o['calls']} calls per path, interleaved with a rotating "
        "order (default context: wide retrieve, graph fusion, assembly):",
        "",
        "| path | p50 ms | p95 ms |",
        "|---|---|---|",
        f"| in-process `graph.invoke` | {o['in_process_p50_ms']:.2f} | {o['in_process_p95_ms']:.2f} |",
    ]
    if "in_process_async_p50_ms" in o:
        lines.append(
            f"| in-process `graph.ainvoke` (the server's path) | "
            f"{o['in_process_async_p50_ms']:.2f} | {o['in_process_async_p95_ms']:.2f} |"
        )
    lines += [
        f"| HTTP `POST /retrieve/invoke` | {o['http_p50_ms']:.2f} | {o['http_p95_ms']:.2f} |",
        "",
        f"Serving overhead (HTTP p50 minus in-process `invoke` p50): "
        f"**{o['overhead_p50_ms']:.2f} ms** (goal < 5 ms)"
        + (
            f"; minus `ainvoke` p50: {o['overhead_vs_async_p50_ms']:.2f} ms."
            if "overhead_vs_async_p50_ms" in o
            else "."
        ),
        "",
    ]
    if "runs" not in result:
        return lines
    lines += [
        f"Workers: {result['runs'][0]['clients']} concurrent clients, "
        f"{result['runs'][0]['seconds']:.0f} s per run, runs in ABBA order "
        "(1, 2, 2, 1 workers); per-worker pool from `pool_per_worker` (budget 16).",
        "",
        "| workers | run | requests | errors | req/s | p50 ms | p95 ms | DB pool (all workers) | PG backends | RSS MB per worker |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for i, run in enumerate(result["runs"], 1):
        a = run["after"]
        rss = ", ".join(f"{v:.0f}" for v in a["worker_rss_mb"])
        lines.append(
            f"| {run['workers']} | {i} | {run['requests']} | {run['errors']} | "
            f"{run['throughput_rps']:.1f} | {run['p50_ms']:.0f} | {run['p95_ms']:.0f} | "
            f"{a['pool_size']:.0f} | {a['backends']} | {rss} |"
        )
    t = result["throughput_rps"]
    lines += [
        "",
        f"Median throughput: 1 worker {t['1']:.1f} req/s, 2 workers {t['2']:.1f} req/s: "
        f"**{result['speedup_2_over_1']:.2f}x** (goal >= 1.7x on 2 cores).",
        "",
    ]
    lines += _cpu_lines(result["runs"])
    if "remote" in result:
        lines += _remote_lines(result["remote"])
    return lines


def _cpu_lines(runs: list[dict]) -> list[str]:  # type: ignore[type-arg]
    """Where the cores went in each load run (server, PostgreSQL, load client, and
    the embedding peer when the run had one on the same cores)."""
    rows = [r for r in runs if r.get("cpu_seconds")]
    if not rows:
        return []
    peer = all("peer" in r["cpu_seconds"] for r in rows)
    lines = [
        "CPU seconds during each run (the server's processes, every PostgreSQL "
        "process, the load client"
        + (", the embedding peer" if peer else "")
        + "), against the capacity (run seconds x cores):",
        "",
        "| workers | req/s | server | PostgreSQL | client | "
        + ("peer | " if peer else "")
        + "capacity | server CPU ms per request |",
        "|---|---|---|---|---|---|---|" + ("---|" if peer else ""),
    ]
    for r in rows:
        c = r["cpu_seconds"]
        per = 1000 * c["server"] / max(r["requests"], 1)
        lines.append(
            f"| {r['workers']} | {r['throughput_rps']:.1f} | {c['server']:.1f} | "
            f"{c['postgres']:.1f} | {c['client']:.1f} | "
            + (f"{c['peer']:.1f} | " if peer else "")
            + f"{c['capacity']:.1f} | {per:.1f} |"
        )
    return [*lines, ""]


def _remote_lines(remote: dict) -> list[str]:  # type: ignore[type-arg]
    lines = [
        f"**Remote embedder at {remote['peer_delay_s'] * 1000:.0f} ms** "
        f"({remote['embedder']}), {remote['runs'][0]['clients']} clients, a new "
        "question on every request (no cached query vector), runs in ABBA order:",
        "",
        "| workers | run | requests | errors | req/s | p50 ms | p95 ms |",
        "|---|---|---|---|---|---|---|",
    ]
    for i, run in enumerate(remote["runs"], 1):
        lines.append(
            f"| {run['workers']} | {i} | {run['requests']} | {run['errors']} | "
            f"{run['throughput_rps']:.1f} | {run['p50_ms']:.0f} | {run['p95_ms']:.0f} |"
        )
    t, p95, goal = remote["throughput_rps"], remote["p95_ms"], remote["goal"]
    lines += [
        "",
        f"Median: 1 worker {t['1']:.1f} req/s (p95 {p95['1']:.0f} ms), 2 workers "
        f"{t['2']:.1f} req/s (p95 {p95['2']:.0f} ms); goal >= {goal['throughput_rps']} "
        f"req/s at p95 < {goal['p95_ms']} ms.",
        "",
    ]
    return [*lines, *_cpu_lines(remote["runs"])]


def _interop_section(result: dict) -> list[str]:  # type: ignore[type-arg]
    runs = result["import"]
    lines = [
        "## langchain-postgres import (`bench/interop.py`)",
        "",
        f"{result['documents']} SciFact documents written to a `PGVector` collection by "
        f"langchain-postgres ({result['langchain_write_s']:.1f} s, embedding included), "
        f"then imported; measured {result['date']}.",
        "",
        "| import | seconds | of which embedding | vectors reused |",
        "|---|---|---|---|",
    ]
    for name, run in runs.items():
        lines.append(
            f"| {name} | {run['seconds']:.1f} | {run['embed_seconds']:.1f} | "
            f"{run['embeddings_reused']} of {run['documents']} |"
        )
    reuse = runs["reuse"]
    lines += [
        "",
        f"Unchanged re-import: {reuse['unchanged_reimport_s']:.1f} s "
        f"({reuse['unchanged_skipped']} rows skipped). nDCG@10 over the "
        f"{result['queries']} SciFact test queries (all judged documents are in the "
        "slice), same run:",
        "",
        "| system | nDCG@10 |",
        "|---|---|",
    ]
    for name, value in result["ndcg@10"].items():
        lines.append(f"| {name} | {value:.3f} |")
    return lines + [""]


def _eval_report_section(report: dict) -> list[str]:  # type: ignore[type-arg]
    meta = report["meta"]
    lines = [
        "## Ablation ladder (`make eval-report`)",
        "",
        f"From `reports/eval/report.json` ({meta['date']}; reranker: {meta['reranker']}; "
        f"judge: {meta['judge']}); the full report with slices, failure diagnosis and "
        "figures is `reports/eval/report.html` / `report.md`. nDCG@10 with 95 % "
        "bootstrap CIs; p: paired randomization test against the step before.",
        "",
        "| data set | step | nDCG@10 | Δ vs previous | p |",
        "|---|---|---|---|---|",
    ]
    for data in report["datasets"]:
        for step in data["steps"]:
            m = step["summary"]["ndcg@10"]
            cmp = step.get("vs_previous")
            delta = f"{cmp['delta']:+.3f} | {cmp['p_value']:.4f}" if cmp else " | "
            lines.append(
                f"| {data['dataset']} | {step['name']} | {m['mean']:.3f} "
                f"[{m['low']:.3f}, {m['high']:.3f}] | {delta} |"
            )
    return lines + [""]


def _scale_section(result: dict) -> list[str]:  # type: ignore[type-arg]
    levels = result["levels"]
    last = levels[-1]
    goal = result["goal_hybrid_p50_ms_at_250k"]
    verdict = "meets" if last["hybrid"]["p50"] <= goal else "misses"
    e = result["query_embedding_ms"]
    budget = result.get("lexical_exhaustive_postings")
    lines = [
        "## Scaling (`bench/scale.py`)",
        "",
        "SciFact replicated with perturbation (words dropped and swapped, vectors plus "
        "Gaussian noise) through the normal ingest path; warm, single client, "
        f"{result['queries']} queries per size, query embedding excluded (it costs "
        f"p50 {e['p50']:.1f} ms, p95 {e['p95']:.1f} ms on its own). Lexical and "
        "hybrid are as shipped: exhaustive BM25 while a query's postings fit "
        f"{budget or 'the budget':,} postings, past that an impact-ordered read of "
        f"about {result.get('lexical_read_budget', 0):,} postings with the best "
        "candidates re-scored exactly. *exhaustive* is the same call always scoring "
        "every posting, run in the same process as the baseline.",
        "",
        "| chunks | measured | lexical p50 / p95 | lexical exhaustive | dense | "
        "hybrid (40) | hybrid, exhaustive lexical | load |",
        "|---|---|---|---|---|---|---|---|",
    ]

    def cell(level: dict, key: str) -> str:  # type: ignore[type-arg]
        if key not in level:
            return "not measured"
        return f"{level[key]['p50']:.1f} / {level[key]['p95']:.1f} ms"

    for lv in levels:
        load = lv.get("load_seconds")
        cells = [
            cell(lv, k)
            for k in (
                "lexical",
                "lexical_exhaustive",
                "dense",
                "hybrid",
                "hybrid_exhaustive",
            )
        ]
        lines.append(
            f"| {lv['chunks']:,} | {lv.get('measured', '?')}"
            + (f" ({lv['note']})" if lv.get("note") else "")
            + " | "
            + " | ".join(cells)
            + (f" | {load:.0f} s |" if load else " | (loaded earlier) |")
        )
    g = result["growth_p50"]
    lines += [
        "",
        f"p50 growth from {levels[0]['chunks']:,} to {last['chunks']:,} chunks: "
        + ", ".join(f"{k} x{v}" for k, v in g.items())
        + f". Goal: hybrid p50 <= {goal} ms at 250k chunks: {verdict} "
        f"({last['hybrid']['p50']:.1f} ms at {last['chunks']:,}).",
        "",
    ]
    quality = [lv for lv in levels if "quality" in lv]
    if quality:
        lines += [
            "What the bounded read costs in quality, per level (replicas map back to "
            "their SciFact document; nDCG@10 against the SciFact qrels; overlap = "
            "share of the exhaustive top-40 chunks the shipped list also returns). "
            "Compare within a row: 5,000 chunks hold only part of SciFact, so many "
            "relevant documents are absent there, and at 250,000 each document has "
            "~29 near-copies crowding the top 40, so levels differ in difficulty:",
            "",
            "| chunks | lexical modes served | lexical nDCG@10 (exhaustive) | "
            "hybrid nDCG@10 (exhaustive lexical) | lexical overlap@40 | "
            "hybrid overlap@40 |",
            "|---|---|---|---|---|---|",
        ]
        for lv in quality:
            q = lv["quality"]
            modes = ", ".join(
                f"{k} {v}" for k, v in sorted(lv["lexical_modes"].items())
            )
            lines.append(
                f"| {lv['chunks']:,} | {modes} | {q['lexical_ndcg@10']:.4f} "
                f"({q['lexical_exhaustive_ndcg@10']:.4f}) | {q['hybrid_ndcg@10']:.4f} "
                f"({q['hybrid_exhaustive_ndcg@10']:.4f}) | {q['lexical_overlap@40']:.3f}"
                f" | {q['hybrid_overlap@40']:.3f} |"
            )
        lines.append("")
    return lines


def _reliability_section(result: dict) -> list[str]:  # type: ignore[type-arg]
    f = result["figures"]

    def value(name: str, default: object = "not run") -> object:
        return f[name]["value"] if name in f else default

    soak = f.get("soak", {})
    faults = f.get("faults_injected", {})
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(faults.get("kinds", {}).items()))
    status = "all passed" if result["passed"] else "FAILED"
    lines = [
        "## Reliability and security (`bench/reliability.py`)",
        "",
        f"The suite's property, fuzz, fault and soak tests with their figures recorded "
        f"({result['pytest']}: {status}, {result['seconds']:.0f} s); "
        f"{result['machine']['cpus']} cores; measured {result['date']}. "
        "Leaks and errors are what the tests found: any non-zero count fails them.",
        "",
        "| check | tried | found |",
        "|---|---|---|",
        f"| permission boundaries: generated (corpus, caller, query, stage combination) "
        f"cases; output, debug, trace, reranker bodies, judge prompt, caches | "
        f"{value('permission_cases')} | leaks: "
        f"{f.get('permission_cases', {}).get('leaks', '-')} |",
        f"| graph fusion, differential (expansion with vs without hidden documents) | "
        f"{value('graph_differential_cases')} | differences: "
        f"{f.get('graph_differential_cases', {}).get('leaks', '-')} |",
        f"| HTTP trust boundary: generated (API key with grants, data route, batch "
        f"items, config in dict and list forms, principals absent / empty / narrowing "
        f"/ widening, tenant) requests; response body, per-item batch outputs, debug "
        f"block, stream events, server trace, /metrics | "
        f"{value('http_scope_cases')} requests "
        f"({f.get('http_scope_cases', {}).get('items', '-')} inputs) | leaks: "
        f"{f.get('http_scope_cases', {}).get('leaks', '-')} |",
        f"| hostile HTTP requests on every served route (types, nesting depth, size, "
        f"bytes that are not UTF-8, content types, keys) | "
        f"{value('http_fuzz_requests')} | 5xx: 0; statuses "
        f"{f.get('http_fuzz_requests', {}).get('statuses', {})} |",
        f"| PipelineVectorStore reads and writes: generated corpora and caller scopes; "
        f"every search, MMR, get_by_ids and filter returns exactly the visible "
        f"documents; delete and add on hidden or other-tenant ids change nothing and "
        f"answer as for a missing id | "
        f"{value('vectorstore_property_cases')} corpora "
        f"({f.get('vectorstore_property_cases', {}).get('scopes', '-')} scopes) | "
        f"leaks or writes: "
        f"{f.get('vectorstore_property_cases', {}).get('leaks', '-')} |",
        f"| fuzzed query requests through the HTTP endpoint | "
        f"{value('query_fuzz_requests')} | 5xx: 0; statuses "
        f"{f.get('query_fuzz_requests', {}).get('statuses', {})} |",
        f"| fuzzed files ingested (truncated, binary, long lines, bad metadata) | "
        f"{value('ingest_fuzz_files')} | half-written documents: 0 |",
        f"| provider and database faults injected ({kinds}) | "
        f"{value('faults_injected')} | answers missing or past deadline: 0 |",
    ]
    if soak:
        lines.append(
            f"| soak: {soak['clients']} query clients + 1 writer, "
            f"{soak['value']:.0f} s | {soak['requests']} requests, "
            f"{soak['documents_written']} documents written | errors: "
            f"{soak['errors']}; p50 {soak['p50_ms']} ms, p95 {soak['p95_ms']} ms; "
            f"RSS +{soak['rss_growth_mb']} MB (bound {soak['rss_bound_mb']:.0f}); "
            f"backends {soak['backends_before']} -> {soak['backends_after']} "
            f"(pool max {soak['pool_max']}) |"
        )
    return lines + [""]


def _side_channels_section(result: dict) -> list[str]:  # type: ignore[type-arg]
    t, corpus = result["timing"], result["corpus"]
    lines = [
        "## Side channels (`bench/side_channels.py`)",
        "",
        "What a caller who sees only public documents learns about hidden ones "
        f"(issue 15), on a synthetic corpus ({corpus['public_documents']} public "
        f"documents; {corpus['hidden_documents']} hidden ones, each hidden-only word "
        f"in {corpus['hidden_documents_per_hidden_word']} of them); "
        f"{result['machine']['cpus']} cores; measured {result['date']}.",
        "",
        "Timing: paired trials, each a word found only in hidden documents against a "
        f"word found nowhere, each asked {t['requests_per_word']} times, interleaved; "
        "the classifier calls the slower one hidden (chance 0.50, 95 % Wilson "
        "interval). Before: the per-branch `lexical_ms` every debug block carried; "
        "now only a debug grant gets it. After: the wall clock of the public call "
        "alone, in process (the attacker's best case: no network jitter).",
        "",
        "| classifier | pairs | accuracy | median time, hidden / absent |",
        "|---|---|---|---|",
    ]
    for key, label in (
        ("before_debug_lexical_ms", "before: debug `lexical_ms`, median"),
        ("after_wall_clock_median", "after: wall clock only, median"),
        ("after_wall_clock_min", "after: wall clock only, minimum"),
    ):
        c = t[key]
        lines.append(
            f"| {label} | {c['pairs']} | **{c['accuracy']:.2f}** "
            f"[{c['ci95'][0]:.2f}, {c['ci95'][1]:.2f}] | "
            f"{c['median_hidden_ms']:.2f} / {c['median_absent_ms']:.2f} ms |"
        )
    lines += [
        "",
        "Collection statistics (BM25 idf and length over the whole tenant, hidden "
        "chunks included): the shift in the fused score of the public results of "
        "queries made of a rare and a common word when one hidden document "
        "containing both is added.",
        "",
        "| corpus | path | public results compared | max shift | median shift "
        "| rank changes |",
        "|---|---|---|---|---|---|",
    ]
    for corpus_name, paths in result["score_shift"].items():
        for path, v in paths.items():
            lines.append(
                f"| {corpus_name} | {path} | {v['results_compared']} | "
                f"{v['max_abs_shift']:.4f} | {v['median_abs_shift']:.4f} | "
                f"{v['rank_changes']} |"
            )
    return lines + [""]


def _documents_section(result: dict) -> list[str]:  # type: ignore[type-arg]
    index = result["index"]
    ingest = result.get("ingest_uncached") or result["ingest"]
    structure = result.get("structure")
    lines = [
        f"## Real documents: {result['site'].split(',')[0]} (`bench/documents.py`)",
        "",
    ]
    if structure:
        lines += [
            "The whole site through the loader and chunker (no embedding): "
            f"{structure['pages']} pages, {structure['chunks']} chunks, "
            f"**{structure['chrome_chunks']} chunks holding navigation chrome**, "
            f"{structure['chunks_under_24_tokens']} under 24 tokens, "
            f"{structure['empty_heading_paths']} with an empty heading path, "
            f"{structure['link_relations']} link relations; load + chunk "
            f"{structure['load_and_chunk_seconds']:.0f} s = "
            f"{structure['docs_per_second_without_embedding']:.2f} documents/s, "
            f"{structure['chunks_per_second_without_embedding']:.1f} chunks/s.",
            "",
        ]
    subset = (
        f" (the judged pages plus {result.get('distractors') or 0} sampled others: "
        "the machine could not embed the whole site in the session's time)"
        if result.get("pages") == "judged"
        else ""
    )
    lines += [
        f"Site: {result['site']}; {index['documents']} pages indexed{subset}; local "
        f"{result['embedder']} on CPU; {result['machine']['cpus']} cores (shared "
        f"with other work); measured {result['date']}. Page-level nDCG@10: a page "
        "ranks where its best chunk ranks. Baselines run in the same process over "
        "the same stored pages: bm25s over page text, dense max-passage (exact "
        "cosine over the very chunk vectors stored), RRF of the two (k = 60). "
        "Defaults were chosen on the dev split; the test split was not used for "
        "any choice.",
        "",
        "| index | value |",
        "|---|---|",
        f"| pages | {index['documents']} |",
        f"| chunks | {index['chunks']} |",
        f"| chunks holding navigation chrome | {index['chrome_chunks']} |",
        f"| chunks under 24 tokens | {index['chunks_under_24_tokens']} |",
        f"| median chunk tokens | {index['median_chunk_tokens']:.0f} |",
        f"| link relations (site graph) | {index['link_relations']} |",
        f"| ingest wall time | {ingest.get('seconds', 0):.0f} s |",
        f"| ingest documents/s | {ingest.get('docs_per_second', 0):.2f} |",
        f"| ingest chunks/s | {ingest.get('chunks_per_second', 0):.1f} |",
        f"| of which vectors from the bench's embedding cache | "
        f"{ingest.get('embedding_cache_hits', 0)} (so the speeds above are not "
        "a cold ingest when this is not 0) |",
        "",
    ]
    splits = result["splits"]
    names = list(next(iter(splits.values()))["systems"])
    heads = [f"{s} ({splits[s]['questions']} q)" for s in splits]
    lines += [
        "| system | "
        + " | ".join(f"nDCG@10 {h}" for h in heads)
        + " | "
        + " | ".join(f"distinct pages, {s}" for s in splits)
        + " |",
        "|---|" + "---|" * (2 * len(splits)),
    ]
    for name in names:
        cells = []
        for split in splits:
            row = splits[split]["systems"][name]
            n = row["ndcg@10"]
            cells.append(f"{n['mean']:.3f} [{n['low']:.3f}, {n['high']:.3f}]")
        for split in splits:
            row = splits[split]["systems"][name]
            pages = row.get("distinct_pages_top10")
            cells.append(f"{pages:.2f}" if pages is not None else "")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Paired randomization tests (nDCG@10, delta = second minus first):",
        "",
        "| comparison | " + " | ".join(splits) + " |",
        "|---|" + "---|" * len(splits),
    ]
    first = next(iter(splits.values()))
    for comparison in first["comparisons"]:
        cells = []
        for split in splits:
            c = splits[split]["comparisons"].get(comparison)
            cells.append(f"{c['delta']:+.3f} (p = {c['p_value']:.3f})" if c else "")
        lines.append(f"| {comparison} | " + " | ".join(cells) + " |")
    kinds = sorted({k for s in splits.values() for k in s.get("by_type", {})})
    if kinds:
        lines += [
            "",
            "By question type (nDCG@10, pipeline / RRF / bm25s):",
            "",
            "| type | " + " | ".join(splits) + " |",
            "|---|" + "---|" * len(splits),
        ]
        for kind in kinds:
            cells = []
            for split in splits:
                t = splits[split].get("by_type", {}).get(kind)
                cells.append(
                    f"{t['pipeline']:.3f} / {t['rrf(bm25s, dense)']:.3f} / "
                    f"{t['bm25s']:.3f} ({t['questions']:.0f} q)"
                    if t
                    else ""
                )
            lines.append(f"| {kind} | " + " | ".join(cells) + " |")
    notes = result.get("notes") or []
    if notes:
        lines += [""] + [f"- {note}" for note in notes]
    return lines + [""]


def _embedders_section(result: dict) -> list[str]:  # type: ignore[type-arg]
    parts, goals = result["parts"], result["goals"]
    lines = [
        "## Embedders (`bench/embedders.py`)",
        "",
        f"{result['machine']['cpus']} cores"
        + (f" ({result['machine']['cpu']})" if result["machine"].get("cpu") else "")
        + f", measured {result['date']}; medians; "
        "each comparison ran in one process, interleaved.",
        "",
    ]
    if result.get("note"):
        lines += [f"Note ({result['note']})", ""]
    a = parts.get("a_remote_concurrency")
    if a:
        med = a["wall_s_median"]
        lines += [
            f"**Remote embedder at {a['peer_delay_s'] * 1000:.0f} ms** (an "
            "OpenAI-compatible peer on 127.0.0.1 in its own process, the real "
            f"`OpenAIEmbeddings` client): {a['concurrent']} concurrent distinct "
            f"query embeddings, {a['rounds']} rounds. Before: one process-wide lock "
            "around every provider call (the old `Embedder`), reproduced in the same "
            "process around the same client.",
            "",
            "| | wall time, median | goal |",
            "|---|---|---|",
            f"| before (global lock) | {med['before_global_lock']:.3f} s | |",
            f"| after | **{med['after']:.3f} s** | < {a['goal_s']} s |",
            "",
            f"Speed-up {a['speedup']:.1f}x; one call alone takes "
            f"{a['single_call_s_median']:.3f} s.",
            "",
        ]
    b = parts.get("b_faults")
    if b:
        lines += [
            f"**Provider faults**: the whole pipeline (no judge, no reranker) with "
            f"`embed_deadline_s` = {b['deadline_s']} s over the sample corpus "
            f"(ingested through the healthy peer), {b['queries']} distinct queries per "
            "fault. *Added* is a query's latency minus the same query's latency "
            "when the provider fails at once (500): the wait the fault costs.",
            "",
            "| fault | errors | fallback recorded | answered | p50 | max | added p50 "
            "| added max |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for mode, label in (("http500", "HTTP 500"), ("hang", "hangs (30 s)")):
            m = b.get(mode)
            if not m:
                continue
            lines.append(
                f"| {label} | {m['errors']} | {m['fallback_recorded']}/{b['queries']}"
                f" | {m['answered_with_chunks']}/{b['queries']} | "
                f"{m['latency_ms_p50']:.0f} ms | {m['latency_ms_max']:.0f} ms | "
                f"{m.get('added_over_fail_fast_ms_p50', float('nan')):.0f} ms | "
                f"{m.get('added_over_fail_fast_ms_max', float('nan')):.0f} ms |"
            )
        lines.append("")
    c = parts.get("c_onnx_vs_torch")
    if c:
        lines += _onnx_lines(c, goals)
    return lines


def _cell(d: dict, key: str, fmt: str) -> str:  # type: ignore[type-arg]
    """``d[key]`` formatted, with its unit (x, ms, MB); "not run" when absent."""
    if key not in d:
        return "not run"
    unit = {"speedup_int8": "x", "p50": " ms", "rss_mb": " MB"}.get(key, "")
    return format(d[key], fmt) + unit


def _onnx_lines(c: dict, goals: dict) -> list[str]:  # type: ignore[type-arg]
    """ONNX fp32 and int8 against torch: speed, memory, retrieval quality."""
    lines = [
        "**ONNX (`local`, fp32) and its int8 copy (`local-int8`) against torch "
        "(`local-torch`)**, same weights, same process; ratios are against torch:",
        "",
        "| measure | ONNX fp32 | ONNX int8 | torch | fp32 ratio / delta | int8 ratio / delta | goal (fp32) |",
        "|---|---|---|---|---|---|---|",
    ]
    t = c.get("throughput")
    if t:
        r = t["chunks_per_s_median"]
        int8 = f"{r['int8']:.1f} chunks/s" if "int8" in r else "not run"
        lines.append(
            f"| embedding throughput ({t['chunks']} SciFact chunks) | "
            f"{r['onnx']:.1f} chunks/s | {int8} | {r['torch']:.1f} chunks/s | "
            f"{t['speedup']:.2f}x | {_cell(t, 'speedup_int8', '.2f')} | "
            f">= {goals['ingest_speedup']}x |"
        )
    q = c.get("query_embed_ms")
    if q:
        i8 = q.get("int8", {})
        lines.append(
            f"| query embedding p50 ({q['samples']} SciFact queries) | "
            f"{q['onnx']['p50']:.2f} ms | {_cell(i8, 'p50', '.2f')} | "
            f"{q['torch']['p50']:.2f} ms | "
            f"{q['onnx']['p50'] / q['torch']['p50']:.2f}x | "
            + (f"{i8['p50'] / q['torch']['p50']:.2f}x" if i8 else "not run")
            + f" | <= {goals['query_p50_ms']} ms |"
        )
    rss = c.get("rss")
    if rss:
        i8 = rss.get("int8", {})
        lines.append(
            "| RSS of a process with the embedder and the pipeline loaded | "
            f"{rss['onnx']['rss_mb']:.0f} MB (torch imported: "
            f"{rss['onnx']['torch_imported']}) | {_cell(i8, 'rss_mb', '.0f')} | "
            f"{rss['torch']['rss_mb']:.0f} MB | "
            f"{rss['onnx']['rss_mb'] / rss['torch']['rss_mb']:.2f}x | "
            + (f"{i8['rss_mb'] / rss['torch']['rss_mb']:.2f}x" if i8 else "not run")
            + f" | <= {goals['rss_mb']:.0f} MB |"
        )
    for name, d in c.get("quality", {}).items():
        i8 = d.get("int8", {})
        lines.append(
            f"| {name}: hybrid nDCG@10 ({d['onnx']['queries']} test queries) | "
            f"{d['onnx']['hybrid_ndcg@10']:.4f} | {_cell(i8, 'hybrid_ndcg@10', '.4f')} | "
            f"{d['torch']['hybrid_ndcg@10']:.4f} | "
            f"{d['hybrid_delta']:+.4f} | {_cell(d, 'hybrid_delta_int8', '+.4f')} | "
            f"within {goals['ndcg_delta']} |"
        )
    lines.append("")
    return lines


def write_benchmarks_md() -> Path:
    lines = [
        "# Benchmarks",
        "",
        "Regenerated by `make bench` from `bench/results/*.json`; every number below",
        "was measured by the script named in its section, on the machine it names.",
        "",
    ]
    quality = RESULTS / "quality.json"
    if quality.exists():
        lines += _quality_section(json.loads(quality.read_text()))
    # One section per documentation site: python3doc (documents.json), then every
    # other site bench/documents.py --site wrote (documents-<site>.json).
    for documents in sorted(
        RESULTS.glob("documents*.json"), key=lambda p: (p.stem != "documents", p.stem)
    ):
        lines += _documents_section(json.loads(documents.read_text()))
    fusion = RESULTS / "fusion.json"
    if fusion.exists():
        lines += _fusion_section(json.loads(fusion.read_text()))
    fusion_splits = RESULTS / "fusion_splits.json"
    if fusion_splits.exists():
        lines += _fusion_splits_section(json.loads(fusion_splits.read_text()))
    graph_weight = RESULTS / "graph_weight.json"
    if graph_weight.exists():
        lines += _graph_weight_section(json.loads(graph_weight.read_text()))
    lexical_parity = RESULTS / "lexical_parity.json"
    if lexical_parity.exists():
        lines += _lexical_parity_section(json.loads(lexical_parity.read_text()))
    pipeline = RESULTS / "pipeline.json"
    if pipeline.exists():
        lines += _pipeline_section(json.loads(pipeline.read_text()))
    latency = RESULTS / "latency.json"
    if latency.exists():
        lines += _latency_section(json.loads(latency.read_text()))
    serve = RESULTS / "serve.json"
    if serve.exists():
        lines += _serve_section(json.loads(serve.read_text()))
    interop = RESULTS / "interop.json"
    if interop.exists():
        lines += _interop_section(json.loads(interop.read_text()))
    eval_report = REPO / "reports" / "eval" / "report.json"
    if eval_report.exists():
        lines += _eval_report_section(json.loads(eval_report.read_text()))
    scale = RESULTS / "scale.json"
    if scale.exists():
        lines += _scale_section(json.loads(scale.read_text()))
    reliability = RESULTS / "reliability.json"
    if reliability.exists():
        lines += _reliability_section(json.loads(reliability.read_text()))
    side_channels = RESULTS / "side_channels.json"
    if side_channels.exists():
        lines += _side_channels_section(json.loads(side_channels.read_text()))
    ingest = RESULTS / "ingest.json"
    if ingest.exists():
        lines += _ingest_section(json.loads(ingest.read_text()))
    embedders = RESULTS / "embedders.json"
    if embedders.exists():
        lines += _embedders_section(json.loads(embedders.read_text()))
    formats = RESULTS / "ingest_formats.json"
    if formats.exists():
        lines += _ingest_formats_section(json.loads(formats.read_text()))
    manuals = RESULTS / "pdf_manuals.json"
    if manuals.exists():
        check = RESULTS / "pdf_manuals_check.json"
        lines += _pdf_manuals_section(
            json.loads(manuals.read_text()),
            json.loads(check.read_text()) if check.exists() else None,
        )
    replicas = RESULTS / "replicas.json"
    if replicas.exists():
        lines += _replicas_section(json.loads(replicas.read_text()))
    capacity = RESULTS / "capacity.json"
    if capacity.exists():
        lines += _capacity_section(json.loads(capacity.read_text()))
    out = REPO / "BENCHMARKS.md"
    out.write_text("\n".join(lines))
    return out


def _replicas_section(r: dict) -> list[str]:  # type: ignore[type-arg]
    """bench/replicas.py: routing through a streaming replica, and failover."""
    one, routed = r["setups"]["one server"], r["setups"]["primary + replica"]
    o, f = r["routing_overhead_p50_ms"], r["failover"]
    lines = [
        "## Read replicas (`bench/replicas.py`)",
        "",
        f"{r['corpus']}; {r['workload']}; {r['rounds']} rounds; {r['machine']}; "
        f"measured {r['date']}. On 2 cores this measures routing overhead and "
        "correctness, not a speed-up (the primary and the standby share the cores).",
        "",
        "| setup | p50 ms | p95 ms | calls | q/s, 2 clients | SELECT 1 p50 ms |",
        "|---|---|---|---|---|---|",
    ]
    for name, v in (("one server", one), ("primary + replica", routed)):
        lines.append(
            f"| {name} | {v['p50_ms']:.2f} | {v['p95_ms']:.2f} | {v['calls']} | "
            f"{v['qps_2_clients']:.1f} | {v['select1_p50_ms']:.3f} |"
        )
    events = ", ".join(f"{e} at {t:.0f} s" for t, e in f["events"])
    lines += [
        "",
        f"Routing overhead, paired medians (call by call): "
        f"**{o['select1_paired_median']:+.3f} ms** per borrowed connection (SELECT 1), "
        f"{o['retrieve_paired_median']:+.3f} ms per retrieve (goal < 1 ms).",
        "",
        f"Failover: {f['seconds']:.0f} s of load, the replica {events}: "
        f"{f['queries']} queries, **{f['errors']} errors**; served by "
        + ", ".join(f"{k} {v}" for k, v in f["served_by"].items())
        + ".",
        "",
    ]
    return lines


def _capacity_section(c: dict) -> list[str]:  # type: ignore[type-arg]
    """bench/capacity.py: storage and HNSW per vector; projections (docs/scaling.md)."""
    st, m = c["storage"], c["model"]
    lines = [
        "## Capacity (`bench/capacity.py`)",
        "",
        f"`{c['command']}`; {c['machine']['cpus']} cores, PostgreSQL "
        f"{c['machine']['postgres']}, pgvector {c['machine']['pgvector']}, "
        f"shared_buffers {c['machine']['shared_buffers']}; measured {c['date']}. "
        "Storage from SciFact as ingested; HNSW builds and queries on "
        f"{c['dimension']}-dimension vectors (ef_search {c['ef_search']}). "
        "docs/scaling.md reads these into a capacity model.",
        "",
        f"Storage (measured): {st['chunks']:,} chunks in {st['total_bytes'] / 2**20:.0f} "
        f"MiB, {st['bytes_per_chunk']:,.0f} bytes per chunk "
        f"({st['chunks_per_gib']:,.0f} chunks per GiB).",
        "",
        "| vectors | HNSW build s (median) | index MiB | build peak MiB | query p50 ms | query p95 ms |",
        "|---|---|---|---|---|---|",
    ]
    for sh in c["shards"]:
        lines.append(
            f"| {sh['vectors']:,} | {sh['build_seconds']:.0f} | "
            f"{sh['index_bytes'] / 2**20:.0f} | {sh['peak_anon_bytes'] / 2**20:.0f} | "
            f"{sh['query_ms_p50']:.2f} | {sh['query_ms_p95']:.2f} |"
        )
    lines += [
        "",
        f"Per vector (measured): index {m['hnsw_index_bytes_per_vector']:,.0f} bytes, "
        f"build memory {m['hnsw_build_memory_bytes_per_vector']:,.0f} bytes. "
        "Extrapolated (n ln n fit of the build times): "
        f"{m['hnsw_build_seconds_per_million_extrapolated'] / 3600:.1f} h to build one "
        "million vectors on one core pair.",
        "",
        "| chunks (extrapolated) | shards | storage GiB per shard | HNSW build h per shard | HNSW index GiB per shard | fan-out query CPU ms |",
        "|---|---|---|---|---|---|",
    ]
    for p in m["projections"]:
        lines.append(
            f"| {p['chunks']:,} | {p['shards']} | {p['storage_gib_per_shard']:.0f} | "
            f"{p['hnsw_build_hours_per_shard']:.1f} | {p['hnsw_index_gib_per_shard']:.1f} | "
            f"{p['fan_out_query_cpu_ms']:.1f} |"
        )
    lines.append("")
    return lines


if __name__ == "__main__":
    print(write_benchmarks_md())
