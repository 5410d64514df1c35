"""retrieval-pipeline: hybrid PostgreSQL retrieval as a LangGraph pipeline.

The plain retrieval API::

    from retrieval_pipeline import retrieve
    chunks = retrieve("how do I rotate the payments API key?", limit=5)
"""

from retrieval_pipeline.errors import (
    ConfigurationError,
    DatabaseUnavailableError,
    DimensionMismatchError,
    IngestError,
    InvalidQueryError,
    RetrievalPipelineError,
)
from retrieval_pipeline.ingest.job import Ingestor, IngestSummary
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

__all__ = [
    "AccessScope",
    "ConfigurationError",
    "DatabaseUnavailableError",
    "DimensionMismatchError",
    "EmbeddedPostgres",
    "Embedder",
    "IngestError",
    "IngestSummary",
    "Ingestor",
    "InvalidQueryError",
    "RetrievalPipelineError",
    "RetrievedChunk",
    "Retriever",
    "Store",
    "open_store",
    "reciprocal_rank_fusion",
    "resolve_embedder",
    "retrieve",
]
