"""retrieval-pipeline: hybrid PostgreSQL retrieval as a LangGraph pipeline.

The plain retrieval API::

    from retrieval_pipeline import retrieve
    chunks = retrieve("how do I rotate the payments API key?", limit=5)

The pipeline, as a library or a subgraph::

    from retrieval_pipeline import Context, build_pipeline
    pipeline = build_pipeline()  # resources from the environment, on first use
    out = pipeline.invoke({"question": "..."}, context=Context(reranker="none"))

Every public name is imported on first use, so importing the package is cheap.
The compiled module-level pipeline is ``retrieval_pipeline.graph.builder.graph``
(``retrieval_pipeline.graph`` is the subpackage).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from retrieval_pipeline.errors import (
    AccessDeniedError,
    ConfigurationError,
    DatabaseTimeoutError,
    DatabaseUnavailableError,
    DimensionMismatchError,
    IngestError,
    InvalidQueryError,
    RetrievalPipelineError,
    WriteConflictError,
)

# The public API, imported on first use (PEP 562): ``import retrieval_pipeline``
# stays cheap and never loads PostgreSQL drivers, LangGraph or an embedding model.
# Each name maps to the module that defines it.
_LAZY: dict[str, str] = {
    "AccessScope": "retrieval_pipeline.tools.store",
    "Context": "retrieval_pipeline.graph.context",
    "EmbeddedPostgres": "retrieval_pipeline.tools.store",
    "Embedder": "retrieval_pipeline.tools.embeddings",
    "IngestSummary": "retrieval_pipeline.ingest.job",
    "Ingestor": "retrieval_pipeline.ingest.job",
    "PipelineResources": "retrieval_pipeline.graph.resources",
    "PipelineRetriever": "retrieval_pipeline.retriever",
    "PipelineVectorStore": "retrieval_pipeline.vectorstore",
    "RetrievedChunk": "retrieval_pipeline.tools.store.records",
    "Retriever": "retrieval_pipeline.tools.retrieve",
    "Store": "retrieval_pipeline.tools.store",
    "build_agent": "retrieval_pipeline.graph.agent",
    "build_pipeline": "retrieval_pipeline.graph.builder",
    "make_retrieval_tool": "retrieval_pipeline.retriever",
    "open_store": "retrieval_pipeline.tools.store",
    "reciprocal_rank_fusion": "retrieval_pipeline.tools.retrieve",
    "resolve_embedder": "retrieval_pipeline.tools.embeddings",
    "retrieve": "retrieval_pipeline.tools.retrieve",
    "to_json": "retrieval_pipeline.graph.state",
}

if TYPE_CHECKING:
    from retrieval_pipeline.graph.agent import build_agent
    from retrieval_pipeline.graph.builder import build_pipeline
    from retrieval_pipeline.graph.context import Context
    from retrieval_pipeline.graph.resources import PipelineResources
    from retrieval_pipeline.graph.state import to_json
    from retrieval_pipeline.ingest.job import Ingestor, IngestSummary
    from retrieval_pipeline.retriever import PipelineRetriever, make_retrieval_tool
    from retrieval_pipeline.tools.embeddings import Embedder, resolve_embedder
    from retrieval_pipeline.tools.retrieve import (
        Retriever,
        reciprocal_rank_fusion,
        retrieve,
    )
    from retrieval_pipeline.tools.store import (
        AccessScope,
        EmbeddedPostgres,
        Store,
        open_store,
    )
    from retrieval_pipeline.tools.store.records import RetrievedChunk
    from retrieval_pipeline.vectorstore import PipelineVectorStore


def __getattr__(name: str) -> Any:
    """Import a public name from its module on first access (PEP 562)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "AccessDeniedError",
    "AccessScope",
    "ConfigurationError",
    "Context",
    "DatabaseTimeoutError",
    "DatabaseUnavailableError",
    "DimensionMismatchError",
    "EmbeddedPostgres",
    "Embedder",
    "IngestError",
    "IngestSummary",
    "Ingestor",
    "InvalidQueryError",
    "PipelineResources",
    "PipelineRetriever",
    "PipelineVectorStore",
    "RetrievalPipelineError",
    "RetrievedChunk",
    "Retriever",
    "Store",
    "WriteConflictError",
    "build_agent",
    "build_pipeline",
    "make_retrieval_tool",
    "open_store",
    "reciprocal_rank_fusion",
    "resolve_embedder",
    "retrieve",
    "to_json",
]
