"""LangGraph Studio's server: `langgraph dev` serves both graphs from langgraph.json.

Runs only in the studio environment (``make test-studio``): ``langgraph-cli[inmem]``
cannot share an environment with ``langserve[server]``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

REPO = Path(__file__).resolve().parents[2]
QUESTION = "Who owns the service that failed with ERR_CONN_RESET?"


def _langgraph_cli() -> str | None:
    beside = Path(sys.executable).with_name("langgraph")
    return str(beside) if beside.exists() else shutil.which("langgraph")


if _langgraph_cli() is None:
    if os.environ.get("RP_REQUIRE_STUDIO"):
        raise RuntimeError("langgraph-cli[inmem] is not installed in this environment")
    pytest.skip("needs the studio extra (make test-studio)", allow_module_level=True)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _config(tmp: Path) -> Path:
    """The committed langgraph.json with its paths made absolute, in a temp dir.

    `langgraph dev` writes its state beside the config; keeping it out of the
    checkout also keeps the tree clean.
    """
    config = json.loads((REPO / "langgraph.json").read_text())
    config["dependencies"] = [str(REPO)]
    for spec in config["graphs"].values():
        spec["path"] = str(REPO / spec["path"].removeprefix("./"))
    if "auth" in config:
        config["auth"]["path"] = str(REPO / config["auth"]["path"].removeprefix("./"))
    if "http" in config:
        config["http"]["app"] = str(REPO / config["http"]["app"].removeprefix("./"))
    path = tmp / "langgraph.json"
    path.write_text(json.dumps(config))
    return path


@pytest.fixture()
def server(
    pg_url: str, ingestor: Any, sample_corpus: Path, tmp_path: Path
) -> Iterator[str]:
    ingestor.ingest_paths([sample_corpus])
    yield from _langgraph_dev(pg_url, tmp_path, {})


@pytest.fixture()
def keyed_server(
    pg_url: str,
    ingestor: Any,
    sample_corpus: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[str]:
    ingestor.ingest_paths([sample_corpus])
    keys = tmp_path / "keys.yaml"
    keys.write_text(
        "keys:\n"
        "  - name: public-bot\n"
        "    key_env: RP_STUDIO_PUBLIC_KEY\n"
        "  - name: finance-bot\n"
        "    key_env: RP_STUDIO_FINANCE_KEY\n"
        "    principals: [finance]\n"
        "  - name: other-tenant\n"
        "    key_env: RP_STUDIO_OTHER_KEY\n"
        "    principals: [finance]\n"
        "    tenant: other\n"
        "  - name: monitoring\n"
        "    key_env: RP_STUDIO_METRICS_KEY\n"
        "    grants: [metrics]\n"
    )
    yield from _langgraph_dev(
        pg_url,
        tmp_path,
        {
            "RETRIEVAL_PIPELINE_API_KEYS": str(keys),
            "RP_STUDIO_PUBLIC_KEY": "public-secret-key",
            "RP_STUDIO_FINANCE_KEY": "finance-secret-key",
            "RP_STUDIO_OTHER_KEY": "other-secret-key",
            "RP_STUDIO_METRICS_KEY": "metrics-secret-key",
        },
    )


def _langgraph_dev(pg_url: str, tmp_path: Path, extra: dict[str, str]) -> Iterator[str]:
    port = _free_port()
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OPENAI_", "VOYAGE_", "COHERE_", "LANGSMITH_"))
        and k != "RETRIEVAL_PIPELINE_API_KEYS"
    }
    env.update(DATABASE_URL=pg_url, LANGGRAPH_CLI_NO_ANALYTICS="1", **extra)
    log = (tmp_path / "langgraph-dev.log").open("w")
    process = subprocess.Popen(
        [
            str(_langgraph_cli()),
            "dev",
            "--no-browser",
            "--no-reload",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--config",
            str(_config(tmp_path)),
        ],
        cwd=tmp_path,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if process.poll() is not None:
                raise RuntimeError(
                    "langgraph dev exited:\n"
                    + (tmp_path / "langgraph-dev.log").read_text()[-4000:]
                )
            try:
                if httpx.get(f"{url}/ok", timeout=2).status_code in (200, 401, 403):
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("langgraph dev did not answer /ok in 120 s")
            time.sleep(0.5)
        yield url
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        log.close()


def _assistant(http: httpx.Client, graph_id: str) -> str:
    found = http.post("/assistants/search", json={"graph_id": graph_id}).json()
    assert found, f"no assistant for {graph_id}"
    return str(found[0]["assistant_id"])


def _sse(body: str) -> list[tuple[str, Any]]:
    events: list[tuple[str, Any]] = []
    for block in body.replace("\r\n", "\n").split("\n\n"):
        name, data = "", ""
        for line in block.splitlines():
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data += line[5:].strip()
        if name:
            events.append((name, json.loads(data) if data else None))
    return events


def test_studio_serves_pipeline_and_agent(server: str) -> None:
    with httpx.Client(base_url=server, timeout=120) as http:
        pipeline_id = _assistant(http, "retrieval_pipeline")
        schemas = http.get(f"/assistants/{pipeline_id}/schemas").json()
        inputs = schemas["input_schema"]["properties"]
        assert {"question", "limit", "doc_ids", "principals", "tenant"} <= set(inputs)
        context = schemas["context_schema"]["properties"]
        assert {"graph_fusion", "reranker", "token_budget", "candidate_pool"} <= set(
            context
        )
        assert set(schemas["output_schema"]["properties"]) == {
            "chunks",
            "retrieval_debug",
        }

        waited = http.post(
            "/runs/wait",
            json={
                "assistant_id": "retrieval_pipeline",
                "input": {"question": QUESTION, "limit": 3},
            },
        )
        assert waited.status_code == 200, waited.text
        output = waited.json()
        assert len(output["chunks"]) == 3
        assert output["retrieval_debug"]["path"] == "pipeline"
        assert output["chunks"][0]["source_uri"].startswith("file://")

        plain = http.post(
            "/runs/wait",
            json={
                "assistant_id": "retrieval_pipeline",
                "input": {"question": QUESTION, "limit": 2},
                "context": {"graph_fusion": False},
            },
        ).json()
        assert plain["retrieval_debug"]["path"] == "plain_retrieve"

        streamed = http.post(
            "/runs/stream",
            json={
                "assistant_id": "retrieval_pipeline",
                "input": {"question": QUESTION, "limit": 3},
                "stream_mode": ["updates", "custom"],
            },
        )
        events = _sse(streamed.text)
        updates = [node for name, data in events if name == "updates" for node in data]
        stages = [
            data["retrieval_pipeline"]["stage"]
            for name, data in events
            if name == "custom" and data["retrieval_pipeline"]["status"] == "end"
        ]
        assert updates == ["hybrid_retrieve", "fuse_graph", "assemble_context"]
        assert stages == updates

        agent = http.post(
            "/runs/wait",
            json={
                "assistant_id": "retrieval_agent",
                "input": {"messages": [{"role": "human", "content": QUESTION}]},
            },
        ).json()
        assert agent["answer"].startswith("No chat model is configured")
        assert agent["citations"][0]["marker"] == "[1]"
        assert agent["citations"][0]["source_uri"].startswith("file://")

        # http.app: our /healthz and /metrics (no key file: open, as on loopback).
        assert http.get("/healthz").json() == {"status": "ok"}
        metrics = http.get("/metrics")
        assert metrics.status_code == 200
        assert 'rp_queries_total{path="pipeline"}' in metrics.text
        assert 'rp_queries_total{path="plain_retrieve"} 1.0' in metrics.text
        assert http.get("/ok").status_code == 200  # the server's own routes remain


LEDGER = "ledger double posting refunds"
RESTRICTED_DOC = "incidents/inc-2041"


def test_agent_server_runs_hold_the_api_keys_scope(keyed_server: str) -> None:
    def run(key: str | None, **input: Any) -> Any:
        headers = {"X-API-Key": key} if key else {}
        with httpx.Client(base_url=keyed_server, timeout=120) as http:
            return http.post(
                "/runs/wait",
                json={
                    "assistant_id": "retrieval_pipeline",
                    "input": {"question": LEDGER, "limit": 8, **input},
                },
                headers=headers,
            )

    def docs(response: Any) -> set[str]:
        assert response.status_code == 200, response.text
        return {c["document_id"] for c in response.json()["chunks"]}

    assert run(None).status_code in (401, 403)
    assert run("wrong").status_code in (401, 403)
    finance = docs(run("finance-secret-key"))
    assert RESTRICTED_DOC in finance
    # A run's principals narrow the key's grant; they never widen it.
    assert RESTRICTED_DOC not in docs(run("finance-secret-key", principals=[]))
    spoofed = run("public-secret-key", principals=["finance", "security"], tenant=None)
    assert RESTRICTED_DOC not in docs(spoofed)
    # The tenant is always the key's: "other" holds no documents.
    assert docs(run("other-secret-key", tenant=None)) == set()
    # Debug details need the debug grant.
    debug = run("finance-secret-key", debug=True).json()["retrieval_debug"]
    assert "stage_ms" not in debug and "index_revision" not in debug
    # The agent's pipeline subgraph holds the same scope.
    with httpx.Client(base_url=keyed_server, timeout=120) as http:
        agent = http.post(
            "/runs/wait",
            json={
                "assistant_id": "retrieval_agent",
                "input": {
                    "messages": [{"role": "human", "content": LEDGER}],
                    "principals": ["finance", "security"],
                },
            },
            headers={"X-API-Key": "public-secret-key"},
        )
    assert agent.status_code == 200, agent.text
    cited = {c.get("document_id") for c in agent.json()["citations"]}
    assert RESTRICTED_DOC not in cited

    # http.app: /healthz is public; /metrics needs a key with the metrics grant.
    with httpx.Client(base_url=keyed_server, timeout=60) as http:
        assert http.get("/healthz").json() == {"status": "ok"}
        assert http.get("/metrics").status_code == 401
        assert http.get("/metrics", headers={"X-API-Key": "wrong"}).status_code == 401
        denied = http.get("/metrics", headers={"X-API-Key": "finance-secret-key"})
        assert denied.status_code == 403
        metrics = http.get("/metrics", headers={"X-API-Key": "metrics-secret-key"})
        assert metrics.status_code == 200, metrics.text
    assert 'rp_queries_total{path="pipeline"}' in metrics.text
    assert 'rp_permission_rejections_total{reason="missing_key"} 1.0' in metrics.text
    assert 'rp_permission_rejections_total{reason="missing_grant"} 1.0' in metrics.text
    assert "secret" not in metrics.text
