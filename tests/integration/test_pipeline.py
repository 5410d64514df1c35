from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fake_judge import ScriptedJudge
from provider_peers import rerank_peer

from retrieval_pipeline.errors import InvalidQueryError
from retrieval_pipeline.graph.builder import build_pipeline
from retrieval_pipeline.graph.context import SOFT_FILTER_BOOST, Context
from retrieval_pipeline.graph.resources import PipelineResources
from retrieval_pipeline.ingest.job import Ingestor
from retrieval_pipeline.tools.rerankers.http import CohereReranker, VoyageReranker
from retrieval_pipeline.tools.retrieve import Retriever

QUESTION = "Who owns the service that failed with ERR_CONN_RESET?"


@pytest.fixture()
def corpus(ingestor: Ingestor, sample_corpus: Path) -> None:
    ingestor.ingest_paths([sample_corpus])


def pipeline(retriever: Retriever, **resources: Any):  # type: ignore[no-untyped-def]
    return build_pipeline(PipelineResources(retriever=retriever, **resources))


def nodes_run(graph: Any, state: dict[str, Any], context: Any) -> list[str]:
    ran = []
    for update in graph.stream(state, context=context, stream_mode="updates"):
        ran.extend(update)
    return ran


class TestRouting:
    @pytest.mark.parametrize(
        ("judge", "understanding", "graph_fusion", "reranker", "expected"),
        [
            (False, True, False, "none", ["plain_retrieve"]),
            (True, False, False, "none", ["plain_retrieve"]),
            (
                False,
                True,
                True,
                "none",
                ["hybrid_retrieve", "fuse_graph", "assemble_context"],
            ),
            (
                False,
                True,
                False,
                "peer",
                ["hybrid_retrieve", "rerank", "assemble_context"],
            ),
            (
                True,
                True,
                False,
                "none",
                ["understand_query", "hybrid_retrieve", "assemble_context"],
            ),
            (
                True,
                True,
                True,
                "peer",
                [
                    "understand_query",
                    "hybrid_retrieve",
                    "fuse_graph",
                    "rerank",
                    "assemble_context",
                ],
            ),
        ],
    )
    def test_every_combination_takes_the_right_path(
        self,
        retriever: Retriever,
        corpus: None,
        judge: bool,
        understanding: bool,
        graph_fusion: bool,
        reranker: str,
        expected: list[str],
    ) -> None:
        with rerank_peer() as (url, _):
            resources: dict[str, Any] = {}
            if judge:
                resources["judge"] = ScriptedJudge(answer={"rewrite": QUESTION})
            if reranker == "peer":
                resources["reranker"] = VoyageReranker(api_key="k", base_url=url)
            graph = pipeline(retriever, **resources)
            context = Context(
                understanding=understanding, graph_fusion=graph_fusion, reranker="none"
            )
            ran = nodes_run(graph, {"question": QUESTION, "limit": 5}, context)
        assert [n for n in ran if n in expected] == expected
        assert set(ran) == set(expected)

    def test_a_dict_context_from_http_or_studio_works(
        self, retriever: Retriever, corpus: None
    ) -> None:
        graph = pipeline(retriever)
        out = graph.invoke(
            {"question": QUESTION}, context={"graph_fusion": False, "reranker": "none"}
        )
        assert out["retrieval_debug"]["path"] == "plain_retrieve"

    def test_unknown_context_keys_are_rejected(
        self, retriever: Retriever, corpus: None
    ) -> None:
        # LangGraph coerces a dict into the Context dataclass itself; a typo fails.
        with pytest.raises((TypeError, ValueError), match="reranked"):
            pipeline(retriever).invoke(
                {"question": QUESTION}, context={"reranked": "x"}
            )

    def test_bad_input_is_a_user_error(
        self, retriever: Retriever, corpus: None
    ) -> None:
        with pytest.raises(InvalidQueryError):
            pipeline(retriever).invoke({"question": "  "})
        with pytest.raises(InvalidQueryError):
            pipeline(retriever).invoke({"question": "ok", "limit": 0})


class TestARerankerAskedForByName:
    @pytest.mark.parametrize(
        ("kind", "env", "graph_fusion"),
        [
            ("voyage", "VOYAGE_API_KEY", True),
            ("cohere", "COHERE_API_KEY", True),
            ("onnx", "RETRIEVAL_PIPELINE_RERANKER_ONNX", True),
            ("voyage", "VOYAGE_API_KEY", False),  # every stage inactive: plain path
        ],
    )
    def test_a_missing_key_is_a_recorded_fallback_not_a_silent_none(
        self,
        retriever: Retriever,
        corpus: None,
        monkeypatch: pytest.MonkeyPatch,
        kind: str,
        env: str,
        graph_fusion: bool,
    ) -> None:
        for name in ("VOYAGE_API_KEY", "COHERE_API_KEY", "CO_API_KEY", env):
            monkeypatch.delenv(name, raising=False)
        context = Context(understanding=False, graph_fusion=graph_fusion, reranker=kind)
        out = pipeline(retriever).invoke({"question": QUESTION}, context=context)
        debug = out["retrieval_debug"]
        assert debug["reranker_kind"] == "none" and out["chunks"]
        [missing] = [f for f in debug["fallbacks"] if f["stage"] == "rerank"]
        assert f"the {kind} reranker was asked for" in missing["reason"]
        assert env in missing["reason"]
        auto = Context(understanding=False, graph_fusion=graph_fusion, reranker="auto")
        quiet = pipeline(retriever).invoke({"question": QUESTION}, context=auto)
        assert not quiet["retrieval_debug"].get("fallbacks")  # auto asks for nothing


class TestIdentityAndDeterminism:
    def test_all_stages_inactive_equals_retrieve_and_slice(
        self, retriever: Retriever, corpus: None
    ) -> None:
        graph = pipeline(retriever)
        context = Context(understanding=False, graph_fusion=False, reranker="none")
        for question, limit in [
            (QUESTION, 5),
            ("kafka consumer lag", 3),
            ("who leads payments", 8),
        ]:
            out = graph.invoke({"question": question, "limit": limit}, context=context)
            direct = [c.to_dict() for c in retriever.retrieve(question, limit=limit)]
            assert out["chunks"] == [{**c, "graph_boosted": False} for c in direct]

    def test_deterministic_configuration_reproduces_byte_for_byte(
        self, retriever: Retriever, corpus: None
    ) -> None:
        graph = pipeline(retriever)
        context = Context(
            understanding=False, graph_fusion=True, reranker="none", candidate_pool=5
        )
        runs = [
            graph.invoke({"question": QUESTION, "limit": 8}, context=context)
            for _ in range(2)
        ]
        first, second = (json.dumps(r["chunks"], sort_keys=True) for r in runs)
        assert first == second
        # Without debug the block holds no timings, so all of it reproduces.
        assert runs[0]["retrieval_debug"] == runs[1]["retrieval_debug"]


class TestUnderstanding:
    def test_rewrite_subqueries_and_original_branch(
        self, retriever: Retriever, corpus: None
    ) -> None:
        judge = ScriptedJudge(
            answer={
                "rewrite": "auth gateway connection reset owner team",
                "sub_queries": ["auth gateway owner", "session store pool exhaustion"],
                "is_ambiguous": False,
            }
        )
        graph = pipeline(retriever, judge=judge)
        out = graph.invoke(
            {"question": QUESTION}, context=Context(graph_fusion=False, reranker="none")
        )
        debug = out["retrieval_debug"]
        assert debug["rewrite"] == "auth gateway connection reset owner team"
        assert debug["sub_queries"] == [
            "auth gateway owner",
            "session store pool exhaustion",
        ]
        branches = {b["branch"]: b for b in debug["branches"]}
        assert set(branches) == {"main", "original", "sub_query_1", "sub_query_2"}
        assert branches["original"]["channels"] == ["lexical"]
        assert len(judge.calls) == 1  # one structured judge call

    def test_the_original_branch_keeps_a_rare_identifier_the_rewrite_dropped(
        self, retriever: Retriever, corpus: None
    ) -> None:
        judge = ScriptedJudge(
            answer={"rewrite": "which gateway problem affects payments"}
        )
        graph = pipeline(retriever, judge=judge)
        out = graph.invoke(
            {"question": "SESSION_POOL_SIZE", "limit": 5},
            context=Context(graph_fusion=False, reranker="none"),
        )
        assert any("SESSION_POOL_SIZE" in c["text"] for c in out["chunks"])

    @pytest.mark.parametrize("error", ["timeout", "malformed"])
    def test_judge_failure_falls_back_to_the_raw_question(
        self, retriever: Retriever, corpus: None, error: str
    ) -> None:
        graph = pipeline(retriever, judge=ScriptedJudge(error=error))
        out = graph.invoke(
            {"question": QUESTION}, context=Context(graph_fusion=False, reranker="none")
        )
        debug = out["retrieval_debug"]
        assert debug["rewrite"] is None and out["chunks"]
        assert debug["fallbacks"][0]["stage"] == "understand_query"

    def test_soft_filters_boost_but_never_exclude(
        self, retriever: Retriever, corpus: None
    ) -> None:
        # Positions are compared over every passage, so the per-document cap is
        # off: with it the runbook keeps one passage and the first service page is
        # second before any boost, leaving the boost nothing to move.
        context = Context(
            graph_fusion=False, reranker="none", candidate_pool=40, document_chunks=0
        )
        plain = pipeline(
            retriever,
            judge=ScriptedJudge(
                answer={"rewrite": "kafka consumer lag scaling partitions"}
            ),
        )
        boosted = pipeline(
            retriever,
            judge=ScriptedJudge(
                answer={
                    "rewrite": "kafka consumer lag scaling partitions",
                    "filters": {"path_prefix": "services/"},
                }
            ),
        )
        before = plain.invoke(
            {"question": "kafka consumer lag scaling partitions", "limit": 20},
            context=context,
        )
        after = boosted.invoke(
            {"question": "kafka consumer lag scaling partitions", "limit": 20},
            context=context,
        )
        docs_before = [c["document_id"] for c in before["chunks"]]
        docs_after = [c["document_id"] for c in after["chunks"]]

        def first_service(docs: list[str]) -> int:
            return next(i for i, d in enumerate(docs) if d.startswith("services/"))

        assert first_service(docs_after) < first_service(docs_before)  # boosted ...
        assert "runbooks/kafka-consumer-lag" in docs_after  # ... but nothing excluded

    def test_entity_type_filter_boosts_documents_mentioning_that_type(
        self, retriever: Retriever, corpus: None
    ) -> None:
        from retrieval_pipeline.tools.store.graph import GraphStore

        question = "kafka consumer lag scaling partitions"
        context = Context(graph_fusion=False, reranker="none", candidate_pool=40)
        plain = pipeline(retriever, judge=ScriptedJudge(answer={"rewrite": question}))
        typed = pipeline(
            retriever,
            judge=ScriptedJudge(
                answer={"rewrite": question, "filters": {"entity_types": ["Team"]}}
            ),
        )
        before = plain.invoke({"question": question, "limit": 20}, context=context)
        after = typed.invoke({"question": question, "limit": 20}, context=context)
        scope = retriever.scope()
        with retriever.store.connection() as conn:
            keys = dict(conn.execute("SELECT source_id, id FROM documents").fetchall())
        teams = GraphStore(retriever.store).documents_mentioning_types(
            list(keys.values()), ["team"], scope
        )
        with_team = {source for source, key in keys.items() if key in teams}
        assert with_team and with_team != set(keys)  # a real split of the corpus

        # Every chunk of a team-mentioning document gains exactly the boost; the
        # rest keep their scores; nothing is excluded.
        scores_before = {c["chunk_id"]: c for c in before["chunks"]}
        compared = 0
        for chunk in after["chunks"]:
            old = scores_before.get(chunk["chunk_id"])
            if old is None:
                continue
            gain = SOFT_FILTER_BOOST if chunk["document_id"] in with_team else 0.0
            assert chunk["score"] == pytest.approx(old["score"] + gain)
            compared += 1
        assert compared >= 5
        assert any(c["document_id"] in with_team for c in after["chunks"][:8])
        assert "runbooks/kafka-consumer-lag" in [
            c["document_id"] for c in after["chunks"]
        ]

    def test_freshness_intent_favours_recent_documents(
        self, retriever: Retriever, corpus: None
    ) -> None:
        context = Context(graph_fusion=False, reranker="none")
        recent = pipeline(
            retriever,
            judge=ScriptedJudge(answer={"rewrite": "ledger", "freshness": "recent"}),
        )
        historical = pipeline(
            retriever,
            judge=ScriptedJudge(
                answer={"rewrite": "ledger", "freshness": "historical"}
            ),
        )
        a = recent.invoke({"question": "ledger", "limit": 10}, context=context)[
            "chunks"
        ]
        b = historical.invoke({"question": "ledger", "limit": 10}, context=context)[
            "chunks"
        ]
        assert a[0]["updated_at"] >= b[0]["updated_at"]


class TestRerankStage:
    @pytest.mark.parametrize("provider", [VoyageReranker, CohereReranker])
    def test_reranker_scores_resort_the_pool(
        self, retriever: Retriever, corpus: None, provider: type
    ) -> None:
        with rerank_peer() as (url, peer):
            graph = pipeline(retriever, reranker=provider(api_key="k", base_url=url))
            out = graph.invoke(
                {"question": "kafka consumer lag partitions", "limit": 5},
                context=Context(graph_fusion=False, candidate_pool=10),
            )
        debug = out["retrieval_debug"]
        assert debug["reranked"] is True and debug["reranker_kind"].startswith(
            provider.provider
        )
        scores = [c["rerank_score"] for c in out["chunks"]]
        assert scores == sorted(scores, reverse=True) and all(
            0 <= s <= 1 for s in scores
        )
        assert len(peer.requests[0]["documents"]) == 10  # the pool, never the corpus
