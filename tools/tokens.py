"""Token counting: tiktoken when an encoding can be loaded, else ~4 characters/token.

tiktoken downloads its BPE rank files at first use, which cannot happen offline. We
seed tiktoken's own cache from a local copy of the official files (verified by
tiktoken's hash check) and fall back to the spec's estimate when none is found. The
method in use is reported so a budget is never silently measured two ways.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import shutil
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol

from retrieval_pipeline.graph.context import CHARS_PER_TOKEN
from retrieval_pipeline.settings import TIKTOKEN_DIR_ENV, home_dir

logger = logging.getLogger(__name__)

ENCODING_NAME = "cl100k_base"
_BLOB_URL = "https://openaipublic.blob.core.windows.net/encodings/{name}.tiktoken"


class TokenCounter(Protocol):
    """Counts tokens in text; ``method`` names how (for the debug block)."""

    @property
    def method(self) -> str:
        """How tokens are counted, e.g. ``tiktoken:cl100k_base`` or ``chars/4``."""
        ...

    def count(self, text: str) -> int:
        """Return the number of tokens in ``text``."""
        ...


@dataclass(frozen=True)
class CharEstimateCounter:
    """The spec's estimate: ~4 characters per token, rounded up."""

    chars_per_token: int = CHARS_PER_TOKEN
    method: str = field(default="chars/4", init=False)

    def count(self, text: str) -> int:
        """Return ``ceil(len(text) / chars_per_token)``."""
        return math.ceil(len(text) / self.chars_per_token)


@dataclass(frozen=True)
class TiktokenCounter:
    """Exact BPE token counts through a loaded tiktoken encoding."""

    encoding: Any
    method: str = "tiktoken:" + ENCODING_NAME

    def count(self, text: str) -> int:
        """Return the exact token count (special tokens are treated as text)."""
        return len(self.encoding.encode_ordinary(text))


def _rank_file_candidates(name: str) -> list[Path]:
    candidates: list[Path] = []
    configured = os.environ.get(TIKTOKEN_DIR_ENV)
    if configured:
        candidates.append(Path(configured) / f"{name}.tiktoken")
    # A development checkout sits beside ../shared/data/tiktoken.
    repo_root = Path(__file__).resolve().parents[1]
    candidates.append(
        repo_root.parent / "shared" / "data" / "tiktoken" / f"{name}.tiktoken"
    )
    return candidates


def _seed_tiktoken_cache(name: str) -> bool:
    """Place a local rank file where tiktoken looks for its download cache."""
    cache_dir = Path(os.environ.get("TIKTOKEN_CACHE_DIR") or home_dir() / "tiktoken")
    cache_dir.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(cache_dir))
    key = hashlib.sha1(_BLOB_URL.format(name=name).encode()).hexdigest()
    cached = cache_dir / key
    if cached.exists():
        return True
    for candidate in _rank_file_candidates(name):
        if candidate.is_file():
            shutil.copyfile(candidate, cached)
            return True
    return False


@lru_cache(maxsize=1)
def default_token_counter() -> TokenCounter:
    """Return a tiktoken counter when the rank file is available, else chars/4."""
    try:
        import tiktoken
    except ImportError:  # pragma: no cover - tiktoken is a core dependency
        return CharEstimateCounter()
    if not _seed_tiktoken_cache(ENCODING_NAME):
        logger.info("no %s rank file found; counting ~4 chars/token", ENCODING_NAME)
        return CharEstimateCounter()
    try:
        encoding = tiktoken.get_encoding(ENCODING_NAME)
    except (OSError, ValueError) as exc:  # corrupt or unverifiable rank file
        logger.warning(
            "tiktoken could not load %s (%s); using chars/4", ENCODING_NAME, exc
        )
        return CharEstimateCounter()
    return TiktokenCounter(encoding)
