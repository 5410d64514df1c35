"""``retrieval-pipeline`` command line: ingest, query, and the embedded database.

User mistakes print one clear line on stderr and exit non-zero; only bugs keep a
traceback.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from retrieval_pipeline.errors import DatabaseUnavailableError, RetrievalPipelineError
from retrieval_pipeline.graph.context import DEFAULT_LIMIT
from retrieval_pipeline.settings import database_url, redact_url

if TYPE_CHECKING:  # the CLI imports the heavy modules lazily
    from retrieval_pipeline.ingest.job import IngestSummary

EXIT_USAGE = 2
EXIT_DATABASE = 3


def _csv(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def _acl_csv(value: str) -> list[str]:
    principals = _csv(value)
    if not principals:
        # An empty value (say, an unset shell variable) would make documents public.
        raise argparse.ArgumentTypeError(
            f"{value!r} names no principal; omit --principals for public documents"
        )
    return principals


def _add_access(
    parser: argparse.ArgumentParser, verb: str, *, grants: bool = False
) -> None:
    if grants:  # ingest: defaults for documents, and a tenant they cannot leave
        principals_help = (
            "comma-separated ACL principals for documents that name none "
            "(omit for public; an empty value is an error)"
        )
        tenant_help = (
            "tenant of the documents; one naming another tenant fails "
            "(default: each document's own, else none)"
        )
    else:
        principals_help = (
            f"comma-separated ACL principals the {verb} carry (none = public only)"
        )
        tenant_help = "tenant scope (default: none)"
    parser.add_argument(
        "--principals",
        type=_acl_csv if grants else _csv,
        default=[],
        help=principals_help,
    )
    parser.add_argument("--tenant", default=None, help=tenant_help)


def build_parser() -> argparse.ArgumentParser:
    """Build the argument parser (exposed for tests and docs)."""
    parser = argparse.ArgumentParser(
        prog="retrieval-pipeline",
        description="Hybrid PostgreSQL retrieval with provenance.",
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="log progress details"
    )
    sub = parser.add_subparsers(dest="command", required=True)

    ingest = sub.add_parser(
        "ingest", help="ingest markdown, text, HTML, PDF, DOCX or BEIR JSONL"
    )
    ingest.add_argument("paths", nargs="*", type=Path, help="files or directories")
    ingest.add_argument(
        "--from-langchain-postgres",
        metavar="DATABASE_URL",
        default=None,
        help="import a langchain-postgres PGVector collection (--collection) or "
        "PGVectorStore table (--table) from this database",
    )
    ingest.add_argument("--collection", default=None, help="PGVector collection name")
    ingest.add_argument("--table", default=None, help="PGVectorStore table name")
    ingest.add_argument(
        "--schema", default="public", help="schema of the PGVectorStore table"
    )
    ingest.add_argument(
        "--embedding-model",
        default=None,
        help="model that made the stored vectors (reused when it is ours)",
    )
    _add_access(ingest, "documents", grants=True)
    ingest.add_argument(
        "--title-entities",
        action="store_true",
        help="treat each document's title as an entity (wiki-style corpora)",
    )
    ingest.add_argument(
        "--prune",
        action="store_true",
        help="delete stored documents under the given directories that no longer exist",
    )
    ingest.add_argument(
        "--no-site-links",
        dest="site_links",
        action="store_false",
        help="do not turn links between the ingested pages (HTML <a href>, markdown "
        "links) into graph relations (on by default)",
    )
    ingest.add_argument(
        "--embeddings",
        default=None,
        help="embedder: local (default), "
        "openai[:model], voyage[:model], cohere[:model]",
    )
    ingest.add_argument("--json", action="store_true", help="print the summary as JSON")
    ingest.add_argument(
        "--no-progress", action="store_true", help="hide the progress bar"
    )

    query = sub.add_parser("query", help="retrieve ranked chunks for a question")
    query.add_argument("question")
    query.add_argument(
        "--limit", type=int, default=DEFAULT_LIMIT, help="chunks to return"
    )
    _add_access(query, "caller holds")
    query.add_argument(
        "--doc-id",
        action="append",
        dest="doc_ids",
        default=None,
        help="restrict to this document id (repeatable)",
    )
    query.add_argument(
        "--embeddings", default=None, help="embedder (must match the index)"
    )
    query.add_argument(
        "--no-understanding", action="store_true", help="skip query understanding"
    )
    query.add_argument("--no-graph", action="store_true", help="skip graph fusion")
    query.add_argument(
        "--reranker",
        default="auto",
        help="auto (default), voyage, cohere, onnx or none",
    )
    query.add_argument(
        "--json", action="store_true", help="print the machine-readable form"
    )
    query.add_argument(
        "--debug",
        action="store_true",
        help="include timings, raw channel scores and the index revision (they "
        "depend on documents the caller cannot see: for operators)",
    )

    evaluate = sub.add_parser(
        "eval",
        help="evaluate retrieval on a BEIR-format data set",
        description="run (default): evaluate configurations on one data set; "
        "report: the ablation ladder, slices, failure diagnosis and plots on one or "
        "more data sets (HTML + markdown); check: the regression gate against a "
        "committed baseline (exit 1 on a statistically significant drop)",
    )
    evaluate.add_argument(
        "action", nargs="?", choices=["run", "report", "check"], default="run"
    )
    evaluate.add_argument(
        "--dataset",
        type=Path,
        action="append",
        required=True,
        help="BEIR folder (repeatable for `report`)",
    )
    evaluate.add_argument(
        "--baseline",
        type=Path,
        default=None,
        help="`check`: baseline JSON (default eval/baselines/<dataset>.json)",
    )
    evaluate.add_argument(
        "--update-baseline",
        action="store_true",
        help="`check`: write the fresh run as the new baseline instead of comparing",
    )
    evaluate.add_argument(
        "--max-queries",
        type=int,
        default=None,
        help="evaluate only the first N judged queries (by id) of each data set",
    )
    evaluate.add_argument(
        "--config",
        action="append",
        dest="configs",
        default=None,
        help="configuration to run (repeatable; default: lexical, dense, hybrid); "
        "the first is the baseline of the paired tests",
    )
    evaluate.add_argument(
        "--split",
        default="test",
        help="dev (choose defaults), test (report them; default) or all; a set "
        "without dev or train judgements has a fixed dev third carved from its test "
        "file (eval/datasets.py)",
    )
    evaluate.add_argument(
        "--title-entities",
        action="append",
        default=[],
        metavar="NAME",
        help="ingest data set NAME (its folder name; 'all' for every one) with each "
        "document's title as its entity, the graph multi-hop sets need (repeatable; "
        "recorded in the report)",
    )
    evaluate.add_argument(
        "--slice",
        action="append",
        default=[],
        metavar="NAME=FILE",
        help="report a slice of query ids listed one per line in FILE",
    )
    evaluate.add_argument(
        "--out",
        type=Path,
        default=None,
        help="run: JSON results file; report: output folder (default eval-report)",
    )
    evaluate.add_argument("--run-out", type=Path, default=None, help="TREC run file")
    evaluate.add_argument("--embeddings", default=None, help="embedder (default local)")

    delete = sub.add_parser("delete", help="delete documents by their source id")
    delete.add_argument("doc_ids", nargs="+")
    delete.add_argument("--tenant", default=None)

    db = sub.add_parser("db", help="manage the embedded PostgreSQL server")
    db.add_argument(
        "action",
        choices=["start", "stop", "status", "reset", "maintain"],
        help="maintain: VACUUM (ANALYZE) after a large (re-)ingest, on the embedded "
        "server or DATABASE_URL",
    )
    db.add_argument(
        "--yes", action="store_true", help="confirm `reset` (deletes all data)"
    )
    db.add_argument(
        "--reindex",
        action="store_true",
        help="`maintain`: also rebuild the indexes online (REINDEX CONCURRENTLY), "
        "which shrinks them after a re-ingest",
    )

    serve = sub.add_parser(
        "serve", help="serve the pipeline over HTTP (LangServe; needs the serve extra)"
    )
    serve.add_argument("--host", default="127.0.0.1", help="bind address")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument(
        "--api-keys",
        default=None,
        help="JSON/YAML file mapping API keys to principals and tenant "
        "(required to bind beyond loopback)",
    )
    serve.add_argument(
        "--workers",
        type=int,
        default=1,
        help="worker processes (uvicorn) sharing the port and the database",
    )
    serve.add_argument(
        "--db-connections",
        type=int,
        default=None,
        help="database connections for all workers together (default 16, or "
        "RETRIEVAL_PIPELINE_DB_CONNECTIONS); each worker's pool is "
        "ceil(budget / workers), between 2 and 8",
    )
    return parser


def _cmd_serve(args: argparse.Namespace) -> int:
    try:
        from retrieval_pipeline.serve import serve
    except ImportError as exc:
        raise RetrievalPipelineError(
            f"serving needs the serve extra ({exc.name} is missing): "
            "pip install 'retrieval-pipeline[serve]'"
        ) from exc
    serve(
        args.host,
        args.port,
        api_keys_file=args.api_keys,
        workers=args.workers,
        db_connections=args.db_connections,
    )
    return 0


def _indexed_line(name: str, summary: IngestSummary) -> str:
    """One line on what an evaluation's ingest did (written, reused, unchanged)."""
    reused = (
        f" ({summary.embeddings_reused} stored vectors reused)"
        if summary.embeddings_reused
        else ""
    )
    return (
        f"{name}: {summary.documents} documents indexed{reused}, "
        f"{summary.skipped} unchanged (cached)"
    )


def _print_json(value: Any) -> None:
    json.dump(value, sys.stdout, indent=2, ensure_ascii=False, default=str)
    sys.stdout.write("\n")


def _cmd_ingest(args: argparse.Namespace) -> int:
    from retrieval_pipeline.ingest.job import Ingestor
    from retrieval_pipeline.tools.embeddings import resolve_embedder
    from retrieval_pipeline.tools.store import open_store

    if bool(args.paths) == bool(args.from_langchain_postgres):
        raise RetrievalPipelineError(
            "give files or directories to ingest, or --from-langchain-postgres URL "
            "with --collection NAME or --table NAME (not both)"
        )
    embedder = resolve_embedder(args.embeddings)
    with open_store() as store:
        ingestor = Ingestor(
            store, embedder, progress=not (args.no_progress or args.json)
        )
        if args.from_langchain_postgres:
            from retrieval_pipeline.ingest.langchain_postgres import (
                LangchainSource,
                import_langchain_postgres,
            )

            summary = import_langchain_postgres(
                ingestor,
                LangchainSource(
                    args.from_langchain_postgres,
                    collection=args.collection,
                    table=args.table,
                    schema=args.schema,
                ),
                tenant=args.tenant or "",
                principals=args.principals,
                embedding_model=args.embedding_model,
                prune=args.prune,
            )
        else:
            summary = ingestor.ingest_paths(
                args.paths,
                tenant=args.tenant or "",
                principals=args.principals,
                title_entities=args.title_entities,
                prune=args.prune,
                site_links=args.site_links,
            )
    if args.json:
        _print_json(summary.to_dict())
    else:
        print(
            f"ingested {summary.documents} documents ({summary.chunks} chunks), "
            f"skipped {summary.skipped} unchanged, removed {summary.removed}, "
            f"failed {summary.failed} in {summary.seconds:.1f}s "
            f"(embedding {summary.embed_seconds:.1f}s"
            + (
                f"; {summary.embeddings_reused} stored vectors reused)"
                if summary.embeddings_reused
                else ")"
            )
        )
        for path, reason in summary.failures:
            print(f"  failed: {path}: {reason}", file=sys.stderr)
        for path, reason in summary.warnings:
            print(f"  warning: {path}: {reason}", file=sys.stderr)
    return 1 if summary.failed and not summary.documents and not summary.skipped else 0


def _cmd_query(args: argparse.Namespace) -> int:
    from retrieval_pipeline.graph.builder import build_pipeline
    from retrieval_pipeline.graph.context import Context
    from retrieval_pipeline.graph.resources import PipelineResources
    from retrieval_pipeline.graph.state import to_json
    from retrieval_pipeline.tools.embeddings import resolve_embedder
    from retrieval_pipeline.tools.judge import resolve_judge
    from retrieval_pipeline.tools.retrieve import Retriever, check_limit, clean_query
    from retrieval_pipeline.tools.store import open_store

    question = clean_query(args.question)  # fail fast, before starting anything
    check_limit(args.limit)
    context = Context(
        understanding=not args.no_understanding,
        graph_fusion=not args.no_graph,
        reranker=args.reranker,
    )
    with open_store() as store:
        resources = PipelineResources(
            retriever=Retriever(store, resolve_embedder(args.embeddings)),
            judge=resolve_judge(),
        )
        state: dict[str, Any] = {
            "question": question,
            "limit": args.limit,
            "principals": args.principals,
            "tenant": args.tenant,
            "doc_ids": args.doc_ids,
            "debug": args.debug,
        }
        output = build_pipeline(resources).invoke(state, context=context)
    if args.json:
        _print_json(to_json(output))
        return 0
    chunks = output["chunks"]
    if not chunks:
        print("no matching chunks (check --principals/--tenant, or ingest documents)")
    for rank, chunk in enumerate(chunks, start=1):
        ranks = ", ".join(f"{c} #{r}" for c, r in chunk["ranks"].items())
        heading = " > ".join(chunk["heading_path"]) or chunk["title"]
        tag = "  [graph]" if chunk["graph_boosted"] else ""
        score = chunk.get("rerank_score", chunk["score"])
        print(
            f"{rank}. [{score:.4f}] {chunk['document_id']} :: {heading}  ({ranks}){tag}"
        )
        from retrieval_pipeline.tools.store.records import page_label

        pages = page_label(chunk.get("page_start"), chunk.get("page_end"))
        where = f"{chunk['source_uri']} {pages}" if pages else chunk["source_uri"]
        print(f"   {where}  chars {chunk['char_start']}-{chunk['char_end']}")
        snippet = " ".join(chunk["text"].split())
        print(f"   {snippet[:240]}{'...' if len(snippet) > 240 else ''}")
    debug = output["retrieval_debug"]
    print(
        f"-- {debug.get('path')}: pool {debug.get('candidate_pool')}, graph added "
        f"{debug.get('graph_added')}, reranker {debug.get('reranker_kind')}, "
        f"{debug.get('assembled_tokens')} tokens ({debug.get('token_method')})"
    )
    return 0


def _cmd_eval(args: argparse.Namespace) -> int:
    from retrieval_pipeline.eval.datasets import load_query_ids
    from retrieval_pipeline.eval.runner import (
        ensure_ingested,
        resolve_configs,
        run_configs,
        write_trec_run,
    )
    from retrieval_pipeline.ingest.job import Ingestor
    from retrieval_pipeline.tools.embeddings import resolve_embedder
    from retrieval_pipeline.tools.judge import resolve_judge
    from retrieval_pipeline.tools.retrieve import Retriever
    from retrieval_pipeline.tools.store import open_store

    if args.action != "run":
        return _cmd_eval_report(args)
    if len(args.dataset) != 1:
        raise RetrievalPipelineError(
            "`eval` takes one --dataset; `eval report` takes several"
        )
    try:
        configs = resolve_configs(args.configs)
    except ValueError as exc:
        raise RetrievalPipelineError(str(exc)) from None
    dataset = _limited(_load_dataset(args, args.dataset[0]), args.max_queries)
    _check_title_entities(args, [dataset])
    slices: dict[str, list[str]] = {}
    for spec in args.slice:
        name, sep, file = spec.partition("=")
        if not sep or not name or not Path(file).is_file():
            raise RetrievalPipelineError(f"--slice expects NAME=FILE, got {spec!r}")
        slices[name] = [q for q in load_query_ids(Path(file)) if q in dataset.queries]
    embedder = resolve_embedder(args.embeddings)
    with open_store() as store:
        summary = ensure_ingested(dataset, Ingestor(store, embedder, progress=True))
        print(_indexed_line(dataset.name, summary), file=sys.stderr)
        report = run_configs(
            dataset, Retriever(store, embedder), configs, judge=resolve_judge()
        )
    report.slices = slices
    print(report.table())
    for name, ids in slices.items():
        print(f"  slice {name}: {len(ids)} queries")
        for result in report.results:
            s = result.summary(ids)["ndcg@10"]
            interval = f"[{s['low']:.3f}, {s['high']:.3f}]"
            print(f"    {result.name}: ndcg@10 {s['mean']:.3f} {interval}")
    out = args.out or Path(f"eval-{dataset.name}.json")
    out.write_text(json.dumps(report.to_dict(), indent=1) + "\n", encoding="utf-8")
    print(f"wrote {out}", file=sys.stderr)
    if args.run_out is not None:
        write_trec_run(args.run_out, report.results)
        print(f"wrote {args.run_out}", file=sys.stderr)
    return 0


def _load_dataset(args: argparse.Namespace, path: Path) -> Any:
    """One --dataset with the run's split and its --title-entities option."""
    from retrieval_pipeline.eval.datasets import load_beir

    named = set(args.title_entities)
    return load_beir(
        path,
        split=args.split,
        title_entities="all" in named or Path(path).name in named,
    )


def _check_title_entities(args: argparse.Namespace, datasets: list[Any]) -> None:
    unknown = set(args.title_entities) - {d.name for d in datasets} - {"all"}
    if unknown:
        raise RetrievalPipelineError(
            f"--title-entities names no --dataset: {sorted(unknown)}; use a data "
            "set's folder name or 'all'"
        )


def _limited(dataset: Any, max_queries: int | None) -> Any:
    """The data set restricted to its first ``max_queries`` judged queries."""
    if max_queries is None:
        return dataset
    if max_queries < 1:
        raise RetrievalPipelineError("--max-queries must be at least 1")
    from dataclasses import replace

    keep = sorted(dataset.queries)[:max_queries]
    return replace(
        dataset,
        queries={q: dataset.queries[q] for q in keep},
        qrels={q: dataset.qrels[q] for q in keep},
    )


def _cmd_eval_report(args: argparse.Namespace) -> int:
    from datetime import date

    from retrieval_pipeline.eval import report as rep
    from retrieval_pipeline.eval.runner import ensure_ingested
    from retrieval_pipeline.ingest.job import Ingestor
    from retrieval_pipeline.tools.embeddings import resolve_embedder
    from retrieval_pipeline.tools.judge import resolve_judge
    from retrieval_pipeline.tools.rerankers import resolve_reranker
    from retrieval_pipeline.tools.retrieve import Retriever
    from retrieval_pipeline.tools.store import open_store

    datasets = [
        _limited(_load_dataset(args, path), args.max_queries) for path in args.dataset
    ]
    _check_title_entities(args, datasets)
    names = [d.name for d in datasets]
    if len(set(names)) != len(names):
        raise RetrievalPipelineError(f"data set names repeat: {names}")
    judge = resolve_judge()
    reranker = resolve_reranker("auto")
    embedder = resolve_embedder(args.embeddings)
    reports = []
    with open_store() as store:
        retriever = Retriever(store, embedder)
        for i, dataset in enumerate(datasets):
            summary = ensure_ingested(dataset, Ingestor(store, embedder, progress=True))
            print(_indexed_line(dataset.name, summary), file=sys.stderr)
            others = [d for d in datasets if d is not dataset]
            borrowed = (
                sorted(others[i % len(others)].queries.values())[: rep.NEGATIVES]
                if others
                else list(rep.OFF_TOPIC)
            )
            report = rep.run_dataset(
                dataset,
                retriever,
                judge=judge,
                reranker_available=reranker.active,
                borrowed=borrowed,
            )
            reports.append(report)
            final = report.steps[-1].result.summary()["ndcg@10"]
            print(
                f"{dataset.name}: final step {report.steps[-1].step.name} nDCG@10 "
                f"{final['mean']:.3f} ({report.seconds:.0f} s)",
                file=sys.stderr,
            )
    if args.action == "check":
        return _eval_check(args, reports)
    meta = {
        "date": date.today().isoformat(),
        "reranker": reranker.kind if reranker.active else "none available",
        "judge": type(judge).__name__ if judge is not None else "none available",
        "embedder": embedder.model,
    }
    out = args.out or Path("eval-report")
    paths = rep.write_report(reports, out, meta)
    for path in paths.values():
        print(f"wrote {path}", file=sys.stderr)
    return 0


def _eval_check(args: argparse.Namespace, reports: list[Any]) -> int:
    from retrieval_pipeline.eval.report import check_against_baseline

    problems = []
    for report in reports:
        current = report.to_dict()
        baseline_path = args.baseline or Path(
            "eval", "baselines", f"{report.dataset.name}.json"
        )
        if args.update_baseline:
            baseline_path.parent.mkdir(parents=True, exist_ok=True)
            slim = {
                "dataset": current["dataset"],
                "split": current.get("split"),
                "title_entities": current.get("title_entities"),
                "queries": current["queries"],
                "steps": [
                    {k: s[k] for k in ("name", "summary", "per_query")}
                    for s in current["steps"]
                ],
            }
            baseline_path.write_text(json.dumps(slim, indent=1) + "\n")
            print(f"wrote baseline {baseline_path}", file=sys.stderr)
            continue
        if not baseline_path.is_file():
            raise RetrievalPipelineError(
                f"no baseline at {baseline_path}; create one with "
                "`retrieval-pipeline eval check --update-baseline`"
            )
        baseline = json.loads(baseline_path.read_text())
        for step in current["steps"]:
            old = next(
                (b for b in baseline["steps"] if b["name"] == step["name"]), None
            )
            now = step["summary"]["ndcg@10"]["mean"]
            was = old["summary"]["ndcg@10"]["mean"] if old else float("nan")
            print(
                f"{report.dataset.name} {step['name']}: nDCG@10 {now:.4f} "
                f"(baseline {was:.4f})"
            )
        problems += check_against_baseline(current, baseline)
    for problem in problems:
        print(f"REGRESSION: {problem}", file=sys.stderr)
    if problems:
        return 1
    print("eval check: no statistically significant drop", file=sys.stderr)
    return 0


def _cmd_delete(args: argparse.Namespace) -> int:
    from retrieval_pipeline.tools.store import open_store
    from retrieval_pipeline.tools.store.records import document_key

    with open_store() as store:
        for doc_id in args.doc_ids:
            deleted = store.delete_document(document_key(args.tenant or "", doc_id))
            print(f"{'deleted' if deleted else 'not found'}: {doc_id}")
    return 0


def _mib(size: int) -> str:
    return f"{size / 2**20:.1f} MiB"


def _cmd_db(args: argparse.Namespace) -> int:
    from retrieval_pipeline.tools.store import EmbeddedPostgres, open_store

    url = database_url()
    if args.action == "maintain":
        with open_store() as store:
            sizes = store.maintain(reindex=args.reindex)
        for table, (before, after) in sizes.items():
            print(f"{table}: {_mib(before)} -> {_mib(after)}")
        return 0
    if url is not None and args.action != "status":
        raise RetrievalPipelineError(
            f"DATABASE_URL is set ({redact_url(url)}); `db {args.action}` manages "
            "only the "
            "embedded server. Unset DATABASE_URL to use it."
        )
    server = EmbeddedPostgres()
    match args.action:
        case "start":
            with open_store() as store:  # starts the server and applies migrations
                counts = store.counts()
            print(
                f"embedded PostgreSQL running (data: {server.pgdata}); "
                f"{counts['documents']} "
                "documents"
            )
        case "stop":
            print("stopped" if server.stop() else "not running")
        case "status":
            if url is not None:
                with open_store() as store:
                    counts = store.counts()
                print(f"external PostgreSQL {redact_url(url)}: {counts}")
            else:
                status = server.status()
                state = f"running (pid {status.pid})" if status.running else "stopped"
                print(f"embedded PostgreSQL {state}; data: {status.pgdata}")
        case "reset":
            if not args.yes:
                raise RetrievalPipelineError(
                    f"`db reset` deletes every document in {server.pgdata}; "
                    "run again with --yes to confirm"
                )
            server.reset()
            print(f"deleted {server.pgdata}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``retrieval-pipeline`` command."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    handlers = {
        "ingest": _cmd_ingest,
        "query": _cmd_query,
        "eval": _cmd_eval,
        "delete": _cmd_delete,
        "db": _cmd_db,
        "serve": _cmd_serve,
    }
    try:
        return handlers[args.command](args)
    except DatabaseUnavailableError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_DATABASE
    except RetrievalPipelineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
