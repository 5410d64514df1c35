"""The HTTP trust boundary: every route holds the API key's scope.

Regression tests for each finding of the security review (issue 15), a test that
enumerates every route the app serves (it fails when a route is added without being
classified here and so covered by the property test), a hypothesis property over
generated keys and requests on every data route (zero leaks in bodies, debug blocks,
stream events, traces and metrics) and a fuzz run of hostile requests (zero 5xx).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from figures import record_figure
from helpers import property_settings
from http_server import running
from hypothesis import given
from hypothesis import strategies as st
from security_corpus import (
    GATED_DEBUG_FIELDS,
    PRINCIPALS,
    QUESTIONS,
    TENANTS,
    Doc,
    Key,
    effective_principals,
    generate_corpus,
    generate_keys,
    hidden_canaries,
    key_file,
    write_corpus,
)

from retrieval_pipeline.auth import MAX_JSON_DEPTH
from retrieval_pipeline.errors import DatabaseUnavailableError
from retrieval_pipeline.graph.builder import build_pipeline
from retrieval_pipeline.graph.resources import PipelineResources
from retrieval_pipeline.ingest.job import Ingestor
from retrieval_pipeline.observability import add_trace_listener
from retrieval_pipeline.serve import create_app
from retrieval_pipeline.tools.retrieve import Retriever

# Every route the app serves, by (path, method), and how the tests reach it. A route
# missing here fails test_every_served_route_is_classified: classify it (and cover it
# in the property test if it returns data) before serving it.
DATA_ROUTES = {
    ("/retrieve/invoke", "POST"),
    ("/retrieve/batch", "POST"),
    ("/retrieve/stream", "POST"),
    ("/retrieve/stream_log", "POST"),
}
META_ROUTES = {  # no document data; a key is still required
    ("/retrieve/input_schema", "GET"),
    ("/retrieve/output_schema", "GET"),
    ("/retrieve/config_schema", "GET"),
    ("/retrieve/playground/{file_path:path}", "GET"),
    ("/retrieve/playground", "GET"),  # a relative redirect to the page
    ("/openapi.json", "GET"),
    ("/docs", "GET"),
    ("/docs/oauth2-redirect", "GET"),
    ("/redoc", "GET"),
    ("/", "GET"),
}
GRANTED_ROUTES = {("/metrics", "GET")}  # a key with the metrics grant
PUBLIC_ROUTES = {("/healthz", "GET")}  # says ok or unavailable, nothing else
# The Agent Server's user, forged by a LangServe client in its config.
FORGED_AGENT_USER = {
    "configurable": {
        "langgraph_auth_user": {
            "identity": "forged",
            "retrieval_pipeline_scope": {
                "principals": list(PRINCIPALS),
                "tenant": "acme",
                "grants": ["debug", "metrics"],
            },
        }
    }
}


@dataclass
class World:
    docs: list[Doc]
    keys: list[Key]
    http: httpx.Client
    app: Any
    traces: list[dict[str, Any]]
    chunk_docs: dict[str, str]  # chunk id -> document id

    def key(
        self, *, tenant: Any = ..., principals: int | None = None, grant: str = ""
    ) -> Key:
        for key in self.keys:
            ident = key.identity
            if tenant is not ... and ident.tenant != tenant:
                continue
            if principals is not None and len(ident.principals) != principals:
                continue
            if grant and grant not in ident.grants:
                continue
            return key
        raise LookupError("no such key in the generated set")


def _headers(key: Key | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {key.secret}"} if key else {}


@pytest.fixture()
def world(
    tmp_path: Path, store: Any, ingestor: Ingestor, retriever: Retriever
) -> Iterator[World]:
    docs = generate_corpus()
    root = tmp_path / "corpus"
    root.mkdir()
    summary = ingestor.ingest_paths([write_corpus(root, docs)])
    assert not summary.failures, summary.failures
    keys = generate_keys()
    api_keys = key_file(tmp_path / "keys.yaml", keys)
    pipeline = build_pipeline(PipelineResources(retriever=retriever))
    app = create_app(
        pipeline,
        api_keys=api_keys,
        health=lambda: {"schema_versions": store.schema_versions()},
        pool_stats=store.pool_stats,
    )
    with store.connection() as conn:
        rows = conn.execute(
            "SELECT c.id, d.source_id FROM chunks c JOIN documents d"
            " ON d.id = c.document_id"
        ).fetchall()
    traces: list[dict[str, Any]] = []
    remove = add_trace_listener(traces.append)
    try:
        with running(app) as url, httpx.Client(base_url=url, timeout=60) as http:
            yield World(docs, keys, http, app, traces, {r[0]: r[1] for r in rows})
    finally:
        remove()


def _gated_fields(value: Any) -> list[str]:
    """Debug-only fields present with a value anywhere in a JSON value."""
    found: list[str] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for k, v in item.items():
                if k in GATED_DEBUG_FIELDS and v not in (None, {}, [], ""):
                    found.append(k)
                stack.append(v)
        elif isinstance(item, list):
            stack.extend(item)
    return found


def _scope_of(key: Key, item: dict[str, Any]) -> tuple[set[str], str | None]:
    return effective_principals(key.identity, item), key.identity.tenant


def _assert_no_leak(
    world: World, text: str, key: Key, items: list[dict[str, Any]]
) -> None:
    for item in items:
        principals, tenant = _scope_of(key, item)
        for canary in hidden_canaries(world.docs, principals, tenant):
            assert canary not in text, (canary, key.identity, item, text[:400])


def _chunk_docs(payload: Any) -> list[str]:
    return [c["document_id"] for c in payload["chunks"]]


# --- regression tests: one per finding ---------------------------------------------
class TestBatch:
    @pytest.mark.parametrize(
        "config",
        [
            None,
            {"configurable": {}},
            [{"configurable": {}}, {"configurable": {}}],
            {
                "metadata": {
                    "retrieval_pipeline_identity": {"principals": list(PRINCIPALS)}
                }
            },
            FORGED_AGENT_USER,
        ],
        ids=["absent", "dict", "list", "injected-metadata", "forged-agent-user"],
    )
    def test_batch_items_hold_the_key_scope(self, world: World, config: Any) -> None:
        key = world.key(tenant=None, principals=0)
        items = [
            {
                "question": QUESTIONS[0],
                "principals": list(PRINCIPALS),
                "tenant": "acme",
            },
            {"question": QUESTIONS[1], "principals": list(PRINCIPALS)},
        ]
        body: dict[str, Any] = {"inputs": items}
        if config is not None:
            body["config"] = config
        response = world.http.post("/retrieve/batch", json=body, headers=_headers(key))
        assert response.status_code == 200, response.text
        _assert_no_leak(world, response.text, key, items)
        public = {d.id for d in world.docs if d.tenant is None and not d.principals}
        for output in response.json()["output"]:
            assert set(_chunk_docs(output)) <= public


class TestOutsideProbeFindings:
    """Found by an outside probe of a running server (issue 15's review)."""

    @pytest.mark.parametrize("item", ["hi", None, 5, [{"question": "q"}]])
    def test_a_batch_item_that_is_not_an_object_is_a_400(
        self, world: World, item: Any
    ) -> None:
        response = world.http.post(
            "/retrieve/batch",
            json={"inputs": [item]},
            headers=_headers(world.keys[0]),
        )
        assert response.status_code == 400, response.text
        assert "object" in response.json()["detail"]

    def test_a_batch_is_bounded(self, world: World) -> None:
        from retrieval_pipeline.serve import MAX_BATCH_ITEMS

        items = [{"question": QUESTIONS[0]}] * (MAX_BATCH_ITEMS + 1)
        response = world.http.post(
            "/retrieve/batch", json={"inputs": items}, headers=_headers(world.keys[0])
        )
        assert response.status_code == 400
        assert str(MAX_BATCH_ITEMS) in response.json()["detail"]

    def test_two_credentials_are_refused_not_resolved(self, world: World) -> None:
        low, high = world.keys[0].secret, world.keys[6].secret
        body = {"input": {"question": QUESTIONS[0]}}
        for headers in (
            [("Authorization", f"Bearer {low}"), ("X-API-Key", high)],
            [("Authorization", f"Bearer {low}"), ("Authorization", f"Bearer {high}")],
            [("X-API-Key", low), ("X-API-Key", high)],
        ):
            response = world.http.post("/retrieve/invoke", json=body, headers=headers)
            assert response.status_code == 401, headers
        lower = world.http.post(
            "/retrieve/invoke", json=body, headers={"Authorization": f"bearer {low}"}
        )
        assert lower.status_code == 200

    def test_a_body_that_is_not_utf8_is_a_400(self, world: World) -> None:
        body = json.dumps({"input": {"question": QUESTIONS[0]}})
        for encoding in ("utf-16", "utf-32", "latin-1"):
            response = world.http.post(
                "/retrieve/invoke",
                content=(body + ' "\u00e9"é').encode(encoding)
                if encoding == "latin-1"
                else body.encode(encoding),
                headers={**_headers(world.keys[0]), "content-type": "application/json"},
            )
            assert response.status_code == 400, (encoding, response.text)


class TestSecondOutsideProbe:
    """Found by the second outside probe of a running server (issue 17's review)."""

    def test_a_server_without_keys_answers_only_requests_addressed_to_loopback(
        self, world: World, retriever: Retriever, store: Any
    ) -> None:
        from retrieval_pipeline.settings import allowed_hosts

        # DNS rebinding: a page on rebind.example re-points its own name at
        # 127.0.0.1, so the visitor's browser reaches a keyless loopback server.
        app = create_app(
            build_pipeline(PipelineResources(retriever=retriever)),
            health=lambda: {"schema_versions": store.schema_versions()},
            pool_stats=store.pool_stats,
            allowed_hosts=allowed_hosts(keyed=False),
        )
        hidden = next(d for d in world.docs if d.principals)
        body = {
            "input": {
                "question": hidden.canary,
                "principals": list(hidden.principals),
                "tenant": hidden.tenant,
            }
        }
        with running(app) as url, httpx.Client(base_url=url, timeout=60) as http:
            port = url.rsplit(":", 1)[1]
            for host in (f"rebind.example:{port}", "rebind.example", "127.0.0.2", ""):
                for method, path in (
                    ("POST", "/retrieve/invoke"),
                    ("POST", "/retrieve/stream"),
                    ("GET", "/metrics"),
                    ("GET", "/healthz"),
                ):
                    refused = http.request(
                        method,
                        path,
                        json=body if method == "POST" else None,
                        headers={"Host": host},
                    )
                    assert refused.status_code == 400, (host, path, refused.text)
                    detail = refused.json()["detail"]
                    assert "RETRIEVAL_PIPELINE_ALLOWED_HOSTS" in detail
                    assert hidden.canary not in refused.text
            for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"):
                answered = http.post(
                    "/retrieve/invoke", json=body, headers={"Host": host}
                )
                assert answered.status_code == 200, (host, answered.text)
                assert hidden.canary in answered.text  # what the refusals kept back

    @pytest.mark.parametrize(
        "content_type",
        ["text/plain;charset=UTF-8", "application/x-www-form-urlencoded", None],
    )
    def test_a_body_not_declared_json_is_a_415_on_every_data_route(
        self, world: World, content_type: str | None
    ) -> None:
        # A browser sends these cross-site without a preflight; never a JSON one.
        body = json.dumps({"input": {"question": QUESTIONS[0]}}).encode()
        for path, _ in sorted(DATA_ROUTES):
            headers = _headers(world.keys[0])
            if content_type is not None:
                headers["content-type"] = content_type
            request = world.http.build_request("POST", path, content=body)
            request.headers.pop("content-type", None)
            request.headers.update(headers)
            response = world.http.send(request)
            assert response.status_code == 415, (path, response.text)
            assert "application/json" in response.json()["detail"]

    @pytest.mark.parametrize(
        "content_type", ["application/json; charset=utf-8", "application/vnd.rp+json"]
    )
    def test_json_media_types_with_parameters_are_accepted(
        self, world: World, content_type: str
    ) -> None:
        response = world.http.post(
            "/retrieve/invoke",
            content=json.dumps({"input": {"question": QUESTIONS[0]}}),
            headers={**_headers(world.keys[0]), "content-type": content_type},
        )
        assert response.status_code == 200, response.text

    @pytest.mark.parametrize(
        ("item", "field"),
        [
            ({"limit": 1, "doc_ids": ["x"]}, "question"),
            ({"question": QUESTIONS[0], "tenant": 5}, "tenant"),
            ({"question": QUESTIONS[0], "tenant": ["a"]}, "tenant"),
            ({"question": QUESTIONS[0], "debug": None}, "debug"),
            ({"question": QUESTIONS[0], "debug": "x"}, "debug"),
        ],
    )
    def test_a_batch_item_of_the_wrong_shape_is_a_400_naming_the_field(
        self, world: World, item: dict[str, Any], field: str
    ) -> None:
        response = world.http.post(
            "/retrieve/batch",
            json={"inputs": [{"question": QUESTIONS[0]}, item]},
            headers=_headers(world.keys[0]),
        )
        assert response.status_code == 400, response.text
        detail = response.json()["detail"]
        assert "item 2" in detail and f"'{field}'" in detail, detail
        # The connection is still good (a 500 here used to reset the next request).
        after = world.http.post(
            "/retrieve/invoke",
            json={"input": {"question": QUESTIONS[0]}},
            headers=_headers(world.keys[0]),
        )
        assert after.status_code == 200

    def test_a_second_credential_is_named_in_the_401(self, world: World) -> None:
        low, high = world.keys[0].secret, world.keys[6].secret
        response = world.http.post(
            "/retrieve/invoke",
            json={"input": {"question": QUESTIONS[0]}},
            headers=[("Authorization", f"Bearer {low}"), ("X-API-Key", high)],
        )
        assert response.status_code == 401
        assert "more than one credential" in response.json()["detail"]
        missing = world.http.post(
            "/retrieve/invoke", json={"input": {"question": QUESTIONS[0]}}
        )
        assert "missing API key" in missing.json()["detail"]

    @pytest.mark.parametrize("route", ["stream", "stream_log"])
    def test_a_stream_on_a_database_that_is_down_ends_with_a_503_event(
        self, store: Any, route: str
    ) -> None:
        from langchain_core.runnables import RunnableLambda

        def down(*_: Any) -> Any:
            raise DatabaseUnavailableError(
                "cannot connect to PostgreSQL at /tmp/pg password=hunter2"
            )

        app = create_app(RunnableLambda(down), health=down, pool_stats=store.pool_stats)
        with running(app) as url, httpx.Client(base_url=url, timeout=30) as http:
            response = http.post(
                f"/retrieve/{route}", json={"input": {"question": "q"}}
            )  # httpx reads the whole body: a cut-off one raises here
            assert response.status_code == 200  # the stream had started
            errors = [
                e
                for e in _events(response.text)
                if isinstance(e, dict) and "status_code" in e
            ]
            assert errors == [
                {
                    "status_code": 503,
                    "message": "the database is unavailable; retry shortly",
                }
            ]
            assert "event: error" in response.text
            assert "hunter2" not in response.text and "/tmp/pg" not in response.text

            # A failure that is not the project's keeps LangServe's 500, still ends.
            def broken(*_: Any) -> Any:  # typed as `down` is: one LangServe model
                return 1 / 0

            app_bug = create_app(
                RunnableLambda(broken),
                health=down,
                pool_stats=store.pool_stats,
            )
        with running(app_bug) as url, httpx.Client(base_url=url, timeout=30) as http:
            bug = http.post(f"/retrieve/{route}", json={"input": {"question": "q"}})
            events = [e for e in _events(bug.text) if isinstance(e, dict)]
            assert [e for e in events if "status_code" in e] == [
                {"status_code": 500, "message": "Internal Server Error"}
            ]
            assert "ZeroDivisionError" not in bug.text


class TestThirdOutsideProbe:
    """What an outside probe of the server found on 2026-12-03."""

    def test_no_redirect_names_the_host_header(self, world: World) -> None:
        # Starlette's slash redirect was `location: http://evil.example/...`, a 307
        # that resends the POST body to the host the header named.
        key = world.keys[0]
        headers = {**_headers(key), "Host": "evil.example"}
        for path in sorted({p for p, _ in DATA_ROUTES}):
            response = world.http.post(
                path + "/", json={"input": {"question": "x"}}, headers=headers
            )
            # A 404, or the guard's 400 for a body that is not this route's shape.
            assert response.status_code in (400, 404), path
            assert "location" not in response.headers, path
        page = world.http.get(
            "/retrieve/playground", headers=headers, follow_redirects=False
        )
        assert page.status_code == 307
        assert page.headers["location"] == "playground/"  # relative: no host
        shown = world.http.get(
            "/retrieve/playground", headers=_headers(key), follow_redirects=True
        )
        assert shown.status_code == 200 and "<html" in shown.text.lower()


class TestAgentServerBinding:
    """Runs under LangGraph's Agent Server read the caller from the run's config."""

    def test_every_stage_reads_the_authenticated_scope(
        self, world: World, retriever: Retriever
    ) -> None:
        from retrieval_pipeline.graph.context import Context

        pipeline = build_pipeline(PipelineResources(retriever=retriever))
        key = world.key(tenant=None, principals=1)
        user = {
            "identity": key.identity.name,
            "retrieval_pipeline_scope": {
                "principals": list(key.identity.principals),
                "tenant": key.identity.tenant,
                "grants": [],
            },
        }
        config = {"configurable": {"langgraph_auth_user": user}}
        item = {
            "question": QUESTIONS[0],
            "limit": 20,
            "principals": list(PRINCIPALS),
            "tenant": "acme",
            "debug": True,
        }
        for context in (Context(), Context(graph_fusion=False, understanding=False)):
            out = pipeline.invoke(item, config=config, context=context)
            text = json.dumps(out)
            # The run asked for every principal and tenant acme: it gets the key's.
            for canary in hidden_canaries(
                world.docs, set(key.identity.principals), None
            ):
                assert canary not in text
            assert out["chunks"], "the key's own documents are found"
            assert _gated_fields(out) == []  # no debug grant

    def test_a_malformed_scope_claim_fails_closed(
        self, world: World, retriever: Retriever
    ) -> None:
        from retrieval_pipeline.errors import AccessDeniedError

        pipeline = build_pipeline(PipelineResources(retriever=retriever))
        bad = {"langgraph_auth_user": {"retrieval_pipeline_scope": "everything"}}
        with pytest.raises(AccessDeniedError):
            pipeline.invoke({"question": "q"}, config={"configurable": bad})


class TestNarrowing:
    def test_empty_principals_means_public_documents_only(self, world: World) -> None:
        key = world.key(principals=2, tenant=None)
        both = world.http.post(
            "/retrieve/invoke",
            json={"input": {"question": QUESTIONS[0], "limit": 20}},
            headers=_headers(key),
        ).json()["output"]
        empty = world.http.post(
            "/retrieve/invoke",
            json={"input": {"question": QUESTIONS[0], "limit": 20, "principals": []}},
            headers=_headers(key),
        )
        assert empty.status_code == 200
        docs = {d.id: d for d in world.docs}
        assert any(docs[i].principals for i in _chunk_docs(both))  # the grant works
        assert all(not docs[i].principals for i in _chunk_docs(empty.json()["output"]))

    @pytest.mark.parametrize(
        "principals", [5, [["hr"]], None, "hr", [1, 2], {"hr": 1}, ["\x00"]]
    )
    def test_mistyped_principals_are_a_clear_4xx(
        self, world: World, principals: Any
    ) -> None:
        key = world.key(principals=2)
        response = world.http.post(
            "/retrieve/invoke",
            json={"input": {"question": QUESTIONS[0], "principals": principals}},
            headers=_headers(key),
        )
        assert response.status_code in (400, 422), response.text
        assert "Traceback" not in response.text


class TestHostileBodies:
    @pytest.mark.parametrize("route", ["/retrieve/invoke", "/retrieve/batch"])
    def test_deeply_nested_json_is_a_400(self, world: World, route: str) -> None:
        deep = "[" * 5000 + "]" * 5000
        body = (
            '{"input": ' + deep + "}"
            if route.endswith("invoke")
            else '{"inputs": ' + deep + "}"
        )
        response = world.http.post(
            route,
            content=body,
            headers={**_headers(world.keys[0]), "content-type": "application/json"},
        )
        assert response.status_code == 400, response.text
        assert "nested" in response.json()["detail"]
        just_inside = {"input": {"question": "q", "x": _nest(MAX_JSON_DEPTH - 2)}}
        assert (
            world.http.post(
                route, json=just_inside, headers=_headers(world.keys[0])
            ).status_code
            != 500
        )

    def test_an_oversized_body_is_a_413(self, world: World) -> None:
        response = world.http.post(
            "/retrieve/invoke",
            json={"input": {"question": "x" * (2 << 20)}},
            headers=_headers(world.keys[0]),
        )
        assert response.status_code == 413

    def test_stream_log_answers_with_the_run_log_only(self, world: World) -> None:
        key = world.key(principals=0, tenant=None)
        with world.http.stream(
            "POST",
            "/retrieve/stream_log",
            json={"input": {"question": QUESTIONS[0], "principals": list(PRINCIPALS)}},
            headers=_headers(key),
        ) as stream:
            body = "".join(stream.iter_text())
        assert stream.status_code == 200
        assert "event: error" not in body, body[:500]
        assert "event: end" in body
        assert "/logs/" not in body  # no inner runs: no per-stage start/end times
        _assert_no_leak(world, body, key, [{"principals": list(PRINCIPALS)}])

    def test_context_with_an_unknown_key_is_a_400(self, world: World) -> None:
        from retrieval_pipeline.errors import ConfigurationError
        from retrieval_pipeline.graph.context import resolve_context

        with pytest.raises(ConfigurationError, match="unknown context keys"):
            resolve_context({"no_such_setting": 1})
        with pytest.raises(ConfigurationError, match="token_budget"):
            resolve_context({"token_budget": "lots"})

    def test_python_retrieve_with_principals_none_is_a_clear_error(
        self, retriever: Retriever
    ) -> None:
        from retrieval_pipeline.errors import InvalidQueryError

        with pytest.raises(InvalidQueryError, match="principals"):
            retriever.retrieve("ledger", principals=None)  # type: ignore[arg-type]


def _nest(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


class TestExposure:
    def test_every_route_but_healthz_needs_a_key(self, world: World) -> None:
        for path, method in META_ROUTES | GRANTED_ROUTES | DATA_ROUTES:
            url = path.replace("{file_path:path}", "index.html")
            response = world.http.request(
                method, url, json={} if method == "POST" else None
            )
            assert response.status_code == 401, (path, response.status_code)
            assert "Bearer" in response.headers.get("www-authenticate", "")
        health = world.http.get("/healthz")
        assert health.status_code == 200 and health.json() == {"status": "ok"}

    def test_metrics_need_the_metrics_grant(self, world: World) -> None:
        plain = world.key(grant="debug")
        assert world.http.get("/metrics", headers=_headers(plain)).status_code == 403
        granted = world.key(grant="metrics")
        metrics = world.http.get("/metrics", headers=_headers(granted))
        assert metrics.status_code == 200
        assert (
            'rp_permission_rejections_total{reason="missing_grant"} 1.0' in metrics.text
        )
        for key in world.keys:
            assert key.secret not in metrics.text

    def test_docs_answer_with_a_key(self, world: World) -> None:
        key = world.keys[0]
        assert world.http.get("/openapi.json", headers=_headers(key)).status_code == 200
        assert world.http.get("/docs", headers=_headers(key)).status_code == 200

    def test_database_down_is_a_fast_503_that_names_no_path(self, store: Any) -> None:
        secret_path = "/var/run/postgresql/.s.PGSQL.5432 user=rp password=hunter2"

        def down(*_: Any) -> Any:
            raise DatabaseUnavailableError(
                f"cannot connect to PostgreSQL at {secret_path}"
            )

        from langchain_core.runnables import RunnableLambda

        app = create_app(RunnableLambda(down), health=down, pool_stats=store.pool_stats)
        with running(app) as url, httpx.Client(base_url=url, timeout=30) as http:
            health = http.get("/healthz")
            invoke = http.post("/retrieve/invoke", json={"input": {"question": "q"}})
        assert health.status_code == 503 and health.json() == {"status": "unavailable"}
        assert invoke.status_code == 503
        for response in (health, invoke):
            assert "5432" not in response.text and "hunter2" not in response.text
            assert "/var/run" not in response.text

    @pytest.mark.timeout(45)  # a borrow that waited the pool's 120 s would trip it
    def test_a_stopped_server_fails_a_borrow_without_waiting_the_pool_timeout(
        self, tmp_path: Path
    ) -> None:
        from retrieval_pipeline.tools.store import EmbeddedPostgres, Store

        server = EmbeddedPostgres(tmp_path / "down", keep_running=True)
        url = server.start()
        doomed = Store(url, connect_timeout=120)
        try:
            server.stop()
            with pytest.raises(DatabaseUnavailableError) as down:
                with doomed.connection() as conn:
                    conn.execute("SELECT 1")
            assert "Check that PostgreSQL is running" in str(down.value)
        finally:
            doomed.close()
            server.stop()


class TestDebugGrant:
    def _debug(self, world: World, key: Key) -> Any:
        response = world.http.post(
            "/retrieve/invoke",
            json={"input": {"question": QUESTIONS[0], "debug": True}},
            headers=_headers(key),
        )
        assert response.status_code == 200, response.text
        return response.json()["output"]

    def test_debug_details_need_the_debug_grant(self, world: World) -> None:
        without = self._debug(world, world.key(grant="metrics"))
        assert _gated_fields(without) == []
        granted = self._debug(world, world.key(grant="debug"))
        assert "stage_ms" in granted["retrieval_debug"]


# --- every route --------------------------------------------------------------------
def test_every_served_route_is_classified(world: World) -> None:
    served = {
        (route.path, method)
        for route in world.app.routes
        for method in (getattr(route, "methods", None) or {"GET"})
        if method != "HEAD"
    }
    known = DATA_ROUTES | META_ROUTES | GRANTED_ROUTES | PUBLIC_ROUTES
    assert served - known == set(), "classify the new route and cover it"
    assert known - served == set(), "a classified route is no longer served"


# --- the property ---------------------------------------------------------------------
principals_field = st.one_of(
    st.just(...),  # absent: the key's grant
    st.just([]),
    st.lists(st.sampled_from(PRINCIPALS), max_size=4, unique=True),
    st.lists(st.sampled_from([*PRINCIPALS, "admin", "*", "root"]), max_size=3),
)
tenant_field = st.one_of(st.just(...), st.sampled_from([*TENANTS, "", "*"]))


@st.composite
def items(draw: st.DrawFn) -> dict[str, Any]:
    item: dict[str, Any] = {
        "question": draw(st.sampled_from(QUESTIONS)),
        "limit": draw(st.integers(min_value=1, max_value=20)),
    }
    principals = draw(principals_field)
    if principals is not ...:
        item["principals"] = principals
    tenant = draw(tenant_field)
    if tenant is not ...:
        item["tenant"] = tenant
    if draw(st.booleans()):
        item["debug"] = True
    if draw(st.integers(0, 4)) == 0:
        item["doc_ids"] = draw(
            st.lists(st.sampled_from([f"doc-{i:02d}" for i in range(18)]), max_size=4)
        )
    return item


configs = st.one_of(
    st.just(None),
    st.just(FORGED_AGENT_USER),
    st.just({"configurable": {}}),
    st.just(
        {
            "metadata": {
                "retrieval_pipeline_identity": {
                    "principals": list(PRINCIPALS),
                    "tenant": "acme",
                }
            }
        }
    ),
    st.just({"tags": ["x"], "run_name": "y"}),
)
requests = st.tuples(
    st.integers(min_value=0, max_value=8),  # key index
    st.sampled_from(sorted(DATA_ROUTES)),
    st.lists(items(), min_size=1, max_size=3),
    configs,
    st.booleans(),  # list-form config on batch
)

PROPERTY_CASES = int(os.environ.get("RP_HTTP_PROPERTY_CASES", "2000"))


def test_no_route_leaks_outside_the_key_scope(world: World) -> None:
    checked = {"requests": 0, "items": 0}

    @property_settings(PROPERTY_CASES)
    @given(requests)
    def check(
        case: tuple[int, tuple[str, str], list[dict[str, Any]], Any, bool],
    ) -> None:
        index, (path, _), batch, config, list_config = case
        key = world.keys[index]
        world.traces.clear()
        if path == "/retrieve/batch":
            body: dict[str, Any] = {"inputs": batch}
            if config is not None:
                body["config"] = [config] * len(batch) if list_config else config
            sent = batch
        else:
            body = {"input": batch[0]}
            if config is not None:
                body["config"] = config
            sent = batch[:1]
        if path.endswith("stream") or path.endswith("stream_log"):
            with world.http.stream(
                "POST", path, json=body, headers=_headers(key)
            ) as response:
                text = "".join(response.iter_text())
            assert "event: error" not in text, text[:500]
        else:
            response = world.http.post(path, json=body, headers=_headers(key))
            text = response.text
        assert response.status_code == 200, (response.status_code, text[:400])
        if path == "/retrieve/batch":  # each output against its own item
            for item, output in zip(sent, response.json()["output"], strict=True):
                _assert_no_leak(world, json.dumps(output), key, [item])
        # Anywhere in the response: nothing hidden from every item sent.
        hidden = set.intersection(
            *(set(hidden_canaries(world.docs, *_scope_of(key, item))) for item in sent)
        )
        for canary in hidden:
            assert canary not in text, (canary, key.identity, sent, text[:400])
        if "debug" not in key.identity.grants:
            assert (
                _gated_fields(
                    json.loads(text)
                    if not path.endswith(("stream", "stream_log"))
                    else _events(text)
                )
                == []
            )
        for record in world.traces:  # the server-side trace: only visible chunks
            chunk_docs = [
                world.chunk_docs[s["chunk_id"]] for s in record.get("selected", [])
            ]
            allowed = set()
            for item in sent:
                principals, tenant = _scope_of(key, item)
                allowed |= {
                    d.id
                    for d in world.docs
                    if d.tenant == tenant
                    and (not d.principals or set(d.principals) & principals)
                }
            assert set(chunk_docs) <= allowed
        checked["requests"] += 1
        checked["items"] += len(sent)

    check()
    metrics = world.http.get(
        "/metrics", headers=_headers(world.key(grant="metrics"))
    ).text
    for doc in world.docs:
        assert doc.canary not in metrics
    record_figure(
        "http_scope_cases", checked["requests"], items=checked["items"], leaks=0
    )
    assert checked["requests"] >= PROPERTY_CASES


def _events(text: str) -> list[Any]:
    out = []
    for line in text.splitlines():
        if line.startswith("data: "):
            try:
                out.append(json.loads(line[6:]))
            except ValueError:
                pass
    return out


# --- the fuzz run --------------------------------------------------------------------
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=40),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)
hostile_inputs = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {"question": st.text(max_size=200) | json_values},
        optional={
            "limit": json_values,
            "principals": json_values,
            "tenant": json_values,
            "doc_ids": json_values,
            "debug": json_values,
        },
    ),
)


@st.composite
def hostile_bodies(draw: st.DrawFn) -> bytes:
    kind = draw(st.integers(0, 5))
    if kind == 0:  # deep
        depth = draw(st.integers(30, 3000))
        return ('{"input": ' + "[" * depth + "]" * depth + "}").encode()
    if kind == 1:  # raw bytes, often not UTF-8
        return draw(st.binary(max_size=300))
    if kind == 2:  # big
        return json.dumps(
            {"input": {"question": "ledger " * draw(st.integers(1, 200_000))}}
        ).encode()
    field = draw(st.sampled_from(["input", "inputs", "config", "kwargs", "x"]))
    body = {field: draw(hostile_inputs)}
    if draw(st.booleans()):
        body["config"] = draw(json_values)
    return json.dumps(body, default=str).encode("utf-8", "surrogatepass")


FUZZ_CASES = int(os.environ.get("RP_HTTP_FUZZ_CASES", "1000"))


def test_hostile_requests_on_every_route_never_get_a_5xx(world: World) -> None:
    routes = sorted(DATA_ROUTES | META_ROUTES | GRANTED_ROUTES | PUBLIC_ROUTES)
    statuses: dict[int, int] = {}

    @property_settings(FUZZ_CASES)
    @given(
        st.sampled_from(routes),
        hostile_bodies(),
        st.sampled_from(  # mostly JSON: other types stop at the gate's 415
            [
                "application/json",
                "application/json; charset=utf-8",
                "application/json",
                "text/plain",
                "application/x-www-form-urlencoded",
                "",
            ]
        ),
        st.integers(0, 9),
    )
    def check(
        route: tuple[str, str], body: bytes, content_type: str, key_index: int
    ) -> None:
        path, method = route
        url = path.replace("{file_path:path}", "index.html")
        headers = _headers(world.keys[key_index]) if key_index < 9 else {}
        if content_type:
            headers["content-type"] = content_type
        response = world.http.request(
            "POST" if method == "POST" else method,
            url,
            content=body if method == "POST" else None,
            headers=headers,
        )
        statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
        assert response.status_code < 500, (
            route,
            response.status_code,
            response.text[:300],
            body[:200],
        )
        for marker in ("Traceback", "psycopg", "SQLSTATE", 'File "'):
            assert marker not in response.text

    check()
    record_figure(
        "http_fuzz_requests",
        sum(statuses.values()),
        statuses={str(k): v for k, v in sorted(statuses.items())},
    )
    assert sum(statuses.values()) >= FUZZ_CASES
