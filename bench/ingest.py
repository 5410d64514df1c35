"""Ingest benchmark: SciFact (5,183 documents) with the local embedding model.

Reports documents/s, chunks/s, and the database side's cost (chunking, COPY, postings,
statistics, index maintenance: everything but embedding) as a share of the embedding
time measured in the same run. Goal (issue 2): under 15 % of embedding time, and peak
memory under 2 GB. Each repetition ingests into a fresh embedded database.

    python bench/ingest.py [--dataset DIR] [--limit N] [--repeat R]

Per format (issue 16): ``--formats`` ingests one corpus per format (markdown, HTML,
PDF, DOCX) into fresh databases and reports documents/s and chunks/s beside each
run's own embedding time, and the PDF text extractors (pypdfium2, used, against
pypdf) on the same files; ``--pdf-manuals`` ingests Debian's octave-doc and
gnuplot-doc PDF manuals (install them first: ``apt-get install -y octave-doc
gnuplot-doc``) into bench/.cache/pdf-home and draws 20 chunks (seeded) for a
check by hand of their heading path and pages (bench/results/pdf_manuals_check.json).

    python bench/ingest.py --formats
    python bench/ingest.py --pdf-manuals
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
        if keep:
            # reset() then start() on one object fails (its pgdata path is gone).
            EmbeddedPostgres(home, keep_running=True).reset()
        server = EmbeddedPostgres(home, keep_running=True)
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


FORMATS_RESULTS = REPO / "bench" / "results" / "ingest_formats.json"
MANUALS_RESULTS = REPO / "bench" / "results" / "pdf_manuals.json"
SHARED_PDFS = REPO.parent / "shared" / "data" / "documents" / "pdf"
PYTHON_DOC = Path("/usr/share/doc/python3-doc/html/library")
MANUAL_PACKAGES = ("octave-doc", "gnuplot-doc")
HTML_PAGES = 100  # the first N python3-doc library pages (sorted): keeps the run short
CORPUS_LABELS = {
    "md": "examples/sample_corpus (markdown)",
    "html": f"python3-doc library/*.html, first {HTML_PAGES} pages",
    "pdf": "shared/data/documents/pdf (15 files: 3 cannot be read)",
    "docx": "sample_corpus converted to DOCX with python-docx (generated)",
}
SAMPLE_SEED = 16  # issue number; the 20 checked chunks are drawn with it


def _markdown_to_docx(source: Path, target: Path) -> None:
    """A DOCX with the markdown file's headings, paragraphs and lists (styles)."""
    import docx

    text = source.read_text(encoding="utf-8")
    if text.startswith("---"):
        text = text.split("\n---", 1)[-1].split("\n", 1)[-1]
    document = docx.Document()
    for block in text.split("\n\n"):
        lines = [line for line in block.strip().split("\n") if line.strip()]
        if not lines:
            continue
        if lines[0].startswith("#"):
            level = len(lines[0]) - len(lines[0].lstrip("#"))
            document.add_heading(lines[0].lstrip("#").strip(), level=min(level, 9))
            lines = lines[1:]
        if lines and all(line.lstrip().startswith(("- ", "* ")) for line in lines):
            for line in lines:
                document.add_paragraph(line.lstrip()[2:], style="List Bullet")
        elif lines:
            document.add_paragraph(" ".join(lines))
    document.save(str(target))


def _format_corpora(tmp: Path) -> dict[str, Path]:
    sample = REPO / "examples" / "sample_corpus"
    docx_dir = tmp / "docx"
    for md in sorted(sample.rglob("*.md")):
        out = docx_dir / md.relative_to(sample).with_suffix(".docx")
        out.parent.mkdir(parents=True, exist_ok=True)
        _markdown_to_docx(md, out)
    html_dir = tmp / "html"
    html_dir.mkdir()
    for page in sorted(PYTHON_DOC.glob("*.html"))[:HTML_PAGES]:
        (html_dir / page.name).write_bytes(page.read_bytes())
    return {"md": sample, "html": html_dir, "pdf": SHARED_PDFS, "docx": docx_dir}


def _ingest_fresh(
    paths: list[Path], home: Path, embedder: object, ids: list[str] | None = None
) -> dict[str, object]:
    from retrieval_pipeline.ingest.job import Ingestor
    from retrieval_pipeline.tools.store import EmbeddedPostgres, Store

    EmbeddedPostgres(home, keep_running=True).reset()
    server = EmbeddedPostgres(home, keep_running=True)
    url = server.start()
    try:
        with Store(url) as store:
            summary = Ingestor(store, embedder).ingest_paths(paths)  # type: ignore[arg-type]
            with store.connection() as conn:
                pages = conn.execute(
                    "SELECT count(*) FILTER (WHERE page_start IS NOT NULL),"
                    " count(*) FILTER (WHERE page_start IS NULL) FROM chunks"
                ).fetchone()
                found = conn.execute(
                    "SELECT id, page_start, page_end, heading_path FROM chunks"
                    " WHERE id = ANY(%s::text[]) ORDER BY id",
                    (ids or [],),
                ).fetchall()
    finally:
        server.stop()
    return {
        "summary": summary,
        "chunks_with_pages": pages[0],
        "chunks_without": pages[1],
        "found": [list(row) for row in found],
    }


def _load_seconds(files: list[Path]) -> tuple[float, int]:
    """Parse time alone (load_file, no chunking or embedding), and files that failed."""
    from retrieval_pipeline.errors import IngestError
    from retrieval_pipeline.ingest.loaders import LoadDefaults, load_file

    started = time.perf_counter()
    failed = 0
    for file in files:
        try:
            load_file(file, LoadDefaults(root=file.parent))
        except IngestError:
            failed += 1
    return time.perf_counter() - started, failed


def _pdf_extractors(files: list[Path]) -> dict[str, float]:
    """Seconds to extract every page's text: pypdfium2 (used) and pypdf (baseline)."""
    import pypdf
    import pypdfium2 as pdfium

    def with_pdfium(path: Path) -> int:
        document = pdfium.PdfDocument(str(path))
        try:
            return sum(len(page.get_textpage().get_text_range()) for page in document)
        finally:
            document.close()

    def with_pypdf(path: Path) -> int:
        return sum(len(p.extract_text() or "") for p in pypdf.PdfReader(path).pages)

    out: dict[str, float] = {}
    for name, extract in (("pypdfium2", with_pdfium), ("pypdf", with_pypdf)):
        started = time.perf_counter()
        chars = 0
        for path in files:
            try:
                chars += extract(path)
            except Exception:  # noqa: BLE001 - encrypted/damaged files fail in both
                continue
        out[f"{name}_seconds"] = time.perf_counter() - started
        out[f"{name}_chars"] = chars
    out["pypdf_over_pypdfium2"] = out["pypdf_seconds"] / out["pypdfium2_seconds"]
    return out


def run_formats() -> dict[str, object]:
    from retrieval_pipeline.ingest.loaders import discover
    from retrieval_pipeline.tools.embeddings import resolve_embedder

    embedder = resolve_embedder("local")
    rows: dict[str, dict[str, object]] = {}
    with tempfile.TemporaryDirectory(prefix="rp-bench-formats-") as tmp:
        corpora = _format_corpora(Path(tmp))
        for name, corpus in corpora.items():
            files = list(discover([corpus]))
            parse_seconds, parse_failed = _load_seconds(files)
            run = _ingest_fresh([corpus], Path(tmp) / f"home-{name}", embedder)
            summary = run["summary"]
            rows[name] = {
                "corpus": CORPUS_LABELS[name],
                "files": len(files),
                "documents": summary.documents,  # type: ignore[attr-defined]
                "chunks": summary.chunks,  # type: ignore[attr-defined]
                "failed": summary.failed,  # type: ignore[attr-defined]
                "failures": [
                    {"path": Path(p).name, "reason": r}
                    for p, r in summary.failures  # type: ignore[attr-defined]
                ],
                "warnings": len(summary.warnings),  # type: ignore[attr-defined]
                "chunks_with_pages": run["chunks_with_pages"],
                "seconds": summary.seconds,  # type: ignore[attr-defined]
                "embed_seconds": summary.embed_seconds,  # type: ignore[attr-defined]
                "parse_seconds": parse_seconds,
                "parse_failed": parse_failed,
                "docs_per_second": summary.documents / summary.seconds,  # type: ignore[attr-defined]
                "chunks_per_second": summary.chunks / summary.seconds,  # type: ignore[attr-defined]
                "parsed_files_per_second": len(files) / parse_seconds,
            }
            print(
                name,
                json.dumps({k: v for k, v in rows[name].items() if k != "failures"}),
            )
    pdfs = sorted(SHARED_PDFS.glob("*.pdf"))
    return {
        "benchmark": "ingest_formats",
        "machine": {"cpus": psutil.cpu_count(), "python": platform.python_version()},
        "date": time.strftime("%Y-%m-%d"),
        "html_pages": HTML_PAGES,
        "formats": rows,
        "pdf_extractors": {"files": len(pdfs), **_pdf_extractors(pdfs)},
    }


def _manual_files() -> list[Path]:
    import subprocess

    files: list[Path] = []
    for package in MANUAL_PACKAGES:
        listed = subprocess.run(
            ["dpkg", "-L", package], capture_output=True, text=True, check=False
        ).stdout.split()
        files += sorted(Path(p) for p in listed if p.endswith(".pdf"))
    if not files:
        raise SystemExit(
            "no PDF manuals: install them first (apt-get install -y octave-doc "
            "gnuplot-doc)"
        )
    return files


def _pages(files: list[Path]) -> int:
    import pypdfium2 as pdfium

    total = 0
    for file in files:
        document = pdfium.PdfDocument(str(file))
        total += len(document)
        document.close()
    return total


def _manual_chunks(files: list[Path]) -> dict[str, object]:
    """Parse and chunk every manual as ingest does; the 20 chunks are drawn here.

    Pages are ``page_span`` over the chunk's offsets, the function the ingest job
    stores; chunk ids are the stored ids (``chunk_key``), so the drawn chunks can be
    looked up in the database the ingest below writes.
    """
    import random

    import pypdfium2 as pdfium

    from retrieval_pipeline.errors import IngestError
    from retrieval_pipeline.ingest.job import chunk_document
    from retrieval_pipeline.ingest.loaders import LoadDefaults, load_file, page_span
    from retrieval_pipeline.tools.store.records import chunk_key, document_key
    from retrieval_pipeline.tools.tokens import default_token_counter

    counter = default_token_counter()
    pages = 0
    rows = []
    failures = []
    warnings = []
    started = time.perf_counter()
    for file in files:
        document = pdfium.PdfDocument(str(file))
        pages += len(document)
        document.close()
        try:
            (source,) = load_file(file, LoadDefaults(root=file.parent))
        except IngestError as exc:
            failures.append({"path": file.name, "reason": exc.reason})
            continue
        warnings += [{"path": file.name, "reason": w} for w in source.warnings]
        doc_key = document_key(source.tenant, source.source_id)
        for chunk in chunk_document(source, counter):
            first, last = page_span(source.pages, chunk.char_start, chunk.char_end)
            rows.append(
                {
                    "chunk_id": chunk_key(doc_key, chunk.ordinal, chunk.indexed_text()),
                    "file": file.name,
                    "page_start": first,
                    "page_end": last,
                    "heading_path": list(chunk.heading_path),
                    "first_line": chunk.body.strip().split("\n")[0][:120],
                    "last_line": chunk.body.strip().split("\n")[-1][-120:],
                }
            )
    seconds = time.perf_counter() - started
    rows.sort(key=lambda r: str(r["chunk_id"]))
    return {
        "pages": pages,
        "parsed_chunks": len(rows),
        "parse_and_chunk_seconds": seconds,
        "parse_failures": failures,
        "parse_warnings": warnings,
        "sample_seed": SAMPLE_SEED,
        "sample": random.Random(SAMPLE_SEED).sample(rows, 20),
    }


def run_pdf_manuals(ingest_only: list[str] | None = None) -> dict[str, object]:
    from retrieval_pipeline.tools.embeddings import resolve_embedder

    files = _manual_files()
    result: dict[str, object] = {
        "benchmark": "pdf_manuals",
        "machine": {"cpus": psutil.cpu_count(), "python": platform.python_version()},
        "date": time.strftime("%Y-%m-%d"),
        "packages": list(MANUAL_PACKAGES),
        "files": [f.name for f in files],
        **_manual_chunks(files),
    }
    # Written before the (long) embedding ingest, which updates it when it ends.
    MANUALS_RESULTS.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(f"parsed: {result['pages']} pages, {result['parsed_chunks']} chunks")
    home = REPO / "bench" / ".cache" / "pdf-home"
    staged = Path(tempfile.mkdtemp(prefix="rp-bench-manuals-"))
    ingested = [f for f in files if not ingest_only or f.name in ingest_only]
    result["ingested_files"] = [f.name for f in ingested]
    for file in ingested:
        (staged / file.name).symlink_to(file)
    ids = [str(r["chunk_id"]) for r in result["sample"]]  # type: ignore[attr-defined]
    run = _ingest_fresh([staged], home, resolve_embedder("local"), ids)
    summary = run["summary"]
    result.update(
        {
            "documents": summary.documents,  # type: ignore[attr-defined]
            "chunks": summary.chunks,  # type: ignore[attr-defined]
            "chunks_with_pages": run["chunks_with_pages"],
            "failed": summary.failed,  # type: ignore[attr-defined]
            "failures": summary.failures,  # type: ignore[attr-defined]
            "warnings": summary.warnings,  # type: ignore[attr-defined]
            "seconds": summary.seconds,  # type: ignore[attr-defined]
            "embed_seconds": summary.embed_seconds,  # type: ignore[attr-defined]
            "docs_per_second": summary.documents / summary.seconds,  # type: ignore[attr-defined]
            "chunks_per_second": summary.chunks / summary.seconds,  # type: ignore[attr-defined]
            "ingested_pages": _pages(ingested),
            "pages_per_second": _pages(ingested) / summary.seconds,  # type: ignore[attr-defined]
            "sample_found_in_database": run["found"],
        }
    )
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--formats", action="store_true", help="ingest speed per format (issue 16)"
    )
    parser.add_argument(
        "--pdf-manuals",
        action="store_true",
        help="ingest the octave-doc/gnuplot-doc PDF manuals and draw 20 chunks",
    )
    parser.add_argument(
        "--ingest-only",
        nargs="*",
        default=None,
        help="with --pdf-manuals: embed and store only these manual files (names); "
        "all of them are still parsed, chunked and sampled",
    )
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
    if args.formats or args.pdf_manuals:
        target = FORMATS_RESULTS if args.formats else MANUALS_RESULTS
        result = run_formats() if args.formats else run_pdf_manuals(args.ingest_only)
        target.write_text(json.dumps(result, indent=2, default=str) + "\n")
        print(f"wrote {target}")
        from report import write_benchmarks_md

        write_benchmarks_md()
        return 0
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
