"""`retrieval-pipeline eval report` and `eval check` on a small synthetic BEIR set.

The report is rendered for real (matplotlib, Agg) and read back: every ladder step,
slice, failure category and figure is present, the failure categories add up to the
queries, and the permission slice returns nothing withheld. The gate passes against
its own baseline and fails, with the step named, against a better one.
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import pytest
from helpers import write_jsonl

from retrieval_pipeline.cli import main

TOPICS = [
    ("kafka", "consumer lag grows when partitions stall and offsets fall behind"),
    ("ledger", "double postings are reversed with a compensating journal entry"),
    ("gateway", "ERR_CONN_RESET means the upstream pool was exhausted"),
    ("cheese", "aged cheddar develops crystals of tyrosine over months"),
    ("glacier", "glaciers carve u shaped valleys and leave moraines behind"),
    ("violin", "a violin bow is strung with horsehair rubbed in rosin"),
    ("orchard", "apple orchards need cross pollination from another cultivar"),
    ("comet", "a comet tail points away from the sun because of solar wind"),
    ("bread", "sourdough rises from wild yeast and lactobacilli in the starter"),
    ("tide", "spring tides happen when sun and moon align at new moon"),
    ("volcano", "basalt lava flows are runny because of low silica content"),
    ("chess", "the sicilian defence answers e4 with the c5 pawn push"),
]


@pytest.fixture()
def small_beir(tmp_path: Path) -> Path:
    root = tmp_path / "small"
    (root / "qrels").mkdir(parents=True)
    corpus, queries, qrels = [], [], []
    for i, (topic, fact) in enumerate(TOPICS):
        corpus.append({"_id": f"{topic}-a", "title": topic.title(), "text": fact})
        corpus.append(
            {
                "_id": f"{topic}-b",
                "title": f"{topic.title()} notes",
                "text": f"More on {topic}: {fact.split()[-1]} and {topic} facts.",
            }
        )
        corpus.append(
            {
                "_id": f"{topic}-boiler",
                "title": "Footer",
                "text": "All rights reserved. Contact the editors for corrections. "
                f"Topic index {i}.",
            }
        )
        queries.append({"_id": f"q{i:02d}", "text": f"what about {topic}: {fact[:30]}"})
        qrels.append(f"q{i:02d}\t{topic}-a\t2")
        if i % 2 == 0:
            qrels.append(f"q{i:02d}\t{topic}-b\t1")
    write_jsonl(root / "corpus.jsonl", corpus)
    write_jsonl(root / "queries.jsonl", queries)
    (root / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "\n".join(qrels) + "\n"
    )
    return root


def test_report_renders_every_section_and_figure(
    small_beir: Path, tmp_path: Path, pg_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "report"
    assert (
        main(["eval", "report", "--dataset", str(small_beir), "--out", str(out)]) == 0
    )
    md = (out / "report.md").read_text()
    page = (out / "report.html").read_text()
    data = json.loads((out / "report.json").read_text())["datasets"][0]
    steps = [s["name"] for s in data["steps"]]
    assert steps[:5] == ["lexical", "dense", "hybrid", "+pool+assembler", "+graph"]
    for step in data["steps"][1:]:
        assert {"delta", "p_value", "ci"} <= set(step["vs_previous"])
    for name in steps:
        assert f"| {name} |" in md
    assert set(data["slices"]) >= {
        "identifiers_and_quotes",
        "low_overlap_paraphrase",
        "multi_passage",
        "near_duplicate_pressure",
    }
    assert data["slices"]["multi_passage"]["queries"] == 6
    failures = data["failures"]
    assert failures["queries_complete"] + failures["queries_with_missing"] == len(
        TOPICS
    )
    relevant = sum(1 + (i % 2 == 0) for i in range(len(TOPICS)))
    found = sum(len(causes) for causes in failures["per_query"].values())
    assert sum(failures["missing_by_cause"].values()) == found <= relevant
    assert data["permission"]["queries"] == 6
    assert data["permission"]["withheld_documents_returned"] == 0
    assert data["negatives"]["queries"] > 0  # off-topic questions for a single set
    assert 0 < data["assembly"]["tokens_used_share"]["mean"] <= 1
    assert 0 <= data["assembly"]["duplicate_share_in_context"]["mean"] <= 1
    assert "stage_ms_p50" in data["steps"][-1]
    images = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(images) == 4
    for image in images:
        assert base64.b64decode(image)[:8] == b"\x89PNG\r\n\x1a\n"
    for heading in ("Failure diagnosis", "Context assembly", "Negative queries"):
        assert heading in md


def test_the_gate_passes_on_its_baseline_and_fails_on_a_drop(
    small_beir: Path, tmp_path: Path, pg_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    baseline = tmp_path / "baseline.json"
    args = ["eval", "check", "--dataset", str(small_beir), "--baseline", str(baseline)]
    assert main(args) == 2  # a usage error: no baseline yet
    assert "no baseline" in capsys.readouterr().err
    assert main([*args, "--update-baseline"]) == 0
    assert main(args) == 0
    assert "no statistically significant drop" in capsys.readouterr().err
    # A baseline in which every query of the hybrid step was perfect: a real drop.
    data = json.loads(baseline.read_text())
    hybrid = next(s for s in data["steps"] if s["name"] == "hybrid")
    hybrid["per_query"]["ndcg@10"] = {q: 1.0 for q in hybrid["per_query"]["ndcg@10"]}
    lexical = next(s for s in data["steps"] if s["name"] == "lexical")
    lexical["per_query"]["ndcg@10"] = {
        q: v + 0.5 for q, v in lexical["per_query"]["ndcg@10"].items()
    }
    baseline.write_text(json.dumps(data))
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "REGRESSION" in err and "lexical" in err


def test_duplicate_share_counts_near_copies_of_earlier_chunks() -> None:
    from retrieval_pipeline.observability import duplicate_share

    footer = "All rights reserved. Contact the editors for corrections about this page."
    assert duplicate_share([]) == 0.0
    assert duplicate_share(["kafka lag grows", "ledger postings reverse"]) == 0
    assert duplicate_share([footer, footer, "something else entirely"]) == (1 / 3)
