from __future__ import annotations

import pytest

from retrieval_pipeline.errors import InvalidQueryError
from retrieval_pipeline.graph.context import MAX_QUERY_CHARS, RRF_K
from retrieval_pipeline.settings import redact_url
from retrieval_pipeline.tools.retrieve import (
    check_limit,
    clean_query,
    reciprocal_rank_fusion,
)
from retrieval_pipeline.tools.tokens import CharEstimateCounter, default_token_counter


class TestTokenCounting:
    def test_tiktoken_loads_from_the_local_rank_file(self) -> None:
        counter = default_token_counter()
        assert counter.method == "tiktoken:cl100k_base"
        assert counter.count("hello world") == 2

    def test_char_estimate_is_four_characters_per_token_rounded_up(self) -> None:
        counter = CharEstimateCounter()
        assert counter.method == "chars/4"
        assert counter.count("") == 0
        assert counter.count("abcd") == 1
        assert counter.count("abcde") == 2


class TestReciprocalRankFusion:
    def test_uses_one_based_ranks_and_k_60(self) -> None:
        fused = dict(reciprocal_rank_fusion({"a": ["x", "y"], "b": ["y"]}))
        assert fused["x"] == pytest.approx(1 / (RRF_K + 1))
        assert fused["y"] == pytest.approx(1 / (RRF_K + 2) + 1 / (RRF_K + 1))

    def test_ties_break_by_id(self) -> None:
        fused = reciprocal_rank_fusion({"a": ["b", "a"], "b": ["a", "b"]})
        assert [i for i, _ in fused] == ["a", "b"]

    def test_weights_scale_a_channel(self) -> None:
        fused = reciprocal_rank_fusion(
            {"lexical": ["x"], "dense": ["y"]}, weights={"lexical": 2.0}
        )
        assert fused[0][0] == "x"

    def test_empty_input_gives_empty_output(self) -> None:
        assert reciprocal_rank_fusion({"lexical": [], "dense": []}) == []


class TestQueryValidation:
    @pytest.mark.parametrize("bad", ["", "   ", "\n\t", "\x00"])
    def test_empty_queries_are_rejected_clearly(self, bad: str) -> None:
        with pytest.raises(InvalidQueryError, match="empty"):
            clean_query(bad)

    def test_enormous_query_is_rejected_with_the_limit(self) -> None:
        with pytest.raises(InvalidQueryError, match="limit"):
            clean_query("x" * (MAX_QUERY_CHARS + 1))

    def test_nul_bytes_and_lone_surrogates_are_neutralised(self) -> None:
        assert clean_query("a\x00b\ud800c") == "a b?c"

    def test_non_string_is_rejected(self) -> None:
        with pytest.raises(InvalidQueryError):
            clean_query(42)

    @pytest.mark.parametrize("bad", [0, -1, 10_000, "5", True, 2.5])
    def test_bad_limits_are_rejected(self, bad: object) -> None:
        with pytest.raises(InvalidQueryError):
            check_limit(bad)


class TestSecrets:
    @pytest.mark.parametrize(
        "url",
        [
            "postgresql://user:s3cret@db:5432/x",
            "host=db user=u password=s3cret dbname=x",
            "postgresql://user@db/x?password=s3cret",
        ],
    )
    def test_passwords_are_redacted(self, url: str) -> None:
        assert "s3cret" not in redact_url(url)
