"""Dev/test splits and the title-entity option of the evaluation sets (issue 18)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from retrieval_pipeline.errors import RetrievalPipelineError
from retrieval_pipeline.eval.datasets import carved_dev, load_beir

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data"


def _beir(
    root: Path, splits: dict[str, list[str]], extra: tuple[str, ...] = ()
) -> Path:
    """A tiny BEIR folder: one document per query, qrels files per split."""
    root.mkdir(parents=True, exist_ok=True)
    ids = sorted({q for qs in splits.values() for q in qs})
    (root / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": f"d{q}", "text": f"doc {q}"}) + "\n" for q in ids)
    )
    main = [q for q in ids if q not in extra]
    (root / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": q, "text": f"question {q}"}) + "\n" for q in main)
    )
    (root / "qrels").mkdir(exist_ok=True)
    for split, qs in splits.items():
        rows = "".join(f"{q}\td{q}\t1\n" for q in qs)
        (root / "qrels" / f"{split}.tsv").write_text(
            "query-id\tcorpus-id\tscore\n" + rows
        )
    return root


def test_a_set_with_only_test_judgements_is_carved_into_disjoint_thirds(
    tmp_path: Path,
) -> None:
    ids = [f"q{i}" for i in range(300)]
    root = _beir(tmp_path / "multi", {"test": ids})
    dev = load_beir(root, split="dev")
    test = load_beir(root, split="test")
    everything = load_beir(root, split="all")
    assert set(dev.queries).isdisjoint(test.queries)
    assert set(dev.queries) | set(test.queries) == set(everything.queries) == set(ids)
    assert 70 <= len(dev.queries) <= 130  # about a third
    assert set(dev.queries) == {q for q in ids if carved_dev(q)}  # the fixed rule
    assert "carved" in dev.split_source and "carved" in test.split_source
    assert (dev.split, test.split) == ("dev", "test")


def test_own_dev_or_train_judgements_are_the_dev_split(tmp_path: Path) -> None:
    root = _beir(
        tmp_path / "sci",
        {"test": ["t1", "t2"], "train": ["r1", "r2", "r3"]},
        extra=("r1", "r2", "r3"),
    )
    (root / "queries_train.jsonl").write_text(
        "".join(json.dumps({"_id": q, "text": q}) + "\n" for q in ("r1", "r2", "r3"))
    )
    dev = load_beir(root, split="dev")
    assert sorted(dev.queries) == ["r1", "r2", "r3"]  # texts from queries_train
    assert dev.split_source == "qrels/train.tsv"
    assert sorted(load_beir(root, split="test").queries) == ["t1", "t2"]


def test_a_toy_set_is_not_carved(tmp_path: Path) -> None:
    root = _beir(tmp_path / "toy", {"test": ["a", "b", "c"]})
    assert sorted(load_beir(root).queries) == ["a", "b", "c"]
    assert "not carved" in load_beir(root, split="dev").split_source


def test_a_missing_split_is_a_clear_error(tmp_path: Path) -> None:
    root = _beir(tmp_path / "x", {"test": ["a"]})
    with pytest.raises(RetrievalPipelineError, match="qrels/validation.tsv"):
        load_beir(root, split="validation")


def test_title_entities_are_an_explicit_option_not_a_folder_name(
    tmp_path: Path,
) -> None:
    root = _beir(tmp_path / "multihop" / "set", {"test": ["a"]})
    assert load_beir(root).title_entities is False  # the folder name changes nothing
    assert load_beir(root, title_entities=True).title_entities is True


@pytest.mark.skipif(not (SHARED / "scifact").exists(), reason="shared data absent")
def test_the_shared_sets_have_fixed_splits() -> None:
    assert len(load_beir(SHARED / "scifact", split="dev").queries) == 809
    assert len(load_beir(SHARED / "nfcorpus", split="dev").queries) == 324
    hotpot = SHARED / "multihop" / "hotpotqa"
    assert len(load_beir(hotpot, split="dev").queries) == 86
    assert len(load_beir(hotpot, split="test").queries) == 214
    musique = SHARED / "multihop" / "musique"
    assert len(load_beir(musique, split="dev").queries) == 33
    assert len(load_beir(musique, split="test").queries) == 67
