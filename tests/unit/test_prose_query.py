"""The lexical channel's prose text splits inner hyphens (issue 18, lexical parity)."""

from __future__ import annotations

from retrieval_pipeline.ingest.chunker import extract_identifiers
from retrieval_pipeline.tools.retrieve import parse_websearch, prose_query


def test_inner_hyphens_read_as_spaces() -> None:
    assert prose_query("AMP-activated kinase") == "AMP activated kinase"
    assert prose_query("76-85% of people") == "76 85% of people"
    assert prose_query("β-blockers") == "β blockers"


def test_exclusions_and_underscores_are_left_alone() -> None:
    parsed = parse_websearch("gateway -timeout ERR_CONN_RESET")
    assert prose_query(parsed.text) == "gateway ERR_CONN_RESET"
    assert parsed.constraint == "-timeout"
    assert prose_query("a - b") == "a - b"  # a dash between spaces is no inner hyphen


def test_the_identifier_field_still_sees_the_whole_token() -> None:
    # The identifiers come from the question as written, not from the prose text.
    assert "il-2" in extract_identifiers("IL-2 signalling")
    assert "76-85" in extract_identifiers("76-85% of people")


def test_command_line_options_are_text_not_exclusions() -> None:
    # "--eval" is the option a question asks about; read as "-eval" it would remove
    # every chunk that documents it. A one-letter flag and a negative number too.
    for question in ("octave --eval", "mkoctfile --mex", "python -m venv", "at -10 C"):
        parsed = parse_websearch(question)
        assert parsed.constraint is None, question
        assert parsed.text == question
    # A dash before a word or a quoted phrase still excludes, as on the web.
    assert parse_websearch("cats -dogs").constraint == "-dogs"
    assert parse_websearch('cats -"hot dogs"').constraint == '-"hot dogs"'
