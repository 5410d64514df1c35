"""report.html and report.md read top-down: title, summary, then one section per set.

Rendered from the JSON form alone (no database, no evaluation run), as a committed
report.json would be.
"""

import re
from pathlib import Path
from typing import Any

from retrieval_pipeline.eval.report import write_outputs

META = {"date": "2026-12-01", "reranker": "none available", "judge": "none available"}


def _ci(mean: float) -> dict[str, float]:
    return {"mean": mean, "low": mean - 0.05, "high": mean + 0.05, "level": 0.95}


def _report(name: str, base: float, steps: list[str]) -> dict[str, Any]:
    entries: list[dict[str, Any]] = []
    for i, step in enumerate(steps):
        entry: dict[str, Any] = {
            "name": step,
            "summary": {"ndcg@10": _ci(base + i / 100), "recall@20": _ci(0.8)},
        }
        if i:
            entry["vs_previous"] = {"delta": 0.01, "p_value": 0.2}
        entries.append(entry)
    entries[-1]["stage_ms_p50"] = {"hybrid_retrieve": 12.0, "assemble_context": 3.0}
    entries[-1]["latency_ms_p50"] = 16.0
    return {
        "dataset": name,
        "queries": 40,
        "title_entities": False,
        "steps": entries,
        "slices": {
            "multi_passage": {
                "how": "two or more relevant documents",
                "queries": 9,
                "final": _ci(0.6),
                "hybrid": _ci(0.55),
                "final_vs_hybrid": {"delta": 0.05, "p_value": 0.03},
            },
            "near_duplicate_pressure": {"how": "dropped near-duplicates", "queries": 0},
        },
        "failures": {
            "queries_complete": 30,
            "queries_with_missing": 10,
            "missing_by_cause": {"absent": 2, "ranked_low": 5, "omitted": 3},
            "examples": {"absent": ["q1"], "ranked_low": [], "omitted": ["q7"]},
        },
        "assembly": {
            "budget_tokens": 6000,
            "tokens_used_share": _ci(0.7),
            "duplicate_share_of_pool": _ci(0.1),
            "duplicate_share_in_context": _ci(0.1),
            "distinct_documents_top10": _ci(8.0),
            "first_relevant_position_median": 1.0,
        },
        "negatives": {
            "queries": 10,
            "how": "borrowed questions",
            "empty_result_rate": 0.0,
            "false_positive_rate": 1.0,
            "note": "no abstention threshold",
        },
        "permission": {
            "queries": 6,
            "how": "half withheld",
            "withheld_documents_returned": 0,
            "recall_of_visible_evidence": None,
        },
    }


def _render(tmp_path: Path) -> tuple[str, str]:
    reports = [
        _report("alpha", 0.5, ["lexical", "dense", "hybrid"]),
        _report("beta", 0.3, ["lexical", "dense", "hybrid", "+rerank"]),
    ]
    paths = write_outputs(reports, META, tmp_path)
    return paths["html"].read_text(), paths["md"].read_text()


def test_html_opens_with_the_title_then_the_summary_then_one_section_per_set(
    tmp_path: Path,
) -> None:
    page, _ = _render(tmp_path)
    body = page[page.index("<body>") :]
    order = [
        body.index("<h1>Retrieval evaluation report</h1>"),
        body.index("<h2>Summary: nDCG@10 per step</h2>"),
        body.index('<h2 id="alpha">'),
        body.index('<h2 id="beta">'),
    ]
    assert order == sorted(order)
    assert body.index("<img") > order[2]  # no figure before the first data set


def test_summary_has_one_row_per_set_and_a_column_per_step(tmp_path: Path) -> None:
    page, md = _render(tmp_path)
    summary = page[page.index("Summary: nDCG@10") : page.index('<h2 id="alpha">')]
    header = re.findall(r"<th>(.*?)</th>", summary)
    assert header == ["data set", "queries", "lexical", "dense", "hybrid", "+rerank"]
    rows = re.findall(r"<tr><td>(.*?)</td>", summary)
    assert rows == ["alpha", "beta"]
    assert "0.500 [0.450, 0.550]" in summary
    assert "| alpha | 40 | 0.500 [0.450, 0.550] |" in md
    assert "| – |" in md  # alpha has no +rerank step


def test_each_set_carries_its_own_figures_beside_its_tables(tmp_path: Path) -> None:
    page, _ = _render(tmp_path)
    alpha = page[page.index('<h2 id="alpha">') : page.index('<h2 id="beta">')]
    captions = re.findall(r"<figcaption>(.*?)</figcaption>", alpha)
    assert captions == [
        "alpha: ladder",
        "alpha: slices",
        "alpha: failures",
        "alpha: latency",
    ]
    ladder_panel = alpha[alpha.index('<div class="panel">') :]
    ladder_panel = ladder_panel[: ladder_panel.index("</figure>")]
    assert "<th>nDCG@10</th>" in ladder_panel and "alpha: ladder" in ladder_panel
    assert "<style>" in page and "border-collapse" in page
