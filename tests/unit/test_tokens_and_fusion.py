from __future__ import annotations

import pytest

from retrieval_pipeline.errors import InvalidQueryError
from retrieval_pipeline.graph.context import MAX_QUERY_CHARS, RRF_K
from retrieval_pipeline.settings import redact_url
from retrieval_pipeline.tools.retrieve import (
    check_limit,
    clean_query,
    convex_fusion,
    fuse,
    parse_websearch,
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


class TestConvexFusion:
    def test_min_max_normalised_equal_weights(self) -> None:
        fused = dict(
            convex_fusion(
                {
                    "lexical": [("a", 10.0), ("b", 5.0), ("c", 0.0)],
                    "dense": [("b", 0.9), ("a", 0.5)],
                }
            )
        )
        assert fused["a"] == pytest.approx((1.0 + 0.0) / 2)
        assert fused["b"] == pytest.approx((0.5 + 1.0) / 2)
        assert fused["c"] == pytest.approx(0.0)

    def test_scores_are_in_unit_range_for_both_methods(self) -> None:
        scored = {
            "lexical": [("a", 3.0), ("b", 1.0)],
            "dense": [("a", 0.8), ("c", 0.1)],
        }
        for method in ("convex", "rrf"):
            fused = fuse(scored, method=method)
            assert fused[0] == ("a", pytest.approx(1.0))
            assert all(0.0 <= s <= 1.0 for _, s in fused)

    def test_unknown_fusion_is_rejected(self) -> None:
        with pytest.raises(ValueError, match="convex"):
            fuse({}, method="borda")


class TestWebSearchSyntax:
    def test_phrases_and_exclusions_become_constraints(self) -> None:
        parsed = parse_websearch('"consumer lag" kafka -zookeeper -"old broker"')
        assert parsed.constraint == '-zookeeper -"old broker"'
        assert parsed.phrases == '"consumer lag"'
        assert parsed.text == "consumer lag kafka"

    def test_plain_questions_have_no_constraint(self) -> None:
        parsed = parse_websearch("what is ERR_CONN_RESET in v2.3.1 - really?")
        assert parsed.constraint is None and parsed.phrases is None
        assert parsed.text == "what is ERR_CONN_RESET in v2.3.1 - really?"

    def test_hyphenated_words_are_not_exclusions(self) -> None:
        assert parse_websearch("event-bus well-known").constraint is None
