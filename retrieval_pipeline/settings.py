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
SERVE_THREADS_ENV = "RETRIEVAL_PIPELINE_SERVE_THREADS"
DEFAULT_SERVE_THREADS = 64
ALLOWED_HOSTS_ENV = "RETRIEVAL_PIPELINE_ALLOWED_HOSTS"
LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
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
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        from retrieval_pipeline.errors import ConfigurationError

        where = f"{HOME_ENV}={configured}" if configured else "the user data directory"
        problem = (
            "a file is in the way"
            if isinstance(exc, FileExistsError | NotADirectoryError)
            else exc.strerror or type(exc).__name__
        )
        raise ConfigurationError(
            f"cannot use {path} as the data directory ({where}): {problem}. "
            f"Point {HOME_ENV} at a directory you can write."
        ) from None
    return path.resolve()


_DRIVER_SCHEME = re.compile(r"^postgres(?:ql)?\+[a-z0-9_]+://", re.IGNORECASE)


def database_url() -> str | None:
    """Return ``DATABASE_URL`` when an external PostgreSQL is configured.

    A SQLAlchemy-style URL naming a driver (``postgresql+psycopg://``, as
    langchain-postgres uses) is taken as the plain ``postgresql://`` URL.
    """
    value = os.environ.get(DATABASE_URL_ENV, "").strip()
    return _DRIVER_SCHEME.sub("postgresql://", value) or None


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


def _whole_number(name: str, default: int, low: int, high: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = low - 1
    if not low <= value <= high:
        from retrieval_pipeline.errors import ConfigurationError

        raise ConfigurationError(
            f"{name} must be a whole number from {low} to {high}, got {raw!r}"
        )
    return value


def embed_concurrency() -> int:
    """Remote embedding batches in flight at once during ingest (default 4)."""
    from retrieval_pipeline.graph.context import EMBED_CONCURRENCY

    return _whole_number(EMBED_CONCURRENCY_ENV, EMBED_CONCURRENCY, 1, 64)


def serve_threads() -> int:
    """Threads of a server process's executor, where the sync stages run (64).

    The stages mostly wait (the database, a remote embedder or reranker), so a
    server needs about as many threads as requests it keeps in flight, times the
    parallel branches of one request; asyncio's default, ``min(32, cores + 4)``,
    is 6 on two cores and capped a remote embedder at 200 ms near 11 req/s.
    """
    return _whole_number(SERVE_THREADS_ENV, DEFAULT_SERVE_THREADS, 1, 1024)


def allowed_hosts(*, keyed: bool) -> frozenset[str] | None:
    """The ``Host`` names ``serve`` answers; None answers any.

    ``RETRIEVAL_PIPELINE_ALLOWED_HOSTS``: comma-separated names (``*``: any). Without
    API keys the server trusts request bodies, so it answers the loopback names plus
    those listed (a DNS-rebinding page addresses it by its own name); with keys, any
    host unless names are listed (a key, not the host, is the boundary there).
    """
    raw = os.environ.get(ALLOWED_HOSTS_ENV, "").strip()
    names = {n.strip().lower().strip("[]") for n in raw.split(",") if n.strip()}
    if "*" in names:
        if not keyed:
            from retrieval_pipeline.errors import ConfigurationError

            raise ConfigurationError(
                f"{ALLOWED_HOSTS_ENV}=* needs API keys: a server without keys trusts "
                "request bodies, so it answers only the names it is given"
            )
        return None
    if keyed and not names:
        return None
    return frozenset(names) | (frozenset() if keyed else LOOPBACK_HOSTS)


_PASSWORD_IN_URL = re.compile(r"(://[^:/@]+:)([^@]*)(@)")
_PASSWORD_PARAM = re.compile(r"(password=)([^&\s]+)", re.IGNORECASE)


def redact_url(url: str) -> str:
    """Hide the password in a connection string so it can be printed or logged."""
    url = _PASSWORD_IN_URL.sub(r"\1***\3", url)
    return _PASSWORD_PARAM.sub(r"\1***", url)
