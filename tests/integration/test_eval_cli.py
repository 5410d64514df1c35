from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import write_jsonl

from retrieval_pipeline.cli import main
from retrieval_pipeline.tools.store import Store


@pytest.fixture()
def tiny_beir(tmp_path: Path) -> Path:
    root = tmp_path / "tiny"
    (root / "qrels").mkdir(parents=True)
    write_jsonl(
        root / "corpus.jsonl",
        [
            {
                "_id": "d1",
                "title": "Kafka",
                "text": "Consumer lag grows when consumers stall.",
            },
            {
                "_id": "d2",
                "title": "Ledger",
                "text": "Double postings are reversed, never deleted.",
            },
            {
                "_id": "d3",
                "title": "Gateway",
                "text": "ERR_CONN_RESET means the pool is exhausted.",
            },
            {"_id": "d4", "title": "Cheese", "text": "Mice eat cheese in the garden."},
        ],
    )
    write_jsonl(
        root / "queries.jsonl",
        [
            {
                "_id": "q1",
                "text": "why does consumer lag grow",
                "metadata": {"answers": ["x"]},
            },
            {"_id": "q2", "text": "ERR_CONN_RESET"},
            {"_id": "q3", "text": "how are duplicate ledger postings fixed"},
            {"_id": "q4", "text": "unjudged query"},
        ],
    )
    (root / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td3\t2\nq3\td2\t1\n"
    )
    (tmp_path / "slice.txt").write_text("# exact identifiers\nq2\n")
    return root


class TestEvalCommand:
    def test_eval_prints_a_table_writes_json_and_a_trec_run(
        self,
        store: Store,
        tiny_beir: Path,
        tmp_path: Path,
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        out, run = tmp_path / "r.json", tmp_path / "run.trec"
        argv = [
            "eval",
            "--dataset",
            str(tiny_beir),
            "--out",
            str(out),
            "--run-out",
            str(run),
            "--slice",
            f"identifiers={tmp_path / 'slice.txt'}",
        ]
        assert main(argv) == 0
        printed = capsys.readouterr().out
        assert "tiny: 3 queries" in printed and "hybrid" in printed
        assert "slice identifiers: 1 queries" in printed
        report = json.loads(out.read_text())
        assert set(report["configs"]) == {"lexical", "dense", "hybrid"}
        hybrid = report["configs"]["hybrid"]
        assert hybrid["summary"]["ndcg@10"]["mean"] == pytest.approx(1.0)
        assert set(hybrid["per_query"]["ndcg@10"]) == {"q1", "q2", "q3"}
        assert report["comparisons"]["ndcg@10"]["hybrid"]["queries"] == 3
        lines = run.read_text().splitlines()
        qid, q0, doc, rank, score, tag = lines[0].split()
        assert q0 == "Q0" and rank == "1" and doc in {"d1", "d2", "d3", "d4"}
        assert {line.split()[5] for line in lines} == {"lexical", "dense", "hybrid"}

    def test_a_second_run_reuses_the_ingested_corpus(
        self,
        store: Store,
        tiny_beir: Path,
        tmp_path: Path,
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        argv = ["eval", "--dataset", str(tiny_beir), "--out", str(tmp_path / "r.json")]
        assert main(argv) == 0
        capsys.readouterr()
        assert main(argv) == 0
        assert "0 documents indexed, 4 unchanged" in capsys.readouterr().err

    def test_unknown_config_is_a_clear_error(
        self, store: Store, tiny_beir: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        assert main(["eval", "--dataset", str(tiny_beir), "--config", "magic"]) == 2
        assert (
            "valid: lexical, dense, hybrid, hybrid-rrf, pipeline"
            in capsys.readouterr().err
        )

    def test_the_pipeline_output_itself_is_evaluated(
        self,
        store: Store,
        tiny_beir: Path,
        tmp_path: Path,
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        out = tmp_path / "r.json"
        argv = [
            "eval",
            "--dataset",
            str(tiny_beir),
            "--config",
            "hybrid",
            "--config",
            "pipeline",
            "--out",
            str(out),
        ]
        assert main(argv) == 0
        report = json.loads(out.read_text())
        assert list(report["configs"]) == ["hybrid", "pipeline"]
        assert report["configs"]["pipeline"]["summary"]["ndcg@10"][
            "mean"
        ] == pytest.approx(1.0)
        assert "pipeline" in report["comparisons"]["ndcg@10"]
