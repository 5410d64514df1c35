from __future__ import annotations

import time

import pytest
from provider_peers import PeerBehaviour, rerank_peer

from retrieval_pipeline.errors import ConfigurationError
from retrieval_pipeline.tools.rerankers import NoReranker, RerankError, resolve_reranker
from retrieval_pipeline.tools.rerankers.http import CohereReranker, VoyageReranker

DOCS = [
    "kafka consumer lag runbook",
    "ledger double postings",
    "consumer lag alert on kafka",
]


@pytest.fixture(params=["voyage", "cohere"])
def provider(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def make(provider: str, base_url: str):  # type: ignore[no-untyped-def]
    cls = VoyageReranker if provider == "voyage" else CohereReranker
    return cls(api_key="sk-test-secret", base_url=base_url)


class TestHttpRerankers:
    def test_request_shape_and_score_mapping(self, provider: str) -> None:
        with rerank_peer() as (url, peer):
            scores = make(provider, url).rerank(
                "kafka consumer lag", DOCS, deadline_s=5
            )
        body = peer.requests[0]
        assert body["query"] == "kafka consumer lag" and body["documents"] == DOCS
        if provider == "voyage":
            assert body["model"] == "rerank-2.5" and body["top_k"] == 3
        else:
            assert body["model"] == "rerank-v3.5" and body["top_n"] == 3
        assert peer.headers[0]["Authorization"] == "Bearer sk-test-secret"
        by_index = {s.index: s.score for s in scores}
        assert by_index[0] == pytest.approx(1.0) and by_index[1] == 0.0
        assert all(0.0 <= s.score <= 1.0 for s in scores)

    @pytest.mark.parametrize(
        ("mode", "reason"),
        [
            ("http500", "HTTP 500"),
            ("malformed", "malformed response"),
            ("wrong_count", "expected 3 results"),
            ("rate_limited", "Retry-After 7"),
            ("reset", "transport error"),
        ],
    )
    def test_failures_raise_a_rerank_error_with_a_reason(
        self, provider: str, mode: str, reason: str
    ) -> None:
        with rerank_peer(PeerBehaviour(mode=mode)) as (url, _):
            with pytest.raises(RerankError, match=reason) as info:
                make(provider, url).rerank("q", DOCS, deadline_s=5)
        assert "sk-test-secret" not in str(info.value)

    def test_a_slow_provider_times_out_at_the_deadline(self, provider: str) -> None:
        with rerank_peer(PeerBehaviour(mode="slow", delay_s=1.0)) as (url, _):
            started = time.monotonic()
            with pytest.raises(RerankError, match="timeout"):
                make(provider, url).rerank("q", DOCS, deadline_s=0.3)
            assert time.monotonic() - started < 1.5

    def test_the_key_never_appears_in_repr(self, provider: str) -> None:
        assert "sk-test-secret" not in repr(make(provider, "http://127.0.0.1:9"))

    def test_no_documents_means_no_request(self, provider: str) -> None:
        with rerank_peer() as (url, peer):
            assert make(provider, url).rerank("q", [], deadline_s=1) == []
        assert peer.requests == []


class TestResolution:
    def test_auto_without_keys_is_inactive(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        for key in (
            "VOYAGE_API_KEY",
            "COHERE_API_KEY",
            "CO_API_KEY",
            "RETRIEVAL_PIPELINE_RERANKER_ONNX",
        ):
            monkeypatch.delenv(key, raising=False)
        reranker = resolve_reranker("auto")
        assert isinstance(reranker, NoReranker) and not reranker.active

    def test_auto_prefers_voyage_then_cohere(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("COHERE_API_KEY", "c")
        assert resolve_reranker("auto").kind == "cohere:rerank-v3.5"
        monkeypatch.setenv("VOYAGE_API_KEY", "v")
        assert resolve_reranker("auto").kind == "voyage:rerank-2.5"

    def test_unknown_name_lists_the_choices(self) -> None:
        with pytest.raises(
            ConfigurationError, match="auto, voyage, cohere, onnx, none"
        ):
            resolve_reranker("magic")

    def test_onnx_without_a_model_is_inactive(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.delenv("RETRIEVAL_PIPELINE_RERANKER_ONNX", raising=False)
        assert not resolve_reranker("onnx").active
