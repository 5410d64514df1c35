from __future__ import annotations

import pytest

from retrieval_pipeline.ingest.chunker import chunk_text, extract_identifiers
from retrieval_pipeline.tools.tokens import CharEstimateCounter, default_token_counter

COUNTER = CharEstimateCounter()

DOC = """---
title: x
---
# Guide

Intro paragraph one.

## Install

- step one
- step two

  continued item text

- step three

```bash
make install

make test
```

## Use

Final paragraph.
"""


def _chunks(text: str, **kw):  # type: ignore[no-untyped-def]
    return chunk_text(text, counter=COUNTER, **kw)


class TestStructuralChunking:
    def test_headings_become_the_heading_path(self) -> None:
        start = DOC.index("# Guide")
        chunks = _chunks(DOC, start=start)
        paths = [c.heading_path for c in chunks]
        assert paths == [("Guide",), ("Guide", "Install"), ("Guide", "Use")]

    def test_lists_and_code_blocks_are_kept_whole(self) -> None:
        start = DOC.index("# Guide")
        install = _chunks(DOC, start=start)[1]
        assert "- step one" in install.body and "- step three" in install.body
        assert "make install\n\nmake test\n```" in install.body

    def test_small_chunks_are_split_between_blocks_never_inside(self) -> None:
        start = DOC.index("# Guide")
        chunks = _chunks(DOC, start=start, max_tokens=16, overlap_tokens=0)
        bodies = [c.body for c in chunks]
        # The code fence holds a blank line but is one block.
        assert any(b.startswith("```bash") and b.endswith("```") for b in bodies)

    def test_every_body_is_an_exact_slice_of_the_source(self) -> None:
        chunks = _chunks(
            DOC, start=DOC.index("# Guide"), max_tokens=16, overlap_tokens=4
        )
        for chunk in chunks:
            assert DOC[chunk.char_start : chunk.char_end] == chunk.body

    def test_front_matter_is_never_chunked(self) -> None:
        chunks = _chunks(DOC, start=DOC.index("# Guide"))
        assert all("title: x" not in c.body for c in chunks)

    def test_indexed_text_is_heading_path_plus_body(self) -> None:
        chunk = _chunks(DOC, start=DOC.index("# Guide"))[2]
        assert chunk.indexed_text() == "Guide\nUse\nFinal paragraph."

    def test_empty_text_gives_no_chunks(self) -> None:
        assert _chunks("   \n\n  ") == []

    def test_unstructured_text_ignores_markdown_syntax(self) -> None:
        text = "# not a heading\n\nplain"
        chunks = _chunks(text, structured=False, base_headings=("Title",))
        assert chunks[0].heading_path == ("Title",)
        assert chunks[0].body.startswith("# not a heading")  # text, not a heading


class TestTokenCap:
    def test_long_block_is_cut_under_the_cap_with_overlap(self) -> None:
        counter = default_token_counter()
        words = " ".join(f"word{i}" for i in range(600))
        chunks = chunk_text(words, counter=counter, max_tokens=64, overlap_tokens=8)
        assert len(chunks) > 5
        assert all(c.token_count <= 64 for c in chunks)
        for first, second in zip(chunks, chunks[1:], strict=False):
            assert second.char_start < first.char_end  # overlapping windows
            assert second.char_start > first.char_start  # always progressing
        assert chunks[-1].body.endswith("word599")

    def test_no_overlap_means_adjacent_windows(self) -> None:
        words = " ".join(f"w{i}" for i in range(300))
        chunks = _chunks(words, max_tokens=32, overlap_tokens=0)
        for first, second in zip(chunks, chunks[1:], strict=False):
            assert second.char_start > first.char_end

    def test_invalid_cap_is_rejected(self) -> None:
        with pytest.raises(ValueError):
            _chunks("text", max_tokens=8)
        with pytest.raises(ValueError):
            _chunks("text", max_tokens=64, overlap_tokens=40)


class TestIdentifiers:
    @pytest.mark.parametrize(
        "token",
        ["ERR_CONN_RESET", "v2.3.1", "getUserById", "x86_64", "76-85", "INC-2107"],
    )
    def test_identifier_tokens_are_kept_intact(self, token: str) -> None:
        assert token.lower() in extract_identifiers(f"see {token} now")

    @pytest.mark.parametrize("number", ["2.5", "0.05", "2.3.1", "10"])
    def test_plain_numbers_are_not_identifiers(self, number: str) -> None:
        # PostgreSQL's parser keeps a decimal or dotted number whole as a prose
        # lexeme; as an identifier too it would count twice.
        assert extract_identifiers(f"at {number} now") == ()

    def test_plain_words_are_not_identifiers(self) -> None:
        assert extract_identifiers("The quick brown fox, twice.") == ()

    def test_trailing_punctuation_is_stripped(self) -> None:
        assert extract_identifiers("fixed in v2.3.2.") == ("v2.3.2",)
