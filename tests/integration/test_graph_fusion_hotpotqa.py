"""Graph fusion on real multi-hop data: a slice of the HotpotQA set in ../shared."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import SHARED_DATA
from helpers import write_jsonl

from retrieval_pipeline.eval.datasets import load_beir
from retrieval_pipeline.graph.builder import build_pipeline
from retrieval_pipeline.graph.context import Context
from retrieval_pipeline.graph.resources import PipelineResources
from retrieval_pipeline.ingest.job import Ingestor
from retrieval_pipeline.tools.retrieve import Retriever

HOTPOT = SHARED_DATA / "multihop" / "hotpotqa"
QUERIES = 25
DISTRACTORS = 150
POOL = 3


@pytest.fixture()
def hotpot_slice(ingestor: Ingestor, tmp_path: Path) -> dict[str, set[str]]:
    if not HOTPOT.exists():
        pytest.skip("shared HotpotQA slice not present")
    dataset = load_beir(HOTPOT, name="hotpotqa")
    qids = sorted(dataset.queries)[:QUERIES]
    needed = {doc for q in qids for doc in dataset.qrels[q]}
    records = []
    with (HOTPOT / "corpus.jsonl").open(encoding="utf-8") as fh:
        for n, line in enumerate(fh):
            record = json.loads(line)
            if record["_id"] in needed or n < DISTRACTORS:
                records.append(record)
    write_jsonl(tmp_path / "corpus.jsonl", records)
    ingestor.ingest_paths([tmp_path], title_entities=True)
    return {dataset.queries[q]: set(dataset.qrels[q]) for q in qids}


def test_graph_fusion_adds_second_hop_paragraphs_text_search_missed(
    retriever: Retriever, hotpot_slice: dict[str, set[str]]
) -> None:
    graph = build_pipeline(PipelineResources(retriever=retriever))
    context = Context(understanding=False, reranker="none", candidate_pool=POOL)
    found_by_text = found_by_pipeline = graph_hits = 0
    for question, supporting in hotpot_slice.items():
        text = {c.document_id for c in retriever.retrieve(question, limit=POOL)}
        out = graph.invoke({"question": question, "limit": 20}, context=context)
        pipeline = {c["document_id"] for c in out["chunks"]}
        found_by_text += len(text & supporting)
        found_by_pipeline += len(pipeline & supporting)
        graph_hits += sum(
            1
            for c in out["chunks"]
            if c["graph_boosted"] and c["document_id"] in supporting
        )
    assert graph_hits > 0  # supporting paragraphs that only the graph brought in
    assert found_by_pipeline > found_by_text
