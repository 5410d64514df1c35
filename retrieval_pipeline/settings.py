"""Environment-derived settings: where data lives and which database to use.

Secrets (database passwords, provider keys) are read from the environment only and
are never logged: use :func:`redact_url` before printing a connection string.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import platformdirs

HOME_ENV = "RETRIEVAL_PIPELINE_HOME"
DATABASE_URL_ENV = "DATABASE_URL"
EMBEDDINGS_ENV = "RETRIEVAL_PIPELINE_EMBEDDINGS"
TIKTOKEN_DIR_ENV = "RETRIEVAL_PIPELINE_TIKTOKEN_DIR"
STATEMENT_TIMEOUT_ENV = "RETRIEVAL_PIPELINE_STATEMENT_TIMEOUT_MS"
EMBED_CONCURRENCY_ENV = "RETRIEVAL_PIPELINE_EMBED_CONCURRENCY"
REPLICA_URLS_ENV = "DATABASE_REPLICA_URLS"
REPLICA_MAX_LAG_ENV = "RETRIEVAL_PIPELINE_REPLICA_MAX_LAG_S"
DEFAULT_REPLICA_MAX_LAG_S = 5.0
DEFAULT_STATEMENT_TIMEOUT_MS = 60_000


def home_dir() -> Path:
    """Return the data directory (``RETRIEVAL_PIPELINE_HOME`` or the user data dir)."""
    configured = os.environ.get(HOME_ENV)
    path = (
        Path(configured).expanduser()
        if configured
        else Path(platformdirs.user_data_dir("retrieval-pipeline"))
    )
    path.mkdir(parents=True, exist_ok=True)
    return path.resolve()


def database_url() -> str | None:
    """Return ``DATABASE_URL`` when an external PostgreSQL is configured."""
    value = os.environ.get(DATABASE_URL_ENV, "").strip()
    return value or None


def replica_urls() -> list[str]:
    """Return the read replicas of ``DATABASE_REPLICA_URLS`` (comma-separated)."""
    raw = os.environ.get(REPLICA_URLS_ENV, "")
    return [url.strip() for url in raw.split(",") if url.strip()]


def replica_max_lag() -> float:
    """Seconds a replica may lag behind the primary and still answer queries."""
    raw = os.environ.get(REPLICA_MAX_LAG_ENV, "").strip()
    if not raw:
        return DEFAULT_REPLICA_MAX_LAG_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value >= 0:
        from retrieval_pipeline.errors import ConfigurationError

        raise ConfigurationError(
            f"{REPLICA_MAX_LAG_ENV} must be a number of seconds (0 or more), got "
            f"{raw!r}"
        )
    return value


def statement_timeout() -> int:
    """Milliseconds any one SQL statement may run (0 = no limit)."""
    raw = os.environ.get(STATEMENT_TIMEOUT_ENV, "").strip()
    if not raw:
        return DEFAULT_STATEMENT_TIMEOUT_MS
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        from retrieval_pipeline.errors import ConfigurationError

        raise ConfigurationError(
            f"{STATEMENT_TIMEOUT_ENV} must be a whole number of milliseconds (0 = no "
            f"limit), got {raw!r}"
        )
    return value


def embed_concurrency() -> int:
    """Remote embedding batches in flight at once during ingest (default 4)."""
    from retrieval_pipeline.graph.context import EMBED_CONCURRENCY

    raw = os.environ.get(EMBED_CONCURRENCY_ENV, "").strip()
    if not raw:
        return EMBED_CONCURRENCY
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if not 1 <= value <= 64:
        from retrieval_pipeline.errors import ConfigurationError

        raise ConfigurationError(
            f"{EMBED_CONCURRENCY_ENV} must be a whole number from 1 to 64, got {raw!r}"
        )
    return value


_PASSWORD_IN_URL = re.compile(r"(://[^:/@]+:)([^@]*)(@)")
_PASSWORD_PARAM = re.compile(r"(password=)([^&\s]+)", re.IGNORECASE)


def redact_url(url: str) -> str:
    """Hide the password in a connection string so it can be printed or logged."""
    url = _PASSWORD_IN_URL.sub(r"\1***\3", url)
    return _PASSWORD_PARAM.sub(r"\1***", url)
