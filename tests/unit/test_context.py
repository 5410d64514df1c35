from __future__ import annotations

import pytest

from retrieval_pipeline.graph.context import MAX_LIMIT, Context, resolve_context


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("candidate_pool", 0),
        ("max_chunks", MAX_LIMIT + 1),
        ("graph_seeds", 0),
        ("top_entities", -1),
        ("frontier_cap", 0),
        ("graph_documents", 0),
        ("graph_chunks", MAX_LIMIT + 1),
        ("graph_score_weight", 0.0),
        ("document_share", 1.5),
        ("max_hops", 3),
        ("mmr_lambda", -0.1),
        ("fusion", "sum"),
    ],
)
def test_out_of_range_settings_name_the_setting(key: str, value: object) -> None:
    # A context arriving as a dict (HTTP, Studio) gets the same clear error.
    with pytest.raises(ValueError, match=key):
        resolve_context({key: value})


def test_defaults_are_valid_and_a_foreign_context_falls_back_to_them() -> None:
    assert resolve_context(object()) == Context()
    assert resolve_context({"graph_seeds": 3}).graph_seeds == 3
