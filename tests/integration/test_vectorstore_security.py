"""PipelineVectorStore security: writes obey the read scope; bad input is a clear error.

Writes (``delete``, ``add_texts``) are authorised against the same tenant and
principals as searches: an id the caller cannot see behaves like one that does not
exist, and an overwrite never changes who can read a document. Inputs PostgreSQL or
pgvector would reject (NUL bytes, lone surrogates, NaN vectors, an
``hnsw.ef_search`` above 1000) fail before the database with the project's errors.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from figures import record_figure
from helpers import property_settings
from hypothesis import given
from hypothesis import strategies as st

from retrieval_pipeline.errors import (
    DimensionMismatchError,
    InvalidQueryError,
    WriteConflictError,
)
from retrieval_pipeline.tools.embeddings import Embedder
from retrieval_pipeline.vectorstore import MAX_K, PipelineVectorStore

TEXTS = [
    "Refund reconciliation runs nightly for the finance team.",
    "The auth gateway drops connections when its pool is exhausted.",
    "Card captures are retried three times before failing.",
    "Payroll exports are encrypted and owned by human resources.",
]


class MemoEmbedder(Embedder):
    """The real local model, remembering passage vectors (the property test embeds
    the same few texts in every example)."""

    def __init__(self, inner: Embedder) -> None:
        super().__init__(
            inner.embeddings,
            model=inner.model,
            version=inner.version,
            dimension=inner.dimension,
        )
        self._passages: dict[str, list[float]] = {}

    def embed_documents(self, texts: Any) -> list[list[float]]:
        missing = [t for t in dict.fromkeys(texts) if t not in self._passages]
        if missing:
            self._passages.update(
                zip(missing, super().embed_documents(missing), strict=True)
            )
        return [self._passages[t] for t in texts]


@pytest.fixture(scope="module")
def memo_embedder(embedder: Embedder) -> MemoEmbedder:
    return MemoEmbedder(embedder)


def snapshot(store: Any) -> tuple[Any, ...]:
    """Every stored document and chunk, with what decides access and content."""
    with store.connection() as conn:
        documents = conn.execute(
            "SELECT id, tenant, source_id, acl::text, content, revision, metadata::text"
            " FROM documents ORDER BY id"
        ).fetchall()
        chunks = conn.execute(
            "SELECT id, document_id, tenant, acl::text, body FROM chunks ORDER BY id"
        ).fetchall()
    return tuple(map(tuple, documents)), tuple(map(tuple, chunks))


@pytest.fixture()
def seeded(store: Any, memo_embedder: MemoEmbedder) -> Any:
    """A public document, a finance-only one, and one in tenant 'acme'."""
    admin = PipelineVectorStore(store, memo_embedder)
    admin.add_texts(
        TEXTS[:2],
        [{"principals": ["finance"], "kind": "ledger"}, {"kind": "ops"}],
        ids=["secret", "public"],
    )
    PipelineVectorStore(store, memo_embedder, tenant="acme").add_texts(
        [TEXTS[2]], ids=["acme-doc"]
    )
    return store


class TestWritesObeyTheReadScope:
    def test_delete_of_a_hidden_id_returns_what_a_missing_id_returns(
        self, seeded: Any, memo_embedder: MemoEmbedder
    ) -> None:
        outsider = PipelineVectorStore(seeded, memo_embedder, principals=["support"])
        before = snapshot(seeded)
        assert outsider.delete(["secret"]) is outsider.delete(["no-such-id"]) is False
        assert snapshot(seeded) == before

    def test_delete_of_another_tenants_id_returns_what_a_missing_id_returns(
        self, seeded: Any, memo_embedder: MemoEmbedder
    ) -> None:
        before = snapshot(seeded)
        public = PipelineVectorStore(seeded, memo_embedder)
        assert public.delete(["acme-doc"]) is False
        assert snapshot(seeded) == before

    def test_delete_of_a_visible_id_deletes_it(
        self, seeded: Any, memo_embedder: MemoEmbedder
    ) -> None:
        finance = PipelineVectorStore(seeded, memo_embedder, principals=["finance"])
        assert finance.delete(["secret", "public"]) is True
        assert finance.get_by_ids(["secret", "public"]) == []

    def test_delete_of_a_mix_deletes_the_visible_and_reports_false(
        self, seeded: Any, memo_embedder: MemoEmbedder
    ) -> None:
        outsider = PipelineVectorStore(seeded, memo_embedder, principals=["support"])
        assert outsider.delete(["public", "secret"]) is False
        finance = PipelineVectorStore(seeded, memo_embedder, principals=["finance"])
        assert [d.id for d in finance.get_by_ids(["public", "secret"])] == ["secret"]

    def test_add_on_a_hidden_id_is_refused_and_changes_nothing(
        self, seeded: Any, memo_embedder: MemoEmbedder
    ) -> None:
        outsider = PipelineVectorStore(seeded, memo_embedder, principals=["support"])
        before = snapshot(seeded)
        with pytest.raises(WriteConflictError, match="not available") as refused:
            outsider.add_texts(["overwritten"], ids=["secret"])
        assert "finance" not in str(refused.value)
        assert snapshot(seeded) == before
        # The same text as the stored one (an unchanged revision) is refused too.
        with pytest.raises(WriteConflictError, match="not available"):
            outsider.add_texts(
                [TEXTS[0]], [{"principals": ["finance"]}], ids=["secret"]
            )
        assert snapshot(seeded) == before

    def test_a_refused_batch_writes_none_of_its_texts(
        self, seeded: Any, memo_embedder: MemoEmbedder
    ) -> None:
        outsider = PipelineVectorStore(seeded, memo_embedder, principals=["support"])
        before = snapshot(seeded)
        with pytest.raises(WriteConflictError):
            outsider.add_texts([TEXTS[3], "overwritten"], ids=["fresh", "secret"])
        assert snapshot(seeded) == before

    def test_an_id_in_another_tenant_is_a_new_document(
        self, seeded: Any, memo_embedder: MemoEmbedder
    ) -> None:
        before = snapshot(seeded)
        public = PipelineVectorStore(seeded, memo_embedder)
        assert public.add_texts([TEXTS[3]], ids=["acme-doc"]) == ["acme-doc"]
        acme = PipelineVectorStore(seeded, memo_embedder, tenant="acme")
        assert acme.get_by_ids(["acme-doc"])[0].page_content == TEXTS[2]
        assert set(before[0]) < set(snapshot(seeded)[0])

    def test_a_document_that_appears_after_the_check_is_not_overwritten(
        self, seeded: Any, memo_embedder: MemoEmbedder, monkeypatch: Any
    ) -> None:
        # A concurrent writer between add_texts' check and its write: the write's
        # own transaction re-checks the rows it replaces.
        monkeypatch.setattr(seeded, "document_access", lambda keys, scope: {})
        before = snapshot(seeded)
        outsider = PipelineVectorStore(seeded, memo_embedder, principals=["support"])
        with pytest.raises(WriteConflictError, match="not available"):
            outsider.add_texts(["overwritten"], ids=["secret"])
        finance = PipelineVectorStore(seeded, memo_embedder, principals=["finance"])
        with pytest.raises(WriteConflictError, match="other principals"):
            finance.add_texts(["made public"], ids=["secret"])
        assert snapshot(seeded) == before

    def test_an_overwrite_keeps_the_stored_principals(
        self, seeded: Any, memo_embedder: MemoEmbedder
    ) -> None:
        finance = PipelineVectorStore(seeded, memo_embedder, principals=["finance"])
        finance.add_texts([TEXTS[3]], [{"kind": "ledger"}], ids=["secret"])
        assert finance.get_by_ids(["secret"])[0].page_content == TEXTS[3]
        public = PipelineVectorStore(seeded, memo_embedder)
        assert public.get_by_ids(["secret"]) == []
        assert "secret" not in {d.id for d in public.similarity_search(TEXTS[3])}

    def test_an_overwrite_naming_the_same_principals_is_allowed(
        self, seeded: Any, memo_embedder: MemoEmbedder
    ) -> None:
        finance = PipelineVectorStore(seeded, memo_embedder, principals=["finance"])
        finance.add_texts([TEXTS[3]], [{"principals": "finance"}], ids=["secret"])
        assert finance.get_by_ids(["secret"])[0].page_content == TEXTS[3]

    @pytest.mark.parametrize("principals", [[], "", ["finance", "hr"], "everyone"])
    def test_an_overwrite_naming_other_principals_is_refused(
        self, seeded: Any, memo_embedder: MemoEmbedder, principals: Any
    ) -> None:
        finance = PipelineVectorStore(seeded, memo_embedder, principals=["finance"])
        before = snapshot(seeded)
        with pytest.raises(ValueError) as refused:
            finance.add_texts(
                ["made public"], [{"principals": principals}], ids=["secret"]
            )
        if principals:  # an empty ACL may be refused earlier, as malformed
            assert isinstance(refused.value, WriteConflictError)
            assert "delete it and add it again" in str(refused.value)
        assert snapshot(seeded) == before

    def test_a_public_document_cannot_be_restricted_by_an_overwrite(
        self, seeded: Any, memo_embedder: MemoEmbedder
    ) -> None:
        before = snapshot(seeded)
        with pytest.raises(WriteConflictError):
            PipelineVectorStore(seeded, memo_embedder).add_texts(
                ["mine now"], [{"principals": ["me"]}], ids=["public"]
            )
        assert snapshot(seeded) == before

    def test_delete_then_add_changes_access(
        self, seeded: Any, memo_embedder: MemoEmbedder
    ) -> None:
        finance = PipelineVectorStore(seeded, memo_embedder, principals=["finance"])
        assert finance.delete(["secret"]) is True
        finance.add_texts([TEXTS[0]], ids=["secret"])
        public = PipelineVectorStore(seeded, memo_embedder)
        assert [d.id for d in public.get_by_ids(["secret"])] == ["secret"]


class TestClearErrors:
    @pytest.mark.parametrize("search", ["similarity", "scored", "mmr", "vector"])
    def test_an_empty_in_filter_returns_no_documents(
        self, seeded: Any, memo_embedder: MemoEmbedder, search: str
    ) -> None:
        vs = PipelineVectorStore(seeded, memo_embedder)
        empty = {"kind": {"$in": []}}
        vector = memo_embedder.embed_query("refunds")
        found = {
            "similarity": lambda: vs.similarity_search("refunds", filter=empty),
            "scored": lambda: vs.similarity_search_with_score("x", filter=empty),
            "mmr": lambda: vs.max_marginal_relevance_search("x", filter=empty),
            "vector": lambda: vs.similarity_search_by_vector(vector, filter=empty),
        }[search]()
        assert found == []

    def test_k_above_pgvectors_ef_search_limit_is_a_clear_error(
        self, seeded: Any, memo_embedder: MemoEmbedder
    ) -> None:
        vs = PipelineVectorStore(seeded, memo_embedder)
        with pytest.raises(InvalidQueryError, match=f"at most {MAX_K}"):
            vs.similarity_search("refunds", k=1500)
        with pytest.raises(InvalidQueryError, match="hnsw.ef_search"):
            vs.max_marginal_relevance_search("refunds", k=1500)
        assert [d.id for d in vs.similarity_search("refunds", k=MAX_K)] == ["public"]

    def test_a_fetch_k_above_the_limit_is_clamped(
        self, seeded: Any, memo_embedder: MemoEmbedder
    ) -> None:
        vs = PipelineVectorStore(seeded, memo_embedder)
        found = vs.max_marginal_relevance_search("refunds", k=2, fetch_k=5000)
        assert {d.id for d in found} == {"public"}

    @pytest.mark.parametrize(
        "spec",
        [
            {"kind\x00": "ops"},
            {"kind": "o\x00ps"},
            {"kind": {"$in": ["ops", "\x00"]}},
            {"kind": {"$eq": {"nested\x00": 1}}},
            {"\ud800": "ops"},
            {"kind": "\udfff"},
            {"kind": {"$in": ["ops", "\ud83d"]}},
            {"kind": math.nan},
            {"kind": {"$eq": object()}},
        ],
        ids=[
            "nul-key",
            "nul-value",
            "nul-in",
            "nul-nested-key",
            "surrogate-key",
            "surrogate-value",
            "surrogate-in",
            "nan",
            "not-json",
        ],
    )
    def test_unstorable_filter_keys_and_values_are_invalid_queries(
        self, seeded: Any, memo_embedder: MemoEmbedder, spec: dict[str, Any]
    ) -> None:
        vs = PipelineVectorStore(seeded, memo_embedder)
        with pytest.raises(InvalidQueryError):
            vs.similarity_search("refunds", filter=spec)
        with pytest.raises(InvalidQueryError):
            vs.max_marginal_relevance_search("refunds", filter=spec)

    @pytest.mark.parametrize("bad", ["a\x00b", "\ud800"], ids=["nul", "surrogate"])
    def test_unstorable_ids_texts_and_metadata_are_invalid_queries(
        self, seeded: Any, memo_embedder: MemoEmbedder, bad: str
    ) -> None:
        vs = PipelineVectorStore(seeded, memo_embedder)
        before = snapshot(seeded)
        for call in (
            lambda: vs.delete([bad]),
            lambda: vs.get_by_ids([bad]),
            lambda: vs.add_texts(["fine"], ids=[bad]),
            lambda: vs.add_texts([bad]),
            lambda: vs.add_texts(["fine"], [{"k": bad}]),
            lambda: vs.add_texts(["fine"], [{bad: 1}]),
            lambda: vs.add_texts(["fine"], [{"principals": [bad]}]),
        ):
            with pytest.raises(InvalidQueryError):
                call()
        assert snapshot(seeded) == before

    @pytest.mark.parametrize("dimension", [0, 3, 385])
    def test_a_query_vector_of_another_dimension_is_a_dimension_mismatch(
        self, seeded: Any, memo_embedder: MemoEmbedder, dimension: int
    ) -> None:
        vs = PipelineVectorStore(seeded, memo_embedder)
        with pytest.raises(DimensionMismatchError, match="384"):
            vs.similarity_search_by_vector([0.1] * dimension)
        with pytest.raises(DimensionMismatchError, match="384"):
            vs.max_marginal_relevance_search_by_vector([0.1] * dimension)

    @pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
    def test_a_non_finite_query_vector_is_an_invalid_query(
        self, seeded: Any, memo_embedder: MemoEmbedder, bad: float
    ) -> None:
        vs = PipelineVectorStore(seeded, memo_embedder)
        vector = list(memo_embedder.embed_query("refunds"))
        vector[7] = bad
        with pytest.raises(InvalidQueryError, match="finite"):
            vs.similarity_search_by_vector(vector)
        with pytest.raises(InvalidQueryError, match="finite"):
            vs.max_marginal_relevance_search_by_vector(vector)

    def test_a_search_before_anything_was_added_finds_nothing(
        self, store: Any, memo_embedder: MemoEmbedder
    ) -> None:
        vs = PipelineVectorStore(store, memo_embedder)
        assert vs.similarity_search("refunds") == []
        assert vs.max_marginal_relevance_search("refunds") == []
        assert vs.get_by_ids(["x"]) == [] and vs.delete(["x"]) is False


# --- property: no read returns, and no write touches, a document outside the scope ---
TENANTS = ("", "acme")
PRINCIPALS = ("p1", "p2", "p3")
IDS = ("d1", "d2", "d3", "d4")
KINDS = ("x", "y")

corpus_rows = st.lists(
    st.tuples(
        st.sampled_from(IDS),
        st.sampled_from(TENANTS),
        st.frozensets(st.sampled_from(PRINCIPALS), max_size=2),
        st.sampled_from(range(len(TEXTS))),
        st.sampled_from(KINDS),
    ),
    min_size=1,
    max_size=6,
    unique_by=lambda row: (row[0], row[1]),
)
scopes = st.lists(
    st.tuples(
        st.sampled_from(TENANTS),
        st.frozensets(st.sampled_from(PRINCIPALS), max_size=2),
    ),
    min_size=1,
    max_size=3,
)


_CHECKED = {"examples": 0, "scopes": 0}


@given(rows=corpus_rows, scopes=scopes, kinds=st.lists(st.sampled_from(KINDS)))
@property_settings(max_examples=50)
def test_the_vector_store_never_reads_or_writes_outside_its_scope(
    store: Any,
    memo_embedder: MemoEmbedder,
    rows: list[tuple[str, str, frozenset[str], int, str]],
    scopes: list[tuple[str, frozenset[str]]],
    kinds: list[str],
) -> None:
    with store.connection() as conn:
        conn.execute(
            "TRUNCATE documents, chunks, chunk_terms, term_stats, corpus_stats,"
            " entities, mentions, relations CASCADE"
        )
    for tenant in TENANTS:
        mine = [r for r in rows if r[1] == tenant]
        if mine:
            PipelineVectorStore(store, memo_embedder, tenant=tenant).add_texts(
                [TEXTS[r[3]] for r in mine],
                [
                    {"kind": r[4]} | ({"principals": sorted(r[2])} if r[2] else {})
                    for r in mine
                ],
                ids=[r[0] for r in mine],
            )
    vector = memo_embedder.embed_query("who owns refunds and connections")
    for tenant, principals in scopes:
        vs = PipelineVectorStore(
            store, memo_embedder, tenant=tenant, principals=sorted(principals)
        )
        in_tenant = {r[0]: r for r in rows if r[1] == tenant}
        visible = {i for i, r in in_tenant.items() if not r[2] or r[2] & principals}
        hidden = set(in_tenant) - visible
        wanted = {i for i in visible if in_tenant[i][4] in kinds}
        depth = len(rows) + 1
        kind_filter = {"kind": {"$in": kinds}}

        assert {d.id for d in vs.similarity_search("refunds", k=depth)} == visible
        assert {
            d.id for d, _ in vs.similarity_search_with_score("gateway", k=depth)
        } == visible
        assert {d.id for d in vs.similarity_search_by_vector(vector, k=depth)} == (
            visible
        )
        mmr = vs.max_marginal_relevance_search("payroll", k=depth, fetch_k=depth)
        assert {d.id for d in mmr} == visible
        assert {d.id for d in vs.get_by_ids(list(IDS))} == visible
        assert {
            d.id for d in vs.similarity_search("x", k=depth, filter=kind_filter)
        } == wanted
        mmr = vs.max_marginal_relevance_search_by_vector(
            vector, k=depth, fetch_k=depth, filter=kind_filter
        )
        assert {d.id for d in mmr} == wanted

        before = snapshot(store)
        elsewhere = {r[0] for r in rows if r[1] != tenant} - set(in_tenant)
        for outside in sorted(hidden | elsewhere):
            assert vs.delete([outside]) is vs.delete(["never-stored"]) is False
        assert snapshot(store) == before
        for hidden_id in sorted(hidden):
            with pytest.raises(WriteConflictError, match="not available") as refused:
                vs.add_texts([TEXTS[0]], [{"kind": "x"}], ids=[hidden_id])
            assert not any(p in str(refused.value) for p in PRINCIPALS)
        assert snapshot(store) == before
        _CHECKED["scopes"] += 1
    _CHECKED["examples"] += 1
    record_figure(
        "vectorstore_property_cases",
        _CHECKED["examples"],
        scopes=_CHECKED["scopes"],
        leaks=0,
    )
