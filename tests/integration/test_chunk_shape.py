"""One chunk shape: every route returns the same keys (tools/store/records.py).

Routes: the plain ``retrieve``, the pipeline graph (its plain path and its staged
path), the LangChain retriever, the agent tool, and the HTTP app's invoke, batch and
stream. A key with no value is present as null; the two evidence keys
(``rerank_score``, ``channel_scores``) appear only with their evidence, alike on
every route.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from http_server import running
from provider_peers import rerank_peer
from test_serving import app_for

from retrieval_pipeline.graph.builder import build_pipeline
from retrieval_pipeline.graph.context import Context
from retrieval_pipeline.graph.resources import PipelineResources
from retrieval_pipeline.ingest.job import Ingestor
from retrieval_pipeline.retriever import PipelineRetriever, make_retrieval_tool
from retrieval_pipeline.tools.rerankers.http import VoyageReranker
from retrieval_pipeline.tools.retrieve import Retriever

QUESTION = "Who owns the service that failed with ERR_CONN_RESET?"
PLAIN = Context(understanding=False, graph_fusion=False, reranker="none")
STAGED = Context(understanding=False, graph_fusion=True, reranker="none")
KEYS = {
    "chunk_id",
    "document_id",
    "title",
    "text",
    "heading_path",
    "source_uri",
    "revision",
    "char_start",
    "char_end",
    "page_start",
    "page_end",
    "token_count",
    "parser_version",
    "embedding_model",
    "embedding_version",
    "updated_at",
    "score",
    "ranks",
    "graph_boosted",
}
"""Every route's keys (``ChunkOutput``), whatever ran."""

Shapes = dict[str, set[frozenset[str]]]


@pytest.fixture()
def pipeline(retriever: Retriever, ingestor: Ingestor, sample_corpus: Path) -> Any:
    """The sample corpus ingested, and a pipeline over it (no judge, no reranker)."""
    ingestor.ingest_paths([sample_corpus])
    return build_pipeline(PipelineResources(retriever=retriever))


def shapes(chunks: list[dict[str, Any]]) -> set[frozenset[str]]:
    """The distinct key sets of a route's chunks (one, when the shape is fixed)."""
    assert chunks, "the route returned no chunks"
    return {frozenset(chunk) for chunk in chunks}


def document_shapes(documents: list[Any]) -> set[frozenset[str]]:
    """A LangChain document's keys: its metadata plus the text as page content."""
    return shapes([{**d.metadata, "text": d.page_content} for d in documents])


def python_routes(retriever: Retriever, pipeline: Any) -> Shapes:
    from_retriever = PipelineRetriever(pipeline=pipeline, limit=3, context=STAGED)
    tool = make_retrieval_tool(from_retriever)
    message = tool.invoke(
        {
            "name": tool.name,
            "args": {"question": QUESTION},
            "id": "call_1",
            "type": "tool_call",
        }
    )
    return {
        "retrieve": shapes([c.to_dict() for c in retriever.retrieve(QUESTION)]),
        "graph_plain_path": shapes(
            pipeline.invoke({"question": QUESTION, "limit": 3}, context=PLAIN)["chunks"]
        ),
        "graph_staged_path": shapes(
            pipeline.invoke({"question": QUESTION, "limit": 3}, context=STAGED)[
                "chunks"
            ]
        ),
        "langchain_retriever": document_shapes(from_retriever.invoke(QUESTION)),
        "agent_tool": document_shapes(message.artifact),
    }


def http_routes(store: Any, pipeline: Any) -> Shapes:
    app = app_for(store, pipeline)
    payload = {"question": QUESTION, "limit": 3}
    with running(app) as url, httpx.Client(base_url=url, timeout=60) as http:
        invoked = http.post("/retrieve/invoke", json={"input": payload}).json()
        batched = http.post("/retrieve/batch", json={"inputs": [payload]}).json()
        with http.stream("POST", "/retrieve/stream", json={"input": payload}) as s:
            body = "".join(s.iter_text())
    streamed = [
        json.loads(line.removeprefix("data: "))
        for line in body.splitlines()
        if line.startswith("data: {")
    ]
    # The stream carries each stage's update; the last stage's holds the chunks.
    last = [
        update["chunks"]
        for event in streamed
        for update in event.values()
        if isinstance(update, dict) and update.get("chunks")
    ][-1]
    return {
        "http_invoke": shapes(invoked["output"]["chunks"]),
        "http_batch": shapes(batched["output"][0]["chunks"]),
        "http_stream": shapes(last),
    }


class TestOneChunkShape:
    def test_every_route_returns_the_same_keys(
        self, store: Any, retriever: Retriever, pipeline: Any
    ) -> None:
        routes = {**python_routes(retriever, pipeline), **http_routes(store, pipeline)}
        assert routes == dict.fromkeys(routes, {frozenset(KEYS)})

    def test_a_key_without_a_value_is_present_as_null(self, pipeline: Any) -> None:
        for context in (PLAIN, STAGED):
            out = pipeline.invoke({"question": QUESTION}, context=context)
            for chunk in out["chunks"]:
                assert chunk["page_start"] is None and chunk["page_end"] is None

    def test_debug_adds_raw_channel_scores_on_every_path(
        self, retriever: Retriever, pipeline: Any
    ) -> None:
        asked = {"question": QUESTION, "limit": 3, "debug": True}
        routes = {
            "retrieve": shapes(
                [c.to_dict() for c in retriever.retrieve(QUESTION, debug=True)]
            ),
            "graph_plain_path": shapes(pipeline.invoke(asked, context=PLAIN)["chunks"]),
            "graph_staged_path": shapes(
                pipeline.invoke(asked, context=STAGED)["chunks"]
            ),
        }
        assert routes == dict.fromkeys(routes, {frozenset(KEYS | {"channel_scores"})})
        staged = pipeline.invoke(asked, context=STAGED)["chunks"]
        found = [c for c in staged if not c["graph_boosted"]]
        assert found and all(c["channel_scores"] for c in found)

    def test_a_reranked_chunk_adds_only_its_rerank_score(
        self, retriever: Retriever, pipeline: Any
    ) -> None:
        with rerank_peer() as (url, _):
            reranked = build_pipeline(
                PipelineResources(
                    retriever=retriever,
                    reranker=VoyageReranker(api_key="k", base_url=url),
                )
            ).invoke({"question": QUESTION, "limit": 3}, context=STAGED)
        assert reranked["retrieval_debug"]["reranked"] is True
        assert shapes(reranked["chunks"]) == {frozenset(KEYS | {"rerank_score"})}


class TestOneFetchAndOneValidationPerRun:
    def test_a_reranked_run_fetches_the_pool_rows_once(
        self, retriever: Retriever, pipeline: Any, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        store = retriever.store
        fetched: list[int] = []
        fetch = store.fetch_chunks

        def counting(chunk_ids: Any, scope: Any) -> Any:
            fetched.append(len(chunk_ids))
            return fetch(chunk_ids, scope)

        monkeypatch.setattr(store, "fetch_chunks", counting)
        context = Context(understanding=False, graph_fusion=False, reranker="none")
        with rerank_peer() as (url, _):
            resources = PipelineResources(
                retriever=retriever,
                reranker=VoyageReranker(api_key="k", base_url=url),
            )
            out = build_pipeline(resources).invoke(
                {"question": QUESTION}, context=context
            )
        assert out["retrieval_debug"]["reranked"] is True
        assert len(fetched) == 1  # by the reranker; the assembler reuses its rows
        assert not resources._handed_rows  # nothing left behind

    def test_the_question_is_validated_once_per_run(
        self, pipeline: Any, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        from retrieval_pipeline.tools.query import clean_query

        calls: list[object] = []

        def counting(question: object) -> str:
            calls.append(question)
            return clean_query(question)

        for name, module in list(sys.modules.items()):
            if name.startswith("retrieval_pipeline") and hasattr(module, "clean_query"):
                monkeypatch.setattr(module, "clean_query", counting)
        out = pipeline.invoke({"question": f"  {QUESTION}  "}, context=STAGED)
        assert out["chunks"]
        assert calls == [f"  {QUESTION}  "]
