"""Permission boundaries, property-based (hypothesis).

Random corpora with random ACL principals and tenants, random callers and queries,
every stage combination (understanding on/off, graph fusion on/off, reranker none,
Voyage or Cohere at a local HTTP peer). The invariant: nothing from a document the
caller may not see reaches the caller, by any path:

- the output chunks and the debug block;
- the trace record (in-process listener);
- any reranker request body (checked at the HTTP peer);
- the judge's prompt;
- the assembler's caches (keys are chunk ids: only visible ones may be added).

Every hidden document carries unique marker tokens and ids; a leak is any of them
appearing anywhere above. A second property checks graph fusion differentially: its
expansion (entities, weights, documents) for a caller is the same whether or not the
hidden documents exist, so it reveals neither their titles nor their counts.

Examples are derandomised so CI is reproducible; the case count is asserted.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

import pytest
from fake_judge import ScriptedJudge
from figures import record_figure
from helpers import property_settings
from hypothesis import given
from hypothesis import strategies as st
from provider_peers import rerank_peer

from retrieval_pipeline.graph.builder import build_pipeline
from retrieval_pipeline.graph.context import Context
from retrieval_pipeline.graph.resources import PipelineResources
from retrieval_pipeline.ingest.job import Ingestor
from retrieval_pipeline.ingest.loaders import SourceDocument
from retrieval_pipeline.observability import add_trace_listener
from retrieval_pipeline.tools import assembly
from retrieval_pipeline.tools.rerankers.http import CohereReranker, VoyageReranker
from retrieval_pipeline.tools.retrieve import Retriever
from retrieval_pipeline.tools.store.graph import GraphStore
from retrieval_pipeline.tools.store.records import (
    EntitySpec,
    RelationSpec,
    document_key,
)

WORDS = (
    "harbor quartz meadow signal ember lattice willow river copper lantern glacier "
    "violet anchor summit thunder basalt orchard canyon beacon prism falcon cobalt"
).split()
ENTITIES = ["Falcon", "Cobalt", "Orchard", "Beacon", "Summit", "Lantern"]
ALIASES = {
    "Falcon": "Raptor",
    "Cobalt": "Blue Metal",
}  # fixed: canonical maps are tenant-wide
TENANTS = ["", "acme"]
PRINCIPALS = ["red", "blue", "green"]
API_KEY = "sk-test-permission-secret-0123456789"
MIN_CASES = 2000


@dataclass(frozen=True)
class Doc:
    n: int
    tenant: str
    acl: tuple[str, ...]
    words: tuple[str, ...]
    declared: tuple[str, ...]
    relations: tuple[tuple[str, str], ...]
    title_entity: str | None  # unique per corpus

    @property
    def source_id(self) -> str:
        return f"src{self.n:05d}z"

    @property
    def marker(self) -> str:
        return f"mk{self.n:05d}q"

    def visible_to(self, tenant: str, principals: frozenset[str]) -> bool:
        return self.tenant == tenant and (
            not self.acl or bool(principals & set(self.acl))
        )

    def source(self) -> SourceDocument:
        text = " ".join(self.words) + f" {self.marker}."
        title = self.title_entity or f"Note {self.marker}"
        content = f"{title}\n\n{text}"
        return SourceDocument(
            source_id=self.source_id,
            title=title,
            path=f"notes/{self.source_id}",
            source_uri=f"test://{self.source_id}",
            content=content,
            body_start=0,
            kind="text",
            tenant=self.tenant,
            principals=self.acl,
            entities=tuple(
                EntitySpec(name, aliases=(ALIASES[name],) if name in ALIASES else ())
                for name in self.declared
            ),
            relations=tuple(RelationSpec(a, b) for a, b in self.relations),
            title_entity=self.title_entity is not None,
        )


def _doc(n: int, title_entity: str | None) -> st.SearchStrategy[Doc]:
    names = st.sampled_from(ENTITIES)
    mention = st.sampled_from(ENTITIES + list(ALIASES.values()))
    return st.builds(
        Doc,
        n=st.just(n),
        tenant=st.sampled_from(TENANTS),
        acl=st.lists(st.sampled_from(PRINCIPALS), max_size=2, unique=True).map(tuple),
        words=st.lists(st.sampled_from(WORDS) | mention, min_size=3, max_size=18).map(
            tuple
        ),
        declared=st.lists(names, max_size=2, unique=True).map(tuple),
        relations=st.lists(st.tuples(names, names), max_size=2).map(tuple),
        title_entity=st.just(title_entity),
    )


@st.composite
def corpora(draw: st.DrawFn) -> list[Doc]:
    size = draw(st.integers(min_value=3, max_value=9))
    titles = draw(st.permutations(ENTITIES + [None] * size))[:size]  # unique titles
    base = draw(st.integers(min_value=0, max_value=9999)) * 10
    return [draw(_doc(base + i, titles[i])) for i in range(size)]


@dataclass(frozen=True)
class Case:
    tenant: str
    principals: frozenset[str]
    query: str
    scope: tuple[int, ...] | None  # indexes into the corpus (any document)
    understanding: bool
    graph_fusion: bool
    reranker: str  # none | voyage | cohere


cases = st.builds(
    Case,
    tenant=st.sampled_from(TENANTS),
    principals=st.frozensets(st.sampled_from([*PRINCIPALS, "nobody"]), max_size=2),
    query=st.lists(
        st.sampled_from(WORDS + ENTITIES + list(ALIASES.values())),
        min_size=1,
        max_size=6,
    ).map(" ".join),
    scope=st.none() | st.lists(st.integers(0, 8), min_size=1, max_size=3).map(tuple),
    understanding=st.booleans(),
    graph_fusion=st.booleans(),
    reranker=st.sampled_from(["none", "voyage", "cohere"]),
)


def _ingest(ingestor: Ingestor, docs: list[Doc]) -> None:
    with ingestor.store.connection() as conn:
        conn.execute(
            "TRUNCATE documents, chunks, chunk_terms, term_stats, corpus_stats,"
            " entities, mentions, relations CASCADE"
        )
    summary = ingestor.ingest_documents([d.source() for d in docs])
    assert not summary.failures, summary.failures


def _ids_by_document(ingestor: Ingestor) -> dict[str, list[str]]:
    """source id -> [internal document id, chunk ids...]"""
    with ingestor.store.connection() as conn:
        rows = conn.execute(
            "SELECT d.source_id, d.id, c.id FROM documents d"
            " JOIN chunks c ON c.document_id = d.id"
        ).fetchall()
    out: dict[str, list[str]] = {}
    for source_id, doc_id, chunk_id in rows:
        out.setdefault(source_id, [doc_id]).append(chunk_id)
    return out


class Harness:
    """Six compiled pipelines (judge yes/no x reranker), peers, listeners, counters."""

    def __init__(self, retriever: Retriever, voyage_url: str, cohere_url: str) -> None:
        self.retriever = retriever
        self.judge = ScriptedJudge(answer={"rewrite": "x"})
        rerankers = {
            "none": None,
            "voyage": VoyageReranker(api_key=API_KEY, base_url=voyage_url),
            "cohere": CohereReranker(api_key=API_KEY, base_url=cohere_url),
        }
        self.graphs = {
            (judged, kind): build_pipeline(
                PipelineResources(
                    retriever=retriever,
                    judge=self.judge if judged else None,
                    reranker=reranker,
                )
            )
            for judged in (True, False)
            for kind, reranker in rerankers.items()
        }
        self.traces: list[dict[str, Any]] = []
        self.cases = 0


@pytest.fixture(scope="module")
def harness(session_store: Any, embedder: Any) -> Any:
    retriever = Retriever(session_store, embedder)
    with rerank_peer() as (voyage_url, voyage), rerank_peer() as (cohere_url, cohere):
        h = Harness(retriever, voyage_url, cohere_url)
        h.peers = (voyage, cohere)  # type: ignore[attr-defined]
        remove = add_trace_listener(h.traces.append)
        try:
            yield h
        finally:
            remove()


def _leaks(blob: str, hidden: set[str]) -> list[str]:
    return sorted(s for s in hidden if s in blob)


def test_no_hidden_evidence_reaches_a_caller_by_any_path(
    harness: Harness, embedder: Any
) -> None:
    ingestor = Ingestor(harness.retriever.store, embedder)

    @property_settings(150)
    @given(docs=corpora(), batch=st.lists(cases, min_size=13, max_size=18))
    def check(docs: list[Doc], batch: list[Case]) -> None:
        _ingest(ingestor, docs)
        ids = _ids_by_document(ingestor)
        voyage, cohere = harness.peers  # type: ignore[attr-defined]
        for case in batch:
            visible = [d for d in docs if d.visible_to(case.tenant, case.principals)]
            hidden_docs = [d for d in docs if d not in visible]
            hidden = {d.marker for d in hidden_docs} | {
                d.source_id for d in hidden_docs
            }
            hidden |= {i for d in hidden_docs for i in ids[d.source_id]}
            visible_chunks = {c for d in visible for c in ids[d.source_id][1:]}
            harness.judge.answer = {
                "rewrite": " ".join(reversed(case.query.split())),
                "sub_queries": [case.query.split()[0], "falcon lantern"],
                "filters": {"doc_title_contains": "Falcon", "path_prefix": "notes/"},
                "freshness": "recent",
            }
            for peer in (voyage, cohere):
                peer.requests.clear()
            harness.judge.calls.clear()
            harness.traces.clear()
            shingles_before = set(assembly._shingle_cache)
            tokens_before = set(assembly._token_cache)
            scope = (
                None
                if case.scope is None
                else [docs[i % len(docs)].source_id for i in case.scope]
            )
            graph = harness.graphs[(case.understanding, case.reranker)]
            result = graph.invoke(
                {
                    "question": case.query,
                    "limit": 6,
                    "doc_ids": scope,
                    "principals": sorted(case.principals),
                    "tenant": case.tenant,
                },
                context=Context(
                    graph_fusion=case.graph_fusion, candidate_pool=12, reranker="none"
                ),
            )
            harness.cases += 1
            where = f"case {case} on corpus {docs}"
            chunk_ids = {c["chunk_id"] for c in result["chunks"]}
            assert chunk_ids <= visible_chunks, where
            assert not _leaks(json.dumps(result, default=str), hidden), where
            assert API_KEY not in json.dumps(result, default=str)
            assert len(harness.traces) == 1, where
            trace = json.dumps(harness.traces, default=str)
            assert not _leaks(trace, hidden) and API_KEY not in trace, where
            sent = json.dumps(
                [r["documents"] for p in (voyage, cohere) for r in p.requests]
            )
            assert not _leaks(sent, hidden), where
            assert not _leaks(json.dumps(harness.judge.calls, default=str), hidden)
            for cache, before in (
                (assembly._shingle_cache, shingles_before),
                (assembly._token_cache, tokens_before),
            ):
                added = {key[-2] for key in set(cache) - before}
                assert added <= visible_chunks, where

    check()
    assert harness.cases >= MIN_CASES, f"only {harness.cases} cases ran"
    record_figure("permission_cases", harness.cases, leaks=0)


def test_graph_fusion_is_the_same_whether_or_not_hidden_documents_exist(
    harness: Harness, embedder: Any
) -> None:
    """Differential: tenant 'full' holds every document; tenant 'seen' only those the
    caller may see. Graph expansion from the same seeds must be identical, by entity
    name and source id: hidden titles, names and counts leave no trace."""
    ingestor = Ingestor(harness.retriever.store, embedder)
    graph = GraphStore(harness.retriever.store)
    tried = 0

    @property_settings(60)
    @given(
        docs=corpora(),
        principals=st.frozensets(st.sampled_from(PRINCIPALS), max_size=2),
        hops=st.integers(1, 2),
    )
    def check(docs: list[Doc], principals: frozenset[str], hops: int) -> None:
        nonlocal tried
        full = [_retenant(d, "full") for d in docs]
        seen = [
            _retenant(d, "seen") for d in docs if not d.acl or principals & set(d.acl)
        ]
        _ingest(ingestor, full + seen)
        with ingestor.store.connection() as conn:
            names = dict(conn.execute("SELECT id, name FROM entities").fetchall())
            sources = dict(
                conn.execute("SELECT id, source_id FROM documents").fetchall()
            )
        seed_sources = [d.source_id for d in seen]

        def expand(tenant: str) -> Any:
            scope = harness.retriever.scope(
                principals=sorted(principals), tenant=tenant
            )
            seeds = [document_key(tenant, s) for s in seed_sources]
            out = graph.expand(
                seeds,
                scope,
                top_entities=8,
                max_hops=hops,
                frontier_cap=16,
                document_cap=20,
            )

            # Ids hash the tenant, so ties order differently: compare as sorted sets.
            def named(pairs: Any, label: Any) -> list[tuple[str, float]]:
                return sorted((label[k], round(w, 9)) for k, w in pairs)

            return (
                named(out.seeds, names),
                [named(hop, names) for hop in out.hops],
                named(out.documents, sources),
            )

        assert expand("full") == expand("seen"), f"{docs} for {sorted(principals)}"
        tried += 1

    check()
    assert tried >= 50
    record_figure("graph_differential_cases", tried, leaks=0)


def _retenant(doc: Doc, tenant: str) -> Doc:
    return replace(doc, tenant=tenant)
