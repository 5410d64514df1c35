"""The chain-score invariant: a linked passage never outranks the seed that led to it.

Two levels. ``chain_score`` (the passage's score from its link and its relevance) never
exceeds the link, whatever the relevance or weight. And the expansion in SQL never
gives a document a link above the best seed it can be reached from, over random
entity graphs: several entities and edges into one document, relation weights
outside [0, 1], questions that name a relation, isolated neighbours (degree 0) and
hubs. The graphs are written straight into the real store's tables (no chunks or
embeddings are needed to expand), so each example takes milliseconds.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from retrieval_pipeline.tools.graph_fusion import chain_score
from retrieval_pipeline.tools.store.graph import GraphStore
from retrieval_pipeline.tools.store.records import entity_key
from retrieval_pipeline.tools.store.store import AccessScope

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
from helpers import property_settings  # noqa: E402

RELATION_TYPES = ("owns", "depends_on", "leads", "calls", "links_to")
QUESTIONS = (
    "",
    "Who owns the gateway?",
    "What does it depend on?",
    "lead time",
    "which page links to it",
)


@given(
    link=st.floats(0, 1),
    relevance=st.floats(-5, 5, allow_nan=False),
    weight=st.floats(0, 10, allow_nan=False),
)
@property_settings(500)
def test_a_chain_score_never_passes_its_link(
    link: float, relevance: float, weight: float
) -> None:
    assert 0 <= chain_score(link, relevance, weight) <= link


def test_a_linked_passage_with_full_relevance_reaches_its_link() -> None:
    assert chain_score(0.8, 1.0) == pytest.approx(0.8)
    assert chain_score(0.8, 0.0) == pytest.approx(0.4)  # half for the link alone


@st.composite
def graphs(draw: Any) -> dict[str, Any]:
    docs = [f"d{i}" for i in range(draw(st.integers(2, 9)))]
    entities = [f"Entity {i}" for i in range(draw(st.integers(1, 7)))]
    titles = {d: draw(st.sampled_from([*entities, f"Page {d}"])) for d in docs}
    mentions = draw(
        st.lists(
            st.tuples(
                st.sampled_from(entities),
                st.sampled_from(docs),
                st.sampled_from(("explicit", "extracted", "title")),
                st.integers(1, 6),
            ),
            max_size=30,
            unique_by=lambda m: (m[0], m[1], m[2]),
        )
    )
    relations = draw(
        st.lists(
            st.tuples(
                st.sampled_from(entities),
                st.sampled_from(entities),
                st.sampled_from(RELATION_TYPES),
                st.sampled_from(docs),
                # weights above 1 must not lift a link
                st.sampled_from((0.0, 0.3, 1.0, 1.5, 3.0)),
            ),
            max_size=20,
            unique_by=lambda r: (r[0], r[1], r[2], r[3]),
        )
    )
    seeds = draw(st.dictionaries(st.sampled_from(docs), st.floats(0.01, 1), min_size=1))
    return {
        "docs": docs,
        "entities": entities,
        "titles": titles,
        "mentions": mentions,
        "relations": relations,
        "seeds": seeds,
        "question": draw(st.sampled_from(QUESTIONS)),
        "max_hops": draw(st.integers(1, 3)),
    }


def _write(store: Any, graph: dict[str, Any]) -> None:
    with store.connection() as conn, conn.transaction():
        conn.execute(
            "TRUNCATE documents, chunks, chunk_terms, term_stats, corpus_stats,"
            " entities, mentions, relations CASCADE"
        )
        for doc in graph["docs"]:
            conn.execute(
                "INSERT INTO documents (id, source_id, title, source_uri, revision,"
                " parser_version, content, embedding_model, updated_at)"
                " VALUES (%s, %s, %s, '', 'r', 'p', '', 'm', now())",
                (doc, doc, graph["titles"][doc]),
            )
        for name in graph["entities"]:
            conn.execute(
                "INSERT INTO entities (id, name) VALUES (%s, %s)",
                (entity_key("", name), name),
            )
        for name, doc, origin, count in graph["mentions"]:
            conn.execute(
                "INSERT INTO mentions (entity_id, document_id, count, origin)"
                " VALUES (%s, %s, %s, %s)",
                (entity_key("", name), doc, count, origin),
            )
        for source, target, kind, doc, weight in graph["relations"]:
            conn.execute(
                "INSERT INTO relations"
                " (source_id, target_id, type, document_id, weight)"
                " VALUES (%s, %s, %s, %s, %s)",
                (entity_key("", source), entity_key("", target), kind, doc, weight),
            )


def _bounds(graph: dict[str, Any]) -> tuple[dict[str, float], dict[str, float]]:
    """Upper bounds: per entity and per document, the best seed that can reach it.

    Reachability is over-approximated (any mention, any relation in either
    direction, any page co-mention), so a bound is never below the true one.
    """
    mentioned: dict[str, set[str]] = {}
    for name, doc, _, _ in graph["mentions"]:
        mentioned.setdefault(doc, set()).add(entity_key("", name))
    neighbours: dict[str, set[str]] = {}
    for source, target, _, _, _ in graph["relations"]:
        a, b = entity_key("", source), entity_key("", target)
        neighbours.setdefault(a, set()).add(b)
        neighbours.setdefault(b, set()).add(a)
    for names in mentioned.values():
        for a in names:
            neighbours.setdefault(a, set()).update(names)
    entity_bound: dict[str, float] = {}
    for seed, score in graph["seeds"].items():
        reached = set(mentioned.get(seed, ()))
        for _ in range(graph["max_hops"]):
            reached |= {n for e in reached for n in neighbours.get(e, ())}
        for entity in reached:
            entity_bound[entity] = max(entity_bound.get(entity, 0.0), score)
    document_bound: dict[str, float] = {}
    for doc, names in mentioned.items():
        for entity in names:
            if entity in entity_bound:
                document_bound[doc] = max(
                    document_bound.get(doc, 0.0), entity_bound[entity]
                )
    return entity_bound, document_bound


@given(graph=graphs())
@property_settings(60)
def test_no_link_passes_the_best_seed_that_reaches_it(
    store: Any, graph: dict[str, Any]
) -> None:
    _write(store, graph)
    expansion = GraphStore(store).expand(
        graph["seeds"],
        AccessScope(principals=(), tenant="", doc_keys=None),
        top_entities=8,
        max_hops=graph["max_hops"],
        frontier_cap=16,
        document_cap=20,
        question=graph["question"],
    )
    entity_bound, document_bound = _bounds(graph)
    best = max(graph["seeds"].values())
    for entity, weight in [
        *expansion.seeds,
        *(e for hop in expansion.hops for e in hop),
    ]:
        assert 0 <= weight <= entity_bound.get(entity, 0.0) + 1e-9 <= best + 1e-9
    for doc, weight in expansion.documents:
        assert 0 <= weight <= document_bound.get(doc, 0.0) + 1e-9
        # Its passages: at most the link, whatever their relevance.
        assert chain_score(weight, 1.0) <= document_bound[doc] + 1e-9
    assert expansion.answers <= {doc for doc, _ in expansion.documents}
    if graph["question"] == "which page links to it":  # names only links_to
        assert not expansion.answers  # a hyperlink is no fact a question asks for


@pytest.mark.parametrize("weight", [0.0, -1.0, 1.5])
def test_a_graph_weight_outside_0_1_is_rejected(weight: float) -> None:
    from retrieval_pipeline.errors import ConfigurationError
    from retrieval_pipeline.graph.context import Context

    with pytest.raises(ConfigurationError, match="graph_score_weight"):
        Context(graph_score_weight=weight)


def test_structural_relations_name_the_site_link_relation() -> None:
    from retrieval_pipeline.ingest.site import LINK_RELATION
    from retrieval_pipeline.tools.store.graph import STRUCTURAL_RELATIONS

    assert LINK_RELATION in STRUCTURAL_RELATIONS


def test_the_untyped_default_relation_is_never_named_by_a_question() -> None:
    from retrieval_pipeline.tools.store.graph import STRUCTURAL_RELATIONS
    from retrieval_pipeline.tools.store.records import RelationSpec

    assert RelationSpec("a", "b").type in STRUCTURAL_RELATIONS
