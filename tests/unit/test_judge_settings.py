"""Which judge the environment gives: none, or an OpenAI-compatible chat model."""

from __future__ import annotations

import pytest

from retrieval_pipeline.tools.judge import JUDGE_MODEL_ENV, resolve_judge


def test_no_key_no_url_no_judge(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    assert resolve_judge() is None


@pytest.mark.parametrize("value", ["none", "off", " NONE "])
def test_the_judge_can_be_turned_off_beside_an_openai_key(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-embeddings-only")
    monkeypatch.setenv(JUDGE_MODEL_ENV, value)
    assert resolve_judge() is None


def test_a_key_gives_the_named_model(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("langchain_openai")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv(JUDGE_MODEL_ENV, "gpt-4o-mini")
    judge = resolve_judge()
    assert judge is not None and judge.model_name == "gpt-4o-mini"
    assert "sk-test" not in repr(judge)
