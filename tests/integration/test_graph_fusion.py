from __future__ import annotations

from pathlib import Path

import pytest
from helpers import write_jsonl

from retrieval_pipeline.graph.builder import build_pipeline
from retrieval_pipeline.graph.context import Context
from retrieval_pipeline.graph.resources import PipelineResources
from retrieval_pipeline.ingest.job import Ingestor
from retrieval_pipeline.tools.retrieve import Retriever
from retrieval_pipeline.tools.store.graph import GraphStore
from retrieval_pipeline.tools.store.records import document_key, entity_key

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
        expansion = GraphStore(retriever.store).expand(
            [document_key("", "film")],
            scope,
            top_entities=8,
            max_hops=2,
            frontier_cap=16,
            document_cap=20,
        )
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
        expansion = GraphStore(retriever.store).expand(
            [document_key("", "services/session-store")],
            scope,
            top_entities=8,
            max_hops=2,
            frontier_cap=16,
            document_cap=20,
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
        expansion = GraphStore(retriever.store).expand(
            [document_key("", "services/auth-gateway")],
            scope,
            top_entities=8,
            max_hops=2,
            frontier_cap=16,
            document_cap=20,
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
        expansion = GraphStore(retriever.store).expand(
            [document_key("", "seed")],
            retriever.scope(),
            top_entities=1,
            max_hops=2,
            frontier_cap=16,
            document_cap=60,
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
        expansion = GraphStore(retriever.store).expand(
            [document_key("", "seed")],
            retriever.scope(),
            top_entities=1,
            max_hops=2,
            frontier_cap=5,
            document_cap=60,
        )
        assert len(expansion.hops[0]) == 5
