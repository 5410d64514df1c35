"""report.md and report.html from the JSON form of the per-data-set reports.

Both read top-down: the title and how to read the numbers, a summary table (one row
per data set, each step's nDCG@10 with its CI), then one section per data set in
which each table sits beside the figure drawn from the same numbers. The page is
self-contained (figures inline as PNG), so it can be mailed or committed as is.
"""

from __future__ import annotations

import base64
import html
import io
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from retrieval_pipeline.eval.report.diagnosis import CAUSES
from retrieval_pipeline.eval.report.ladder import HEADLINE

if TYPE_CHECKING:
    from retrieval_pipeline.eval.report.dataset import DatasetReport

TITLE = "Retrieval evaluation report"


@dataclass(frozen=True)
class Table:
    """A table: a header row and rows of already formatted cells."""

    header: tuple[str, ...]
    rows: Sequence[tuple[str, ...]]


@dataclass(frozen=True)
class Panel:
    """Tables and paragraphs shown beside the figure drawn from the same numbers."""

    blocks: list[Table | str]
    figure: str | None = None  # key into the data set's figures


@dataclass(frozen=True)
class Section:
    """One data set: a heading, a line on its split, then its panels."""

    dataset: str
    title: str
    intro: list[str] = field(default_factory=list)
    panels: list[Panel] = field(default_factory=list)


def _fmt(s: Mapping[str, float]) -> str:
    return f"{s['mean']:.3f} [{s['low']:.3f}, {s['high']:.3f}]"


def _intro(meta: Mapping[str, Any]) -> str:
    return (
        f"Generated {meta['date']} by `retrieval-pipeline eval report`; "
        f"reranker: {meta['reranker']}; judge: {meta['judge']}. "
        "Means with 95 % bootstrap CIs; p from a paired randomization test of each "
        "step against the one before it. The pipeline steps return at most 20 "
        "chunks (the assembler's cap), which can hold fewer than 20 distinct "
        "documents, so their recall@20 can sit below the channel steps' (which rank "
        "100 chunks per channel)."
    )


def summary_table(reports: Sequence[Mapping[str, Any]]) -> Table:
    """One row per data set: each step's nDCG@10 with its CI."""
    names: list[str] = []
    for r in reports:
        names += [s["name"] for s in r["steps"] if s["name"] not in names]
    rows = []
    for r in reports:
        by_name = {s["name"]: s for s in r["steps"]}
        rows.append(
            (r["dataset"], str(r["queries"]))
            + tuple(
                _fmt(by_name[n]["summary"][HEADLINE]) if n in by_name else "–"
                for n in names
            )
        )
    return Table(("data set", "queries", *names), rows)


def _ladder_table(r: Mapping[str, Any]) -> Table:
    rows = []
    for s in r["steps"]:
        cmp = s.get("vs_previous")
        rows.append(
            (
                s["name"],
                _fmt(s["summary"][HEADLINE]),
                _fmt(s["summary"]["recall@20"]),
                f"{cmp['delta']:+.3f}" if cmp else "",
                f"{cmp['p_value']:.4f}" if cmp else "",
            )
        )
    return Table(("step", "nDCG@10", "recall@20", "Δ vs previous", "p"), rows)


def _slice_table(r: Mapping[str, Any]) -> Table:
    rows = []
    for name, spec in r["slices"].items():
        scored: tuple[str, ...] = ("", "", "", "")
        if "final_vs_hybrid" in spec:
            c = spec["final_vs_hybrid"]
            scored = (
                _fmt(spec["final"]),
                _fmt(spec["hybrid"]),
                f"{c['delta']:+.3f}",
                f"{c['p_value']:.4f}",
            )
        rows.append((name, str(spec["queries"]), spec["how"], *scored))
    return Table(("slice", "queries", "how", "final", "hybrid", "Δ", "p"), rows)


def _failure_text(f: Mapping[str, Any]) -> str:
    examples = "; ".join(f"{k}: {', '.join(v)}" for k, v in f["examples"].items() if v)
    return (
        f"Failure diagnosis (final step): {f['queries_complete']} queries have "
        f"every relevant document in the top 10, {f['queries_with_missing']} "
        "miss at least one. Missing relevant documents by cause: "
        + ", ".join(f"{k} {v}" for k, v in f["missing_by_cause"].items())
        + " (absent: in no candidate list; ranked_low: a candidate below the "
        "pool cut; omitted: in the pool, not in the top 10 of the context)"
        + (f"; example queries: {examples}" if examples else "")
        + "."
    )


def _probe_texts(r: Mapping[str, Any]) -> list[Table | str]:
    a, n, p = r["assembly"], r["negatives"], r["permission"]
    visible = p["recall_of_visible_evidence"]
    return [
        f"Context assembly: tokens used {_fmt(a['tokens_used_share'])} of "
        f"{a['budget_tokens']}; near-duplicates dropped per pool chunk "
        f"{_fmt(a['duplicate_share_of_pool'])}; near-duplicate share of the "
        f"assembled context {_fmt(a['duplicate_share_in_context'])}; distinct "
        "documents in the top 10 "
        f"{_fmt(a['distinct_documents_top10'])}; first relevant position (median) "
        f"{a['first_relevant_position_median']}.",
        f"Negative queries ({n['queries']}, {n['how']}): empty-result rate "
        f"{n['empty_result_rate']:.2f}, false-positive rate "
        f"{n['false_positive_rate']:.2f} ({n['note']}).",
        f"Permission boundary ({p['queries']} queries, {p['how']}): withheld "
        f"documents returned: {p['withheld_documents_returned']}"
        + (f"; recall of the visible evidence {_fmt(visible)}." if visible else "."),
    ]


def section(r: Mapping[str, Any]) -> Section:
    """One data set's section: ladder, slices, diagnosis, probes and latency."""
    # Every number below comes from this split (older reports: the test file).
    split = r.get("split", "test")
    source = r.get("split_source", "qrels/test.tsv")
    # Reports written before the flag was recorded say nothing either way.
    flag = r.get("title_entities")
    graph = "not recorded" if flag is None else ("on" if flag else "off")
    panels = [
        Panel([_ladder_table(r)], "ladder"),
        Panel([_slice_table(r)], "slices"),
        Panel([_failure_text(r["failures"])], "failures"),
        Panel(_probe_texts(r)),
    ]
    final = r["steps"][-1]
    if "stage_ms_p50" in final:
        latency = (
            "Latency per stage, final step (median ms): "
            + ", ".join(f"{k} {v}" for k, v in final["stage_ms_p50"].items())
            + f"; whole query {final['latency_ms_p50']:.1f} ms."
        )
        panels.append(Panel([latency], "latency"))
    return Section(
        r["dataset"],
        f"{r['dataset']} ({r['queries']} queries)",
        [f"Split: **{split}** ({source}); title entities: {graph}."],
        panels,
    )


# --- markdown ---------------------------------------------------------------------


def _md_table(table: Table) -> list[str]:
    return [
        "| " + " | ".join(table.header) + " |",
        "|" + "---|" * len(table.header),
        *("| " + " | ".join(row) + " |" for row in table.rows),
    ]


def markdown(reports: Sequence[Mapping[str, Any]], meta: Mapping[str, Any]) -> str:
    """The markdown report: title, summary table, one section per data set."""
    lines = [f"# {TITLE}", "", _intro(meta), "", "## Summary: nDCG@10 per step", ""]
    lines += [*_md_table(summary_table(reports)), ""]
    for s in map(section, reports):
        lines += [f"## {s.title}", ""]
        for text in s.intro:
            lines += [text, ""]
        for panel in s.panels:
            for block in panel.blocks:
                lines += [*(_md_table(block) if isinstance(block, Table) else [block])]
                lines.append("")
    return "\n".join(lines)


# --- HTML -------------------------------------------------------------------------

_CSS = """
body{font-family:system-ui,sans-serif;max-width:1400px;margin:2em auto;padding:0 1em;
 color:#222;line-height:1.45}
h1{margin-bottom:.2em}
h2{border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:2em}
table{border-collapse:collapse;font-size:13px;margin:.5em 0 1em;
 font-variant-numeric:tabular-nums}
th,td{border:1px solid #d0d0d0;padding:4px 8px;text-align:left;vertical-align:top;
 white-space:nowrap}
td.prose{white-space:normal;min-width:12em}
th{background:#f0f2f5}tbody tr:nth-child(even){background:#fafafa}
.panel{display:flex;flex-wrap:wrap;gap:1.5em;align-items:flex-start;margin:1em 0}
.panel .text{flex:1 1 600px}
.panel p{margin:.4em 0 .8em;font-size:14px}
figure{flex:0 1 400px;margin:0}img{max-width:100%}
figcaption{font-size:12px;color:#555;text-align:center}
code{background:#f3f3f3;padding:0 .2em}
"""
_BOLD = re.compile(r"\*\*(.+?)\*\*")
_CODE = re.compile(r"`(.+?)`")


def _inline(text: str) -> str:
    escaped = html.escape(text)
    return _CODE.sub(r"<code>\1</code>", _BOLD.sub(r"<strong>\1</strong>", escaped))


def _html_cell(text: str) -> str:
    # Numbers stay on one line; sentences (a slice's "how") wrap.
    prose = ' class="prose"' if len(text) > 40 and " " in text else ""
    return f"<td{prose}>{_inline(text)}</td>"


def _html_table(table: Table) -> str:
    head = "".join(f"<th>{_inline(c)}</th>" for c in table.header)
    body = "".join(
        "<tr>" + "".join(_html_cell(c) for c in row) + "</tr>" for row in table.rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _html_block(block: Table | str) -> str:
    if isinstance(block, Table):
        return _html_table(block)
    return f"<p>{_inline(block)}</p>"


def _html_panel(panel: Panel, dataset: str, figures: Mapping[str, str]) -> str:
    text = "".join(_html_block(b) for b in panel.blocks)
    image = figures.get(panel.figure) if panel.figure else None
    figure = (
        f'<figure><img alt="{html.escape(dataset)}: {panel.figure}" '
        f'src="data:image/png;base64,{image}"/>'
        f"<figcaption>{html.escape(dataset)}: {panel.figure}</figcaption></figure>"
        if image
        else ""
    )
    return f'<div class="panel"><div class="text">{text}</div>{figure}</div>'


def html_page(
    reports: Sequence[Mapping[str, Any]],
    meta: Mapping[str, Any],
    figures: Mapping[str, Mapping[str, str]],
) -> str:
    """A self-contained page; ``figures`` maps data set -> figure name -> PNG base64."""
    parts = [
        f"<h1>{TITLE}</h1>",
        f"<p>{_inline(_intro(meta))}</p>",
        "<h2>Summary: nDCG@10 per step</h2>",
        _html_table(summary_table(reports)),
    ]
    for s in map(section, reports):
        own = figures.get(s.dataset, {})
        anchor = html.escape(s.dataset)
        parts.append(f'<section><h2 id="{anchor}">{_inline(s.title)}</h2>')
        parts += [f"<p>{_inline(text)}</p>" for text in s.intro]
        parts += [_html_panel(p, s.dataset, own) for p in s.panels]
        parts.append("</section>")
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>{TITLE}</title><style>{_CSS}</style></head><body>\n"
        + "\n".join(parts)
        + "\n</body></html>\n"
    )


# --- figures ----------------------------------------------------------------------


def _png(fig: Any) -> str:
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _bars(
    labels: Sequence[str],
    values: Sequence[float],
    *,
    ylabel: str,
    title: str,
    yerr: Sequence[Sequence[float]] | None = None,
    signed: bool = False,
) -> str:
    """One bar chart as PNG (base64); ``signed`` colours gains green, losses red."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.6, 2.9))
    colors = ["tab:green" if v >= 0 else "tab:red" for v in values] if signed else None
    ax.bar(range(len(values)), values, yerr=yerr, capsize=3, color=colors)
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=20, ha="right", fontsize=8)
    if signed:
        ax.axhline(0, color="black", linewidth=0.8)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    return _png(fig)


def plots(report: Mapping[str, Any]) -> dict[str, str]:
    """One data set's figures as base64 PNG: ladder, slices, failures, latency."""
    import matplotlib

    matplotlib.use("Agg")
    steps = report["steps"]
    summaries = [s["summary"][HEADLINE] for s in steps]
    figures = {
        "ladder": _bars(
            [s["name"] for s in steps],
            [m["mean"] for m in summaries],
            yerr=[
                [m["mean"] - m["low"] for m in summaries],
                [m["high"] - m["mean"] for m in summaries],
            ],
            ylabel="nDCG@10 (95 % CI)",
            title="Ablation ladder",
        )
    }
    scored = {n: s for n, s in report["slices"].items() if "final_vs_hybrid" in s}
    if scored:
        figures["slices"] = _bars(
            list(scored),
            [s["final_vs_hybrid"]["delta"] for s in scored.values()],
            ylabel="Δ nDCG@10, final vs hybrid",
            title="Per-slice deltas",
            signed=True,
        )
    missing = report["failures"]["missing_by_cause"]
    figures["failures"] = _bars(
        list(CAUSES),
        [missing[c] / max(sum(missing.values()), 1) for c in CAUSES],
        ylabel="share of missing relevant documents",
        title="Why relevant documents miss the top 10 (final step)",
    )
    stages = steps[-1].get("stage_ms_p50")
    if stages:
        figures["latency"] = _bars(
            list(stages),
            list(stages.values()),
            ylabel="median ms",
            title="Latency per stage (final step)",
        )
    return figures


# --- files ------------------------------------------------------------------------


def write_report(
    reports: Sequence[DatasetReport], out: Path, meta: Mapping[str, Any]
) -> dict[str, Path]:
    """Write report.md, report.html and report.json under ``out``."""
    return write_outputs([r.to_dict() for r in reports], meta, out)


def write_outputs(
    data: Sequence[Mapping[str, Any]], meta: Mapping[str, Any], out: Path
) -> dict[str, Path]:
    """Render the JSON form of the per-data-set reports into the three files."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {
        "md": out / "report.md",
        "html": out / "report.html",
        "json": out / "report.json",
    }
    figures = {r["dataset"]: plots(r) for r in data}
    paths["md"].write_text(markdown(data, meta), encoding="utf-8")
    paths["html"].write_text(html_page(data, meta, figures), encoding="utf-8")
    paths["json"].write_text(
        json.dumps({"meta": dict(meta), "datasets": list(data)}, indent=1, default=str),
        encoding="utf-8",
    )
    return paths
