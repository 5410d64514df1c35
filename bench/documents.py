"""Real documents: a documentation site as shipped (Debian's python3-doc, HTML).

Ingests the Python 3.11 manual (its ``.html`` pages, copied under bench/.cache) into
a fresh embedded-database home, and reports documents, chunks, chunks that still
carry the site's navigation chrome (must be 0), and ingest speed (documents/s,
chunks/s). Then evaluates page-level nDCG@10 on the questions in
bench/data/python3doc/questions.jsonl (written blind, with a dev and a test split),
where a page's rank is its best chunk's rank:

- pipeline: the shipped pipeline (default Context, ``limit`` 10), as ``query`` runs it
- bm25s over page text (the stored page text; Lucene BM25, Snowball stemmer)
- dense max-passage: exact cosine over the very chunk vectors stored (same model),
  a page scored by its best chunk
- RRF(bm25s, dense max-passage), k = 60

plus variants of the pipeline used to choose defaults on the dev split: site links
on/off (the pages are ingested with links; the link graph is the only graph here, so
graph fusion off is exactly links off), and the assembler's per-document chunk cap.
Every variant is reported on both splits; choices are made on dev only. Writes
bench/results/documents.json and regenerates BENCHMARKS.md.

Embeddings are cached on disk by text (bench/.cache), so a rerun re-embeds only
changed chunks; the ingest speed reported is the first, uncached run's.

    python bench/documents.py [--ingest-only | --skip-ingest]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from quality import RRF_K, DenseExact, _bm25s_runs, _rrf  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SOURCE = Path("/usr/share/doc/python3/html")
SITE = REPO / "bench" / ".cache" / "python3doc" / "html"
SITE_ALL = REPO / "bench" / ".cache" / "python3doc" / "all"
STRUCTURE = REPO / "bench" / ".cache" / "documents-structure.json"
HOME = REPO / "bench" / ".cache" / "documents-home"
QUESTIONS = REPO / "bench" / "data" / "python3doc" / "questions.jsonl"
RESULTS = REPO / "bench" / "results" / "documents.json"
LIMIT = 10
# Text of python3-doc's chrome (the related bars, sidebar and footer of every page):
# a chunk holding any of these carries navigation, not content.
CHROME_MARKERS = (
    "Previous topic",
    "Next topic",
    "This Page",
    "Show Source",
    "Report a Bug",
    "Quick search",
    "Created using",
    "Last updated on May",  # the footer's form (the download page's body has a colon)
    "modules | next |",  # the related bar, whitespace normalised
    "modules | previous |",
    "Theme Auto",
    "Python Software Foundation. This page is licensed",
)


def copy_site(only: set[str] | None = None, site: Path = SITE) -> int:
    """Copy the manual's HTML pages (not its _sources text or static files)."""
    if not SOURCE.is_dir():
        raise SystemExit(
            f"{SOURCE} not found: install Debian's python3-doc (apt-get install "
            "python3-doc)"
        )
    if site.exists():
        shutil.rmtree(site)
    count = 0
    for page in sorted(SOURCE.resolve().rglob("*.html")):
        rel = page.relative_to(SOURCE.resolve())
        if rel.parts[0].startswith("_") or (
            only is not None and rel.as_posix() not in only
        ):
            continue
        target = site / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(page, target)
        count += 1
    return count


class CachedEmbeddings:
    """A LangChain embeddings object whose document vectors are cached on disk.

    Keyed by model and text, so a re-run of this bench re-embeds only the chunks
    whose text changed; the ingest speed it reports is the first, uncached run's
    (``ingest.embedding_cache_hits`` says how many vectors came from the cache).
    """

    def __init__(self, inner: Any, path: Path) -> None:
        import sqlite3

        path.parent.mkdir(parents=True, exist_ok=True)
        self.inner = inner
        self.db = sqlite3.connect(path, check_same_thread=False, timeout=120)
        self.db.execute("CREATE TABLE IF NOT EXISTS v (k TEXT PRIMARY KEY, v TEXT)")
        self.hits = 0

    @staticmethod
    def _key(text: str) -> str:
        import hashlib

        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        keys = [self._key(t) for t in texts]
        found: dict[str, list[float]] = {}
        # Part by part, looking the cache up again each time: another process
        # (--warm-cache) may be filling it at the same time.
        for start in range(0, len(keys), 256):
            part = keys[start : start + 256]
            marks = ",".join("?" * len(part))
            for k, v in self.db.execute(
                f"SELECT k, v FROM v WHERE k IN ({marks})", part
            ):
                found[k] = json.loads(v)
            todo = [i for i in range(start, start + len(part)) if keys[i] not in found]
            self.hits += len(part) - len(todo)
            if not todo:
                continue
            fresh = self.inner.embed_documents([texts[i] for i in todo])
            with self.db:
                for i, vector in zip(todo, fresh, strict=True):
                    found[keys[i]] = list(vector)
                    self.db.execute(
                        "INSERT OR REPLACE INTO v VALUES (?, ?)",
                        (keys[i], json.dumps(list(vector))),
                    )
        return [found[k] for k in keys]

    def embed_query(self, text: str) -> list[float]:
        return list(self.inner.embed_query(text))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def structure() -> dict[str, Any]:
    """Load, de-boilerplate and chunk every page (no database, no embedding)."""
    from retrieval_pipeline.ingest.job import chunk_document
    from retrieval_pipeline.ingest.loaders import LoadDefaults, load_file
    from retrieval_pipeline.ingest.site import prepare_site
    from retrieval_pipeline.tools.tokens import default_token_counter

    copy_site(site=SITE_ALL)
    counter = default_token_counter()
    started = time.perf_counter()
    docs = [
        d
        for page in sorted(SITE_ALL.rglob("*.html"))
        for d in load_file(page, LoadDefaults(root=SITE_ALL))
    ]
    docs = prepare_site(docs)
    loaded = time.perf_counter()
    chunks = [(d.source_id, c) for d in docs for c in chunk_document(d, counter)]
    seconds = time.perf_counter() - started
    per_marker = {m: 0 for m in CHROME_MARKERS}
    chrome = 0
    examples = []
    for source_id, chunk in chunks:
        text = " ".join(chunk.indexed_text().split())
        found = [m for m in CHROME_MARKERS if m in text]
        for m in found:
            per_marker[m] += 1
        if found:
            chrome += 1
            if len(examples) < 5:
                examples.append({"page": source_id, "markers": found})
    tokens = [c.token_count for _, c in chunks]
    return {
        "pages": len(docs),
        "chunks": len(chunks),
        "chrome_chunks": chrome,
        "per_marker": per_marker,
        "examples": examples,
        "chunks_under_24_tokens": sum(1 for t in tokens if t < 24),
        "median_chunk_tokens": statistics.median(tokens),
        "empty_heading_paths": sum(1 for _, c in chunks if not c.heading_path),
        "link_relations": sum(len(d.relations) for d in docs),
        "load_seconds": round(loaded - started, 1),
        "load_and_chunk_seconds": round(seconds, 1),
        "docs_per_second_without_embedding": len(docs) / seconds,
        "chunks_per_second_without_embedding": len(chunks) / seconds,
    }


def warm_cache(worker: int, workers: int) -> None:
    """Embed every ``workers``-th chunk text of the copied site, from the end."""
    from retrieval_pipeline.ingest.job import chunk_document
    from retrieval_pipeline.ingest.loaders import LoadDefaults, load_file
    from retrieval_pipeline.ingest.site import prepare_site
    from retrieval_pipeline.tools.embeddings import resolve_embedder
    from retrieval_pipeline.tools.tokens import default_token_counter

    counter = default_token_counter()
    docs = prepare_site(
        [
            d
            for page in sorted(SITE.rglob("*.html"))
            for d in load_file(page, LoadDefaults(root=SITE))
        ]
    )
    texts = [c.indexed_text() for d in docs for c in chunk_document(d, counter)]
    mine = texts[::-1][worker::workers]
    embedder = resolve_embedder("local")
    embedder.warm_up()
    cache = CachedEmbeddings(
        embedder._embeddings,  # noqa: SLF001 (bench-only)
        REPO / "bench" / ".cache" / "documents-embeddings.sqlite",
    )
    for start in range(0, len(mine), 256):
        cache.embed_documents(mine[start : start + 256])
        print(f"worker {worker}: {start + 256}/{len(mine)}", file=sys.stderr)


def judged_pages(distractors: int) -> set[str]:
    """The judged pages and ``distractors`` other pages (a seeded sample)."""
    import random

    judged = {str(p) for q in load_questions() for p in q["relevant"]}
    root = SOURCE.resolve()
    others = sorted(
        p.relative_to(root).as_posix()
        for p in root.rglob("*.html")
        if not p.relative_to(root).parts[0].startswith("_")
        and p.relative_to(root).as_posix() not in judged
    )
    return judged | set(random.Random(0).sample(others, min(distractors, len(others))))


def load_questions() -> list[dict[str, Any]]:
    if not QUESTIONS.exists():
        raise SystemExit(f"{QUESTIONS} not found: the question set is required")
    rows = [
        json.loads(line)
        for line in QUESTIONS.read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    return [r for r in rows if r.get("relevant")]


def chrome_chunks(store: Any) -> dict[str, Any]:
    with store.connection() as conn:
        rows = conn.execute("SELECT source_id, content FROM chunks").fetchall()
    per_marker = {m: 0 for m in CHROME_MARKERS}
    hit = 0
    examples = []
    for source_id, content in rows:
        text = " ".join(content.split())
        found = [m for m in CHROME_MARKERS if m in text]
        for m in found:
            per_marker[m] += 1
        if found:
            hit += 1
            if len(examples) < 5:
                examples.append({"page": source_id, "markers": found})
    tokens = []
    with store.connection() as conn:
        tokens = [r[0] for r in conn.execute("SELECT token_count FROM chunks")]
    return {
        "chunks": len(rows),
        "chrome_chunks": hit,
        "per_marker": per_marker,
        "examples": examples,
        "chunks_under_24_tokens": sum(1 for t in tokens if t < 24),
        "median_chunk_tokens": statistics.median(tokens) if tokens else 0,
    }


def run_pipeline(
    graph: Any, questions: list[dict[str, Any]], context: Any
) -> tuple[dict[str, list[str]], dict[str, float], dict[str, int]]:
    from retrieval_pipeline.eval.metrics import chunks_to_documents

    run: dict[str, list[str]] = {}
    distinct: dict[str, float] = {}
    graph_added: dict[str, int] = {}
    for q in questions:
        output = graph.invoke(
            {"question": q["question"], "limit": LIMIT, "tenant": "", "debug": True},
            context=context,
        )
        pages = [c["document_id"] for c in output["chunks"]]
        run[q["id"]] = chunks_to_documents(pages)
        distinct[q["id"]] = len(set(pages))
        debug = output.get("retrieval_debug") or {}
        graph_added[q["id"]] = int(debug.get("graph_added", 0) or 0)
        for record in debug.get("fallbacks") or []:
            # A late query embedding (a loaded machine) drops the dense channel;
            # the quality figures are only comparable without such fallbacks.
            print(f"fallback on {q['id']}: {record}", file=sys.stderr)
    return run, distinct, graph_added


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--skip-ingest",
        action="store_true",
        help="reuse the store of the last run (quality only)",
    )
    parser.add_argument(
        "--ingest-only", action="store_true", help="ingest (fill the cache) and stop"
    )
    parser.add_argument(
        "--structure",
        action="store_true",
        help="only load and chunk the whole site (chrome, chunk counts, parse speed)",
    )
    parser.add_argument(
        "--pages",
        choices=("all", "judged"),
        default="all",
        help="index the whole site, or only the judged pages plus --distractors",
    )
    parser.add_argument("--distractors", type=int, default=0)
    parser.add_argument(
        "--warm-cache",
        metavar="K/N",
        help="embed part K of N of the copied site's chunks into the cache (a helper"
        " process beside an ingest on a slow machine)",
    )
    args = parser.parse_args()
    previous = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    if args.warm_cache:
        worker, workers = (int(x) for x in args.warm_cache.split("/"))
        warm_cache(worker, workers)
        return 0
    if args.structure:
        found = structure()
        STRUCTURE.parent.mkdir(parents=True, exist_ok=True)
        STRUCTURE.write_text(json.dumps(found, indent=1) + "\n")
        print(json.dumps(found, indent=1))
        return 0
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import retrieval_pipeline.ingest.job as job
    from retrieval_pipeline.eval.metrics import evaluate
    from retrieval_pipeline.eval.stats import bootstrap_ci, paired_test
    from retrieval_pipeline.graph.builder import build_pipeline
    from retrieval_pipeline.graph.context import Context
    from retrieval_pipeline.graph.resources import PipelineResources
    from retrieval_pipeline.ingest.job import Ingestor
    from retrieval_pipeline.tools.embeddings import resolve_embedder
    from retrieval_pipeline.tools.retrieve import Retriever
    from retrieval_pipeline.tools.store import EmbeddedPostgres, Store

    embedder = resolve_embedder("local")
    cache = CachedEmbeddings(
        embedder._embeddings,  # noqa: SLF001 (bench-only: a disk cache in front)
        REPO / "bench" / ".cache" / "documents-embeddings.sqlite",
    )
    embedder._embeddings = cache  # noqa: SLF001
    ingest: dict[str, Any] = {}
    if not args.skip_ingest:
        pages = copy_site(
            judged_pages(args.distractors) if args.pages == "judged" else None
        )
        if HOME.exists():
            shutil.rmtree(HOME)
        ingest["pages_copied"] = pages
    server = EmbeddedPostgres(HOME, keep_running=False)
    results: dict[str, Any] = {}
    try:
        with Store(server.start()) as store:
            if not args.skip_ingest:
                started = time.perf_counter()
                summary = Ingestor(store, embedder).ingest_paths(
                    [SITE], site_links=True
                )
                seconds = time.perf_counter() - started
                ingest.update(summary.to_dict())
                ingest["seconds"] = round(seconds, 2)
                ingest["docs_per_second"] = summary.documents / seconds
                ingest["chunks_per_second"] = summary.chunks / seconds
                ingest["embedding_cache_hits"] = cache.hits
                print(
                    f"ingest: {summary.documents} pages, {summary.chunks} chunks, "
                    f"{summary.failed} failed, {seconds:.0f} s",
                    file=sys.stderr,
                )
            else:
                ingest = previous.get("ingest", {})
            uncached = REPO / "bench" / ".cache" / "documents-ingest-uncached.json"
            if ingest.get("embedding_cache_hits") == 0 and ingest.get("chunks"):
                uncached.write_text(json.dumps(ingest, indent=1))
            if args.ingest_only:
                return 0
            questions = load_questions()
            counts = chrome_chunks(store)
            with store.connection() as conn:
                rows = conn.execute(
                    "SELECT source_id, content FROM documents ORDER BY source_id"
                ).fetchall()
                relations = conn.execute("SELECT count(*) FROM relations").fetchone()
            ids = [r[0] for r in rows]
            texts = [r[1] for r in rows]
            counts["documents"] = len(ids)
            counts["link_relations"] = int(relations[0]) if relations else 0
            queries = {q["id"]: q["question"] for q in questions}
            qrels = {
                q["id"]: {str(k): int(v) for k, v in q["relevant"].items()}
                for q in questions
            }
            missing = sorted(
                {p for judged in qrels.values() for p in judged} - set(ids)
            )

            runs: dict[str, dict[str, list[str]]] = {}
            exact = DenseExact(store, "")
            runs["dense max-passage"] = {
                q: exact.search(embedder.embed_query(t)) for q, t in queries.items()
            }
            runs["bm25s"] = _bm25s_runs(ids, texts, queries)
            runs["rrf(bm25s, dense)"] = {
                q: _rrf([runs["bm25s"][q], runs["dense max-passage"][q]], RRF_K)
                for q in queries
            }
            graph = build_pipeline(
                PipelineResources(retriever=Retriever(store, embedder))
            )
            distinct: dict[str, dict[str, float]] = {}
            added: dict[str, dict[str, int]] = {}
            shipped_cap = Context().document_chunks or None
            # The store holds the link relations; it has no other entities, so graph
            # fusion off is exactly an ingest with site_links=False.
            linked, unlinked = Context(), Context(graph_fusion=False)
            shipped = linked if job.SITE_LINKS else unlinked
            other = "off" if job.SITE_LINKS else "on"
            variants: list[tuple[str, Context, int | None]] = [
                ("pipeline", shipped, shipped_cap),
                (
                    f"pipeline, site links {other}",
                    unlinked if job.SITE_LINKS else linked,
                    shipped_cap,
                ),
            ]
            for cap in (None, 1, 2, 3):
                if cap != shipped_cap:
                    variants.append(
                        (f"pipeline, chunks/page {cap or 'no cap'}", shipped, cap)
                    )
            for name, context, cap in variants:
                runs[name], distinct[name], added[name] = run_pipeline(
                    graph, questions, replace(context, document_chunks=cap or 0)
                )
            splits: dict[str, Any] = {}
            for split in ("dev", "test"):
                qids = sorted(q["id"] for q in questions if q.get("split") == split)
                if not qids:
                    continue
                sub = {q: qrels[q] for q in qids}
                per = {
                    name: evaluate(run, sub, ks=(10,), metrics=("ndcg",))["ndcg@10"]
                    for name, run in runs.items()
                }
                table = {}
                for name in runs:
                    values = [per[name][q] for q in qids]
                    row: dict[str, Any] = {"ndcg@10": bootstrap_ci(values).to_dict()}
                    if name in distinct:
                        row["distinct_pages_top10"] = statistics.mean(
                            distinct[name][q] for q in qids
                        )
                        row["graph_added_mean"] = statistics.mean(
                            added[name][q] for q in qids
                        )
                    table[name] = row
                base = [per["rrf(bm25s, dense)"][q] for q in qids]
                comparisons = {
                    f"{name} vs rrf(bm25s, dense)": paired_test(
                        base, [per[name][q] for q in qids]
                    ).to_dict()
                    for name in runs
                    if name.startswith("pipeline")
                }
                comparisons[f"pipeline, site links {other} vs pipeline"] = paired_test(
                    [per[f"pipeline, site links {other}"][q] for q in qids],
                    [per["pipeline"][q] for q in qids],
                ).to_dict()
                by_type: dict[str, dict[str, float]] = {}
                for kind in sorted({str(q.get("type", "")) for q in questions}):
                    ids_of = [
                        q["id"]
                        for q in questions
                        if q.get("split") == split and str(q.get("type", "")) == kind
                    ]
                    if ids_of:
                        by_type[kind] = {
                            name: statistics.mean(per[name][q] for q in ids_of)
                            for name in ("pipeline", "rrf(bm25s, dense)", "bm25s")
                        }
                        by_type[kind]["questions"] = len(ids_of)
                splits[split] = {
                    "questions": len(qids),
                    "systems": table,
                    "comparisons": comparisons,
                    "by_type": by_type,
                }
            results = {
                "benchmark": "documents",
                "date": time.strftime("%Y-%m-%d"),
                "site": "python3-doc 3.11 (Debian), HTML pages",
                "embedder": embedder.model,
                "machine": {
                    "cpus": os.cpu_count(),
                    "python": platform.python_version(),
                },
                "pages": args.pages,
                "distractors": args.distractors if args.pages == "judged" else None,
                "structure": (
                    json.loads(STRUCTURE.read_text()) if STRUCTURE.exists() else None
                ),
                "ingest": ingest,
                "ingest_uncached": (
                    json.loads(uncached.read_text()) if uncached.exists() else None
                ),
                "index": counts,
                "judged_pages_missing_from_index": missing,
                "shipped": {
                    "document_chunks": shipped_cap,
                    "site_links": job.SITE_LINKS,
                },
                "splits": splits,
            }
    finally:
        server.stop()
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    for split, body in results.get("splits", {}).items():
        for name, row in body["systems"].items():
            extra = (
                f"  pages {row['distinct_pages_top10']:.2f}"
                if "distinct_pages_top10" in row
                else ""
            )
            print(f"{split} {name:34s} {row['ndcg@10']['mean']:.3f}{extra}")
    from report import write_benchmarks_md

    write_benchmarks_md()
    return 0


if __name__ == "__main__":
    sys.exit(main())
