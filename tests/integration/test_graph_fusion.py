from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from helpers import write_jsonl

from retrieval_pipeline.graph.builder import build_pipeline
from retrieval_pipeline.graph.context import Context
from retrieval_pipeline.graph.resources import PipelineResources
from retrieval_pipeline.ingest.job import Ingestor
from retrieval_pipeline.tools.graph_fusion import graph_fusion
from retrieval_pipeline.tools.retrieve import Retriever
from retrieval_pipeline.tools.store.graph import GraphStore
from retrieval_pipeline.tools.store.records import document_key, entity_key
from retrieval_pipeline.tools.store.store import AccessScope

WIKI = [
    # A HotpotQA-shaped miniature: the question names the film; the answer sits in the
    # actress's own paragraph, which shares no words with the question.
    {
        "_id": "film",
        "title": "Kiss and Tell (1945 film)",
        "text": "Kiss and Tell is a 1945 comedy in which Shirley Temple plays "
        "Corliss Archer.",
    },
    {
        "_id": "actress",
        "title": "Shirley Temple",
        "text": "Shirley Temple Black served as United States ambassador to Ghana and "
        "as Chief of Protocol of the United States.",
    },
    {
        "_id": "other",
        "title": "Meet Corliss Archer",
        "text": "Meet Corliss Archer was a radio program about a teenage girl.",
    },
] + [
    {
        "_id": f"filler{i}",
        "title": f"Filler page {i}",
        "text": f"An unrelated paragraph number {i} about geology and rivers.",
    }
    for i in range(12)
]
QUESTION = (
    "What government position was held by the woman who portrayed Corliss Archer "
    "in Kiss and Tell?"
)


@pytest.fixture()
def wiki(ingestor: Ingestor, tmp_path: Path) -> None:
    write_jsonl(tmp_path / "wiki.jsonl", WIKI)
    ingestor.ingest_paths([tmp_path], title_entities=True)


def run(retriever: Retriever, question: str, **context: object) -> dict:  # type: ignore[type-arg]
    graph = build_pipeline(PipelineResources(retriever=retriever))
    return graph.invoke(
        {"question": question, "limit": 8},
        context=Context(reranker="none", **context),  # type: ignore[arg-type]
    )


def expand(retriever: Retriever, seeds: Any, **settings: Any) -> Any:
    """GraphStore.expand with the spec's defaults (scope: the default caller's)."""
    scope = settings.pop("scope", None) or retriever.scope()
    defaults = {"top_entities": 8, "max_hops": 2, "frontier_cap": 16}
    return GraphStore(retriever.store).expand(
        seeds, scope, **(defaults | {"document_cap": 20} | settings)
    )


def fuse(retriever: Retriever, pool: dict[str, float], scope: Any, seeds: int) -> Any:
    """graph_fusion for QUESTION with the spec's defaults and a chain weight of 1."""
    return graph_fusion(
        retriever,
        QUESTION,
        pool,
        scope,
        seeds=seeds,
        top_entities=8,
        max_hops=2,
        frontier_cap=16,
        document_cap=20,
        chunk_cap=10,
        score_weight=1.0,
        rrf_k=60,
    )


class TestGraphFusion:
    def test_a_second_hop_paragraph_text_search_missed_is_added_and_tagged(
        self, retriever: Retriever, wiki: None
    ) -> None:
        text_search = retriever.retrieve(QUESTION, limit=2)
        assert "actress" not in [c.document_id for c in text_search]
        fused = run(retriever, QUESTION, candidate_pool=2)
        added = [c for c in fused["chunks"] if c["graph_boosted"]]
        assert "actress" in [c["document_id"] for c in added]
        assert fused["retrieval_debug"]["graph_added"] >= 1

    def test_graph_fusion_respects_a_document_scope(
        self, retriever: Retriever, wiki: None
    ) -> None:
        scoped = build_pipeline(PipelineResources(retriever=retriever)).invoke(
            {"question": QUESTION, "doc_ids": ["film", "other"]},
            context=Context(reranker="none", candidate_pool=2),
        )
        assert {c["document_id"] for c in scoped["chunks"]} <= {"film", "other"}

    def test_graph_fusion_never_reaches_documents_the_caller_cannot_see(
        self, ingestor: Ingestor, retriever: Retriever, tmp_path: Path
    ) -> None:
        records = [dict(r) for r in WIKI]
        records[1]["metadata"] = {"principals": ["diplomats"]}
        write_jsonl(tmp_path / "wiki.jsonl", records)
        ingestor.ingest_paths([tmp_path], title_entities=True)
        public = run(retriever, QUESTION, candidate_pool=2)
        assert "actress" not in [c["document_id"] for c in public["chunks"]]
        scope = retriever.scope(principals=[])
        expansion = expand(retriever, [document_key("", "film")], scope=scope)
        assert document_key("", "actress") not in [d for d, _ in expansion.documents]
        allowed = run(retriever, QUESTION, candidate_pool=2)
        assert (
            allowed["retrieval_debug"]["graph_added"]
            == public["retrieval_debug"]["graph_added"]
        )

    def test_only_served_entities_are_followed(
        self, ingestor: Ingestor, retriever: Retriever, sample_corpus: Path
    ) -> None:
        ingestor.ingest_paths([sample_corpus])
        scope = retriever.scope()
        expansion = expand(
            retriever, [document_key("", "services/session-store")], scope=scope
        )
        reached = {e for e, _ in expansion.seeds} | {
            e for hop in expansion.hops for e, _ in hop
        }
        assert entity_key("", "Session Store") in reached
        assert entity_key("", "Redis Cluster Migration") not in reached  # a draft

    def test_relations_lead_to_the_owning_team(
        self, ingestor: Ingestor, retriever: Retriever, sample_corpus: Path
    ) -> None:
        ingestor.ingest_paths([sample_corpus])
        scope = retriever.scope()
        expansion = expand(
            retriever, [document_key("", "services/auth-gateway")], scope=scope
        )
        reached = {e for hop in expansion.hops for e, _ in hop}
        assert entity_key("", "Identity Team") in reached
        assert document_key("", "teams/identity-team") in [
            d for d, _ in expansion.documents
        ]

    def test_hub_entities_are_damped_by_their_degree(
        self, ingestor: Ingestor, retriever: Retriever, tmp_path: Path
    ) -> None:
        # "Hub" is mentioned by forty pages, "Niche" by one; both hang off the seed.
        records = [
            {"_id": "seed", "title": "Seed", "text": "Seed links to Hub and to Niche."},
            {"_id": "hub", "title": "Hub", "text": "The hub page."},
            {"_id": "niche", "title": "Niche", "text": "The niche page."},
        ] + [
            {"_id": f"p{i}", "title": f"Page {i}", "text": f"Page {i} mentions Hub."}
            for i in range(40)
        ]
        write_jsonl(tmp_path / "w.jsonl", records)
        ingestor.ingest_paths([tmp_path], title_entities=True)
        # Start from the seed's own title entity so Hub and Niche are one hop away.
        expansion = expand(
            retriever, [document_key("", "seed")], top_entities=1, document_cap=60
        )
        weights = dict(expansion.hops[0])
        assert weights[entity_key("", "Niche")] > weights[entity_key("", "Hub")]

    def test_the_frontier_cap_bounds_the_expansion(
        self, ingestor: Ingestor, retriever: Retriever, tmp_path: Path
    ) -> None:
        names = [f"Topic {i}" for i in range(30)]
        records = [
            {
                "_id": "seed",
                "title": "Seed",
                "text": "Seed mentions " + ", ".join(names),
            }
        ]
        records += [
            {"_id": f"t{i}", "title": n, "text": f"{n} page."}
            for i, n in enumerate(names)
        ]
        write_jsonl(tmp_path / "w.jsonl", records)
        ingestor.ingest_paths([tmp_path], title_entities=True)
        expansion = expand(
            retriever,
            [document_key("", "seed")],
            top_entities=1,
            frontier_cap=5,
            document_cap=60,
        )
        assert len(expansion.hops[0]) == 5


def _key(source_id: str) -> str:
    return document_key("", source_id)


class TestChainScores:
    """A linked passage inherits its seed's score, scaled by its own relevance."""

    def test_seed_entities_carry_the_score_of_their_strongest_seed(
        self, retriever: Retriever, wiki: None
    ) -> None:
        expansion = expand(
            retriever, {_key("film"): 0.9, _key("other"): 0.3}, max_hops=1
        )
        seeds = dict(expansion.seeds)
        # The film page mentions Shirley Temple and Meet Corliss Archer's subject;
        # the weaker seed's own title entity keeps the weaker score.
        assert seeds[entity_key("", "Shirley Temple")] == pytest.approx(0.9)
        assert seeds[entity_key("", "Kiss and Tell (1945 film)")] == pytest.approx(0.9)
        assert seeds[entity_key("", "Meet Corliss Archer")] == pytest.approx(0.3)
        ordered = [w for _, w in expansion.seeds]
        assert ordered == sorted(ordered, reverse=True)

    def test_an_own_page_carries_the_link_and_a_seed_that_cannot_gain_is_left_out(
        self, retriever: Retriever, wiki: None
    ) -> None:
        expansion = expand(retriever, {_key("film"): 0.9}, max_hops=1)
        documents = dict(expansion.documents)
        assert documents[_key("actress")] == pytest.approx(0.9)  # Shirley Temple's page
        assert _key("film") not in documents  # it would only meet its own score
        assert all(w <= 0.9 + 1e-9 for w in documents.values())

    def test_a_page_that_merely_mentions_an_entity_is_damped_by_its_degree(
        self, ingestor: Ingestor, retriever: Retriever, tmp_path: Path
    ) -> None:
        records = [
            {"_id": "seed", "title": "Seed", "text": "Seed names Alpha and Beta."},
            {"_id": "alpha", "title": "Alpha", "text": "The alpha page."},
            {"_id": "beta", "title": "Beta", "text": "The beta page."},
            {"_id": "a1", "title": "A one", "text": "A one also names Alpha."},
        ] + [
            {"_id": f"b{i}", "title": f"B {i}", "text": f"B {i} also names Beta."}
            for i in range(6)
        ]
        write_jsonl(tmp_path / "w.jsonl", records)
        ingestor.ingest_paths([tmp_path], title_entities=True)
        expansion = expand(retriever, {_key("seed"): 0.8}, max_hops=1, document_cap=40)
        documents = dict(expansion.documents)
        assert documents[_key("alpha")] == pytest.approx(0.8)
        # Alpha is named by three pages (its own title included), Beta by eight.
        assert documents[_key("a1")] == pytest.approx(0.8 / math.log2(1 + 3))
        assert documents[_key("b0")] == pytest.approx(0.8 / math.log2(1 + 8))

    def test_a_linked_passage_reaches_but_never_passes_its_seed(
        self, retriever: Retriever, wiki: None
    ) -> None:
        pool = {
            chunk_id: score
            for chunk_id, score, _ in retriever.fused(
                QUESTION, retriever.scope(), depth=20
            )[:2]
        }
        result = fuse(retriever, pool, retriever.scope(), 1)
        best = max(pool.values())
        documents = retriever.store.chunk_documents(
            [c for c, _, _ in result.added], retriever.scope()
        )
        added = {documents[c]: s for c, s, _ in result.added}
        assert _key("actress") in added
        # Half the seed's score for the link, up to half more for relevance.
        assert 0.5 * best - 1e-9 <= added[_key("actress")] <= best + 1e-9
        assert all(s <= best + 1e-9 for _, s, _ in result.added + result.boosted)
        ranks = [r for _, _, r in result.added]
        assert all(key.startswith("graph_") for r in ranks for key in r)

    def test_the_scoped_retrieve_keeps_every_filter_of_the_callers_scope(
        self, ingestor: Ingestor, retriever: Retriever, tmp_path: Path
    ) -> None:
        records = [dict(r) for r in WIKI]
        for record in records:
            lang = "fr" if record["_id"] == "actress" else "en"
            record["metadata"] = {"lang": lang}
        write_jsonl(tmp_path / "wiki.jsonl", records)
        ingestor.ingest_paths([tmp_path], title_entities=True)
        pool = {
            chunk_id: score
            for chunk_id, score, _ in retriever.fused(
                QUESTION, retriever.scope(), depth=5
            )[:2]
        }

        def reached(scope: AccessScope) -> set[str]:
            result = fuse(retriever, pool, scope, 2)
            ids = [c for c, _, _ in result.added]
            return set(retriever.store.chunk_documents(ids, retriever.scope()).values())

        assert _key("actress") in reached(retriever.scope())
        # The graph links the film to the actress, but an English-only caller
        # must not get her French page back.
        english = replace(retriever.scope(), metadata=('{"lang": "en"}',))
        assert _key("actress") not in reached(english)
