"""Side channels (issue 15, section 5): what a caller learns about what it cannot see.

Timings, raw channel scores and the index revision go only to a caller who asks for
debug (the HTTP server grants it per API key); curation (lifecycle, aliases, types)
applies to a caller only when a document the caller may see declares it.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from retrieval_pipeline.graph.builder import build_pipeline
from retrieval_pipeline.graph.context import Context
from retrieval_pipeline.graph.resources import PipelineResources
from retrieval_pipeline.graph.state import to_json
from retrieval_pipeline.ingest.job import Ingestor
from retrieval_pipeline.observability import add_trace_listener
from retrieval_pipeline.tools.retrieve import Retriever, retrieve
from retrieval_pipeline.tools.store.graph import GraphStore
from retrieval_pipeline.tools.store.records import document_key, entity_key
from retrieval_pipeline.tools.store.store import Store

QUESTION = "Who owns the service that failed with ERR_CONN_RESET?"
PLAIN = Context(understanding=False, graph_fusion=False, reranker="none")
PIPELINE = Context(understanding=False, graph_fusion=True, reranker="none")
GATED_DEBUG_KEYS = {"stage_ms", "index_revision", "lexical_postings", "lexical_mode"}


@pytest.fixture()
def corpus(ingestor: Ingestor, sample_corpus: Path) -> None:
    ingestor.ingest_paths([sample_corpus])


def run(retriever: Retriever, context: Context, **state: Any) -> dict[str, Any]:
    graph = build_pipeline(PipelineResources(retriever=retriever))
    return graph.invoke({"question": QUESTION, "limit": 5, **state}, context=context)


def assert_nothing_gated(output: dict[str, Any]) -> None:
    debug = output["retrieval_debug"]
    assert not GATED_DEBUG_KEYS & set(debug)
    assert not [k for k in debug if k.endswith("_ms")]
    for branch in debug.get("branches", []):
        assert not GATED_DEBUG_KEYS & set(branch)
        assert not [k for k in branch if k.endswith("_ms")], branch
    assert output["chunks"]
    for chunk in output["chunks"]:
        assert "channel_scores" not in chunk


class TestDebugIsOptIn:
    @pytest.mark.parametrize("context", [PLAIN, PIPELINE], ids=["plain", "pipeline"])
    def test_the_default_output_holds_no_timings_scores_or_revision(
        self, retriever: Retriever, corpus: None, context: Context
    ) -> None:
        output = run(retriever, context)
        assert_nothing_gated(output)
        camel = to_json(output)["retrievalDebug"]
        assert not {"stageMs", "indexRevision"} & set(camel)

    @pytest.mark.parametrize("context", [PLAIN, PIPELINE], ids=["plain", "pipeline"])
    def test_visible_counts_stay_in_the_default_output(
        self, retriever: Retriever, corpus: None, context: Context
    ) -> None:
        debug = run(retriever, context)["retrieval_debug"]
        assert {"candidate_pool", "graph_added", "assembled_tokens", "path"} <= set(
            debug
        )
        for branch in debug.get("branches", []):
            assert {"branch", "channels", "candidates"} <= set(branch)

    def test_plain_and_pipeline_chunks_have_the_same_shape(
        self, retriever: Retriever, corpus: None
    ) -> None:
        plain = run(retriever, PLAIN)["chunks"][0]
        piped = run(retriever, PIPELINE)["chunks"][0]
        assert set(plain) == set(piped)

    def test_debug_true_restores_timings_and_revision_on_the_pipeline(
        self, retriever: Retriever, corpus: None
    ) -> None:
        debug = run(retriever, PIPELINE, debug=True)["retrieval_debug"]
        assert {"hybrid_retrieve", "fuse_graph", "assemble_context"} <= set(
            debug["stage_ms"]
        )
        assert debug["index_revision"].startswith("chunks-")
        branch = debug["branches"][0]
        assert {"lexical_ms", "dense_ms", "embed_ms", "lexical_mode"} <= set(branch)

    def test_debug_true_restores_timings_and_raw_scores_on_the_plain_path(
        self, retriever: Retriever, corpus: None
    ) -> None:
        output = run(retriever, PLAIN, debug=True)
        assert "plain_retrieve" in output["retrieval_debug"]["stage_ms"]
        assert output["retrieval_debug"]["index_revision"].startswith("chunks-")
        assert all(chunk["channel_scores"] for chunk in output["chunks"])

    def test_retrieve_returns_no_raw_channel_scores_unless_asked(
        self, retriever: Retriever, corpus: None
    ) -> None:
        default = retriever.retrieve(QUESTION, limit=3)
        assert all(c.channel_scores == {} for c in default)
        assert all("channel_scores" not in c.to_dict() for c in default)
        module = retrieve(QUESTION, limit=3, retriever=retriever)
        assert all(c.channel_scores == {} for c in module)
        asked = retriever.retrieve(QUESTION, limit=3, debug=True)
        assert all(c.channel_scores for c in asked)
        assert [c.chunk_id for c in asked] == [c.chunk_id for c in default]
        assert [c.score for c in asked] == [c.score for c in default]

    @pytest.mark.parametrize("context", [PLAIN, PIPELINE], ids=["plain", "pipeline"])
    def test_streamed_updates_and_stage_events_carry_no_timings(
        self, retriever: Retriever, corpus: None, context: Context
    ) -> None:
        graph = build_pipeline(PipelineResources(retriever=retriever))
        events = list(
            graph.stream(
                {"question": QUESTION, "limit": 5},
                context=context,
                stream_mode=["updates", "custom"],
            )
        )
        stages = [data for mode, data in events if mode == "custom"]
        assert stages and all("ms" not in e["retrieval_pipeline"] for e in stages)
        for mode, data in events:
            if mode != "updates":
                continue
            for update in data.values():
                debug = (update or {}).get("retrieval_debug", {})
                assert not GATED_DEBUG_KEYS & set(debug)
                for branch in debug.get("branches", []):
                    assert not [k for k in branch if k.endswith("_ms")]
                for chunk in (update or {}).get("chunks", []):
                    assert "channel_scores" not in chunk

    @pytest.mark.parametrize("context", [PLAIN, PIPELINE], ids=["plain", "pipeline"])
    def test_the_operator_trace_keeps_timings_the_caller_does_not_get(
        self, retriever: Retriever, corpus: None, context: Context
    ) -> None:
        records: list[dict[str, Any]] = []
        remove = add_trace_listener(records.append)
        try:
            output = run(retriever, context)
        finally:
            remove()
        assert_nothing_gated(output)
        (record,) = records
        assert record["index_revision"].startswith("chunks-")
        assert record["stage_ms"] and record["total_ms"] > 0
        assert record["lexical_ms"] > 0 and record["dense_ms"] > 0


# --- curation ----------------------------------------------------------------------

PUBLIC_DOCS = {
    "orion.md": """\
        ---
        id: orion
        title: Orion Renderer
        entities:
          - {name: Orion, type: service, count: 3}
        relations:
          - {source: Orion, target: Vega, type: depends_on}
        ---
        # Orion

        Orion renders the map tiles. Orion reads its tiles from Vega.
        """,
    "vega.md": """\
        ---
        id: vega
        title: Vega Tile Store
        entities:
          - {name: Vega, type: datastore, count: 2}
        ---
        # Vega

        Vega keeps the rendered map tiles on disk.
        """,
    "lyra.md": """\
        ---
        id: lyra
        title: Lyra Scheduler
        entities:
          - {name: Lyra, type: service, count: 2}
        ---
        # Lyra

        Lyra schedules the nightly map rebuild.
        """,
}
# Declared only by a document the public cannot see: Vega withdrawn, Lyra made an
# alias of Orion, Orion retyped.
HIDDEN_DOC = """\
    ---
    id: curation-memo
    title: Curation memo
    principals: [curators]
    entities:
      - {name: Vega, lifecycle: deleted}
      - {name: Orion, type: weapon, aliases: [Lyra]}
    ---
    # Memo

    Internal notes on the catalogue.
    """


def write_docs(folder: Path, docs: dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in docs.items():
        (folder / name).write_text(textwrap.dedent(text), encoding="utf-8")
    return folder


def graph_view(store: Store, retriever: Retriever, principals: list[str]) -> Any:
    """Everything graph fusion and the entity-type soft filter decide for a caller."""
    scope = retriever.scope(principals=principals)
    graph = GraphStore(store)
    settings = {"top_entities": 8, "max_hops": 2, "frontier_cap": 16}
    expansions = {
        seed: graph.expand(
            {document_key("", seed): 1.0}, scope, document_cap=20, **settings
        )
        for seed in ("orion", "lyra")
    }
    public_docs = [document_key("", d) for d in ("orion", "vega", "lyra")]
    types = {
        kind: graph.documents_mentioning_types(public_docs, [kind], scope)
        for kind in ("weapon", "service", "datastore")
    }
    return expansions, types


def reached(expansion: Any) -> set[str]:
    return {e for e, _ in expansion.seeds} | {
        e for hop in expansion.hops for e, _ in hop
    }


class TestCurationNeedsAVisibleDeclaration:
    @pytest.fixture()
    def public(self, ingestor: Ingestor, tmp_path: Path) -> None:
        ingestor.ingest_paths([write_docs(tmp_path / "public", PUBLIC_DOCS)])

    def add_hidden(self, ingestor: Ingestor, store: Store, tmp_path: Path) -> None:
        ingestor.ingest_paths(
            [write_docs(tmp_path / "hidden", {"memo.md": HIDDEN_DOC})]
        )
        store.link_entities("")  # a later full re-link sees every declaration too

    def test_the_public_view_is_not_trivial(
        self, store: Store, retriever: Retriever, public: None
    ) -> None:
        (expansions, types) = graph_view(store, retriever, [])
        assert entity_key("", "Vega") in reached(expansions["orion"])
        assert entity_key("", "Lyra") in {e for e, _ in expansions["lyra"].seeds}
        assert types["service"] and not types["weapon"]

    def test_hidden_curation_does_not_change_a_public_callers_graph(
        self,
        ingestor: Ingestor,
        store: Store,
        retriever: Retriever,
        public: None,
        tmp_path: Path,
    ) -> None:
        before = graph_view(store, retriever, [])
        self.add_hidden(ingestor, store, tmp_path)
        assert graph_view(store, retriever, []) == before

    def test_hidden_type_is_not_detectable_through_the_entity_type_filter(
        self,
        ingestor: Ingestor,
        store: Store,
        retriever: Retriever,
        public: None,
        tmp_path: Path,
    ) -> None:
        self.add_hidden(ingestor, store, tmp_path)
        _, types = graph_view(store, retriever, [])
        assert types["weapon"] == set()
        assert document_key("", "orion") in types["service"]

    def test_a_caller_who_sees_the_declaring_document_gets_its_curation(
        self,
        ingestor: Ingestor,
        store: Store,
        retriever: Retriever,
        public: None,
        tmp_path: Path,
    ) -> None:
        self.add_hidden(ingestor, store, tmp_path)
        expansions, types = graph_view(store, retriever, ["curators"])
        assert entity_key("", "Vega") not in reached(expansions["orion"])  # deleted
        lyra_seeds = {e for e, _ in expansions["lyra"].seeds}
        assert lyra_seeds == {entity_key("", "Orion")}  # Lyra rolls up to Orion
        assert document_key("", "orion") in types["weapon"]

    def test_curation_vanishes_with_its_declaring_document(
        self,
        ingestor: Ingestor,
        store: Store,
        retriever: Retriever,
        public: None,
        tmp_path: Path,
    ) -> None:
        before = graph_view(store, retriever, ["curators"])
        self.add_hidden(ingestor, store, tmp_path)
        assert graph_view(store, retriever, ["curators"]) != before
        assert store.delete_document(document_key("", "curation-memo"))
        store.link_entities("")
        assert graph_view(store, retriever, ["curators"]) == before

    def test_a_hidden_title_does_not_take_over_a_public_entity_page(
        self,
        ingestor: Ingestor,
        store: Store,
        retriever: Retriever,
        public: None,
        tmp_path: Path,
    ) -> None:
        wiki = {
            "a.md": "---\nid: page-a\ntitle: Draco\n---\nDraco is a small constellation"
            " next to Vega.\n",
            "b.md": "---\nid: page-b\ntitle: Night sky\n---\nThe night sky shows Draco"
            " and Vega.\n",
        }
        ingestor.ingest_paths(
            [write_docs(tmp_path / "wiki", wiki)], title_entities=True
        )
        before = graph_view(store, retriever, [])
        scope = retriever.scope()
        settings = {"top_entities": 8, "max_hops": 2, "frontier_cap": 16}
        seed = {document_key("", "page-b"): 1.0}
        linked = GraphStore(store).expand(seed, scope, document_cap=20, **settings)
        hidden = {
            "h.md": "---\nid: page-h\ntitle: Draco\nprincipals: [curators]\n---\n"
            "Classified.\n"
        }
        ingestor.ingest_paths(
            [write_docs(tmp_path / "hidden-wiki", hidden)], title_entities=True
        )
        assert graph_view(store, retriever, []) == before
        again = GraphStore(store).expand(seed, scope, document_cap=20, **settings)
        assert again == linked
        assert document_key("", "page-a") in [d for d, _ in again.documents]
