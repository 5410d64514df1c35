"""Provider and database faults.

Providers: local HTTP peers speaking the Voyage, Cohere and OpenAI chat protocols
answer with 429 + Retry-After, 500, a reset connection, a reply slower than the
deadline, a reply dripped a byte at a time (each read inside the client's timeout,
the whole far past it), malformed JSON, and the wrong number of results. The answer
must always arrive, in fused order, with the fallback recorded, within the deadline
plus a margin (the margin is generous: the bound under test is the deadline, and
the faults last several times longer).

Database: the server restarted between queries (the pool recovers), a statement
timeout (a clear 503, then service resumes), the connection dropped mid-ingest (the
document is fully old afterwards, and the next ingest makes it fully new).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from figures import record_figure
from helpers import assert_stats_consistent, statements_sent
from http_server import running
from provider_peers import PeerBehaviour, rerank_peer

from retrieval_pipeline.errors import DatabaseTimeoutError, DatabaseUnavailableError
from retrieval_pipeline.graph.builder import build_pipeline
from retrieval_pipeline.graph.context import Context
from retrieval_pipeline.graph.resources import PipelineResources
from retrieval_pipeline.ingest.job import Ingestor
from retrieval_pipeline.serve import create_app
from retrieval_pipeline.tools.judge import resolve_judge
from retrieval_pipeline.tools.rerankers.http import CohereReranker, VoyageReranker
from retrieval_pipeline.tools.retrieve import Retriever
from retrieval_pipeline.tools.store import EmbeddedPostgres, Store

QUESTION = "kafka consumer lag partitions"
DEADLINE_S = 0.5
FAULT_S = 4.0  # how long a slow or dripping peer takes: 8x the deadline
MARGIN_S = 1.5
SECRET = "sk-fault-secret-abcdef0123456789"
MODES = ["rate_limited", "http500", "reset", "slow", "drip", "malformed", "wrong_count"]
_injected: dict[str, int] = {}


@pytest.fixture()
def corpus(ingestor: Ingestor, sample_corpus: Path) -> None:
    ingestor.ingest_paths([sample_corpus])


def _timed(graph: Any, context: Context) -> tuple[dict[str, Any], float]:
    started = time.monotonic()
    out = graph.invoke({"question": QUESTION, "limit": 5}, context=context)
    return out, time.monotonic() - started


def _count(kind: str) -> None:
    _injected[kind] = _injected.get(kind, 0) + 1


class TestProviderFaults:
    @pytest.mark.parametrize("provider", [VoyageReranker, CohereReranker])
    @pytest.mark.parametrize("mode", MODES)
    def test_reranker_faults_fall_back_to_fused_order_within_the_deadline(
        self, retriever: Retriever, corpus: None, provider: type, mode: str
    ) -> None:
        # The baseline runs the all-inactive path, the bare retrieve with no
        # assembler; the per-document passage cap is an assembly policy, so both
        # runs leave it off and the fallback must give exactly the fused order.
        context = Context(
            graph_fusion=False,
            candidate_pool=10,
            rerank_deadline_s=DEADLINE_S,
            document_chunks=0,
        )
        fused, baseline_s = _timed(
            build_pipeline(PipelineResources(retriever=retriever)),
            Context(
                graph_fusion=False,
                candidate_pool=10,
                reranker="none",
                document_chunks=0,
            ),
        )
        with rerank_peer(PeerBehaviour(mode=mode, delay_s=FAULT_S)) as (url, peer):
            reranker = provider(api_key=SECRET, base_url=url)
            graph = build_pipeline(
                PipelineResources(retriever=retriever, reranker=reranker)
            )
            out, elapsed = _timed(graph, context)
        _count(f"rerank_{mode}")
        assert peer.requests, "the fault was never exercised"
        debug = out["retrieval_debug"]
        assert debug["reranked"] is False
        [fallback] = debug["fallbacks"]
        assert fallback["stage"] == "rerank" and fallback["reason"]
        assert SECRET not in str(out)
        assert [c["chunk_id"] for c in out["chunks"]] == [
            c["chunk_id"] for c in fused["chunks"]
        ]
        assert all("rerank_score" not in c for c in out["chunks"])
        assert elapsed < baseline_s + DEADLINE_S + MARGIN_S, (mode, elapsed)

    @pytest.mark.parametrize("mode", [*MODES, "bad_answer"])
    def test_judge_faults_fall_back_to_the_raw_question_within_the_deadline(
        self,
        retriever: Retriever,
        corpus: None,
        mode: str,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """The real ChatOpenAI, resolved from the environment, against a local
        OpenAI-compatible peer."""
        # As above: the baseline is the bare retrieve, so the cap is off in both.
        context = Context(
            graph_fusion=False,
            reranker="none",
            judge_deadline_s=DEADLINE_S,
            document_chunks=0,
        )
        without, baseline_s = _timed(
            build_pipeline(PipelineResources(retriever=retriever)),
            Context(
                graph_fusion=False,
                reranker="none",
                candidate_pool=40,
                document_chunks=0,
            ),
        )
        peer_mode = "ok" if mode == "bad_answer" else mode
        answer = {"rewrite": 7, "sub_queries": "not a list"}
        with rerank_peer(
            PeerBehaviour(mode=peer_mode, delay_s=FAULT_S, answer=answer)
        ) as (url, peer):
            monkeypatch.setenv("OPENAI_BASE_URL", f"{url}/v1")
            monkeypatch.setenv("OPENAI_API_KEY", SECRET)
            judge = resolve_judge(timeout_s=DEADLINE_S)
            assert judge is not None
            graph = build_pipeline(PipelineResources(retriever=retriever, judge=judge))
            out, elapsed = _timed(graph, context)
        _count(f"judge_{mode}")
        assert peer.requests, "the fault was never exercised"
        debug = out["retrieval_debug"]
        [fallback] = debug["fallbacks"]
        assert fallback["stage"] == "understand_query" and fallback["reason"]
        assert debug["rewrite"] is None and debug["sub_queries"] == []
        assert SECRET not in str(out)
        # The raw question ran: the same evidence as without a judge.
        assert [c["chunk_id"] for c in out["chunks"]] == [
            c["chunk_id"] for c in without["chunks"]
        ]
        assert elapsed < baseline_s + DEADLINE_S + MARGIN_S, (mode, elapsed)

    def test_a_working_judge_at_the_peer_is_used(
        self, retriever: Retriever, corpus: None, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The control for the faults above: the same peer, answering well."""
        answer = {"rewrite": "consumer lag in kafka", "sub_queries": ["kafka lag"]}
        with rerank_peer(PeerBehaviour(answer=answer)) as (url, peer):
            monkeypatch.setenv("OPENAI_BASE_URL", f"{url}/v1")
            monkeypatch.setenv("OPENAI_API_KEY", SECRET)
            graph = build_pipeline(
                PipelineResources(retriever=retriever, judge=resolve_judge())
            )
            out = graph.invoke(
                {"question": QUESTION}, context=Context(graph_fusion=False)
            )
        assert out["retrieval_debug"]["rewrite"] == "consumer lag in kafka"
        assert out["retrieval_debug"]["sub_queries"] == ["kafka lag"]
        assert (
            "fallbacks" not in out["retrieval_debug"]
            or not out["retrieval_debug"]["fallbacks"]
        )
        headers = {k.lower(): v for k, v in peer.headers[0].items()}
        assert headers["authorization"] == f"Bearer {SECRET}"


class TestDatabaseFaults:
    def test_the_pool_recovers_after_a_server_restart(
        self, rp_home: Path, pg_url: str, retriever: Retriever, corpus: None
    ) -> None:
        before = retriever.retrieve(QUESTION, limit=3)
        bystander = Store(pg_url, connect_timeout=1)  # queries during the outage
        server = EmbeddedPostgres(rp_home, keep_running=True)
        assert server.stop()
        try:
            with pytest.raises(DatabaseUnavailableError) as down:
                with bystander.connection() as conn:
                    conn.execute("SELECT 1")
            assert "Check that PostgreSQL is running" in str(down.value)
        finally:
            server.start()
            bystander.close()
        _count("db_restart")
        after = retriever.retrieve(QUESTION, limit=3)  # no new Store: the pool heals
        assert [c.chunk_id for c in after] == [c.chunk_id for c in before]

    def test_a_terminated_backend_is_replaced_on_borrow_without_an_error(
        self, pg_url: str
    ) -> None:
        """The borrow check finds a connection the server closed (the socket turned
        readable) and the pool hands out a working one instead."""
        with Store(pg_url, pool_size=2, connect_timeout=5) as fresh:
            with fresh.connection() as conn:
                pid = conn.info.backend_pid
            with psycopg.connect(pg_url, autocommit=True) as killer:
                # Waits (up to 5 s) until the backend has exited: its FATAL message
                # and the close are on the socket before the next borrow.
                killer.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))
            for _ in range(3):  # no error, whichever connection the pool hands out
                with fresh.connection() as conn:
                    assert conn.info.backend_pid != pid
                    assert conn.execute("SELECT 1").fetchone() == (1,)

    def test_a_healthy_borrow_sends_no_statement(
        self, pg_url: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The check looks at the socket, not the server: no empty query per borrow."""
        with Store(pg_url, pool_size=1, connect_timeout=5) as single:
            with single.connection() as conn:  # the one connection, configured
                live = conn.info.backend_pid
            sent = statements_sent(monkeypatch)
            for _ in range(5):
                with single.connection() as conn:
                    assert conn.info.backend_pid == live
            assert sent == []

    def test_without_poll_the_full_check_runs(
        self, pg_url: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A platform without select.poll falls back to psycopg_pool's empty query."""
        from retrieval_pipeline.tools.store import liveness

        with Store(pg_url, pool_size=1, connect_timeout=5) as single:
            with single.connection():
                pass
            monkeypatch.setattr(liveness, "select", object())  # no poll() at all
            sent = statements_sent(monkeypatch)
            with single.connection() as conn:
                assert conn.execute("SELECT 1").fetchone() == (1,)
            assert sent == ["", "SELECT 1"]  # the check's empty query, then ours

    def test_a_statement_timeout_is_a_clear_503_and_service_resumes(
        self, pg_url: str, store: Store, embedder: Any, corpus: None
    ) -> None:
        impatient = Store(pg_url, statement_timeout_ms=300)
        try:
            pipeline = build_pipeline(
                PipelineResources(retriever=Retriever(impatient, embedder))
            )
            with (
                running(create_app(pipeline)) as url,
                httpx.Client(base_url=url, timeout=30) as http,
            ):
                body = {"input": {"question": QUESTION}}
                assert http.post("/retrieve/invoke", json=body).status_code == 200
                # Hold a lock the query needs: it waits, and the timeout cancels it.
                with store.connection() as blocker, blocker.transaction():
                    blocker.execute("LOCK TABLE chunks IN ACCESS EXCLUSIVE MODE")
                    blocked = http.post("/retrieve/invoke", json=body)
                assert blocked.status_code == 503, blocked.text
                detail = blocked.json()["detail"]
                assert "statement timeout" in detail and "Traceback" not in detail
                assert "canceling statement" not in detail  # no raw SQL error text
                assert http.post("/retrieve/invoke", json=body).status_code == 200
            with pytest.raises(DatabaseTimeoutError):
                with impatient.connection() as conn:
                    conn.execute("SELECT pg_sleep(2)")
        finally:
            impatient.close()
        _count("db_statement_timeout")

    def test_a_connection_dropped_mid_ingest_leaves_the_document_whole(
        self,
        ingestor: Ingestor,
        store: Store,
        pg_url: str,
        tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        doc = tmp_path / "runbook.md"
        doc.write_text("# Runbook\n\nThe old procedure: restart the broker.\n")
        ingestor.ingest_paths([tmp_path])
        old = store.counts()

        def contents() -> list[str]:
            with store.connection() as conn:
                return [r[0] for r in conn.execute("SELECT content FROM chunks")]

        old_text = contents()
        doc.write_text(
            "# Runbook\n\nThe new procedure: drain the partition first.\n\n"
            + "\n\n".join(f"## Step {i}\n\nDo step {i} carefully." for i in range(30))
        )
        real_write_graph = Store._write_graph

        def drop_connection_mid_write(self: Store, conn: Any, doc: Any) -> None:
            # Chunks and postings are written by now, uncommitted; kill this backend.
            pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
            with psycopg.connect(pg_url, autocommit=True) as killer:
                killer.execute("SELECT pg_terminate_backend(%s)", (pid,))
            real_write_graph(self, conn, doc)

        monkeypatch.setattr(Store, "_write_graph", drop_connection_mid_write)
        with pytest.raises(DatabaseUnavailableError) as lost:
            ingestor.ingest_paths([tmp_path])
        assert "rolled back" in str(lost.value)
        monkeypatch.setattr(Store, "_write_graph", real_write_graph)
        assert store.counts() == old and contents() == old_text  # fully old
        assert_stats_consistent(store)
        summary = ingestor.ingest_paths([tmp_path])  # the pool replaced the connection
        assert summary.documents == 1 and not summary.failures
        assert any("drain the partition" in c for c in contents())
        assert not any("restart the broker" in c for c in contents())  # fully new
        assert_stats_consistent(store)
        _count("db_connection_dropped_mid_ingest")


def test_publish_fault_figures() -> None:
    """Runs last in this module: what was injected, for BENCHMARKS.md."""
    if _injected:
        record_figure("faults_injected", sum(_injected.values()), kinds=_injected)


# A watchdog: the thread pool for provider deadlines must not leak threads either.
def test_abandoned_provider_calls_do_not_pile_up_threads() -> None:
    workers = [t for t in threading.enumerate() if t.name.startswith("rp-provider")]
    assert len(workers) <= 16
