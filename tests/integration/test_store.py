from __future__ import annotations

import time

import psycopg
import pytest
from langchain_core.embeddings import DeterministicFakeEmbedding

from retrieval_pipeline.errors import DatabaseUnavailableError, DimensionMismatchError
from retrieval_pipeline.ingest.job import Ingestor
from retrieval_pipeline.tools.embeddings import Embedder
from retrieval_pipeline.tools.retrieve import Retriever
from retrieval_pipeline.tools.store import Store
from retrieval_pipeline.tools.store.store import load_migrations


def _database_url(pg_url: str, name: str) -> str:
    base, _, query = pg_url.partition("?")
    return base.rsplit("/", 1)[0] + "/" + name + ("?" + query if query else "")


class TestMigrations:
    def test_migrations_apply_from_empty_and_are_recorded(self, pg_url: str) -> None:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("DROP DATABASE IF EXISTS migrations_test")
            conn.execute("CREATE DATABASE migrations_test")
        url = _database_url(pg_url, "migrations_test")
        with Store(url) as store:
            versions = [m.version for m in load_migrations()]
            assert store.schema_versions() == versions
            assert set(store.counts()) >= {"documents", "chunks", "entities"}

    def test_reopening_applies_nothing_twice(self, pg_url: str) -> None:
        url = _database_url(pg_url, "migrations_test")
        with Store(url) as store:
            assert store.migrate() == []
            assert store.schema_versions() == [m.version for m in load_migrations()]

    def test_migrations_are_numbered_and_ordered(self) -> None:
        versions = [m.version for m in load_migrations()]
        assert versions == sorted(versions) and versions[0] == 1
        assert len(set(versions)) == len(versions)

    def test_pgvector_version_is_detected(self, session_store: Store) -> None:
        assert session_store.pgvector_version() >= (0, 5)


class TestDatabaseDown:
    def test_unreachable_database_fails_fast_with_a_clear_redacted_message(
        self,
    ) -> None:
        started = time.monotonic()
        with pytest.raises(DatabaseUnavailableError) as info:
            Store("postgresql://user:hunter2@127.0.0.1:1/db", connect_timeout=2)
        message = str(info.value)
        assert "hunter2" not in message and "***" in message
        assert "DATABASE_URL" in message
        assert time.monotonic() - started < 10


def _fake_embedder(size: int, model: str) -> Embedder:
    # The only stand-in: a real LangChain Embeddings class producing another dimension.
    return Embedder(DeterministicFakeEmbedding(size=size), model=model, version="test")


class TestEmbeddingDimension:
    def test_other_dimension_is_refused_naming_both_and_how_to_reindex(
        self,
        ingestor: Ingestor,
        store: Store,
        sample_corpus,
        tmp_path,  # type: ignore[no-untyped-def]
    ) -> None:
        ingestor.ingest_paths([sample_corpus / "teams"])
        other = Ingestor(store, _fake_embedder(128, "fake-128"))
        (tmp_path / "n.md").write_text("# New\n\nnew text\n")
        with pytest.raises(DimensionMismatchError) as info:
            other.ingest_paths([tmp_path / "n.md"])
        message = str(info.value)
        assert "384" in message and "128" in message and "re-index" in message
        assert store.counts()["documents"] == 4  # nothing half-written

    def test_same_dimension_other_model_is_refused(
        self,
        ingestor: Ingestor,
        store: Store,
        sample_corpus,  # type: ignore[no-untyped-def]
    ) -> None:
        ingestor.ingest_paths([sample_corpus / "teams"])
        with pytest.raises(DimensionMismatchError, match="different vector space"):
            Ingestor(store, _fake_embedder(384, "fake-384")).ingest_paths(
                [sample_corpus / "services"]
            )

    def test_querying_with_a_mismatched_embedder_is_refused(
        self,
        ingestor: Ingestor,
        store: Store,
        sample_corpus,  # type: ignore[no-untyped-def]
    ) -> None:
        ingestor.ingest_paths([sample_corpus / "teams"])
        retriever = Retriever(store, _fake_embedder(128, "fake-128"))
        with pytest.raises(DimensionMismatchError):
            retriever.retrieve("who leads the platform team?")
