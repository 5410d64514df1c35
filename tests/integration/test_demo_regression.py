"""The demo's question on the example corpus (``make demo``), as a regression test.

"Who owns the service that failed with ERR_CONN_RESET in v2.3.1?" needs two hops: the
runbook names the failing service (Auth Gateway); the service's graph says the
Identity Team owns it. The top three must be the runbook, the Auth Gateway page and
the Identity Team page, and no graph-found passage may score above the seed that led
to it (before issue 18, the Payments Team page scored 1.446 over the runbook's 1.0).
"""

from __future__ import annotations

from pathlib import Path

from retrieval_pipeline.graph.builder import build_pipeline
from retrieval_pipeline.graph.context import Context
from retrieval_pipeline.graph.resources import PipelineResources
from retrieval_pipeline.ingest.job import Ingestor
from retrieval_pipeline.tools.retrieve import Retriever

QUESTION = "Who owns the service that failed with ERR_CONN_RESET in v2.3.1?"


def test_the_demo_question_gets_the_runbook_the_service_and_its_owner(
    ingestor: Ingestor, retriever: Retriever, sample_corpus: Path
) -> None:
    ingestor.ingest_paths([sample_corpus])
    graph = build_pipeline(PipelineResources(retriever=retriever))
    result = graph.invoke(
        {"question": QUESTION, "limit": 5},
        context=Context(reranker="none"),
    )
    chunks = result["chunks"]
    top = [c["document_id"] for c in chunks[:3]]
    assert set(top) == {
        "runbooks/err-conn-reset",
        "services/auth-gateway",
        "teams/identity-team",
    }, [(c["document_id"], c["score"]) for c in chunks]
    scores = [c["score"] for c in chunks]
    assert scores == sorted(scores, reverse=True)
    # The chain-score invariant: the best pool passage (the runbook, a seed) is
    # never passed by a linked one.
    seed_best = max(c["score"] for c in chunks if not c.get("graph_boosted"))
    assert all(c["score"] <= seed_best + 1e-9 for c in chunks)
    assert chunks[0]["score"] <= 1.0 + 1e-9
