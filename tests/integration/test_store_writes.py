"""A record the database refuses is the project's error, raised after the rollback."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

from retrieval_pipeline.errors import RecordRejectedError, WriteConflictError
from retrieval_pipeline.tools.embeddings import Embedder
from retrieval_pipeline.tools.store import Store
from retrieval_pipeline.tools.store.records import (
    ChunkRecord,
    DocumentRecord,
    chunk_key,
    document_key,
)
from retrieval_pipeline.tools.store.scope import AccessScope
from retrieval_pipeline.vectorstore import PipelineVectorStore


def _record(
    store: Store, embedder: Embedder, source_id: str, text: str
) -> DocumentRecord:
    """A one-chunk document; its vector is a unit vector (no model needed)."""
    index = store.ensure_embedding_index(embedder.model, embedder.dimension)
    document_id = document_key("", source_id)
    chunk = ChunkRecord(
        id=chunk_key(document_id, 0, text),
        ordinal=0,
        heading_path=(),
        body=text,
        content=text,
        char_start=0,
        char_end=len(text),
        token_count=len(text.split()),
        identifiers=(),
        embedding=(1.0,) + (0.0,) * (index.dimension - 1),
    )
    return DocumentRecord(
        id=document_id,
        source_id=source_id,
        tenant="",
        title=source_id,
        path=f"{source_id}.md",
        source_uri=f"file:///{source_id}.md",
        revision=text,
        parser_version="test",
        acl=(),
        metadata={},
        content=text,
        embedding_model=index.model,
        embedding_version="test",
        created_at=None,
        updated_at=datetime.now(UTC),
        chunks=(chunk,),
    )


def _contents(store: Store) -> list[str]:
    with store.connection() as conn:
        return [r[0] for r in conn.execute("SELECT content FROM chunks ORDER BY id")]


class TestRejectedRecords:
    def test_a_nul_character_is_rejected_with_the_drivers_reason(
        self, store: Store, embedder: Embedder
    ) -> None:
        bad = _record(store, embedder, "bad", "broken \x00 record")
        with pytest.raises(RecordRejectedError) as rejected:
            store.write_document(bad)
        assert str(rejected.value).startswith("database rejected: ")
        assert rejected.value.reason and rejected.value.source_ids == ("bad",)
        assert isinstance(rejected.value.__cause__, psycopg.DataError)
        assert store.counts()["documents"] == 0

    def test_a_rejected_record_rolls_back_its_whole_batch(
        self, store: Store, embedder: Embedder
    ) -> None:
        good = _record(store, embedder, "good", "a fine record")
        bad = _record(store, embedder, "bad", "broken \x00 record")
        with pytest.raises(RecordRejectedError) as rejected:
            store.write_documents([good, bad])
        assert rejected.value.source_ids == ("good", "bad")
        assert store.counts()["documents"] == 0 and _contents(store) == []

    def test_a_rejected_revision_leaves_the_previous_one_intact(
        self, store: Store, embedder: Embedder
    ) -> None:
        store.write_document(_record(store, embedder, "doc", "first revision"))
        with pytest.raises(RecordRejectedError):
            store.write_document(_record(store, embedder, "doc", "second \x00 one"))
        assert _contents(store) == ["first revision"]

    def test_the_same_id_twice_in_a_batch_is_an_integrity_rejection(
        self, store: Store, embedder: Embedder
    ) -> None:
        first = _record(store, embedder, "twin", "one text")
        with pytest.raises(RecordRejectedError) as rejected:
            store.write_documents([first, first])
        assert isinstance(rejected.value.__cause__, psycopg.IntegrityError)
        assert store.counts()["documents"] == 0

    def test_a_checked_write_rejects_like_a_plain_one(
        self, store: Store, embedder: Embedder
    ) -> None:
        bad = _record(store, embedder, "bad", "broken \x00 record")
        with pytest.raises(RecordRejectedError):
            store.write_documents_checked([bad], AccessScope(), lambda stored: None)
        assert store.counts()["documents"] == 0

    def test_a_lost_connection_is_not_a_rejected_record(
        self, store: Store, embedder: Embedder, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        def unavailable(self: Store, conn: Any, doc: Any) -> None:
            raise psycopg.OperationalError("server closed the connection")

        monkeypatch.setattr(Store, "_write_graph", unavailable)
        with pytest.raises(Exception) as failed:
            store.write_document(_record(store, embedder, "doc", "some text"))
        assert not isinstance(failed.value, RecordRejectedError)


def test_an_id_a_concurrent_writer_claims_first_is_a_write_conflict(
    store: Store, embedder: Embedder, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The vector store's single write maps the duplicate key to its own conflict."""
    real = Store.write_documents_checked
    raised: list[BaseException] = []

    def racing(
        self: Store,
        docs: Sequence[DocumentRecord],
        scope: AccessScope,
        check: Callable[[dict[str, tuple[str, ...] | None]], None],
    ) -> None:
        def check_then_race(stored: dict[str, tuple[str, ...] | None]) -> None:
            check(stored)
            # Another writer inserts the same id after the check and commits while
            # this write's insert waits on it: the insert then hits the primary key.
            rival = psycopg.connect(pg_url)
            rival.execute(
                "INSERT INTO documents (id, source_id, tenant, title, path,"
                " source_uri, revision, parser_version, acl, metadata, content,"
                " embedding_model, updated_at) VALUES (%s, %s, %s, '', '', '', '',"
                " '', '{}', '{}', '', '', now())",
                (docs[0].id, docs[0].source_id, docs[0].tenant),
            )
            threading.Timer(0.5, lambda: (rival.commit(), rival.close())).start()

        try:
            real(self, docs, scope, check_then_race)
        except RecordRejectedError as exc:
            raised.append(exc)
            raise

    monkeypatch.setattr(Store, "write_documents_checked", racing)
    vectors = PipelineVectorStore(store, embedder)
    with pytest.raises(WriteConflictError, match="not available"):
        vectors.add_texts(["claimed by another writer"], ids=["claimed"])
    assert isinstance(raised[0].__cause__, psycopg.errors.UniqueViolation)
