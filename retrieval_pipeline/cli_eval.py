"""``retrieval-pipeline eval``: run configurations, the full report, the gate.

`eval` (run) evaluates configurations on one BEIR data set; `eval report` runs the
ablation ladder with slices and diagnosis on several and writes report.{md,html,json};
`eval check` compares a fresh ladder with the committed baseline.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from retrieval_pipeline.errors import RetrievalPipelineError

if TYPE_CHECKING:  # the CLI imports the heavy modules lazily
    import argparse

    from retrieval_pipeline.ingest.job import IngestSummary


def add_eval_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
) -> None:
    """The `eval` subcommand's arguments (run, report, check)."""
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


def indexed_line(name: str, summary: IngestSummary) -> str:
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


def cmd_eval(args: argparse.Namespace) -> int:
    """`eval` (run): configurations on one data set; hands report/check on."""
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
        print(indexed_line(dataset.name, summary), file=sys.stderr)
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
            print(indexed_line(dataset.name, summary), file=sys.stderr)
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
