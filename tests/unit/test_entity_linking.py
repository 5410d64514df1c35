"""Entity linking's matcher: whole words, any case, longest name first."""

from __future__ import annotations

from retrieval_pipeline.ingest.linking import EntityMatcher


def test_a_name_matches_whole_words_in_any_case() -> None:
    matcher = EntityMatcher([("e1", "Auth Gateway")])
    assert matcher.find("The auth gateway and the AUTH GATEWAY.") == {"e1": 2}
    assert matcher.find("an authgateway or Auth Gateways") == {}


def test_spaces_in_a_name_match_any_run_of_whitespace() -> None:
    matcher = EntityMatcher([("e1", "Auth Gateway")])
    assert matcher.find("the Auth\n  Gateway") == {"e1": 1}


def test_the_longest_name_wins_where_names_overlap() -> None:
    matcher = EntityMatcher([("short", "Gateway"), ("long", "Auth Gateway")])
    assert matcher.find("Auth Gateway, then a gateway") == {"long": 1, "short": 1}


def test_two_letter_names_are_not_evidence() -> None:
    matcher = EntityMatcher([("e1", "QA")])
    assert matcher.empty and matcher.find("QA signed off") == {}


def test_the_first_id_of_a_repeated_name_wins() -> None:
    matcher = EntityMatcher([("first", "Billing"), ("second", "billing")])
    assert matcher.find("billing") == {"first": 1}


def test_no_names_match_nothing() -> None:
    matcher = EntityMatcher([])
    assert matcher.empty and matcher.find("any text at all") == {}
