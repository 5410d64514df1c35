"""Serving: LangServe, retriever and tool, agent subgraph, streaming, traces."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from pathlib import Path
from typing import Any

import httpx
import pytest
from http_server import running
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage

from retrieval_pipeline.errors import ConfigurationError
from retrieval_pipeline.graph.agent import NO_MODEL, AgentContext, build_agent
from retrieval_pipeline.graph.builder import build_pipeline
from retrieval_pipeline.graph.context import Context
from retrieval_pipeline.graph.resources import PipelineResources
from retrieval_pipeline.ingest.job import Ingestor
from retrieval_pipeline.observability import add_trace_listener
from retrieval_pipeline.retriever import PipelineRetriever, make_retrieval_tool
from retrieval_pipeline.serve import ApiKeys, create_app, pool_per_worker, serve
from retrieval_pipeline.tools.retrieve import Retriever

QUESTION = "Who owns the service that failed with ERR_CONN_RESET?"
LEDGER = "ledger double posting refunds"
RESTRICTED_DOC = "incidents/inc-2041"


@pytest.fixture()
def corpus(ingestor: Ingestor, sample_corpus: Path) -> None:
    ingestor.ingest_paths([sample_corpus])


@pytest.fixture()
def pipeline(retriever: Retriever, corpus: None) -> Any:
    return build_pipeline(PipelineResources(retriever=retriever))


@pytest.fixture()
def traces() -> Any:
    records: list[dict[str, Any]] = []
    remove = add_trace_listener(records.append)
    yield records
    remove()


def stable(debug: dict[str, Any]) -> dict[str, Any]:
    """The debug block without wall-clock timings."""
    out = {k: v for k, v in debug.items() if k not in ("stageMs", "stage_ms")}
    out["branches"] = [
        {k: v for k, v in b.items() if not k.endswith("_ms") and not k.endswith("Ms")}
        for b in debug.get("branches", [])
    ]
    return out


def app_for(store: Any, pipeline: Any, **kwargs: Any) -> Any:
    return create_app(
        pipeline,
        health=lambda: {"schema_versions": store.schema_versions()},
        pool_stats=store.pool_stats,
        **kwargs,
    )


_KEY = "keys:\n  - name: x\n    sha256: " + "ab" * 32  # a valid entry


class TestStreamingAndTraces:
    def test_stage_progress_streams_as_updates_and_custom_events(
        self, pipeline: Any
    ) -> None:
        updates: list[str] = []
        events: list[dict[str, Any]] = []
        for mode, chunk in pipeline.stream(
            {"question": QUESTION, "limit": 3, "debug": True},
            stream_mode=["updates", "custom"],
        ):
            if mode == "updates":
                updates.extend(chunk)
            else:
                events.append(chunk["retrieval_pipeline"])
        assert updates == ["hybrid_retrieve", "fuse_graph", "assemble_context"]
        started = [e["stage"] for e in events if e["status"] == "start"]
        ended = [e for e in events if e["status"] == "end"]
        assert started == ["hybrid_retrieve", "fuse_graph", "assemble_context"]
        assert [e["stage"] for e in ended] == started
        assert all(e["ms"] >= 0 for e in ended)

    def test_one_trace_record_per_query_without_text(
        self, pipeline: Any, traces: list[dict[str, Any]], caplog: Any
    ) -> None:
        with caplog.at_level(logging.INFO, logger="retrieval_pipeline.trace"):
            out = pipeline.invoke({"question": QUESTION, "limit": 3, "debug": True})
        assert len(traces) == 1
        record = traces[0]
        assert record["query_id"].startswith("q_")
        assert record["index_revision"] == out["retrieval_debug"]["index_revision"]
        assert set(record["stage_ms"]) == {
            "hybrid_retrieve",
            "fuse_graph",
            "assemble_context",
        }
        assert record["selected_passages"] == 3
        assert [s["chunk_id"] for s in record["selected"]] == [
            c["chunk_id"] for c in out["chunks"]
        ]
        assert record["fusion_candidates"] == out["retrieval_debug"]["candidate_pool"]
        assert record["duplicate_share"] == 0.0
        logged = [json.loads(r.message) for r in caplog.records]
        assert logged == [json.loads(json.dumps(record, default=str))]
        serialised = json.dumps(record)
        for chunk in out["chunks"]:
            assert chunk["text"] not in serialised
        assert "ERR_CONN_RESET" not in serialised  # the question text is not logged

    def test_plain_path_traces_too(
        self, retriever: Retriever, corpus: None, traces: list[dict[str, Any]]
    ) -> None:
        plain = build_pipeline(PipelineResources(retriever=retriever))
        plain.invoke(
            {"question": QUESTION, "limit": 2},
            context=Context(graph_fusion=False, understanding=False),
        )
        assert [t["path"] for t in traces] == ["plain_retrieve"]
        assert traces[0]["index_revision"].startswith("chunks-")

    def test_opentelemetry_span_when_configured(self, pipeline: Any) -> None:
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
            InMemorySpanExporter,
        )

        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        original = trace.get_tracer_provider
        trace.get_tracer_provider = lambda: provider  # type: ignore[assignment]
        try:
            out = pipeline.invoke({"question": QUESTION, "limit": 2})
        finally:
            trace.get_tracer_provider = original  # type: ignore[assignment]
        (span,) = exporter.get_finished_spans()
        assert span.name == "retrieval_pipeline.query"
        assert span.attributes["rp.selected_passages"] == 2
        assert list(span.attributes["rp.selected_chunk_ids"]) == [
            c["chunk_id"] for c in out["chunks"]
        ]
        assert span.attributes["rp.stage_ms.hybrid_retrieve"] > 0


class TestRetrieverAndTool:
    def test_retriever_returns_documents_with_provenance(self, pipeline: Any) -> None:
        retriever = PipelineRetriever(pipeline=pipeline, limit=3)
        docs = retriever.invoke(QUESTION)
        out = pipeline.invoke({"question": QUESTION, "limit": 3})
        assert [d.id for d in docs] == [c["chunk_id"] for c in out["chunks"]]
        first, chunk = docs[0], out["chunks"][0]
        assert first.page_content == chunk["text"]
        assert first.metadata["source_uri"] == chunk["source_uri"]
        assert first.metadata["document_id"] == chunk["document_id"]
        assert first.metadata["ranks"] == chunk["ranks"]
        adocs = asyncio.run(retriever.ainvoke(QUESTION))
        assert [d.id for d in adocs] == [d.id for d in docs]

    def test_retriever_access_is_fixed(self, pipeline: Any) -> None:
        public = PipelineRetriever(pipeline=pipeline, limit=8)
        finance = PipelineRetriever(pipeline=pipeline, limit=8, principals=["finance"])
        public_docs = {d.metadata["document_id"] for d in public.invoke(LEDGER)}
        finance_docs = {d.metadata["document_id"] for d in finance.invoke(LEDGER)}
        assert RESTRICTED_DOC not in public_docs
        assert RESTRICTED_DOC in finance_docs

    def test_retriever_context_dict(self, pipeline: Any) -> None:
        retriever = PipelineRetriever(
            pipeline=pipeline, limit=2, context={"graph_fusion": False}
        )
        out = retriever.run(QUESTION)
        assert out["retrieval_debug"]["path"] == "plain_retrieve"

    def test_tool_returns_cited_evidence_and_artifact(self, pipeline: Any) -> None:
        tool = make_retrieval_tool(
            PipelineRetriever(pipeline=pipeline, limit=5), max_tokens=150
        )
        assert set(tool.args) == {"question", "doc_ids"}
        message = tool.invoke(
            {
                "type": "tool_call",
                "id": "call_1",
                "name": tool.name,
                "args": {"question": QUESTION},
            }
        )
        content, docs = message.content, message.artifact
        assert content.startswith("[1] ")
        assert "source: file://" in content
        assert len(docs) >= 1
        assert content.count("\n\n[") == len(docs) - 1
        from retrieval_pipeline.tools.tokens import default_token_counter

        assert default_token_counter().count(content) <= 150 + 2 * len(docs)

    def test_tool_scope_only_narrows(self, pipeline: Any) -> None:
        retriever = PipelineRetriever(
            pipeline=pipeline, limit=5, doc_ids=["runbooks/err-conn-reset"]
        )
        tool = make_retrieval_tool(retriever)
        widened = tool.invoke(
            {
                "type": "tool_call",
                "id": "c",
                "name": tool.name,
                "args": {"question": LEDGER, "doc_ids": [RESTRICTED_DOC]},
            }
        )
        assert widened.artifact == []
        assert widened.content == "No passages found for this question."
        restricted = make_retrieval_tool(PipelineRetriever(pipeline=pipeline))
        hidden = restricted.invoke(
            {
                "type": "tool_call",
                "id": "d",
                "name": tool.name,
                "args": {"question": LEDGER, "doc_ids": [RESTRICTED_DOC]},
            }
        )
        assert hidden.artifact == []  # no principals: the restricted doc is invisible


class TestAgent:
    def test_answers_with_bound_citations(self, pipeline: Any) -> None:
        model = GenericFakeChatModel(
            messages=iter([AIMessage("The Identity team owns it [1]. See [9].")])
        )
        agent = build_agent(pipeline, model)
        out = agent.invoke({"question": QUESTION, "limit": 3})
        chunks = pipeline.invoke({"question": QUESTION, "limit": 3})["chunks"]
        assert out["answer"].startswith("The Identity team owns it [1]")
        assert [c["chunk_id"] for c in out["citations"]] == [chunks[0]["chunk_id"]]
        assert out["citations"][0]["source_uri"] == chunks[0]["source_uri"]
        assert out["retrieval_debug"]["invalid_citations"] == ["[9]"]
        assert isinstance(out["messages"][-1], AIMessage)

    def test_without_model_returns_evidence(self, pipeline: Any) -> None:
        agent = build_agent(pipeline, None, resolve_model=False)
        out = agent.invoke({"messages": [HumanMessage(QUESTION)]})
        assert out["answer"].startswith(NO_MODEL)
        assert "[1] " in out["answer"]
        assert out["citations"][0]["marker"] == "[1]"
        assert out["retrieval_debug"]["path"] == "pipeline"

    def test_failing_model_degrades_to_evidence(self, pipeline: Any) -> None:
        class Broken(GenericFakeChatModel):
            def _generate(self, *args: Any, **kwargs: Any) -> Any:
                raise TimeoutError("deadline exceeded")

        agent = build_agent(pipeline, Broken(messages=iter([])))
        out = agent.invoke({"question": QUESTION})
        assert "the chat model failed (TimeoutError" in out["answer"]
        assert out["citations"]

    def test_parent_context_type_keeps_pipeline_defaults(self, pipeline: Any) -> None:
        agent = build_agent(pipeline, None, resolve_model=False)
        out = agent.invoke(
            {"question": QUESTION, "limit": 2},
            context=AgentContext(answer_style="bullet", evidence_tokens=60),
        )
        direct = pipeline.invoke({"question": QUESTION, "limit": 2})
        assert stable(out["retrieval_debug"]) == stable(direct["retrieval_debug"])
        # The agent's own context applied: a 60-token evidence budget.
        assert (
            len(out["citations"]) < len(direct["chunks"]) or len(direct["chunks"]) == 1
        )

    def test_agent_respects_access(self, pipeline: Any) -> None:
        agent = build_agent(pipeline, None, resolve_model=False)
        public = agent.invoke({"question": LEDGER})
        finance = agent.invoke({"question": LEDGER, "principals": ["finance"]})
        assert RESTRICTED_DOC not in {c["document_id"] for c in public["citations"]}
        assert RESTRICTED_DOC in {c["document_id"] for c in finance["citations"]}


class TestLangServe:
    def test_remote_runnable_matches_local_call(
        self, store: Any, pipeline: Any
    ) -> None:
        from langserve import RemoteRunnable

        payload = {"question": QUESTION, "limit": 4}
        local = pipeline.invoke(payload)
        with running(app_for(store, pipeline)) as url:
            remote = RemoteRunnable(f"{url}/retrieve").invoke(payload)
            batch = RemoteRunnable(f"{url}/retrieve").batch([payload, payload])
        assert remote["chunks"] == local["chunks"]
        assert stable(remote["retrieval_debug"]) == stable(local["retrieval_debug"])
        assert [b["chunks"] for b in batch] == [local["chunks"]] * 2

    def test_routes_schemas_health_metrics(self, store: Any, pipeline: Any) -> None:
        with (
            running(app_for(store, pipeline)) as url,
            httpx.Client(base_url=url, timeout=30) as http,
        ):
            schema = http.get("/retrieve/input_schema").json()
            assert "question" in json.dumps(schema)
            assert "chunks" in json.dumps(http.get("/retrieve/output_schema").json())
            assert http.get("/retrieve/playground/").status_code == 200
            ok = http.post(
                "/retrieve/invoke", json={"input": {"question": QUESTION, "limit": 2}}
            )
            assert ok.status_code == 200
            assert len(ok.json()["output"]["chunks"]) == 2
            with http.stream(
                "POST", "/retrieve/stream", json={"input": {"question": QUESTION}}
            ) as stream:
                body = "".join(stream.iter_text())
            assert "event: data" in body and "event: end" in body
            empty = http.post("/retrieve/invoke", json={"input": {"question": "  "}})
            assert empty.status_code == 400
            assert "question" in empty.json()["detail"]
            assert "Traceback" not in empty.text
            health = http.get("/healthz")
            assert health.status_code == 200 and health.json()["status"] == "ok"
            metrics = http.get("/metrics").text
        assert 'rp_http_requests_total{route="invoke",status="200"} 1.0' in metrics
        assert 'rp_http_requests_total{route="invoke",status="400"} 1.0' in metrics
        assert 'rp_queries_total{path="pipeline"} 2.0' in metrics
        assert 'rp_stage_seconds_count{stage="hybrid_retrieve"} 2.0' in metrics
        assert "rp_empty_results_total 0.0" in metrics
        assert "rp_duplicate_share_count 2.0" in metrics
        assert 'rp_db_pool_connections{state="pool_size"}' in metrics

    def test_health_reports_database_down(self, store: Any, pipeline: Any) -> None:
        from retrieval_pipeline.errors import DatabaseUnavailableError

        def down() -> dict[str, Any]:
            raise DatabaseUnavailableError("cannot connect to postgresql://…/rp")

        app = create_app(pipeline, health=down, pool_stats=store.pool_stats)
        with running(app) as url:
            response = httpx.get(f"{url}/healthz", timeout=30)
        assert response.status_code == 503
        # Public for load balancers: ok or not, nothing about the server behind it.
        assert response.json() == {"status": "unavailable"}


class TestApiKeys:
    @pytest.fixture()
    def keys(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ApiKeys:
        monkeypatch.setenv("RP_TEST_FINANCE_KEY", "finance-secret-key")
        digest = hashlib.sha256(b"public-secret-key").hexdigest()
        path = tmp_path / "keys.yaml"
        path.write_text(
            "keys:\n"
            "  - name: finance-bot\n"
            "    key_env: RP_TEST_FINANCE_KEY\n"
            "    principals: [finance, security]\n"
            "  - name: public-bot\n"
            f"    sha256: {digest}\n"
            "    principals: []\n"
            "    tenant: other\n"
            "  - name: monitoring\n"
            f"    sha256: {hashlib.sha256(b'metrics-secret-key').hexdigest()}\n"
            "    grants: [metrics]\n"
        )
        return ApiKeys.load(path)

    def invoke(self, http: httpx.Client, key: str | None, **input: Any) -> Any:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return http.post(
            "/retrieve/invoke",
            json={"input": {"question": LEDGER, "limit": 8, **input}},
            headers=headers,
        )

    def test_keys_map_to_principals_and_cannot_widen(
        self, store: Any, pipeline: Any, keys: ApiKeys
    ) -> None:
        with (
            running(app_for(store, pipeline, api_keys=keys)) as url,
            httpx.Client(base_url=url, timeout=30) as http,
        ):
            assert self.invoke(http, None).status_code == 401
            assert self.invoke(http, "wrong").status_code == 401
            finance = self.invoke(http, "finance-secret-key")
            narrowed = self.invoke(http, "finance-secret-key", principals=["ops"])
            # The public key claims finance in the body: ignored; its tenant "other"
            # holds no documents, so nothing comes back.
            spoofed = http.post(
                "/retrieve/invoke",
                json={
                    "input": {
                        "question": LEDGER,
                        "principals": ["finance"],
                        "tenant": None,
                    }
                },
                headers={"X-API-Key": "public-secret-key"},
            )
            assert (
                http.get(
                    "/metrics", headers={"X-API-Key": "public-secret-key"}
                ).status_code
                == 403
            )
            metrics = http.get(
                "/metrics", headers={"X-API-Key": "metrics-secret-key"}
            ).text

        def docs(response: Any) -> set[str]:
            assert response.status_code == 200, response.text
            return {c["document_id"] for c in response.json()["output"]["chunks"]}

        assert RESTRICTED_DOC in docs(finance)
        assert RESTRICTED_DOC not in docs(narrowed)
        assert docs(spoofed) == set()
        assert 'rp_permission_rejections_total{reason="missing_key"} 1.0' in metrics
        assert 'rp_permission_rejections_total{reason="invalid_key"} 1.0' in metrics
        assert (
            'rp_permission_rejections_total{reason="principals_narrowed"} 2.0'
            in metrics
        )
        assert (
            'rp_permission_rejections_total{reason="tenant_overridden"} 1.0' in metrics
        )
        assert "finance-secret-key" not in metrics

    @pytest.mark.parametrize(
        ("text", "message"),
        [
            ("keys: []", "non-empty list"),
            ("keys:\n  - principals: [a]\n    sha256: ab", "needs a 'name'"),
            ("keys:\n  - name: x\n    sha256: abc", "64 hex digits"),
            ("keys:\n  - name: x\n    key_env: RP_UNSET_KEY_VAR", "is not set"),
            ("keys:\n  - name: x", "needs 'key_env' or 'sha256'"),
            ("keys: [", "cannot read"),
            # Fail closed: each of these used to give a key with no tenant.
            (f"{_KEY}\n    tennant: acme", r"'tennant' \(did you mean 'tenant'\?\)"),
            (f"{_KEY}\n    tenants: [acme]", "unknown field 'tenants'"),
            (f"{_KEY}\n    tenant:", "'tenant' must be a non-empty string, got None"),
            (f"{_KEY}\n    tenant: ''", "non-empty string, got ''"),
        ],
    )
    def test_bad_key_files_are_clear(
        self, tmp_path: Path, text: str, message: str
    ) -> None:
        path = tmp_path / "keys.yaml"
        path.write_text(text)
        with pytest.raises(ConfigurationError, match=message):
            ApiKeys.load(path)

    def test_a_short_key_in_the_environment_is_refused(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        path = tmp_path / "keys.yaml"
        path.write_text("keys:\n  - name: x\n    key_env: RP_SHORT_KEY\n")
        monkeypatch.setenv("RP_SHORT_KEY", "x")
        with pytest.raises(ConfigurationError, match="has 1 characters; a key needs"):
            ApiKeys.load(path)
        monkeypatch.setenv("RP_SHORT_KEY", "k" * 16)
        assert len(ApiKeys.load(path).by_digest) == 1

    def test_refuses_public_bind_without_keys(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.delenv("RETRIEVAL_PIPELINE_API_KEYS", raising=False)
        with pytest.raises(ConfigurationError, match="refusing to bind 0.0.0.0"):
            serve("0.0.0.0", 8000)


class TestWorkers:
    """`serve --workers 2`: real processes over one database, keys and metrics."""

    def test_pool_formula_and_budget(self) -> None:
        assert [pool_per_worker(16, n) for n in (1, 2, 4, 8)] == [8, 8, 4, 2]
        assert pool_per_worker(5, 2) == 3
        with pytest.raises(ConfigurationError, match="at least 18 database"):
            serve("127.0.0.1", 8000, workers=9, db_connections=16)
        with pytest.raises(ConfigurationError, match="at least 1"):
            serve("127.0.0.1", 8000, workers=0)

    def test_two_workers_share_database_keys_and_metrics(
        self,
        pg_url: str,
        embedder: Any,
        sample_corpus: Path,
        tmp_path: Path,
    ) -> None:
        import os
        import signal
        import socket
        import subprocess
        import sys
        import time
        import uuid
        from concurrent.futures import ThreadPoolExecutor

        import psycopg
        from psycopg import sql
        from psycopg.conninfo import make_conninfo

        from retrieval_pipeline.tools.store.store import Store

        # A fresh database: `serve` migrates it once, before any worker starts.
        name = f"rp_workers_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        url = make_conninfo(pg_url, dbname=name)
        keys = tmp_path / "keys.yaml"
        keys.write_text(
            "keys:\n"
            "  - name: finance-bot\n"
            "    key_env: RP_W_FINANCE\n"
            "    principals: [finance, security]\n"
            "  - name: public-bot\n"
            "    key_env: RP_W_PUBLIC\n"
            "  - name: monitoring\n"
            "    key_env: RP_W_METRICS\n"
            "    grants: [metrics]\n"
        )
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        env = {
            **os.environ,
            "DATABASE_URL": url,
            "HF_HUB_OFFLINE": "1",
            "RP_W_FINANCE": "finance-secret-key",
            "RP_W_PUBLIC": "public-secret-key",
            "RP_W_METRICS": "metrics-secret-key",
        }
        env.pop("RETRIEVAL_PIPELINE_API_KEYS", None)
        cli = str(Path(sys.executable).with_name("retrieval-pipeline"))
        log_path = tmp_path / "serve.log"
        log = log_path.open("w")
        server = subprocess.Popen(
            [cli, "serve", "--workers", "2", "--port", str(port)]
            + ["--api-keys", str(keys), "--db-connections", "6"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        base = f"http://127.0.0.1:{port}"

        def metrics(http: httpx.Client) -> str:
            response = http.get("/metrics", headers={"X-API-Key": "metrics-secret-key"})
            assert response.status_code == 200
            return response.text

        try:
            deadline = time.monotonic() + 120
            while True:
                assert server.poll() is None, log_path.read_text()[-3000:]
                try:
                    if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                        # Both workers up: every scrape counts two live workers.
                        with httpx.Client(base_url=base, timeout=10) as http:
                            if "rp_workers 2.0" in metrics(http):
                                break
                except httpx.HTTPError:
                    pass
                assert time.monotonic() < deadline, log_path.read_text()[-3000:]
                time.sleep(0.3)
            store = Store(url)
            try:
                assert store.schema_versions()  # migrated by `serve`
                Ingestor(store, embedder).ingest_paths([sample_corpus])
            finally:
                store.close()

            def invoke(key: str | None) -> httpx.Response:
                headers = {"X-API-Key": key} if key else {}
                with httpx.Client(base_url=base, timeout=60) as http:
                    return http.post(
                        "/retrieve/invoke",
                        json={"input": {"question": LEDGER, "limit": 8}},
                        headers=headers,
                    )

            assert invoke(None).status_code == 401
            with ThreadPoolExecutor(4) as pool:
                answers = list(pool.map(invoke, ["finance-secret-key"] * 6))
                public = list(pool.map(invoke, ["public-secret-key"] * 2))
            for response in answers + public:
                assert response.status_code == 200, response.text
            for response in answers:
                docs = {c["document_id"] for c in response.json()["output"]["chunks"]}
                assert RESTRICTED_DOC in docs
            for response in public:
                docs = {c["document_id"] for c in response.json()["output"]["chunks"]}
                assert RESTRICTED_DOC not in docs
            # Whichever worker answers a scrape, it reports both workers' counts
            # (a fresh connection per scrape, so the workers take turns).
            for _ in range(6):
                with httpx.Client(base_url=base, timeout=10) as http:
                    text = metrics(http)
                assert 'rp_http_requests_total{route="invoke",status="200"} 8.0' in text
                assert (
                    'rp_permission_rejections_total{reason="missing_key"} 1.0' in text
                )
                assert "rp_workers 2.0" in text
                assert 'rp_queries_total{path="pipeline"} 8.0' in text
                pool_size = float(
                    text.split('rp_db_pool_connections{state="pool_size"} ')[1].split()[
                        0
                    ]
                )
                assert 2 <= pool_size <= 6  # two pools of at most 3 each
            with psycopg.connect(pg_url) as probe:
                backends = probe.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (name,)
                ).fetchone()
            assert backends is not None and backends[0] <= 6
            _kill_one_worker_and_see_it_replaced(server.pid, base, metrics)
            assert invoke("finance-secret-key").status_code == 200
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()
            log.close()
            with psycopg.connect(pg_url, autocommit=True) as admin:
                admin.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                        sql.Identifier(name)
                    )
                )
        assert "Traceback" not in log_path.read_text()


def _worker_pids(server_pid: int) -> set[int]:
    import psutil

    pids = set()
    for child in psutil.Process(server_pid).children(recursive=True):
        try:
            line = " ".join(child.cmdline())
        except psutil.Error:
            continue
        if "multiprocessing" in line and "resource_tracker" not in line:
            pids.add(child.pid)
    return pids


def _kill_one_worker_and_see_it_replaced(
    server_pid: int, base: str, metrics: Any
) -> None:
    """SIGKILL a worker: uvicorn starts another, and /metrics stops counting it."""
    import os
    import signal
    import time

    before = _worker_pids(server_pid)
    assert len(before) == 2
    victim = min(before)
    os.kill(victim, signal.SIGKILL)
    deadline = time.monotonic() + 90
    text = ""
    while True:
        now = _worker_pids(server_pid)
        if len(now) == 2 and victim not in now:
            try:
                with httpx.Client(base_url=base, timeout=10) as http:
                    text = metrics(http)
            except httpx.HTTPError:
                text = ""
            # Two live workers again, never three: the killed one's gauge is gone.
            if "rp_workers 2.0" in text:
                break
        assert time.monotonic() < deadline, (now, text[-2000:])
        time.sleep(0.5)
