"""LangServe's responses encoded in Rust and orjson: the same JSON as before."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from typing import Any

import pytest
from fastapi.encoders import jsonable_encoder
from fastapi.testclient import TestClient
from langchain_core.runnables import RunnableLambda
from pydantic import BaseModel, RootModel
from starlette.responses import JSONResponse

from retrieval_pipeline import serve_encoding
from retrieval_pipeline.graph.state import PipelineInput, PipelineOutput

pytest.importorskip("langserve")


def _chunk(i: int) -> dict[str, Any]:
    return {
        "chunk_id": f"c{i}",
        "document_id": "doc-1",
        "title": "Ünïcode – title",
        "text": "word " * 50 + '"quoted" \\ back\nslash',
        "heading_path": ["A", "B"],
        "source_uri": "file:///x.md",
        "revision": "r" * 40,
        "char_start": 0,
        "char_end": 250,
        "page_start": None,
        "page_end": None,
        "token_count": 60,
        "parser_version": "md-1",
        "embedding_model": "sentence-transformers/all-MiniLM-L6-v2",
        "embedding_version": "x",
        "updated_at": "2026-12-01T00:00:00+00:00",
        "score": 0.1 + i / 3,
        "ranks": {"lexical": 1, "dense": 2},
        "graph_boosted": False,
    }


OUTPUT = {
    "chunks": [_chunk(i) for i in range(5)],
    "retrieval_debug": {"path": "staged", "fallbacks": [], "candidate_pool": 40},
}


class Metadata(BaseModel):
    run_id: uuid.UUID
    feedback_tokens: list[Any]


class Response(BaseModel):
    output: Any
    metadata: Metadata
    when: dt.datetime
    nested: RootModel[list[int]]


def test_fast_encoder_matches_fastapi_on_a_langserve_shaped_model() -> None:
    model = Response(
        output=OUTPUT,
        metadata=Metadata(run_id=uuid.uuid4(), feedback_tokens=[]),
        when=dt.datetime(2026, 12, 1, 12, 30, tzinfo=dt.UTC),
        nested=RootModel[list[int]]([1, 2]),
    )
    assert serve_encoding.fast_jsonable(model) == jsonable_encoder(model)


def test_other_calls_are_fastapis_own() -> None:
    value = {"a": dt.date(2026, 1, 2), "b": {1, 2}}
    assert serve_encoding.fast_jsonable(value) == jsonable_encoder(value)
    model = Metadata(run_id=uuid.uuid4(), feedback_tokens=[None])
    assert serve_encoding.fast_jsonable(model, exclude_none=True) == jsonable_encoder(
        model, exclude_none=True
    )


def test_orjson_body_parses_to_starlettes() -> None:
    content = {"output": OUTPUT, "n": [1, 2.5, 1e-07, None, True]}
    fast = serve_encoding.OrjsonResponse(content)
    plain = JSONResponse(content)
    assert json.loads(fast.body) == json.loads(plain.body)
    assert fast.headers["content-type"] == plain.headers["content-type"]


def test_orjson_falls_back_for_what_it_cannot_encode() -> None:
    content = {"big": 2**70}  # orjson refuses integers past 64 bits
    assert json.loads(serve_encoding.OrjsonResponse(content).body) == content


def test_served_invoke_and_batch_bodies_unchanged() -> None:
    from langserve import api_handler

    from retrieval_pipeline.serve_app import create_app

    async def answer(_: Any) -> Any:
        return OUTPUT

    stub = RunnableLambda(lambda _: OUTPUT, afunc=answer).with_types(
        input_type=PipelineInput, output_type=PipelineOutput
    )
    app = create_app(stub, health=dict, pool_stats=dict)
    assert api_handler.jsonable_encoder is serve_encoding.fast_jsonable
    assert serve_encoding.install()  # idempotent
    with TestClient(app) as client:
        invoke = client.post("/retrieve/invoke", json={"input": {"question": "x?"}})
        batch = client.post(
            "/retrieve/batch", json={"inputs": [{"question": "x?"}, {"question": "y"}]}
        )
    assert invoke.status_code == 200, invoke.text
    assert invoke.json()["output"] == OUTPUT
    assert set(invoke.json()) == {"output", "metadata"}
    assert uuid.UUID(invoke.json()["metadata"]["run_id"])
    assert batch.status_code == 200, batch.text
    assert batch.json()["output"] == [OUTPUT, OUTPUT]
