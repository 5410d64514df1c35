"""langchain-postgres interop: import PGVector / PGVectorStore tables; a VectorStore."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from langchain_core.documents import Document

from retrieval_pipeline.cli import main
from retrieval_pipeline.errors import ConfigurationError
from retrieval_pipeline.ingest.job import Ingestor
from retrieval_pipeline.ingest.langchain_postgres import (
    LangchainSource,
    import_langchain_postgres,
)
from retrieval_pipeline.tools.embeddings import Embedder
from retrieval_pipeline.tools.retrieve import Retriever
from retrieval_pipeline.vectorstore import PipelineVectorStore, metadata_filter

ROWS = [
    (
        "a1",
        "The Payments API retries card captures three times before failing.",
        {
            "source": "docs/payments.md",
            "title": "Payments API",
            "updated_at": "2026-03-01T10:00:00Z",
        },
    ),
    (
        "a2",
        "Refund reconciliation runs nightly and is owned by the finance platform team.",
        {"source": "docs/refunds.md", "principals": ["finance"]},
    ),
    (
        "a3",
        "The auth gateway drops connections with ERR_CONN_RESET when its pool is "
        "exhausted.",
        {"source": "docs/gateway.md", "tenant": ""},
    ),
]


class CountingEmbedder(Embedder):
    """The real local model, counting how many texts it embeds."""

    def __init__(self, inner: Embedder) -> None:
        super().__init__(
            inner.embeddings,
            model=inner.model,
            version=inner.version,
            dimension=inner.dimension,
        )
        self.embedded = 0

    def embed_each(self, texts: Sequence[str]) -> list[Any]:
        # Ingest embeds through embed_each (embed_documents calls it too).
        self.embedded += len(texts)
        return super().embed_each(texts)


@pytest.fixture()
def counting(embedder: Embedder) -> CountingEmbedder:
    return CountingEmbedder(embedder)


@pytest.fixture()
def sa_url(pg_url: str) -> str:
    return pg_url.replace("postgresql://", "postgresql+psycopg://", 1)


@pytest.fixture()
def pgvector_collection(sa_url: str, embedder: Embedder) -> Iterator[tuple[Any, str]]:
    from langchain_postgres import PGVector

    name = f"col_{uuid.uuid4().hex[:8]}"
    vs = PGVector(
        embeddings=embedder.embeddings,
        collection_name=name,
        connection=sa_url,
        use_jsonb=True,
        collection_metadata={"embedding_model": "all-MiniLM-L6-v2"},
    )
    vs.add_texts(
        [text for _, text, _ in ROWS],
        metadatas=[meta for _, _, meta in ROWS],
        ids=[i for i, _, _ in ROWS],
    )
    yield vs, name
    vs.delete_collection()


@pytest.fixture()
def pgvectorstore_table(sa_url: str, embedder: Embedder) -> Iterator[str]:
    from langchain_postgres import Column, PGEngine, PGVectorStore

    table = f"lc_{uuid.uuid4().hex[:8]}"
    engine = PGEngine.from_connection_string(url=sa_url)
    engine.init_vectorstore_table(
        table_name=table,
        vector_size=embedder.dimension,
        metadata_columns=[Column("source", "TEXT")],
    )
    store = PGVectorStore.create_sync(
        engine=engine,
        table_name=table,
        embedding_service=embedder.embeddings,
        metadata_columns=["source"],
    )
    store.add_texts(
        [text for _, text, _ in ROWS],
        metadatas=[meta for _, _, meta in ROWS],
        ids=[str(uuid.uuid5(uuid.NAMESPACE_URL, i)) for i, _, _ in ROWS],
    )
    yield table
    engine._run_as_sync(engine._adrop_table(table))  # noqa: SLF001
    engine._run_as_sync(engine.close())  # noqa: SLF001


class TestImport:
    def test_pgvector_collection_reuses_vectors_and_maps_metadata(
        self,
        store: Any,
        counting: CountingEmbedder,
        pgvector_collection: tuple[Any, str],
        pg_url: str,
    ) -> None:
        _, name = pgvector_collection
        ingestor = Ingestor(store, counting)
        summary = import_langchain_postgres(
            ingestor, LangchainSource(pg_url, collection=name)
        )
        assert summary.documents == 3 and summary.failed == 0
        assert summary.embeddings_reused == 3
        assert counting.embedded == 0  # the collection's model is ours: no embedding
        retriever = Retriever(store, counting)
        hits = retriever.retrieve("card capture retries", limit=3)
        top = hits[0]
        assert top.document_id == "a1"
        assert top.text.startswith("The Payments API retries")
        assert top.title == "Payments API"
        assert top.source_uri == "docs/payments.md"
        assert top.updated_at.isoformat() == "2026-03-01T10:00:00+00:00"
        assert "reused from langchain-postgres:collection:" in top.embedding_version
        # The stored vector is the one LangChain wrote: the dense rank is exact.
        assert top.ranks.get("dense") == 1

    def test_access_control_from_metadata(
        self,
        store: Any,
        counting: CountingEmbedder,
        pgvector_collection: Any,
        pg_url: str,
    ) -> None:
        _, name = pgvector_collection
        import_langchain_postgres(
            Ingestor(store, counting), LangchainSource(pg_url, collection=name)
        )
        retriever = Retriever(store, counting)
        public = {
            c.document_id for c in retriever.retrieve("refund reconciliation", limit=5)
        }
        finance = {
            c.document_id
            for c in retriever.retrieve(
                "refund reconciliation", limit=5, principals=["finance"]
            )
        }
        assert "a2" not in public
        assert "a2" in finance

    def test_incremental_and_prune(
        self,
        store: Any,
        counting: CountingEmbedder,
        pgvector_collection: tuple[Any, str],
        pg_url: str,
    ) -> None:
        vs, name = pgvector_collection
        source = LangchainSource(pg_url, collection=name)
        ingestor = Ingestor(store, counting)
        import_langchain_postgres(ingestor, source)
        again = import_langchain_postgres(ingestor, source)
        assert (again.documents, again.skipped) == (0, 3)
        vs.add_texts(
            ["The Payments API now retries card captures five times."],
            metadatas=[{"source": "docs/payments.md", "title": "Payments API"}],
            ids=["a1"],
        )
        vs.add_texts(["A new runbook for the ledger."], metadatas=[{}], ids=["a4"])
        vs.delete(ids=["a3"])
        changed = import_langchain_postgres(ingestor, source, prune=True)
        assert (changed.documents, changed.skipped, changed.removed) == (2, 1, 1)
        assert counting.embedded == 0
        ids = {
            c.document_id
            for c in Retriever(store, counting).retrieve(
                "runbook ledger payments gateway", limit=10
            )
        }
        assert "a4" in ids and "a3" not in ids

    def test_other_model_is_re_embedded(
        self,
        store: Any,
        counting: CountingEmbedder,
        pgvector_collection: Any,
        pg_url: str,
    ) -> None:
        _, name = pgvector_collection
        summary = import_langchain_postgres(
            Ingestor(store, counting),
            LangchainSource(pg_url, collection=name),
            embedding_model="text-embedding-3-small",
        )
        assert summary.embeddings_reused == 0
        assert counting.embedded == 3

    def test_pgvectorstore_table(
        self,
        store: Any,
        counting: CountingEmbedder,
        pgvectorstore_table: str,
        pg_url: str,
    ) -> None:
        summary = import_langchain_postgres(
            Ingestor(store, counting),
            LangchainSource(pg_url, table=pgvectorstore_table),
            embedding_model="sentence-transformers/all-MiniLM-L6-v2",
        )
        assert (summary.documents, summary.embeddings_reused) == (3, 3)
        assert counting.embedded == 0
        hits = Retriever(store, counting).retrieve("ERR_CONN_RESET", limit=1)
        assert hits[0].source_uri == "docs/gateway.md"  # from the metadata column

    def test_bad_sources_are_clear(
        self, store: Any, counting: CountingEmbedder, pg_url: str
    ) -> None:
        with pytest.raises(ConfigurationError, match="exactly one"):
            LangchainSource(pg_url)
        with pytest.raises(ConfigurationError, match="no table public.missing_table"):
            import_langchain_postgres(
                Ingestor(store, counting),
                LangchainSource(pg_url, table="missing_table"),
            )

    def test_a_database_without_pgvector_tables_is_a_clear_error(
        self, store: Any, pg_url: str, capsys: Any
    ) -> None:
        import psycopg
        from psycopg import sql
        from psycopg.conninfo import make_conninfo

        name = f"rp_no_pgvector_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        try:
            url = make_conninfo(pg_url, dbname=name)
            args = ["ingest", "--from-langchain-postgres", url, "--collection", "x"]
            assert main(args) == 2  # was UndefinedTable and its traceback
            err = capsys.readouterr().err
            assert "no PGVector tables (langchain_pg_collection" in err
            assert "Traceback" not in err
        finally:
            with psycopg.connect(pg_url, autocommit=True) as admin:
                admin.execute(sql.SQL("DROP DATABASE {}").format(sql.Identifier(name)))

    def test_cli(
        self,
        store: Any,
        pgvector_collection: tuple[Any, str],
        pg_url: str,
        capsys: Any,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        monkeypatch.setenv("DATABASE_URL", pg_url)
        _, name = pgvector_collection
        code = main(
            [
                "ingest",
                "--from-langchain-postgres",
                pg_url,
                "--collection",
                name,
                "--json",
            ]
        )
        out = json.loads(capsys.readouterr().out)
        assert code == 0
        assert out["documents"] == 3 and out["embeddings_reused"] == 3
        code = main(
            ["ingest", "--from-langchain-postgres", pg_url, "--collection", "nope"]
        )
        err = capsys.readouterr().err
        assert code == 2
        assert "no PGVector collection 'nope'" in err and name in err
        assert main(["ingest"]) == 2


class TestVectorStore:
    @pytest.fixture()
    def vs(self, store: Any, embedder: Embedder) -> PipelineVectorStore:
        vs = PipelineVectorStore(store, embedder)
        vs.add_documents(
            [
                Document(
                    id=i,
                    page_content=text,
                    metadata={**meta, "kind": "runbook" if i != "a1" else "api"},
                )
                for i, text, meta in ROWS
            ]
        )
        return vs

    def test_similarity_search_and_scores(self, vs: PipelineVectorStore) -> None:
        docs = vs.similarity_search("card capture retries", k=2)
        assert docs[0].id == "a1"
        assert docs[0].metadata["title"] == "Payments API"
        assert docs[0].metadata["source_uri"] == "docs/payments.md"
        scored = vs.similarity_search_with_score("card capture retries", k=2)
        assert scored[0][1] < scored[1][1]  # cosine distance: lower is closer
        relevance = vs.similarity_search_with_relevance_scores("card capture", k=1)
        assert 0 < relevance[0][1] <= 1
        assert "a2" not in {d.id for d in vs.similarity_search("refund", k=5)}

    def test_access_and_filters(
        self, store: Any, embedder: Embedder, vs: PipelineVectorStore
    ) -> None:
        finance = PipelineVectorStore(store, embedder, principals=["finance"])
        assert "a2" in {d.id for d in finance.similarity_search("refund", k=5)}
        assert [
            d.id
            for d in finance.similarity_search("refund", k=5, filter={"kind": "api"})
        ] == ["a1"]
        both = finance.similarity_search(
            "x", k=5, filter={"kind": {"$in": ["api", "runbook"]}}
        )
        assert {d.id for d in both} == {"a1", "a2", "a3"}
        with pytest.raises(ValueError, match="unsupported filter"):
            finance.similarity_search("x", filter={"kind": {"$gt": 1}})
        assert metadata_filter({"a": {"$in": []}}) == ("__no_match__",)

    def test_mmr_retriever_async_delete(self, vs: PipelineVectorStore) -> None:
        mmr = vs.max_marginal_relevance_search("connections", k=2, fetch_k=3)
        assert len(mmr) == 2 and len({d.id for d in mmr}) == 2
        retriever = vs.as_retriever(search_kwargs={"k": 1})
        assert retriever.invoke("ERR_CONN_RESET")[0].id == "a3"
        found = asyncio.run(vs.asimilarity_search("card capture", k=1))
        assert found[0].id == "a1"
        assert [d.id for d in vs.get_by_ids(["a3", "a2"])] == [
            "a3"
        ]  # a2 is finance-only
        assert vs.delete(["a3"]) is True
        assert "a3" not in {d.id for d in vs.similarity_search("ERR_CONN_RESET", k=3)}


def test_long_rows_stay_one_chunk() -> None:
    from retrieval_pipeline.ingest.job import chunk_document
    from retrieval_pipeline.ingest.loaders import SourceDocument
    from retrieval_pipeline.tools.tokens import default_token_counter

    text = "  " + " ".join(f"word{i}" for i in range(2000)) + "\n"
    source = SourceDocument(
        source_id="long",
        title="Long",
        path="",
        source_uri="x",
        content=text,
        body_start=0,
        kind="langchain",
    )
    (chunk,) = chunk_document(source, default_token_counter())
    assert chunk.body == text.strip()
    assert text[chunk.char_start : chunk.char_end] == chunk.body
    assert chunk.heading_path == ()
