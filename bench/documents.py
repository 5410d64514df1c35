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
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from quality import RRF_K, DenseExact, _bm25s_runs, _rrf  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CACHE = REPO / "bench" / ".cache"
LIMIT = 10
DEPTH = 100  # each channel's depth in the channel lists kept for bench/fusion.py
# Quality runs give the query embedding all the time it needs: on a loaded machine
# the serving deadline (1 s) would drop the dense channel and the figures would
# measure the load, not the ranking.
QUALITY_DEADLINE_S = 60.0


@dataclass(frozen=True)
class Site:
    """One documentation site as Debian ships it, with its blind question set.

    ``chrome`` is text of the site's navigation chrome (related bars, sidebars,
    footers): a chunk holding any of it carries navigation, not content. ``skip``
    says which pages are not part of the corpus (static folders, redirect stubs,
    generated indexes), as the question set's SOURCE.md defines it.
    """

    name: str
    title: str
    source: Path
    package: str
    chrome: tuple[str, ...]
    skip: Callable[[Path], bool]

    @property
    def questions(self) -> Path:
        return REPO / "bench" / "data" / self.name / "questions.jsonl"

    @property
    def copy(self) -> Path:
        return CACHE / self.name / "html"

    @property
    def copy_all(self) -> Path:
        return CACHE / self.name / "all"

    @property
    def _suffix(self) -> str:
        # python3doc keeps the file and folder names its first runs used.
        return "" if self.name == "python3doc" else f"-{self.name}"

    @property
    def home(self) -> Path:
        return CACHE / f"documents-home{self._suffix}"

    @property
    def structure_file(self) -> Path:
        return CACHE / f"documents-structure{self._suffix}.json"

    @property
    def results(self) -> Path:
        return REPO / "bench" / "results" / f"documents{self._suffix}.json"


def _python3doc_skip(rel: Path) -> bool:
    return rel.parts[0].startswith("_")


def _octave_skip(rel: Path) -> bool:
    # 2,324 of the 2,863 files are XREF*.html redirect stubs ("The node you are
    # looking for is at ..."); the indexes are generated listings.
    name = rel.name
    return name.startswith("XREF") or "Index" in name or name == "index.html"


SITES = {
    "python3doc": Site(
        name="python3doc",
        title="python3-doc 3.11 (Debian), HTML pages",
        source=Path("/usr/share/doc/python3/html"),
        package="python3-doc",
        chrome=(
            "Previous topic",
            "Next topic",
            "This Page",
            "Show Source",
            "Report a Bug",
            "Quick search",
            "Created using",
            "Last updated on May",  # the footer's form (the download page: a colon)
            "modules | next |",  # the related bar, whitespace normalised
            "modules | previous |",
            "Theme Auto",
            "Python Software Foundation. This page is licensed",
        ),
        skip=_python3doc_skip,
    ),
    "octavedoc": Site(
        name="octavedoc",
        title="octave-doc 7.3 (Debian), GNU Octave manual, HTML pages",
        source=Path("/usr/share/doc/octave/octave.html"),
        package="octave-doc",
        chrome=(
            "[Contents][Index]",  # texinfo's node header, whitespace normalised
            "Next: ",
            "Previous: ",
            "Up: ",
        ),
        skip=_octave_skip,
    ),
}
SITE = SITES["python3doc"]  # the default, and what older callers imported


def copy_site(site: Site, only: set[str] | None = None, *, whole: bool = False) -> int:
    """Copy the site's HTML pages (not its static files, stubs or indexes)."""
    if not site.source.is_dir():
        raise SystemExit(
            f"{site.source} not found: install Debian's {site.package} (apt-get"
            f" install {site.package})"
        )
    into = site.copy_all if whole else site.copy
    if into.exists():
        shutil.rmtree(into)
    count = 0
    root = site.source.resolve()
    for page in sorted(root.rglob("*.html")):
        rel = page.relative_to(root)
        if site.skip(rel) or (only is not None and rel.as_posix() not in only):
            continue
        target = into / rel
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


def structure(site: Site) -> dict[str, Any]:
    """Load, de-boilerplate and chunk every page (no database, no embedding)."""
    from retrieval_pipeline.ingest.job import chunk_document
    from retrieval_pipeline.ingest.loaders import LoadDefaults, load_file
    from retrieval_pipeline.ingest.site import prepare_site
    from retrieval_pipeline.tools.tokens import default_token_counter

    copy_site(site, whole=True)
    counter = default_token_counter()
    started = time.perf_counter()
    docs = [
        d
        for page in sorted(site.copy_all.rglob("*.html"))
        for d in load_file(page, LoadDefaults(root=site.copy_all))
    ]
    docs = prepare_site(docs)
    loaded = time.perf_counter()
    chunks = [(d.source_id, c) for d in docs for c in chunk_document(d, counter)]
    seconds = time.perf_counter() - started
    per_marker = {m: 0 for m in site.chrome}
    chrome = 0
    examples = []
    for source_id, chunk in chunks:
        text = " ".join(chunk.indexed_text().split())
        found = [m for m in site.chrome if m in text]
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


def warm_cache(site: Site, worker: int, workers: int) -> None:
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
            for page in sorted(site.copy.rglob("*.html"))
            for d in load_file(page, LoadDefaults(root=site.copy))
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


def judged_pages(site: Site, distractors: int) -> set[str]:
    """The judged pages and ``distractors`` other pages (a seeded sample)."""
    import random

    judged = {str(p) for q in load_questions(site) for p in q["relevant"]}
    root = site.source.resolve()
    others = sorted(
        p.relative_to(root).as_posix()
        for p in root.rglob("*.html")
        if not site.skip(p.relative_to(root))
        and p.relative_to(root).as_posix() not in judged
    )
    return judged | set(random.Random(0).sample(others, min(distractors, len(others))))


def load_questions(site: Site) -> list[dict[str, Any]]:
    if not site.questions.exists():
        raise SystemExit(f"{site.questions} not found: the question set is required")
    rows = [
        json.loads(line)
        for line in site.questions.read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    return [r for r in rows if r.get("relevant")]


def question_qrels(questions: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Each question's graded pages, as the metrics take them."""
    return {
        q["id"]: {str(k): int(v) for k, v in q["relevant"].items()} for q in questions
    }


def chrome_chunks(site: Site, store: Any) -> dict[str, Any]:
    with store.connection() as conn:
        rows = conn.execute("SELECT source_id, content FROM chunks").fetchall()
    per_marker = {m: 0 for m in site.chrome}
    hit = 0
    examples = []
    for source_id, content in rows:
        text = " ".join(content.split())
        found = [m for m in site.chrome if m in text]
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


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--site", choices=sorted(SITES), default="python3doc")
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
    return parser.parse_args()


def ingest_site(
    site: Site, store: Any, embedder: Any, cache: CachedEmbeddings
) -> dict[str, Any]:
    from retrieval_pipeline.ingest.job import Ingestor

    started = time.perf_counter()
    summary = Ingestor(store, embedder).ingest_paths([site.copy], site_links=True)
    seconds = time.perf_counter() - started
    ingest: dict[str, Any] = summary.to_dict()
    ingest["seconds"] = round(seconds, 2)
    ingest["docs_per_second"] = summary.documents / seconds
    ingest["chunks_per_second"] = summary.chunks / seconds
    ingest["embedding_cache_hits"] = cache.hits
    print(
        f"ingest: {summary.documents} pages, {summary.chunks} chunks, "
        f"{summary.failed} failed, {seconds:.0f} s",
        file=sys.stderr,
    )
    return ingest


def channel_runs(
    site: Site,
    retriever: Any,
    store: Any,
    questions: list[dict[str, Any]],
    qrels: dict[str, dict[str, int]],
) -> dict[str, dict[str, list[str]]]:
    """Our two channels, our hybrid (the default fusion) and RRF over our channels.

    The hybrid's page ranking is read from its top 50 chunks ("plain retrieve", the
    ranker's quality) and from its top ``LIMIT`` chunks, the pipeline's own answer
    size (the pipeline spreads those chunks over pages; a plain top 10 often holds
    several chunks of one page, so fewer pages).

    Also keeps each question's channel lists (depth 100) where bench/fusion.py
    reads them (``channels-<site>-<split>.json``), so the fusion study covers the
    site's dev split beside the shared sets'.
    """
    from fusion import rrf

    from retrieval_pipeline.eval.metrics import chunks_to_documents

    scope = retriever.scope(tenant="")
    sources = store.chunk_sources("")
    lists = {
        q["id"]: retriever.channels(
            q["question"], scope, depth=DEPTH, embed_deadline_s=QUALITY_DEADLINE_S
        )
        for q in questions
    }
    for split in ("dev", "test"):
        ids = [q["id"] for q in questions if q.get("split") == split]
        data = {
            "qrels": {i: qrels[i] for i in ids},
            "docs": sources,
            "queries": {i: lists[i] for i in ids},
        }
        (CACHE / f"channels-{site.name}-{split}.json").write_text(json.dumps(data))

    def pages(chunks: list[str]) -> list[str]:
        return chunks_to_documents([sources[c] for c in chunks])

    runs: dict[str, dict[str, list[str]]] = {
        "our lexical": {},
        "our dense": {},
        "rrf(our lexical, our dense)": {},
        "our hybrid (plain retrieve)": {},
        f"our hybrid, {LIMIT} chunks": {},
    }
    for q in questions:
        channels = lists[q["id"]]
        runs["our lexical"][q["id"]] = pages([c for c, _ in channels["lexical"]])
        runs["our dense"][q["id"]] = pages([c for c, _ in channels["dense"]])
        runs["rrf(our lexical, our dense)"][q["id"]] = pages(rrf(channels))
        hits = retriever.retrieve(
            q["question"], limit=50, tenant="", embed_deadline_s=QUALITY_DEADLINE_S
        )
        ranked = [h.document_id for h in hits]
        runs["our hybrid (plain retrieve)"][q["id"]] = chunks_to_documents(ranked)
        # The same ranking cut where the pipeline's answer is cut (LIMIT chunks):
        # what a caller of plain retrieve with the pipeline's budget gets.
        runs[f"our hybrid, {LIMIT} chunks"][q["id"]] = chunks_to_documents(
            ranked[:LIMIT]
        )
    return runs


def split_tables(
    questions: list[dict[str, Any]],
    qrels: dict[str, dict[str, int]],
    runs: dict[str, dict[str, list[str]]],
    extras: dict[str, dict[str, dict[str, float]]],
    other: str,
) -> dict[str, Any]:
    from retrieval_pipeline.eval.metrics import evaluate
    from retrieval_pipeline.eval.stats import bootstrap_ci, paired_test

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
            row: dict[str, Any] = {
                "ndcg@10": bootstrap_ci([per[name][q] for q in qids]).to_dict()
            }
            for key, values in extras.get(name, {}).items():
                row[key] = statistics.mean(values[q] for q in qids)
            table[name] = row
        base = [per["rrf(bm25s, dense)"][q] for q in qids]
        comparisons = {
            f"{name} vs rrf(bm25s, dense)": paired_test(
                base, [per[name][q] for q in qids]
            ).to_dict()
            for name in runs
            if name.startswith(("pipeline", "our hybrid", "rrf(our"))
        }
        comparisons["our lexical vs bm25s"] = paired_test(
            [per["bm25s"][q] for q in qids], [per["our lexical"][q] for q in qids]
        ).to_dict()
        for hybrid in ("our hybrid (plain retrieve)", f"our hybrid, {LIMIT} chunks"):
            comparisons[f"pipeline vs {hybrid}"] = paired_test(
                [per[hybrid][q] for q in qids], [per["pipeline"][q] for q in qids]
            ).to_dict()
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
    return splits


def evaluate_site(site: Site, store: Any, embedder: Any) -> dict[str, Any]:
    """Every system and pipeline variant on the site's dev and test splits."""
    import retrieval_pipeline.ingest.job as job
    from retrieval_pipeline.graph.builder import build_pipeline
    from retrieval_pipeline.graph.context import Context
    from retrieval_pipeline.graph.resources import PipelineResources
    from retrieval_pipeline.tools.retrieve import Retriever

    questions = load_questions(site)
    with store.connection() as conn:
        rows = conn.execute(
            "SELECT source_id, content FROM documents ORDER BY source_id"
        ).fetchall()
    ids = [r[0] for r in rows]
    texts = [r[1] for r in rows]
    queries = {q["id"]: q["question"] for q in questions}
    qrels = question_qrels(questions)
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
    retriever = Retriever(store, embedder)
    runs |= channel_runs(site, retriever, store, questions, qrels)
    graph = build_pipeline(PipelineResources(retriever=retriever))
    extras: dict[str, dict[str, dict[str, float]]] = {}
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
            variants.append((f"pipeline, chunks/page {cap or 'no cap'}", shipped, cap))
    for name, context, cap in variants:
        runs[name], distinct, added = run_pipeline(
            graph,
            questions,
            replace(
                context,
                document_chunks=cap or 0,
                embed_deadline_s=QUALITY_DEADLINE_S,
            ),
        )
        extras[name] = {"distinct_pages_top10": distinct, "graph_added_mean": added}
    counts = chrome_chunks(site, store)
    with store.connection() as conn:
        relations = conn.execute("SELECT count(*) FROM relations").fetchone()
    counts["documents"] = len(ids)
    counts["link_relations"] = int(relations[0]) if relations else 0
    return {
        "index": counts,
        "judged_pages_missing_from_index": sorted(
            {p for judged in qrels.values() for p in judged} - set(ids)
        ),
        "shipped": {"document_chunks": shipped_cap, "site_links": job.SITE_LINKS},
        "splits": split_tables(questions, qrels, runs, extras, other),
    }


def main() -> int:
    args = parse_args()
    site = SITES[args.site]
    previous = json.loads(site.results.read_text()) if site.results.exists() else {}
    if args.warm_cache:
        worker, workers = (int(x) for x in args.warm_cache.split("/"))
        warm_cache(site, worker, workers)
        return 0
    if args.structure:
        found = structure(site)
        site.structure_file.parent.mkdir(parents=True, exist_ok=True)
        site.structure_file.write_text(json.dumps(found, indent=1) + "\n")
        print(json.dumps(found, indent=1))
        return 0
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from retrieval_pipeline.tools.embeddings import resolve_embedder
    from retrieval_pipeline.tools.store import EmbeddedPostgres, Store

    embedder = resolve_embedder("local")
    cache = CachedEmbeddings(
        embedder._embeddings,  # noqa: SLF001 (bench-only: a disk cache in front)
        CACHE / "documents-embeddings.sqlite",
    )
    embedder._embeddings = cache  # noqa: SLF001
    ingest: dict[str, Any] = previous.get("ingest", {})
    if not args.skip_ingest:
        only = judged_pages(site, args.distractors) if args.pages == "judged" else None
        pages = copy_site(site, only)
        if site.home.exists():
            shutil.rmtree(site.home)
    server = EmbeddedPostgres(site.home, keep_running=False)
    uncached = CACHE / f"{site.home.name}-ingest-uncached.json"
    try:
        with Store(server.start()) as store:
            if not args.skip_ingest:
                ingest = {"pages_copied": pages} | ingest_site(
                    site, store, embedder, cache
                )
            if ingest.get("embedding_cache_hits") == 0 and ingest.get("chunks"):
                uncached.write_text(json.dumps(ingest, indent=1))
            if args.ingest_only:
                return 0
            evaluated = evaluate_site(site, store, embedder)
    finally:
        server.stop()
    results = {
        "benchmark": "documents",
        "date": time.strftime("%Y-%m-%d"),
        "site": site.title,
        "embedder": embedder.model,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        # A --skip-ingest run evaluates the index the last ingest built: its subset.
        "pages": previous.get("pages", args.pages) if args.skip_ingest else args.pages,
        "distractors": (
            previous.get("distractors")
            if args.skip_ingest
            else (args.distractors if args.pages == "judged" else None)
        ),
        "structure": (
            json.loads(site.structure_file.read_text())
            if site.structure_file.exists()
            else None
        ),
        "ingest": ingest,
        "ingest_uncached": (
            json.loads(uncached.read_text()) if uncached.exists() else None
        ),
    } | evaluated
    site.results.parent.mkdir(parents=True, exist_ok=True)
    site.results.write_text(json.dumps(results, indent=1) + "\n")
    for split, body in results["splits"].items():
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
