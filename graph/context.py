"""Every default of the retrieval pipeline, in one place, each with its source.

Numbers come from ``shared/spec/retrieval-pipeline.md`` (the spec) unless noted.
"""

from __future__ import annotations

# --- hybrid retrieval -------------------------------------------------------------
RRF_K = 60  # Cormack, Clarke & Buettcher, SIGIR 2009; ranks are 1-based.
CANDIDATE_POOL = 40  # spec: "run it wide", a pool of ~40 chunks.
DEFAULT_LIMIT = 8  # caller's answer budget when none is given (a typical top-k).
MAX_LIMIT = 200  # bounds the work a single request can ask for.
CHANNEL_DEPTH = (
    100  # per-channel depth before fusion; >= pool (issue: "at least the pool").
)
BM25_K1 = 0.9  # Anserini/Pyserini BEIR defaults (Lin et al., 2021): k1=0.9, b=0.4.
BM25_B = 0.4
MAX_QUERY_CHARS = 8_000  # longer input is a paste, not a question; rejected clearly.
HNSW_EF_SEARCH = 100  # pgvector default is 40; >= channel depth so a page is complete.

# --- graph fusion ---------------------------------------------------------------
GRAPH_TOP_ENTITIES = 8  # spec: seeds ranked by mention count, top 8.
GRAPH_MIN_HOPS = 1  # spec: a 1-2 hop neighbourhood.
GRAPH_MAX_HOPS = 2

# --- assembly ---------------------------------------------------------------------
TOKEN_BUDGET = 6_000  # spec: default budget, ~4 characters per token.
MAX_CHUNKS = 20  # spec: hard cap on assembled chunks.
MMR_LAMBDA = 0.7  # spec: greedy MMR trade-off between relevance and redundancy.
DUPLICATE_JACCARD = 0.9  # spec: drop a chunk this similar to an already-selected one.
CHARS_PER_TOKEN = 4  # spec: the estimate used when no tokenizer can be loaded.

# --- ingestion --------------------------------------------------------------------
CHUNK_MAX_TOKENS = 256  # all-MiniLM-L6-v2 reads 256 word pieces; longer text is cut.
CHUNK_OVERLAP_TOKENS = 32  # small overlap so a split sentence keeps its context.
EMBED_BATCH_SIZE = 64  # sentence-transformers' sweet spot on two CPU cores.
