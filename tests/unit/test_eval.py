from __future__ import annotations

import random
from pathlib import Path

import pytest

from retrieval_pipeline.errors import RetrievalPipelineError
from retrieval_pipeline.eval.datasets import load_beir, load_qrels
from retrieval_pipeline.eval.metrics import chunks_to_documents, evaluate, ndcg_at_k
from retrieval_pipeline.eval.stats import bootstrap_ci, paired_test

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"


def _random_case(seed: int) -> tuple[dict[str, list[str]], dict[str, dict[str, int]]]:
    rng = random.Random(seed)
    docs = [f"d{i}" for i in range(60)]
    qrels: dict[str, dict[str, int]] = {}
    run: dict[str, list[str]] = {}
    for q in range(40):
        qid = f"q{q}"
        judged = rng.sample(docs, rng.randint(1, 8))
        qrels[qid] = {d: rng.choice([0, 1, 2]) for d in judged}
        if not any(qrels[qid].values()):
            qrels[qid][judged[0]] = 1
        run[qid] = rng.sample(docs, rng.randint(0, 30))
    return run, qrels


class TestMetricsAgainstRanx:
    """Our metrics equal ranx's (a reference implementation) on random graded runs."""

    @pytest.mark.parametrize("seed", [1, 2, 3])
    def test_ndcg_recall_precision_mrr_match_ranx(self, seed: int) -> None:
        ranx = pytest.importorskip("ranx")
        run, qrels = _random_case(seed)
        ours = evaluate(run, qrels, ks=(1, 5, 10, 20))
        ranx_run = ranx.Run(
            {
                q: {d: float(len(docs) - i) for i, d in enumerate(docs)}
                for q, docs in run.items()
            }
        )
        ranx_qrels = ranx.Qrels(qrels)
        names = [
            f"{m}@{k}"
            for m in ("ndcg", "recall", "precision", "mrr")
            for k in (1, 5, 10, 20)
        ]
        reference = ranx.evaluate(ranx_qrels, ranx_run, names, return_mean=False)
        for name in names:
            for i, qid in enumerate(sorted(qrels)):
                assert ours[name][qid] == pytest.approx(
                    float(reference[name][i]), abs=1e-9
                ), (
                    name,
                    qid,
                )


class TestMetrics:
    def test_perfect_ranking_has_ndcg_one(self) -> None:
        assert ndcg_at_k(["a", "b"], {"a": 2, "b": 1}, 10) == pytest.approx(1.0)

    def test_graded_relevance_rewards_the_higher_grade_first(self) -> None:
        judged = {"a": 2, "b": 1}
        assert ndcg_at_k(["a", "b"], judged, 2) > ndcg_at_k(["b", "a"], judged, 2)

    def test_missing_query_scores_zero(self) -> None:
        result = evaluate({}, {"q": {"a": 1}}, ks=(10,))
        assert all(values["q"] == 0.0 for values in result.values())

    def test_chunks_map_to_documents_by_first_occurrence(self) -> None:
        assert chunks_to_documents(["b", "a", "b", "c", "a"]) == ["b", "a", "c"]

    def test_unknown_metric_is_rejected(self) -> None:
        with pytest.raises(ValueError, match="unknown metrics"):
            evaluate({}, {}, metrics=["map"])


class TestStatistics:
    def test_bootstrap_interval_contains_the_mean(self) -> None:
        values = [0.1, 0.5, 0.9, 0.3, 0.7] * 10
        ci = bootstrap_ci(values)
        assert ci.low < ci.mean < ci.high
        assert ci.mean == pytest.approx(0.5)

    def test_bootstrap_is_reproducible(self) -> None:
        values = [random.Random(5).random() for _ in range(30)]
        assert bootstrap_ci(values) == bootstrap_ci(values)

    def test_paired_test_detects_a_consistent_improvement(self) -> None:
        a = [0.2 + 0.01 * i for i in range(50)]
        b = [x + 0.05 for x in a]
        result = paired_test(a, b)
        assert result.delta == pytest.approx(0.05)
        assert result.p_value < 0.001
        assert result.interval.low > 0

    def test_paired_test_finds_no_difference_in_noise(self) -> None:
        rng = random.Random(7)
        a = [rng.random() for _ in range(60)]
        b = [x + rng.choice([-0.01, 0.01]) for x in a]
        assert paired_test(a, b).p_value > 0.05

    def test_paired_samples_must_align(self) -> None:
        with pytest.raises(ValueError):
            paired_test([1.0], [1.0, 2.0])


class TestBeirLoading:
    def test_scifact_loads_with_only_judged_queries(self) -> None:
        if not (SHARED / "scifact").exists():
            pytest.skip("shared data not present")
        dataset = load_beir(SHARED / "scifact")
        assert dataset.name == "scifact" and len(dataset.queries) == 300
        assert set(dataset.queries) == set(dataset.qrels)

    def test_multihop_queries_never_expose_answers(self) -> None:
        if not (SHARED / "multihop" / "hotpotqa").exists():
            pytest.skip("shared data not present")
        dataset = load_beir(SHARED / "multihop" / "hotpotqa")
        assert all(isinstance(t, str) for t in dataset.queries.values())
        assert dataset.tenant == "eval:hotpotqa"

    def test_missing_files_are_a_clear_error(self, tmp_path: Path) -> None:
        with pytest.raises(RetrievalPipelineError, match="corpus.jsonl"):
            load_beir(tmp_path)

    def test_qrels_accept_trec_and_beir_layouts(self, tmp_path: Path) -> None:
        (tmp_path / "a.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t2\n")
        (tmp_path / "b.tsv").write_text("q1 0 d1 2\n".replace(" ", "\t"))
        assert (
            load_qrels(tmp_path / "a.tsv")
            == load_qrels(tmp_path / "b.tsv")
            == {"q1": {"d1": 2}}
        )
