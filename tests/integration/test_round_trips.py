"""Statements a run sends: what the channels already read is not read again.

The channels return each chunk's document id and the index revision with their own
rows, so graph fusion needs no chunk-to-document statement and a traced run no
revision statement; a tenant smaller than the dense depth is scanned exactly at
once. Each saving is checked against the statement it replaces (same answers).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import statements_sent

from retrieval_pipeline.graph.builder import build_pipeline
from retrieval_pipeline.graph.context import BM25_B, BM25_K1, Context
from retrieval_pipeline.graph.resources import PipelineResources
from retrieval_pipeline.ingest.chunker import extract_identifiers
from retrieval_pipeline.ingest.job import Ingestor
from retrieval_pipeline.observability import add_trace_listener
from retrieval_pipeline.tools.graph_fusion import graph_fusion
from retrieval_pipeline.tools.query import prose_query
from retrieval_pipeline.tools.retrieve import RetrievalTrace, Retriever
from retrieval_pipeline.tools.store import sql as q
from retrieval_pipeline.tools.store import sql_admin as qa

QUESTION = "Who owns the service that failed with ERR_CONN_RESET?"
PLAIN = Context(understanding=False, graph_fusion=False, reranker="none")
PIPELINE = Context(understanding=False, graph_fusion=True, reranker="none")


@pytest.fixture()
def corpus(ingestor: Ingestor, sample_corpus: Path) -> None:
    ingestor.ingest_paths([sample_corpus])


def _sent(sent: list[str], statement: str) -> int:
    head = " ".join(statement.split())[:60]
    return sum(s.startswith(head) for s in sent)


def _traced_run(retriever: Retriever, context: Context) -> tuple[Any, dict[str, Any]]:
    records: list[dict[str, Any]] = []
    remove = add_trace_listener(records.append)
    try:
        graph = build_pipeline(PipelineResources(retriever=retriever))
        out = graph.invoke({"question": QUESTION, "limit": 5}, context=context)
    finally:
        remove()
    (record,) = records
    return out, record


@pytest.mark.parametrize("context", [PLAIN, PIPELINE], ids=["plain", "pipeline"])
def test_a_traced_run_reads_the_revision_with_the_weights(
    retriever: Retriever,
    corpus: None,
    context: Context,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sent = statements_sent(monkeypatch)
    out, record = _traced_run(retriever, context)
    assert out["chunks"]
    assert _sent(sent, qa.INDEX_REVISION) == 0
    assert _sent(sent, q.QUERY_WEIGHTS) >= 1
    # The same label the revision statement gives.
    assert record["index_revision"] == retriever.store.index_revision("")


def test_the_revision_moves_when_the_index_does(
    retriever: Retriever, corpus: None, ingestor: Ingestor, tmp_path: Path
) -> None:
    _, before = _traced_run(retriever, PIPELINE)
    (tmp_path / "new.md").write_text("# Zanzibar\n\nZanzibar owns ERR_CONN_RESET.\n")
    ingestor.ingest_paths([tmp_path / "new.md"])
    _, after = _traced_run(retriever, PIPELINE)
    assert after["index_revision"] != before["index_revision"]
    assert after["index_revision"] == retriever.store.index_revision("")


def test_a_question_found_nowhere_reads_the_revision_with_the_weights(
    retriever: Retriever, corpus: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No query word in the tenant: the weights statement still brings the revision."""
    records: list[dict[str, Any]] = []
    remove = add_trace_listener(records.append)
    sent = statements_sent(monkeypatch)
    try:
        graph = build_pipeline(PipelineResources(retriever=retriever))
        graph.invoke({"question": "qwxzv plmokn", "limit": 5}, context=PIPELINE)
    finally:
        remove()
    assert _sent(sent, qa.INDEX_REVISION) == 0
    assert records[0]["index_revision"] == retriever.store.index_revision("")


@pytest.mark.parametrize("context", [PLAIN, PIPELINE], ids=["plain", "pipeline"])
def test_a_hidden_word_costs_the_statements_of_a_word_found_nowhere(
    retriever: Retriever,
    corpus: None,
    ingestor: Ingestor,
    tmp_path: Path,
    context: Context,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 15: the statements a run sends do not depend on chunks it cannot see."""
    hidden = tmp_path / "hidden.md"
    hidden.write_text(
        "---\nid: hidden\ntitle: Vault\nprincipals: [curators]\n---\n"
        "The zorblax rotation runbook.\n"
    )
    ingestor.ingest_paths([hidden])
    graph = build_pipeline(PipelineResources(retriever=retriever))
    shapes = {}
    for word in ("zorblax", "qwxzv"):
        graph.invoke({"question": word, "limit": 5}, context=context)
        sent = statements_sent(monkeypatch)
        out = graph.invoke({"question": word, "limit": 5}, context=context)
        assert all("zorblax" not in c["text"] for c in out["chunks"])
        shapes[word] = sorted(s[:48] for s in sent)
        monkeypatch.undo()
    assert shapes["zorblax"] == shapes["qwxzv"]


def test_graph_fusion_groups_chunks_by_document_without_a_statement(
    retriever: Retriever, corpus: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    graph = build_pipeline(PipelineResources(retriever=retriever))
    sent = statements_sent(monkeypatch)
    out = graph.invoke({"question": QUESTION, "limit": 8}, context=PIPELINE)
    assert out["retrieval_debug"]["graph_documents"] > 0  # the stage did work
    assert _sent(sent, q.CHUNK_DOCUMENTS.as_string(None)) == 0


def test_graph_fusion_finds_the_same_with_the_channels_document_ids(
    retriever: Retriever, corpus: None
) -> None:
    """The documents the channels returned give what the statement gave."""
    scope = retriever.scope()
    trace = RetrievalTrace()
    fused = retriever.fused(QUESTION, scope, depth=40, trace=trace)
    pool = {chunk_id: score for chunk_id, score, _ in fused}
    settings: dict[str, Any] = {
        "seeds": 5,
        "top_entities": 8,
        "max_hops": 2,
        "frontier_cap": 16,
        "document_cap": 12,
        "chunk_cap": 12,
        "score_weight": 1.0,
        "rrf_k": 60,
    }
    by_statement = graph_fusion(retriever, QUESTION, pool, scope, **settings)
    by_channels = graph_fusion(
        retriever, QUESTION, pool, scope, pool_documents=trace.documents, **settings
    )
    assert by_statement.documents > 0
    assert by_channels == by_statement
    found = by_channels.added + by_channels.boosted
    assert set(by_channels.documents_of) == {chunk_id for chunk_id, _, _ in found}


def test_channel_document_ids_are_the_stored_ones(
    retriever: Retriever, corpus: None
) -> None:
    trace = RetrievalTrace()
    ranked = retriever.channels(QUESTION, retriever.scope(), depth=50, trace=trace)
    ids = {chunk_id for hits in ranked.values() for chunk_id, _ in hits}
    assert ids and set(trace.documents) == ids
    stored = retriever.store.chunk_documents(sorted(ids), retriever.scope())
    assert trace.documents == stored


def test_a_tenant_smaller_than_the_depth_is_scanned_exactly_at_once(
    retriever: Retriever, corpus: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = retriever.store
    vector = retriever.embedder.embed_query(QUESTION)
    scope = retriever.scope()
    walked = store.search_dense(vector, scope, depth=400, ef_search=40)
    assert 0 < len(walked) < 400  # the sample corpus is smaller than the depth
    sent = statements_sent(monkeypatch)
    exact = store.search_dense(
        vector, scope, depth=400, ef_search=40, tenant_chunks=len(walked)
    )
    assert exact == walked
    assert len(sent) == 1 and sent[0].startswith("WITH allowed AS MATERIALIZED")
    # Large enough for the page: the index walk runs as before.
    del sent[:]
    store.search_dense(vector, scope, depth=5, ef_search=40, tenant_chunks=len(walked))
    assert not any(s.startswith("WITH allowed") for s in sent)


@pytest.mark.parametrize("question", [QUESTION, "ERR_CONN_RESET", "zzyzx nowhere"])
def test_the_lexical_pair_runs_on_generic_plans_with_the_same_answers(
    retriever: Retriever,
    corpus: None,
    monkeypatch: pytest.MonkeyPatch,
    question: str,
) -> None:
    """Weights and scorer share one transaction whose first statement asks for
    generic plans; the answers equal those of freshly planned (custom) statements."""
    store = retriever.store
    scope = retriever.scope()

    def lexical() -> list[tuple[str, float, int]]:
        return store.search_lexical(
            prose_query(question),
            extract_identifiers(question),
            scope,
            depth=20,
            k1=BM25_K1,
            b=BM25_B,
        )

    sent = statements_sent(monkeypatch)
    generic = [lexical() for _ in range(7)]  # past psycopg's prepare threshold too
    assert all(run == generic[0] for run in generic)
    assert sent[:2] == [qa.GENERIC_PLANS, " ".join(q.QUERY_WEIGHTS.split())]
    assert sum(s == qa.GENERIC_PLANS for s in sent) == 7
    monkeypatch.setattr(
        qa, "GENERIC_PLANS", "SET LOCAL plan_cache_mode = force_custom_plan"
    )
    assert lexical() == generic[0]
