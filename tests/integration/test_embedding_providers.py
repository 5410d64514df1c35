"""Remote embedding providers: parallel calls, fallbacks, retries, no torch.

The real ``OpenAIEmbeddings`` client talks to an OpenAI-protocol peer on 127.0.0.1
(tests/provider_peers.py). The remote store is a database of its own on the session
server: its index holds the peer's 64-dimensional vectors.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from provider_peers import PeerBehaviour, rerank_peer
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from retrieval_pipeline.graph.builder import build_pipeline
from retrieval_pipeline.graph.context import Context
from retrieval_pipeline.graph.resources import PipelineResources
from retrieval_pipeline.ingest.job import Ingestor
from retrieval_pipeline.tools.embeddings import (
    Embedder,
    EmbeddingUnavailable,
    RetryPolicy,
    _remote,
    retry_after_of,
)
from retrieval_pipeline.tools.retrieve import Retriever
from retrieval_pipeline.tools.store import Store

SECRET = "sk-embed-secret-0123456789abcdef"
QUESTION = "kafka consumer lag partitions"


@pytest.fixture(scope="module")
def remote_url(pg_url: str) -> str:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS embed_providers")
        conn.execute("CREATE DATABASE embed_providers")
    params = conninfo_to_dict(pg_url)
    params["dbname"] = "embed_providers"
    return make_conninfo(**params)


@pytest.fixture()
def remote_store(remote_url: str) -> Iterator[Store]:
    store = Store(remote_url)
    with store.connection() as conn:
        conn.execute(
            "TRUNCATE documents, chunks, chunk_terms, term_stats, corpus_stats,"
            " entities, mentions, relations CASCADE"
        )
    yield store
    store.close()


@pytest.fixture()
def peer(monkeypatch: pytest.MonkeyPatch) -> Iterator[PeerBehaviour]:
    with rerank_peer() as (url, behaviour):
        monkeypatch.setenv("OPENAI_BASE_URL", f"{url}/v1")
        monkeypatch.setenv("OPENAI_API_KEY", SECRET)
        yield behaviour


def _embedder(**retry: Any) -> Embedder:
    embedder = _remote("openai", "text-embedding-3-small")
    if retry:
        embedder.retry = RetryPolicy(**retry)
    return embedder


class TestParallelCalls:
    def test_concurrent_queries_are_in_flight_together(
        self, peer: PeerBehaviour
    ) -> None:
        embedder = _embedder()
        embedder.embed_query_within("warm up", 30)
        peer.mode, peer.delay_s = "slow", 0.4
        in_flight = {"now": 0, "max": 0}
        lock = threading.Lock()
        real = embedder.embeddings.embed_query

        def tracked(text: str) -> list[float]:
            with lock:
                in_flight["now"] += 1
                in_flight["max"] = max(in_flight["max"], in_flight["now"])
            try:
                return list(real(text))
            finally:
                with lock:
                    in_flight["now"] -= 1

        object.__setattr__(embedder.embeddings, "embed_query", tracked)
        threads = [
            threading.Thread(
                target=embedder.embed_query_within, args=(f"query {i}", 30)
            )
            for i in range(6)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        # The old Embedder held one lock around every call: at most one in flight.
        assert in_flight["max"] >= 2

    def test_ingest_batches_run_concurrently_within_the_bound(
        self,
        peer: PeerBehaviour,
        remote_store: Store,
        tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        monkeypatch.setenv("RETRIEVAL_PIPELINE_EMBED_CONCURRENCY", "3")
        for i in range(12):
            (tmp_path / f"d{i}.md").write_text(f"# Doc {i}\n\nParagraph {i} text.\n")
        embedder = _embedder()
        embedder.batch_size = 2
        peer.mode, peer.delay_s = "slow", 0.3
        in_flight = {"now": 0, "max": 0}
        lock = threading.Lock()
        real = embedder.embeddings.embed_documents

        def tracked(texts: list[str]) -> list[list[float]]:
            with lock:
                in_flight["now"] += 1
                in_flight["max"] = max(in_flight["max"], in_flight["now"])
            try:
                return list(real(texts))
            finally:
                with lock:
                    in_flight["now"] -= 1

        object.__setattr__(embedder.embeddings, "embed_documents", tracked)
        summary = Ingestor(remote_store, embedder).ingest_paths([tmp_path])
        assert summary.documents == 12 and summary.failed == 0
        assert 2 <= in_flight["max"] <= 3


class TestQueryFallback:
    @pytest.mark.parametrize("mode", ["http500", "slow", "reset", "malformed"])
    def test_the_lexical_channel_answers_and_the_fallback_is_recorded(
        self,
        peer: PeerBehaviour,
        remote_store: Store,
        sample_corpus: Path,
        mode: str,
    ) -> None:
        embedder = _embedder()
        Ingestor(remote_store, embedder).ingest_paths([sample_corpus])
        graph = build_pipeline(
            PipelineResources(retriever=Retriever(remote_store, embedder))
        )
        context = Context(understanding=False, reranker="none", embed_deadline_s=0.5)
        healthy = graph.invoke({"question": QUESTION, "limit": 5}, context=context)
        assert not healthy["retrieval_debug"].get("fallbacks")
        peer.mode, peer.delay_s = mode, 5.0
        out = graph.invoke({"question": f"{QUESTION} now", "limit": 5}, context=context)
        debug = out["retrieval_debug"]
        reasons = [f["reason"] for f in debug["fallbacks"]]
        assert reasons and all(r.startswith("dense skipped:") for r in reasons)
        assert {f["stage"] for f in debug["fallbacks"]} == {"hybrid_retrieve"}
        if mode == "slow":
            assert "timed out after 0.5s" in reasons[0]
        assert out["chunks"], "the lexical channel still answers"
        assert SECRET not in str(out)

    def test_the_plain_path_records_the_fallback_too(
        self, peer: PeerBehaviour, remote_store: Store, sample_corpus: Path
    ) -> None:
        embedder = _embedder()
        Ingestor(remote_store, embedder).ingest_paths([sample_corpus])
        graph = build_pipeline(
            PipelineResources(retriever=Retriever(remote_store, embedder))
        )
        peer.mode = "http500"
        context = Context(understanding=False, graph_fusion=False, reranker="none")
        out = graph.invoke({"question": QUESTION, "limit": 3}, context=context)
        [fallback] = out["retrieval_debug"]["fallbacks"]
        assert fallback["stage"] in {"plain_retrieve", "hybrid_retrieve"}
        assert "HTTP 500" in fallback["reason"] and out["chunks"]

    @pytest.mark.parametrize("fresh_process", [False, True])
    def test_a_vector_of_the_wrong_width_skips_the_dense_channel_with_a_reason(
        self,
        peer: PeerBehaviour,
        remote_store: Store,
        sample_corpus: Path,
        fresh_process: bool,
    ) -> None:
        # The provider's base URL now serves another model: the database would
        # reject the vector (a DataException); the lexical channel answers instead.
        Ingestor(remote_store, _embedder()).ingest_paths([sample_corpus])
        embedder = _embedder()
        if not fresh_process:
            embedder.embed_query("learn the width from a healthy reply")
        graph = build_pipeline(
            PipelineResources(retriever=Retriever(remote_store, embedder))
        )
        peer.mode = "wrong_dimension"
        for context in (
            Context(understanding=False, reranker="none"),
            Context(understanding=False, graph_fusion=False, reranker="none"),
        ):
            out = graph.invoke(
                {"question": f"{QUESTION} wide", "limit": 3}, context=context
            )
            [fallback] = out["retrieval_debug"]["fallbacks"]
            assert "dimension" in fallback["reason"], fallback
            assert out["chunks"], "the lexical channel still answers"


class TestCommandLineExit:
    def test_a_query_that_answered_does_not_wait_for_a_hung_call(
        self,
        peer: PeerBehaviour,
        remote_store: Store,
        remote_url: str,
        sample_corpus: Path,
        monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        import os

        from retrieval_pipeline.cli import main
        from retrieval_pipeline.tools.deadline import calls_in_flight

        def settle() -> None:  # calls other tests abandoned end first
            waited = time.monotonic() + 15
            while calls_in_flight() and time.monotonic() < waited:
                time.sleep(0.1)

        settle()
        Ingestor(remote_store, _embedder()).ingest_paths([sample_corpus])
        monkeypatch.setenv("DATABASE_URL", remote_url)
        monkeypatch.setenv("RETRIEVAL_PIPELINE_EMBEDDINGS", "openai")
        monkeypatch.setenv("RETRIEVAL_PIPELINE_JUDGE_MODEL", "none")
        exits: list[int] = []
        monkeypatch.setattr(os, "_exit", exits.append)
        peer.mode, peer.delay_s = "slow", 3.0  # hangs past the 1 s deadline
        code = main(["query", f"{QUESTION} hung", "--no-understanding"])
        out = capsys.readouterr()
        assert code == 0 and "1. [" in out.out, out
        assert calls_in_flight() == 1  # the abandoned call still runs...
        assert exits == [0]  # ...and the command left without joining it
        peer.mode = "ok"
        exits.clear()
        settle()  # the hung call ends
        assert main(["query", f"{QUESTION} healthy", "--no-understanding"]) == 0
        assert exits == []  # nothing in flight: a normal exit


class TestIngestRetries:
    def test_retry_after_is_honoured_then_the_batch_lands(
        self, peer: PeerBehaviour, remote_store: Store, tmp_path: Path
    ) -> None:
        (tmp_path / "a.md").write_text("# A\n\nAlpha text.\n")
        peer.mode, peer.fail_times, peer.retry_after = "rate_limited", 1, "0.6"
        summary = Ingestor(remote_store, _embedder(backoff_s=0.01)).ingest_paths(
            [tmp_path]
        )
        assert summary.documents == 1 and summary.failed == 0
        assert len(peer.times) == 3  # the dimension probe (429, retried), the batch
        assert peer.times[1] - peer.times[0] >= 0.6  # waited as the provider asked

    def test_a_document_whose_embedding_fails_is_reported_and_not_written(
        self, peer: PeerBehaviour, remote_store: Store, tmp_path: Path
    ) -> None:
        for name in ("good1", "bad", "good2"):
            body = "POISON here" if name == "bad" else f"{name} paragraph"
            (tmp_path / f"{name}.md").write_text(f"# {name}\n\n{body}.\n")
        peer.poison = "POISON"
        embedder = _embedder(attempts=3, backoff_s=0.01)
        embedder.batch_size = 1
        summary = Ingestor(remote_store, embedder).ingest_paths([tmp_path])
        assert summary.documents == 2
        [(path, reason)] = summary.failures
        assert path.endswith("bad.md") and reason.startswith("not written:")
        assert "3 attempt(s)" in reason and "HTTP 500" in reason
        assert SECRET not in reason
        poisoned = [r for r in peer.requests if "POISON" in str(r)]
        assert len(poisoned) == 3
        with remote_store.connection() as conn:
            docs = conn.execute("SELECT source_id FROM documents ORDER BY 1").fetchall()
            chunks = conn.execute(
                "SELECT count(*) FROM chunks WHERE source_id = 'bad.md'"
            ).fetchone()
        assert [d[0] for d in docs] == ["good1.md", "good2.md"] and chunks[0] == 0

    def test_client_errors_are_not_retried(self) -> None:
        class Forbidden(Exception):
            status_code = 401

        calls: list[int] = []

        class Failing:
            def embed_documents(self, texts: list[str]) -> list[list[float]]:
                calls.append(len(texts))
                raise Forbidden("no")

        embedder = Embedder(
            Failing(), model="x", version="1", dimension=2, remote=True,
            concurrency=None, retry=RetryPolicy(attempts=4, backoff_s=0.01),
        )  # fmt: skip
        [result] = embedder.embed_each(["t"])
        assert isinstance(result, EmbeddingUnavailable) and calls == [1]

    def test_retry_after_forms(self) -> None:
        class Response:
            def __init__(self, value: str) -> None:
                self.headers = {"retry-after": value}

        class Limited(Exception):
            def __init__(self, value: str) -> None:
                self.response = Response(value)

        assert retry_after_of(Limited("2.5")) == 2.5
        in_a_while = retry_after_of(Limited("Wed, 21 Oct 2099 07:28:00 GMT"))
        assert in_a_while is not None and in_a_while > 0
        assert retry_after_of(Limited("soon")) is None
        assert RetryPolicy(retry_after_cap_s=10).delay(0, 3600) == 10


def test_a_query_never_imports_torch(
    ingestor: Ingestor, sample_corpus: Path, pg_url: str, rp_home: Path
) -> None:
    """The serving path (default embedder, the pipeline, a query) without torch."""
    ingestor.ingest_paths([sample_corpus])
    script = (
        "import sys\n"
        "from retrieval_pipeline.graph.builder import build_pipeline\n"
        "from retrieval_pipeline.graph.resources import PipelineResources\n"
        "from retrieval_pipeline.tools.embeddings import resolve_embedder\n"
        "from retrieval_pipeline.tools.retrieve import Retriever\n"
        "from retrieval_pipeline.tools.store import Store\n"
        "store = Store(sys.argv[1])\n"
        "retriever = Retriever(store, resolve_embedder())\n"
        "graph = build_pipeline(PipelineResources(retriever=retriever))\n"
        "out = graph.invoke({'question': 'who owns payments-api', 'limit': 3})\n"
        "assert out['chunks'], out\n"
        "assert not out['retrieval_debug'].get('fallbacks'), out['retrieval_debug']\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch'))\n"
    )
    env = {**os.environ, "RETRIEVAL_PIPELINE_HOME": str(rp_home)}
    env.pop("RETRIEVAL_PIPELINE_EMBEDDINGS", None)
    done = subprocess.run(
        [sys.executable, "-c", script, pg_url],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"
