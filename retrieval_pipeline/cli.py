"""``retrieval-pipeline`` command line: ingest, query, and the embedded database.

User mistakes print one clear line on stderr and exit non-zero; only bugs keep a
traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from retrieval_pipeline.cli_eval import add_eval_parser, cmd_eval
from retrieval_pipeline.errors import DatabaseUnavailableError, RetrievalPipelineError
from retrieval_pipeline.graph.context import DEFAULT_LIMIT
from retrieval_pipeline.settings import database_url, redact_url, replica_urls
from retrieval_pipeline.tools.deadline import calls_in_flight

EXIT_USAGE = 2
EXIT_DATABASE = 3


def _csv(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def _principals_option(
    if_omitted: str,
) -> Callable[[str], list[str]]:
    """``--principals`` as a list; a value naming no principal is a usage error."""

    def principals(value: str) -> list[str]:
        names = _csv(value)
        if not names:
            # The usual cause is an unset shell variable: at ingest it would make
            # documents public, in a query it would hide that only public ones match.
            raise argparse.ArgumentTypeError(
                f"{value!r} names no principal; omit --principals {if_omitted}"
            )
        parts = value.split(",")
        empty = [n for n, part in enumerate(parts, start=1) if not part.strip()]
        if empty:
            # As in front matter (`principals: "hr,"`): an empty entry is a mistake
            # (`hr,$GROUP` with the variable unset), not a list of one.
            raise argparse.ArgumentTypeError(
                f"{value!r} has an empty entry (entry {empty[0]}); pass "
                f"--principals {','.join(names)!r} if that is meant"
            )
        return names

    return principals


def _tenant(value: str) -> str:
    """``--tenant`` as given; a blank or padded name is a usage error, not a tenant."""
    if not value.strip():
        raise argparse.ArgumentTypeError(
            f"{value!r} names no tenant; omit --tenant for no tenant"
        )
    if value != value.strip():
        raise argparse.ArgumentTypeError(
            f"{value!r} has leading or trailing whitespace; pass "
            f"--tenant {value.strip()!r}"
        )
    return value


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
        if_omitted = "for public documents"
    else:
        principals_help = (
            f"comma-separated ACL principals the {verb} (omit for public documents "
            "only; an empty value is an error)"
        )
        tenant_help = "tenant scope (default: none)"
        if_omitted = "to search public documents only"
    parser.add_argument(
        "--principals",
        type=_principals_option(if_omitted),
        default=[],
        help=principals_help,
    )
    parser.add_argument("--tenant", type=_tenant, default=None, help=tenant_help)


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

    add_eval_parser(sub)

    delete = sub.add_parser("delete", help="delete documents by their source id")
    delete.add_argument("doc_ids", nargs="+")
    delete.add_argument(
        "--tenant", type=_tenant, default=None, help="tenant of the documents"
    )

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


def _print_json(value: Any) -> None:
    json.dump(value, sys.stdout, indent=2, ensure_ascii=False, default=str)
    sys.stdout.write("\n")


def _not_in_summary(record: logging.LogRecord) -> bool:
    return not getattr(record, "in_summary", False)


@contextlib.contextmanager
def _summary_only(logger_name: str) -> Iterator[None]:
    """Mute the job's log lines for files that the ingest summary prints itself.

    The job logs each failed or warned file for library callers; the CLI prints the
    summary's ``failed:`` / ``warning:`` line instead, so each is said once.
    """
    job_logger = logging.getLogger(logger_name)
    job_logger.addFilter(_not_in_summary)
    try:
        yield
    finally:
        job_logger.removeFilter(_not_in_summary)


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
    with _summary_only(Ingestor.__module__), open_store() as store:
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
            print(f"  failed: {_shown(path)}: {_shown(reason)}", file=sys.stderr)
        for path, reason in summary.warnings:
            print(f"  warning: {_shown(path)}: {_shown(reason)}", file=sys.stderr)
        _print_not_ingested(summary.not_ingested)
    # Any failed file fails the command (the others are ingested): a script or CI
    # job must see it.
    return 1 if summary.failed else 0


_CONTROLS = {
    c: f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"
    for c in (
        *range(0x00, 0x20),
        *range(0x7F, 0xA0),  # DEL and the C1 controls (CSI, OSC)
        0x061C,
        0x200E,
        0x200F,
        *range(0x202A, 0x202F),  # bidi embeddings and overrides
        *range(0x2066, 0x206A),  # bidi isolates
    )
}


def _shown(text: object) -> str:
    """Text from documents and file names, safe on a terminal.

    Control characters and bidi overrides are shown escaped (ESC as the four
    characters backslash, x, 1, b): a hostile page could otherwise recolour or
    hide text, or move the cursor to rewrite its own provenance line. ``--json``
    stays exact.
    """
    return str(text).translate(_CONTROLS)


def _print_not_ingested(left_out: list[tuple[str, str]], examples: int = 3) -> None:
    """Files a directory walk left out, by reason, a few paths each (all in --json)."""
    by_reason: dict[str, list[str]] = {}
    for path, reason in left_out:
        by_reason.setdefault(reason, []).append(path)
    for reason, paths in sorted(by_reason.items()):
        shown = ", ".join(_shown(p) for p in paths[:examples])
        more = f" and {len(paths) - examples} more" if len(paths) > examples else ""
        print(
            f"  not ingested ({len(paths)}): {reason}: {shown}{more}", file=sys.stderr
        )


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
            f"{rank}. [{score:.4f}] {_shown(chunk['document_id'])} :: "
            f"{_shown(heading)}  ({ranks}){tag}"
        )
        from retrieval_pipeline.tools.store.records import page_label

        pages = page_label(chunk.get("page_start"), chunk.get("page_end"))
        where = f"{chunk['source_uri']} {pages}" if pages else chunk["source_uri"]
        print(f"   {_shown(where)}  chars {chunk['char_start']}-{chunk['char_end']}")
        snippet = _shown(" ".join(chunk["text"].split()))
        print(f"   {snippet[:240]}{'...' if len(snippet) > 240 else ''}")
    debug = output["retrieval_debug"]
    print(
        f"-- {debug.get('path')}: pool {debug.get('candidate_pool')}, graph added "
        f"{debug.get('graph_added')}, reranker {debug.get('reranker_kind')}, "
        f"{debug.get('assembled_tokens')} tokens ({debug.get('token_method')})"
    )
    return 0


def _cmd_delete(args: argparse.Namespace) -> int:
    from retrieval_pipeline.tools.store import open_store
    from retrieval_pipeline.tools.store.records import document_key

    missing = []
    with open_store() as store:
        for doc_id in args.doc_ids:
            if store.delete_document(document_key(args.tenant or "", doc_id)):
                print(f"deleted: {_shown(doc_id)}")
            else:
                missing.append(doc_id)
    where = f"tenant {args.tenant!r}" if args.tenant else "no tenant"
    for doc_id in missing:
        print(
            f"not found: {doc_id} (no document with this id in {where}; check the "
            "id and --tenant)",
            file=sys.stderr,
        )
    # A script must see that an id it meant to delete was not there.
    return 1 if missing else 0


def _mib(size: int) -> str:
    return f"{size / 2**20:.1f} MiB"


def _print_servers(primary_url: str) -> None:
    """One line per server: label, redacted URL, role, up or down, replication lag."""
    from retrieval_pipeline.tools.store.replicas import server_states

    for server in server_states(primary_url, replica_urls()):
        lag = ""
        if server.lag_s is not None:
            lag = f", lag {server.lag_s:.3f} s"
        if server.lag_bytes is not None:
            lag += f" / {server.lag_bytes} bytes"
        state = "up" if server.up else f"DOWN ({server.detail})"
        print(f"{server.label}: {server.url} [{server.role}] {state}{lag}")


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
                _print_servers(url)
                with open_store() as store:
                    counts = store.counts()
                print(f"external PostgreSQL {redact_url(url)}: {counts}")
            else:
                status = server.status()
                state = f"running (pid {status.pid})" if status.running else "stopped"
                print(f"embedded PostgreSQL {state}; data: {status.pgdata}")
                if status.running and replica_urls():
                    _print_servers(server.start())
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
        "eval": cmd_eval,
        "delete": _cmd_delete,
        "db": _cmd_db,
        "serve": _cmd_serve,
    }
    try:
        code = handlers[args.command](args)
        if args.command in ("query", "eval") and calls_in_flight():
            # A hung provider call was abandoned at its deadline and the answer is
            # out: exit now instead of joining its thread until its client times out.
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        return code
    except DatabaseUnavailableError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_DATABASE
    except RetrievalPipelineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly, as Unix tools do. Point
        # stdout at /dev/null so the interpreter's final flush does not fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 141  # 128 + SIGPIPE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
