from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from retrieval_pipeline.tools.assembly import AssemblyItem, assemble, jaccard, shingles
from retrieval_pipeline.tools.tokens import CharEstimateCounter, default_token_counter

CHARS = CharEstimateCounter()


def item(cid: str, text: str, relevance: float, doc: str | None = None) -> AssemblyItem:
    return AssemblyItem(cid, doc or f"doc-{cid}", text, relevance)


PARAGRAPH = "The ledger service records every movement of money as a balanced posting."


class TestShingles:
    def test_normalisation_ignores_case_and_punctuation(self) -> None:
        assert shingles("The Ledger, service!") == shingles("the ledger service")

    def test_identical_texts_have_jaccard_one_and_disjoint_zero(self) -> None:
        a, b = shingles(PARAGRAPH), shingles("completely different words here now")
        assert jaccard(a, a) == 1.0 and jaccard(a, b) == 0.0


class TestAssembly:
    def test_empty_pool_assembles_nothing(self) -> None:
        result = assemble([], CHARS)
        assert result.selected == [] and result.tokens == 0

    def test_the_highest_scored_chunk_is_always_first(self) -> None:
        items = [
            item("b", "beta text about kafka lag", 0.2),
            item("a", "alpha about ledgers", 0.9),
        ]
        assert assemble(items, CHARS).selected[0] == "a"

    def test_near_duplicates_are_dropped(self) -> None:
        items = [
            item("a", PARAGRAPH, 0.9),
            item("b", PARAGRAPH + " ", 0.8),
            item("c", PARAGRAPH.upper(), 0.7),
            item("d", "Consumers commit offsets every thirty seconds on the bus.", 0.6),
        ]
        result = assemble(items, CHARS)
        assert result.selected == ["a", "d"]
        assert sorted(result.dropped_duplicates) == ["b", "c"]

    @pytest.mark.parametrize(
        "counter", [CHARS, default_token_counter()], ids=["chars", "tiktoken"]
    )
    def test_the_token_budget_is_never_exceeded(self, counter) -> None:  # type: ignore[no-untyped-def]
        items = [
            item(f"c{i:02d}", f"passage {i} " + "word " * (10 + i), 1.0 - i / 100)
            for i in range(30)
        ]
        result = assemble(items, counter, token_budget=120)
        assert result.tokens <= 120
        assert result.tokens == sum(
            counter.count(i.text) for i in items if i.chunk_id in result.selected
        )
        assert result.dropped_budget

    def test_the_chunk_cap_is_respected(self) -> None:
        items = [
            item(
                f"c{i:02d}", f"distinct passage number {i} about topic {i}", 1 - i / 50
            )
            for i in range(40)
        ]
        assert len(assemble(items, CHARS, max_chunks=20).selected) == 20

    def test_mmr_prefers_novel_evidence_over_a_redundant_stronger_chunk(self) -> None:
        base = "kafka consumer lag grows when consumers stall and partitions pile up"
        items = [
            item("a", base, 1.0),
            item(
                "b", base + " quickly today", 0.95
            ),  # redundant with a, not a duplicate
            item(
                "c", "the ledger reconciles balances against bank settlement files", 0.9
            ),
        ]
        result = assemble(items, CHARS, max_chunks=2, duplicate_jaccard=0.99)
        assert result.selected == ["a", "c"]

    def test_lambda_one_is_pure_relevance(self) -> None:
        base = "kafka consumer lag grows when consumers stall and partitions pile up"
        items = [
            item("a", base, 1.0),
            item("b", base + " quickly today", 0.95),
            item("c", "other words entirely", 0.9),
        ]
        result = assemble(
            items, CHARS, max_chunks=2, mmr_lambda=1.0, duplicate_jaccard=0.99
        )
        assert result.selected == ["a", "b"]

    def test_one_document_cannot_take_more_than_its_share(self) -> None:
        items = [
            item(
                f"a{i}",
                f"section {i} of the long runbook " + "text " * 40,
                1 - i / 10,
                doc="runbook",
            )
            for i in range(6)
        ]
        items.append(
            item("z", "independent evidence from another source " + "word " * 40, 0.1)
        )
        result = assemble(items, CHARS, token_budget=400, document_share=0.5)
        from_runbook = [c for c in result.selected if c.startswith("a")]
        assert (
            sum(CHARS.count(i.text) for i in items if i.chunk_id in from_runbook) <= 200
        )
        assert "z" in result.selected and result.dropped_document_share

    def test_the_document_chunk_cap_makes_room_for_other_sources(self) -> None:
        # Short chunks of one page pass the token share easily; the cap still holds.
        items = [
            item(
                f"p{i}", f"part {i} of the page about {i * 7} things", 1 - i / 20, "pg"
            )
            for i in range(8)
        ] + [
            item(f"o{i}", f"other page {i} on topic {i * 3}", 0.3 - i / 100)
            for i in range(4)
        ]
        uncapped = assemble(items, CHARS, max_chunks=8)
        assert [c for c in uncapped.selected if c.startswith("p")] == [
            f"p{i}" for i in range(8)
        ]
        capped = assemble(items, CHARS, max_chunks=6, document_chunks=2)
        assert [c for c in capped.selected if c.startswith("p")] == ["p0", "p1"]
        assert {"o0", "o1", "o2", "o3"} <= set(capped.selected)
        assert capped.selected[:2] == ["p0", "p1"]  # still strongest first
        assert set(capped.dropped_document_share) >= {"p6", "p7"}
        # With slots left over and no other source, capped passages fill them.
        alone = [i for i in items if i.document_id == "pg"]
        filled = assemble(alone, CHARS, max_chunks=5, document_chunks=1)
        assert filled.selected == ["p0", "p1", "p2", "p3", "p4"]
        # Fill passages come after every other source's, even stronger ones.
        mixed = assemble(items, CHARS, max_chunks=7, document_chunks=1)
        assert mixed.selected == ["p0", "o0", "o1", "o2", "o3", "p1", "p2"]

    def test_the_pipeline_default_cap_is_valid(self) -> None:
        from retrieval_pipeline.errors import ConfigurationError
        from retrieval_pipeline.graph.context import DOCUMENT_CHUNKS, Context

        assert Context().document_chunks == DOCUMENT_CHUNKS >= 0
        assert Context(document_chunks=0).document_chunks == 0  # 0: no cap
        for bad in (-1, 10_000):
            with pytest.raises(ConfigurationError, match="document_chunks"):
                Context(document_chunks=bad)
        with pytest.raises(ValueError, match="document_chunks"):
            assemble([item("a", "x", 1.0)], CHARS, document_chunks=0)

    def test_assembly_is_deterministic(self) -> None:
        items = [item(f"c{i}", f"passage {i % 5} text {i}", 0.5) for i in range(25)]
        assert (
            assemble(items, CHARS).selected
            == assemble(list(reversed(items)), CHARS).selected
        )

    def test_invalid_settings_are_rejected(self) -> None:
        with pytest.raises(ValueError):
            assemble([item("a", "x", 1.0)], CHARS, token_budget=0)
        with pytest.raises(ValueError):
            assemble([item("a", "x", 1.0)], CHARS, mmr_lambda=1.5)


def eager_mmr(
    items: list[AssemblyItem],
    *,
    token_budget: int,
    max_chunks: int,
    mmr_lambda: float,
    duplicate_jaccard: float,
    document_share: float,
) -> tuple[list[str], list[str], list[str], list[str]]:
    """The textbook full-scan greedy MMR the lazy assembler must reproduce exactly."""
    low = min(i.relevance for i in items)
    shift = -low if low < 0 else 0.0
    top = max(i.relevance for i in items) + shift or 1.0
    norm = {i.chunk_id: (i.relevance + shift) / top for i in items}
    remaining = sorted(items, key=lambda i: (-i.relevance, i.chunk_id))
    redundancy = {i.chunk_id: 0.0 for i in items}
    chosen: list[AssemblyItem] = []
    dups: list[str] = []
    over: list[str] = []
    share: list[str] = []
    used: dict[str, int] = {}
    total = 0
    cap = max(1, int(token_budget * document_share))
    while remaining and len(chosen) < max_chunks:
        best = max(
            remaining,
            key=lambda i: (
                mmr_lambda * norm[i.chunk_id]
                - (1 - mmr_lambda) * redundancy[i.chunk_id],
                -remaining.index(i),
            ),
        )
        remaining.remove(best)
        cost = CHARS.count(best.text)
        if redundancy[best.chunk_id] >= duplicate_jaccard:
            dups.append(best.chunk_id)
        elif total + cost > token_budget:
            over.append(best.chunk_id)
        elif used.get(best.document_id, 0) and used[best.document_id] + cost > cap:
            share.append(best.chunk_id)
        else:
            chosen.append(best)
            used[best.document_id] = used.get(best.document_id, 0) + cost
            total += cost
            for other in remaining:
                similarity = jaccard(shingles(other.text), shingles(best.text))
                redundancy[other.chunk_id] = max(redundancy[other.chunk_id], similarity)
    chosen.sort(key=lambda i: (-i.relevance, i.chunk_id))
    return [i.chunk_id for i in chosen], dups, over, share


WORDS = ["alpha", "beta", "gamma", "delta", "ledger", "money", "posting", "rate"]


@settings(max_examples=200, deadline=None)
@given(
    texts=st.lists(
        st.lists(st.sampled_from(WORDS), min_size=0, max_size=12),
        min_size=1,
        max_size=30,
    ),
    scores=st.lists(st.sampled_from([0.1, 0.25, 0.5, 0.5, 0.9, 1.0]), min_size=30),
    documents=st.lists(st.integers(0, 4), min_size=30),
    mmr_lambda=st.sampled_from([0.0, 0.3, 0.7, 1.0]),
    duplicate_jaccard=st.sampled_from([0.5, 0.9, 1.0]),
    token_budget=st.integers(5, 120),
    max_chunks=st.integers(1, 12),
)
def test_lazy_mmr_selects_exactly_what_a_full_scan_selects(
    texts: list[list[str]],
    scores: list[float],
    documents: list[int],
    mmr_lambda: float,
    duplicate_jaccard: float,
    token_budget: int,
    max_chunks: int,
) -> None:
    items = [
        item(f"c{n:02d}", " ".join(words), scores[n], f"d{documents[n]}")
        for n, words in enumerate(texts)
    ]
    settings_ = {
        "token_budget": token_budget,
        "max_chunks": max_chunks,
        "mmr_lambda": mmr_lambda,
        "duplicate_jaccard": duplicate_jaccard,
        "document_share": 0.5,
    }
    result = assemble(items, CHARS, **settings_)  # type: ignore[arg-type]
    assert (
        result.selected,
        result.dropped_duplicates,
        result.dropped_budget,
        result.dropped_document_share,
    ) == eager_mmr(items, **settings_)  # type: ignore[arg-type]


def test_lazy_mmr_breaks_exact_score_ties_by_position_like_a_full_scan() -> None:
    # With lambda 0 the score is minus the redundancy: B and C are equally similar
    # to A (one shared shingle of three), so the tie must go to B, the stronger.
    items = [
        item("a", "alpha beta gamma delta", 1.0),
        item("b", "alpha beta gamma rate", 0.5),
        item("c", "alpha beta gamma money", 0.4),
    ]
    result = assemble(items, CHARS, mmr_lambda=0.0, max_chunks=2)
    assert result.selected == ["a", "b"]
    assert (
        result.selected
        == eager_mmr(
            items,
            token_budget=6000,
            max_chunks=2,
            mmr_lambda=0.0,
            duplicate_jaccard=0.9,
            document_share=0.5,
        )[0]
    )
