"""Shared fixtures: one embedded PostgreSQL and one local embedding model per session.

The server runs in a temporary data directory and is stopped at the end of the
session; nothing touches the user's own data directory.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SAMPLE_CORPUS = REPO / "examples" / "sample_corpus"
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture(scope="session")
def rp_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    home = tmp_path_factory.mktemp("rp-home")
    previous = os.environ.get("RETRIEVAL_PIPELINE_HOME")
    os.environ["RETRIEVAL_PIPELINE_HOME"] = str(home)
    os.environ.pop("DATABASE_URL", None)
    yield home
    if previous is None:
        os.environ.pop("RETRIEVAL_PIPELINE_HOME", None)
    else:
        os.environ["RETRIEVAL_PIPELINE_HOME"] = previous


@pytest.fixture(scope="session")
def pg_url(rp_home: Path) -> Iterator[str]:
    from retrieval_pipeline.tools.store import EmbeddedPostgres

    server = EmbeddedPostgres(rp_home, keep_running=True)
    url = server.start()
    yield url
    server.stop()


@pytest.fixture(scope="session")
def session_store(pg_url: str):  # type: ignore[no-untyped-def]
    from retrieval_pipeline.tools.store import Store

    store = Store(pg_url)
    yield store
    store.close()


@pytest.fixture()
def store(session_store):  # type: ignore[no-untyped-def]
    """The session's store, emptied before each test."""
    with session_store.connection() as conn:
        conn.execute(
            "TRUNCATE documents, chunks, chunk_terms, term_stats, corpus_stats,"
            " entities, mentions, relations CASCADE"
        )
    return session_store


@pytest.fixture(scope="session")
def embedder():  # type: ignore[no-untyped-def]
    from retrieval_pipeline.tools.embeddings import resolve_embedder

    return resolve_embedder("local")


@pytest.fixture()
def ingestor(store, embedder):  # type: ignore[no-untyped-def]
    from retrieval_pipeline.ingest.job import Ingestor

    return Ingestor(store, embedder)


@pytest.fixture()
def retriever(store, embedder):  # type: ignore[no-untyped-def]
    from retrieval_pipeline.tools.retrieve import Retriever

    return Retriever(store, embedder)


@pytest.fixture()
def sample_corpus() -> Path:
    return SAMPLE_CORPUS
