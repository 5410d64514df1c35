"""The LangServe playground renders and runs a query in a real browser.

HTTP 200 on ``/retrieve/playground/`` proved nothing: the page was blank in a browser
(``Error: Unknown type: {"type":"null"}`` from the form renderer). This drives the
page as a user would and reads the browser's console log.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from http_server import running

from retrieval_pipeline.graph.builder import build_pipeline
from retrieval_pipeline.graph.resources import PipelineResources
from retrieval_pipeline.ingest.job import Ingestor
from retrieval_pipeline.serve import create_app, playground_schema
from retrieval_pipeline.tools.retrieve import Retriever

QUESTION = "Who owns the service that failed with ERR_CONN_RESET?"


def _wait(condition: Any, seconds: float, what: str, browser: Any) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(
        f"{what} within {seconds:.0f} s; console: {browser.get_log('browser')}"
    )


def _problems(log: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Console entries at warning level or above (the favicon's 404 aside)."""
    return [
        entry
        for entry in log
        if entry["level"] in ("SEVERE", "WARNING") and "favicon" not in entry["message"]
    ]


@pytest.mark.browser
def test_playground_renders_its_form_and_shows_chunks(
    store: Any,
    ingestor: Ingestor,
    retriever: Retriever,
    sample_corpus: Path,
    browser: Any,
) -> None:
    from selenium.webdriver.common.by import By

    ingestor.ingest_paths([sample_corpus])
    pipeline = build_pipeline(PipelineResources(retriever=retriever))
    expected = pipeline.invoke({"question": QUESTION, "limit": 8})["chunks"]
    assert expected
    app = create_app(
        pipeline,
        health=lambda: {"schema_versions": store.schema_versions()},
        pool_stats=store.pool_stats,
    )
    with running(app) as url:
        # What the API accepts is unchanged: null stays valid for nullable fields.
        accepted = httpx.post(
            f"{url}/retrieve/invoke",
            json={"input": {"question": QUESTION, "doc_ids": None, "tenant": None}},
            timeout=60,
        )
        assert accepted.status_code == 200, accepted.text
        assert '"null"' in json.dumps(httpx.get(f"{url}/retrieve/input_schema").json())

        browser.get(f"{url}/retrieve/playground/")
        question = _wait(
            lambda: browser.find_elements(By.ID, "#/properties/question-input"),
            30,
            "the playground rendered no question field",
            browser,
        )[0]
        for field in ("limit", "tenant", "debug"):
            assert browser.find_elements(By.ID, f"#/properties/{field}-input")
        assert "PRINCIPALS" in browser.find_element(By.TAG_NAME, "body").text.upper()
        assert _problems(browser.get_log("browser")) == []

        question.send_keys(QUESTION)
        start = _wait(
            lambda: [
                b
                for b in browser.find_elements(By.TAG_NAME, "button")
                if b.text.strip() == "Start" and b.is_enabled()
            ],
            10,
            "the Start button never became enabled",
            browser,
        )[0]
        start.click()
        first = expected[0]
        body = _wait(
            # The output streams in: the chunk id shows up in the debug scores
            # before the chunk itself, so wait for the chunk's source as well.
            lambda: (
                text
                if first["chunk_id"]
                in (text := browser.find_element(By.TAG_NAME, "body").text)
                and first["source_uri"] in text
                else None
            ),
            120,
            "the playground showed no chunks",
            browser,
        )
        assert first["source_uri"] in body, body[-3000:]
        assert _problems(browser.get_log("browser")) == []


def test_playground_schema_drops_only_the_null_option() -> None:
    schema = {
        "properties": {
            "doc_ids": {
                "anyOf": [
                    {"type": "array", "items": {"type": "string"}},
                    {"type": "null"},
                ],
                "default": None,
                "title": "Doc Ids",
            },
            "either": {
                "anyOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}]
            },
            "question": {"type": "string", "title": "Question"},
        }
    }
    assert "doc_ids" not in playground_schema(schema, drop=("doc_ids",))["properties"]
    out = playground_schema(schema)["properties"]
    assert out["doc_ids"] == {
        "type": "array",
        "items": {"type": "string"},
        "title": "Doc Ids",
    }
    assert out["either"] == {"anyOf": [{"type": "string"}, {"type": "integer"}]}
    assert out["question"] == schema["properties"]["question"]
