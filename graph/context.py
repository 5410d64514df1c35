"""Every default of the retrieval pipeline, in one place, each with its source.

Numbers come from ``shared/spec/retrieval-pipeline.md`` (the spec) unless noted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

from retrieval_pipeline.errors import ConfigurationError

# --- hybrid retrieval -------------------------------------------------------------
RRF_K = 60  # Cormack, Clarke & Buettcher, SIGIR 2009; ranks are 1-based.
# Default fusion: convex combination of min-max normalised scores, equal weights
# (Bruch, Gai & Ingber 2023). Chosen on dev splits (bench/fusion.py --select dev;
# issue 18) of SciFact, NFCorpus, HotpotQA, MuSiQue and two Debian documentation
# sites (python3-doc, octave-doc; blind question sets): the best dev mean is a = 0.6
# (the dense share), 0.7097 against 0.7078 at a = 0.5 and 0.6890 for RRF k = 60; on
# the test splits a = 0.5 is as good (0.7118 against 0.7112), so the parameter-free
# equal weights stay. Against RRF over the same lists on test: SciFact +0.017,
# NFCorpus +0.004, HotpotQA +0.026, MuSiQue +0.027, octave-doc +0.022, python3-doc
# -0.007 (p 0.66). "rrf" keeps the spec's fusion one setting away.
FUSION = "convex"
FUSIONS = ("convex", "rrf")
CANDIDATE_POOL = 40  # spec: "run it wide", a pool of ~40 chunks.
DEFAULT_LIMIT = 8  # caller's answer budget when none is given (a typical top-k).
MAX_LIMIT = 200  # bounds the work a single request can ask for.
CHANNEL_DEPTH = 100  # per-channel depth before fusion; >= the pool (issue 3).
# BM25 k1/b chosen on the dev splits (issue 18; bench/lexical_parity.py): of
# (0.9, 0.4) (Anserini's BEIR defaults), (1.2, 0.5), (1.2, 0.75) and (1.5, 0.75),
# Lucene's (1.5, 0.75) has the best mean nDCG@10 over SciFact train, NFCorpus dev,
# HotpotQA dev and MuSiQue dev and is the only one within 0.01 of bm25s on all four
# (MuSiQue dev: 0.454 at (0.9, 0.4), 0.492 here; bm25s 0.491).
BM25_K1 = 1.5
BM25_B = 0.75
MAX_QUERY_CHARS = 8_000  # longer input is a paste, not a question; rejected clearly.
HNSW_EF_SEARCH = 100  # pgvector default is 40; >= channel depth so a page is complete.

# --- graph fusion ---------------------------------------------------------------
GRAPH_TOP_ENTITIES = 8  # spec: seeds ranked by mention count, top 8.
# The pool's strongest documents that seed the expansion (each with its score).
GRAPH_SEEDS = 5
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
# Remote providers: texts per request (well under OpenAI's 2048 inputs and Voyage's
# and Cohere's 96-128) and the retry policy of one batch at ingest.
REMOTE_EMBED_BATCH_SIZE = 96
EMBED_CONCURRENCY = 4  # remote batches in flight at once (RETRIEVAL_PIPELINE_...).
EMBED_RETRIES = 4  # attempts per batch: 1 + 3 retries.
EMBED_BACKOFF_S = 0.5  # first retry after ~0.5 s, doubling, with jitter.
EMBED_RETRY_AFTER_CAP_S = 60.0  # a longer Retry-After is cut to this.
REMOTE_EMBED_TIMEOUT_S = 30.0  # the HTTP client's own timeout per request.
SHINGLE_SIZE = 3  # word 3-shingles: robust to small edits, cheap to compute.
DOCUMENT_SHARE = (
    0.5  # one document may fill at most half the budget (spec: group by source).
)
# Most passages of one document in a context (a soft cap: a document's further
# passages fill the slots no other source can, after every other source's). Chosen on
# the python3-doc dev split (bench/documents.py, BENCHMARKS.md): page-level nDCG@10
# 0.870 with 1, 0.851 with 2, 0.849 with 3, 0.835 without a cap. 0 turns it off.
DOCUMENT_CHUNKS = 1
MAX_SUB_QUERIES = 3  # spec: up to three sub-queries for a bounded multi-query union.

# --- stage behaviour ----------------------------------------------------------------
RERANK_DEADLINE_S = 2.0  # a reranker slower than this falls back to fused order.
JUDGE_DEADLINE_S = 10.0  # the judge gets one structured call within this time.
# Query embedding: one short text, p99 of hosted providers well under a second; a
# slower or failing provider falls back to the lexical channel (fallback recorded).
# The local ONNX model takes ~3 ms; its first load happens before the deadline.
EMBED_DEADLINE_S = 1.0
GRAPH_FRONTIER_CAP = 16  # entities kept per hop: bounds cost around hub nodes.
GRAPH_DOCUMENT_CAP = 20  # documents a graph expansion may resolve to.
GRAPH_CHUNKS = 10  # chunks the scoped retrieve over those documents may add.
# A linked passage's chain score is this times its seed's score, times half for the
# link and half for its own relevance (tools/graph_fusion.py). 1.0: it can reach, not
# pass, the evidence that led to it.
GRAPH_SCORE_WEIGHT = 1.0
# Fused scores live in [0, 1]; a boost is a share of the best possible score, large
# enough to reorder near-ties, too small to lift an irrelevant chunk over a good one.
SOFT_FILTER_BOOST = 0.15  # an advisory filter match (path prefix, title words).
RECENCY_WEIGHT = 0.15  # a freshness intent, scaled by the recency term in [0, 1].
RECENCY_HALF_LIFE_DAYS = 180.0  # age at which the recency term halves.


@dataclass(frozen=True)
class Context:
    """Per-run settings of the pipeline (``runtime.context``); defaults as above.

    Arrives as this dataclass from Python, or as a dict from HTTP and Studio
    (:func:`resolve_context`); under a parent graph with another context type the
    defaults apply.
    """

    understanding: bool = True
    """Run query understanding when a judge model is available."""
    graph_fusion: bool = True
    """Run entity-graph local search."""
    reranker: str = "auto"
    """auto | voyage | cohere | onnx | none."""
    candidate_pool: int = CANDIDATE_POOL
    channel_depth: int = CHANNEL_DEPTH
    rrf_k: int = RRF_K
    fusion: str = FUSION
    """convex (default) or rrf."""
    lexical_weight: float = 1.0
    dense_weight: float = 1.0
    top_entities: int = GRAPH_TOP_ENTITIES
    graph_seeds: int = GRAPH_SEEDS
    max_hops: int = GRAPH_MAX_HOPS
    frontier_cap: int = GRAPH_FRONTIER_CAP
    graph_documents: int = GRAPH_DOCUMENT_CAP
    graph_chunks: int = GRAPH_CHUNKS
    graph_score_weight: float = GRAPH_SCORE_WEIGHT
    token_budget: int = TOKEN_BUDGET
    max_chunks: int = MAX_CHUNKS
    mmr_lambda: float = MMR_LAMBDA
    duplicate_jaccard: float = DUPLICATE_JACCARD
    document_share: float = DOCUMENT_SHARE
    document_chunks: int = DOCUMENT_CHUNKS
    """Most passages of one document (soft cap, see assembly); 0: no cap."""
    rerank_deadline_s: float = RERANK_DEADLINE_S
    judge_deadline_s: float = JUDGE_DEADLINE_S
    embed_deadline_s: float = EMBED_DEADLINE_S
    """Query embedding deadline; past it the dense channel is skipped (fallback)."""

    def __post_init__(self) -> None:
        _check_types(self)
        if not 1 <= self.candidate_pool <= MAX_LIMIT:
            raise ConfigurationError(f"candidate_pool must be 1..{MAX_LIMIT}")
        if self.fusion not in FUSIONS:
            raise ConfigurationError(f"fusion must be one of {FUSIONS}")
        if self.channel_depth < 1 or self.rrf_k < 1 or self.token_budget < 1:
            raise ConfigurationError(
                "channel_depth, rrf_k and token_budget must be positive"
            )
        if not GRAPH_MIN_HOPS <= self.max_hops <= GRAPH_MAX_HOPS:
            raise ConfigurationError(
                f"max_hops must be {GRAPH_MIN_HOPS}..{GRAPH_MAX_HOPS}"
            )
        if not 0 <= self.mmr_lambda <= 1 or not 0 < self.duplicate_jaccard <= 1:
            raise ConfigurationError(
                "mmr_lambda must be in [0, 1], duplicate_jaccard in (0, 1]"
            )
        if not 0 < self.embed_deadline_s <= 60:
            raise ConfigurationError("embed_deadline_s must be in (0, 60] seconds")
        if not 1 <= self.max_chunks <= MAX_LIMIT:
            raise ConfigurationError(f"max_chunks must be 1..{MAX_LIMIT}")
        if not 0 <= self.document_chunks <= MAX_LIMIT:
            raise ConfigurationError(
                f"document_chunks must be 0..{MAX_LIMIT} (0: no per-document cap)"
            )
        for name in (
            "graph_seeds",
            "top_entities",
            "frontier_cap",
            "graph_documents",
            "graph_chunks",
        ):
            if not 1 <= getattr(self, name) <= MAX_LIMIT:
                raise ConfigurationError(f"{name} must be 1..{MAX_LIMIT}")
        if not 0 < self.graph_score_weight <= 1 or not 0 < self.document_share <= 1:
            raise ConfigurationError(
                "graph_score_weight must be in (0, 1] (above 1 a linked passage could"
                " pass the seed that led to it), document_share in (0, 1]"
            )


def resolve_context(value: object) -> Context:
    """Return a :class:`Context` from a Context, a dict (HTTP, Studio) or anything else.

    Unknown dict keys are rejected with the valid names; a parent graph's own context
    object (another type) falls back to the defaults, so the pipeline works as a
    subgraph.
    """
    if isinstance(value, Context):
        return value
    if isinstance(value, Mapping):
        valid = {f.name for f in fields(Context)}
        unknown = {str(k) for k in value} - valid
        if unknown:
            raise ConfigurationError(
                f"unknown context keys {sorted(unknown)}; "
                f"valid: {', '.join(sorted(valid))}"
            )
        return Context(**{str(k): v for k, v in value.items()})
    return Context()


_TYPES: dict[str, tuple[type, ...]] = {
    "bool": (bool,),
    "int": (int,),
    "float": (int, float),
    "str": (str,),
}


def _check_types(context: Context) -> None:
    """Each setting has its declared type (a bool is not a number here)."""
    for f in fields(context):
        value = getattr(context, f.name)
        wanted = _TYPES.get(str(f.type))
        if wanted is None:
            continue
        if isinstance(value, bool) and bool not in wanted:
            ok = False
        else:
            ok = isinstance(value, wanted)
        if ok and isinstance(value, float) and value != value:  # NaN
            ok = False
        if not ok:
            raise ConfigurationError(
                f"context setting '{f.name}' must be {f.type}, got "
                f"{type(value).__name__} {value!r:.40}"
            )
