from __future__ import annotations

import math
from pathlib import Path

import pytest
from helpers import write_jsonl

from retrieval_pipeline.errors import InvalidQueryError
from retrieval_pipeline.ingest.job import Ingestor
from retrieval_pipeline.tools.retrieve import Retriever
from retrieval_pipeline.tools.store import Store

SECRET = "The quarterly zephyrine budget for Project Nightjar is 4.2M EUR."


@pytest.fixture()
def acl_corpus(ingestor: Ingestor, tmp_path: Path) -> Path:
    """The same secret sentence in documents with different owners and tenants."""
    write_jsonl(
        tmp_path / "public.jsonl",
        [
            {
                "_id": "public",
                "title": "Public note",
                "text": "Project Nightjar is public.",
            }
        ],
    )
    write_jsonl(
        tmp_path / "finance.jsonl",
        [
            {
                "_id": "finance",
                "title": "Finance",
                "text": SECRET,
                "metadata": {"principals": ["finance"]},
            }
        ],
    )
    write_jsonl(
        tmp_path / "acme.jsonl",
        [
            {
                "_id": "acme",
                "title": "Acme",
                "text": SECRET,
                "metadata": {"tenant": "acme"},
            }
        ],
    )
    write_jsonl(
        tmp_path / "acme-hr.jsonl",
        [
            {
                "_id": "acme-hr",
                "title": "Acme HR",
                "text": SECRET,
                "metadata": {"tenant": "acme", "principals": ["hr"]},
            }
        ],
    )
    summary = ingestor.ingest_paths([tmp_path])
    assert summary.documents == 4
    return tmp_path


def _visible(retriever: Retriever, **access: object) -> set[str]:
    chunks = retriever.retrieve("zephyrine budget Nightjar", limit=20, **access)  # type: ignore[arg-type]
    return {c.document_id for c in chunks}


class TestAccessControl:
    def test_a_caller_without_principals_sees_public_documents_only(
        self, retriever: Retriever, acl_corpus: Path
    ) -> None:
        assert _visible(retriever) == {"public"}

    def test_a_principal_unlocks_its_documents(
        self, retriever: Retriever, acl_corpus: Path
    ) -> None:
        assert _visible(retriever, principals=["finance"]) == {"public", "finance"}
        assert _visible(retriever, principals=["hr", "nobody"]) == {"public"}

    def test_a_tenant_caller_never_sees_another_tenants_documents(
        self, retriever: Retriever, acl_corpus: Path
    ) -> None:
        assert _visible(retriever, tenant="acme") == {"acme"}
        assert _visible(retriever, tenant="acme", principals=["hr"]) == {
            "acme",
            "acme-hr",
        }
        assert (
            _visible(retriever, tenant="globex", principals=["finance", "hr"]) == set()
        )

    def test_both_channels_filter_before_ranking(
        self, retriever: Retriever, acl_corpus: Path
    ) -> None:
        scope = retriever.scope(principals=[], tenant=None)
        channels = retriever.channels("zephyrine budget Nightjar", scope, depth=50)
        rows = retriever.store.fetch_chunks(
            [i for c in channels.values() for i, _ in c], retriever.scope(tenant=None)
        )
        assert {r["source_id"] for r in rows.values()} <= {"public"}
        assert all(len(ranked) <= 1 for ranked in channels.values())

    def test_document_scope_restricts_results(
        self, retriever: Retriever, acl_corpus: Path
    ) -> None:
        assert _visible(retriever, principals=["finance"], doc_ids=["finance"]) == {
            "finance"
        }
        # A scope never widens access.
        assert _visible(retriever, doc_ids=["finance"]) == set()


class TestLexicalChannel:
    def test_exact_identifiers_rank_first(
        self, ingestor: Ingestor, retriever: Retriever, sample_corpus: Path
    ) -> None:
        ingestor.ingest_paths([sample_corpus])
        for query, token in [
            ("ERR_CONN_RESET", "ERR_CONN_RESET"),
            ("what changed in v2.3.2", "v2.3.2"),
            ("scorePayment", "scorePayment"),
            ("SESSION_POOL_SIZE", "SESSION_POOL_SIZE"),
        ]:
            scope = retriever.scope()
            lexical = retriever.channels(query, scope)["lexical"]
            top = retriever.store.fetch_chunks([lexical[0][0]], scope)[lexical[0][0]]
            assert token in top["content"], query

    def test_a_common_identifier_like_token_does_not_outrank_the_text(
        self, ingestor: Ingestor, retriever: Retriever, tmp_path: Path
    ) -> None:
        records = [
            {"_id": f"cd4-{i}", "text": f"CD4 counts were measured in cohort {i}."}
            for i in range(12)
        ] + [
            {
                "_id": "tb",
                "text": "Antiretroviral therapy reduces tuberculosis rates in adults.",
            },
            {"_id": "rare", "text": "The locus rs647161 is near the APC gene."},
        ]
        write_jsonl(tmp_path / "c.jsonl", records)
        ingestor.ingest_paths([tmp_path])
        scope = retriever.scope()

        def top(query: str) -> str:
            lexical = retriever.channels(query, scope)["lexical"]
            rows = retriever.store.fetch_chunks([lexical[0][0]], scope)
            return str(rows[lexical[0][0]]["source_id"])

        # CD4 is in 12 of 14 chunks: its identifier match weighs little, and the
        # chunk matching the query's rare words ranks first.
        assert top("antiretroviral therapy tuberculosis rates CD4") == "tb"
        # A rare identifier still puts its chunk first over common words.
        assert top("cohort measured counts rs647161") == "rare"

    def test_a_missing_word_never_empties_the_result(
        self, ingestor: Ingestor, retriever: Retriever, sample_corpus: Path
    ) -> None:
        ingestor.ingest_paths([sample_corpus])
        lexical = retriever.channels(
            "how do we rotate merchant keys xylophonequux", retriever.scope()
        )["lexical"]
        assert lexical  # OR semantics, not websearch_to_tsquery's AND

    def test_quoted_phrases_rank_first_but_exclude_nothing(
        self, ingestor: Ingestor, retriever: Retriever, sample_corpus: Path
    ) -> None:
        ingestor.ingest_paths([sample_corpus])
        scope = retriever.scope()
        lexical = retriever.channels('"consumer group" lag', scope)["lexical"]
        rows = retriever.store.fetch_chunks([i for i, _ in lexical], scope)
        texts = [rows[i]["content"].lower() for i, _ in lexical]
        with_phrase = [("consumer group" in t) for t in texts]
        assert with_phrase[0] and not all(with_phrase)  # first, yet others remain
        assert with_phrase == sorted(with_phrase, reverse=True)

    def test_exclusions_remove_matching_chunks_from_every_channel(
        self, ingestor: Ingestor, retriever: Retriever, sample_corpus: Path
    ) -> None:
        ingestor.ingest_paths([sample_corpus])
        plain = retriever.retrieve("consumer lag", limit=20)
        assert any("kafka" in c.text.lower() for c in plain)
        excluded = retriever.retrieve("consumer lag -kafka", limit=20)
        assert excluded
        assert not any("kafka" in c.text.lower() for c in excluded)

    def test_a_constraint_of_only_stop_words_constrains_nothing(
        self, ingestor: Ingestor, retriever: Retriever, sample_corpus: Path
    ) -> None:
        ingestor.ingest_paths([sample_corpus / "teams"])
        assert retriever.retrieve('platform team "the"', limit=3)

    def test_bm25_scores_match_a_reference_computation(
        self, ingestor: Ingestor, retriever: Retriever, store: Store, tmp_path: Path
    ) -> None:
        texts = {
            "1": "cats chase mice and cats sleep",
            "2": "dogs chase cats in the garden every morning",
            "3": "mice eat cheese",
            "4": "a long text about gardens, flowers, trees and the garden shed",
        }
        write_jsonl(
            tmp_path / "c.jsonl", [{"_id": k, "text": v} for k, v in texts.items()]
        )
        ingestor.ingest_paths([tmp_path])
        query = "cats chasing mice"
        with store.connection() as conn:
            terms = {
                cid: dict(
                    conn.execute(
                        "SELECT lexeme, tf FROM chunk_terms WHERE chunk_id = %s", (cid,)
                    ).fetchall()
                )
                for (cid,) in conn.execute("SELECT id FROM chunks").fetchall()
            }
            q_terms = [
                r[0]
                for r in conn.execute(
                    "SELECT lexeme FROM unnest(to_tsvector('english', %s))", (query,)
                )
            ]
        n = len(terms)
        avgdl = sum(sum(t.values()) for t in terms.values()) / n
        k1, b = retriever.k1, retriever.b
        expected = {}
        for cid, tf in terms.items():
            score = 0.0
            for term in q_terms:
                df = sum(1 for t in terms.values() if term in t)
                if term in tf:
                    idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
                    dl = sum(tf.values())
                    score += (
                        idf
                        * tf[term]
                        * (k1 + 1)
                        / (tf[term] + k1 * (1 - b + b * dl / avgdl))
                    )
            if score:
                expected[cid] = score
        got = {
            cid: s for cid, s in retriever.channels(query, retriever.scope())["lexical"]
        }
        assert got.keys() == expected.keys()
        for cid, score in expected.items():
            assert got[cid] == pytest.approx(score, rel=1e-9)

    def test_bm25_statistics_are_kept_per_tenant(
        self, ingestor: Ingestor, retriever: Retriever, tmp_path: Path
    ) -> None:
        write_jsonl(tmp_path / "a.jsonl", [{"_id": "a", "text": "rare word quokka"}])
        ingestor.ingest_paths([tmp_path / "a.jsonl"], tenant="alpha")
        before = retriever.channels("quokka", retriever.scope(tenant="alpha"))[
            "lexical"
        ]
        other = [{"_id": f"b{i}", "text": f"quokka number {i}"} for i in range(30)]
        write_jsonl(tmp_path / "b.jsonl", other)
        ingestor.ingest_paths([tmp_path / "b.jsonl"], tenant="beta")
        after = retriever.channels("quokka", retriever.scope(tenant="alpha"))["lexical"]
        # Another tenant's documents change neither the ranking nor the scores.
        assert after == before


class TestBoundedLexicalChannel:
    """Past the exhaustive budget the lexical channel reads a bounded number of
    postings (impact-ordered) or, with a document scope, scores the scope alone."""

    @pytest.fixture()
    def wide_corpus(self, ingestor: Ingestor, tmp_path: Path) -> None:
        words = "alpha beta gamma delta epsilon zeta eta theta iota kappa".split()
        records = []
        for i in range(300):
            common = " ".join(
                words[j] for j in range(10) if (i >> (j % 8)) & 1 or j < 3
            )
            extra = "zephyrine " * (i % 4) if i % 50 == 0 else ""
            records.append(
                {
                    "_id": f"d{i:03d}",
                    "text": f"{common} {common if i % 3 else ''} {extra} item{i}",
                    "metadata": {
                        "tenant": "wide",
                        # public unless restricted: an absent key, not [] (an
                        # explicitly empty ACL is an ingest error)
                        **({"principals": ["staff"]} if i % 7 == 0 else {}),
                    },
                }
            )
        write_jsonl(tmp_path / "wide.jsonl", records)
        ingestor.ingest_paths([tmp_path])

    QUERIES = [
        "alpha beta gamma delta",
        "zephyrine alpha epsilon",
        "theta iota kappa zeta eta",
        "item42 alpha",
        "getUserById alpha",
    ]

    def _lexical(self, store: Store, query: str, scope: object, **kwargs: object):  # type: ignore[no-untyped-def]
        from retrieval_pipeline.ingest.chunker import extract_identifiers

        stats: dict[str, object] = {}
        rows = store.search_lexical(
            query,
            extract_identifiers(query),
            scope,  # type: ignore[arg-type]
            depth=kwargs.pop("depth", 30),  # type: ignore[arg-type]
            k1=0.9,
            b=0.4,
            stats=stats,
            **kwargs,  # type: ignore[arg-type]
        )
        return rows, stats

    def test_posting_quotas_water_fill_rarest_first(self) -> None:
        from retrieval_pipeline.tools.store.store import posting_quotas

        quotas = posting_quotas([5, 100_000, 40, 50_000], 8_000)
        assert quotas[0] >= 5 and quotas[2] >= 40  # rare lexemes are read whole
        # The common lexemes split the rest evenly, and the whole budget is used.
        assert abs(quotas[1] - quotas[3]) <= 1 and quotas[1] + quotas[3] == 8_000 - 45
        assert posting_quotas([10, 10], 0) == [1, 1]  # never starve a lexeme
        assert posting_quotas([], 100) == []

    def test_an_unbounded_read_equals_the_exhaustive_scorer(
        self, store: Store, retriever: Retriever, wide_corpus: None
    ) -> None:
        for principals in ([], ["staff"]):
            scope = retriever.scope(principals=principals, tenant="wide")
            for query in self.QUERIES:
                exact, stats = self._lexical(store, query, scope)
                assert stats["mode"] == "exhaustive"
                bounded, stats = self._lexical(
                    store, query, scope, exhaustive_postings=0, read_budget=10**6
                )
                assert stats["mode"] == "impact" and stats["postings"] > 0
                assert [r[0] for r in bounded] == [r[0] for r in exact], query
                for (_, a, ha), (_, b, hb) in zip(bounded, exact, strict=True):
                    assert a == pytest.approx(b, rel=1e-9) and ha == hb

    def test_a_small_read_budget_keeps_access_rules_and_rare_terms(
        self, store: Store, retriever: Retriever, wide_corpus: None
    ) -> None:
        scope = retriever.scope(tenant="wide")
        rows, stats = self._lexical(
            store,
            "zephyrine alpha beta gamma",
            scope,
            exhaustive_postings=0,
            read_budget=40,
        )
        assert stats["mode"] == "impact" and len(rows) == 30
        found = retriever.store.fetch_chunks([r[0] for r in rows], scope)
        assert len(found) == len(rows)  # all visible to this caller in this tenant
        # The rare lexeme is read whole: the visible chunks containing it rank first,
        # exactly scored, as the exhaustive scorer ranks them.
        exact, _ = self._lexical(store, "zephyrine alpha beta gamma", scope)
        texts = retriever.store.fetch_chunks([r[0] for r in exact], scope)
        rare = [r for r in exact if "zephyrine" in texts[r[0]]["content"]]
        assert len(rare) == 3
        assert [r[0] for r in rows[:3]] == [r[0] for r in rare]
        assert [r[1] for r in rows[:3]] == pytest.approx([r[1] for r in rare])
        # Another tenant sees nothing of this corpus, whatever the mode.
        other, _ = self._lexical(
            store, "zephyrine alpha", retriever.scope(tenant="x"), exhaustive_postings=0
        )
        assert other == []

    def test_identifiers_and_phrases_still_rank_first_when_bounded(
        self, store: Store, retriever: Retriever, wide_corpus: None
    ) -> None:
        scope = retriever.scope(tenant="wide")
        rows, stats = self._lexical(
            store, "item43 alpha beta", scope, exhaustive_postings=0, read_budget=10
        )
        assert stats["mode"] == "impact"
        top = retriever.store.fetch_chunks([rows[0][0]], scope)[rows[0][0]]
        assert "item43" in top["content"] and rows[0][2] == 1
        rows, _ = self._lexical(
            store,
            "alpha beta",
            scope,
            exhaustive_postings=0,
            read_budget=10,
            phrases='"item8"',
        )
        top = retriever.store.fetch_chunks([rows[0][0]], scope)[rows[0][0]]
        assert "item8" in top["content"]

    def test_a_document_scope_past_the_budget_scores_the_scope_exactly(
        self, store: Store, retriever: Retriever, wide_corpus: None
    ) -> None:
        docs = [f"d{i:03d}" for i in range(0, 300, 9)]
        for principals in ([], ["staff"]):
            scope = retriever.scope(principals=principals, tenant="wide", doc_ids=docs)
            exact, stats = self._lexical(store, "alpha beta zephyrine", scope)
            assert stats["mode"] == "exhaustive"
            scoped, stats = self._lexical(
                store, "alpha beta zephyrine", scope, exhaustive_postings=0
            )
            assert stats["mode"] == "scoped"
            assert [r[0] for r in scoped] == [r[0] for r in exact]
            assert [r[1] for r in scoped] == pytest.approx([r[1] for r in exact])

    def test_the_retriever_records_the_mode_in_its_trace(
        self, store: Store, embedder: object, wide_corpus: None
    ) -> None:
        from retrieval_pipeline.tools.retrieve import RetrievalTrace

        bounded = Retriever(store, embedder, lexical_exhaustive_postings=0)  # type: ignore[arg-type]
        trace = RetrievalTrace()
        assert bounded.retrieve("alpha beta gamma", tenant="wide", trace=trace)
        assert trace.lexical_mode == "impact" and trace.lexical_postings > 0
        exact = Retriever(store, embedder, lexical_exhaustive_postings=None)  # type: ignore[arg-type]
        trace = RetrievalTrace()
        exact.retrieve("alpha beta gamma", tenant="wide", trace=trace)
        assert trace.lexical_mode == "exhaustive"


class TestDenseChannel:
    @pytest.fixture()
    def one_percent_corpus(self, ingestor: Ingestor, tmp_path: Path) -> list[str]:
        """1,000 chunks; a 'rare' caller may see 10 of them (1 %)."""
        records = [
            {
                "_id": str(i),
                "text": f"Note {i} about topic {i % 37} and item {i * 7 % 101}.",
                "metadata": {"principals": ["rare" if i % 100 == 0 else "staff"]},
            }
            for i in range(1000)
        ]
        write_jsonl(tmp_path / "c.jsonl", records)
        ingestor.ingest_paths([tmp_path])
        return [str(i) for i in range(0, 1000, 100)]

    @pytest.mark.parametrize(
        "pgvector", [None, (0, 7, 0)], ids=["installed", "pre-0.8"]
    )
    def test_a_filtered_query_with_a_one_percent_allowed_set_returns_full_depth(
        self,
        retriever: Retriever,
        one_percent_corpus: list[str],
        monkeypatch: pytest.MonkeyPatch,
        pgvector: tuple[int, ...] | None,
    ) -> None:
        if pgvector is not None:  # no iterative scans: the exact fallback must fill in
            monkeypatch.setattr(Store, "pgvector_version", lambda self: pgvector)
        scope = retriever.scope(principals=["rare"])
        dense = retriever.channels("a note about a topic", scope, depth=10)["dense"]
        assert len(dense) == 10
        rows = retriever.store.fetch_chunks([i for i, _ in dense], scope)
        assert sorted(r["source_id"] for r in rows.values()) == sorted(
            one_percent_corpus
        )

    def test_a_document_scope_uses_an_exact_scan_of_the_scope(
        self, retriever: Retriever, one_percent_corpus: list[str]
    ) -> None:
        scope = retriever.scope(principals=["rare"], doc_ids=one_percent_corpus[:5])
        vector = retriever.embedder.embed_query("note")
        dense = retriever.store.search_dense(vector, scope, depth=20, ef_search=40)
        assert len(dense) == 5
        distances = [score for _, score in dense]
        assert distances == sorted(distances, reverse=True)


class TestRetrieve:
    def test_the_demo_question_finds_the_runbook_first(
        self, ingestor: Ingestor, retriever: Retriever, sample_corpus: Path
    ) -> None:
        ingestor.ingest_paths([sample_corpus])
        chunks = retriever.retrieve(
            "Who owns the service that failed with ERR_CONN_RESET in v2.3.1?", limit=5
        )
        assert len(chunks) == 5
        assert chunks[0].document_id == "runbooks/err-conn-reset"
        assert chunks[0].ranks == {"lexical": 1, "dense": 1}
        assert chunks[0].score == pytest.approx(1.0)  # best in both channels
        scores = [c.score for c in chunks]
        assert scores == sorted(scores, reverse=True)

    def test_results_carry_provenance_and_are_deterministic(
        self, ingestor: Ingestor, retriever: Retriever, sample_corpus: Path
    ) -> None:
        ingestor.ingest_paths([sample_corpus])
        first = [
            c.to_dict()
            for c in retriever.retrieve(
                "scaling a consumer up to the partitions", limit=8
            )
        ]
        second = [
            c.to_dict()
            for c in retriever.retrieve(
                "scaling a consumer up to the partitions", limit=8
            )
        ]
        assert first == second
        top = first[0]
        assert top["document_id"] == "runbooks/kafka-consumer-lag"
        assert top["source_uri"].startswith("file://") and top["revision"].startswith(
            "sha256:"
        )
        assert top["char_end"] > top["char_start"] and top["heading_path"]

    def test_an_empty_index_returns_nothing(self, retriever: Retriever) -> None:
        assert retriever.retrieve("anything at all") == []

    @pytest.mark.parametrize(
        "query",
        [
            "'; DROP TABLE chunks; --",
            "a & b | !c <-> d",
            '"unterminated',
            "😀 مرحبا",
            "x:*",
        ],
    )
    def test_hostile_queries_return_results_not_errors(
        self, ingestor: Ingestor, retriever: Retriever, sample_corpus: Path, query: str
    ) -> None:
        ingestor.ingest_paths([sample_corpus / "teams"])
        assert isinstance(retriever.retrieve(query), list)
        assert retriever.store.counts()["chunks"] > 0

    def test_bad_limits_and_empty_queries_are_user_errors(
        self, retriever: Retriever
    ) -> None:
        with pytest.raises(InvalidQueryError):
            retriever.retrieve("   ")
        with pytest.raises(InvalidQueryError):
            retriever.retrieve("ok", limit=0)
