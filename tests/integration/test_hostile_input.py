"""Hostile and malformed input, fuzzed with hypothesis.

- The query path, through the served endpoint on a loopback socket: every request
  returns results or a clear 4xx with a reason; never a 500, a traceback or SQL error
  text.
- Ingestion: truncated markdown, binary files with text extensions, enormous lines, bad
  front matter, bad sidecars, broken JSONL. Every failure is per file with its path and
  a reason; whatever is stored is whole (statistics consistent, every document with
  its chunks, offsets inside the text); a good file beside them is always ingested.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from figures import record_figure
from helpers import assert_stats_consistent, property_settings
from http_server import running
from hypothesis import given
from hypothesis import strategies as st

from retrieval_pipeline.graph.builder import build_pipeline
from retrieval_pipeline.graph.resources import PipelineResources
from retrieval_pipeline.ingest.job import Ingestor
from retrieval_pipeline.serve import create_app
from retrieval_pipeline.tools.retrieve import Retriever

HOSTILE = [
    "",
    "   \t\n ",
    "\x00",
    "owner\x00 of ledger",
    "\ud800 lone surrogate \udfff",
    "x" * 100_000,
    "ledger " * 10_000,
    " ".join(f"term{i}" for i in range(10_000)),
    "a & b | !c <-> d:* (e",
    "!!!:*&|<->()",
    "'; DROP TABLE chunks; --",
    "1) OR 1=1 UNION SELECT content FROM chunks --",
    "$$ \\x00 E'\\\\' %(tenant)s %s {doc_filter}",
    '"unterminated phrase -ledger OR',
    "-only -exclusions -here",
    "OR OR OR",
    "😀🔥💥 owner ledger 👩‍👩‍👧",
    "مرحبا من يملك الخدمة؟ שלום",
    "\u202eevil\u202c ledger \u200b\ufeff",
    "ERR_CONN_RESET v2.3.1 getUserById",
    "-" * 33,  # websearch_to_tsquery overflowed its stack on runs of negations
    "-" * 5000,
    "ledger " + "-" * 40 + "owner",
    '"' + "-" * 50 + '" ledger',
    "- - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - ledger",
    "!" * 100 + " ledger " + "(" * 100,
]
WEIRD_TEXT = st.text(max_size=300) | st.sampled_from(HOSTILE)
LEAK_MARKERS = ("Traceback", "psycopg", "SQLSTATE", "syntax error", 'File "')


def _field(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A field that is usually well-typed, sometimes absent-like or the wrong type."""
    return strategy | st.none() | st.integers() | st.text(max_size=20) | st.just([])


# Half the payloads are well-typed (so hostile text reaches the pipeline itself), half
# carry wrong types (so validation answers them).
well_typed = st.fixed_dictionaries(
    {"question": WEIRD_TEXT},
    optional={
        "limit": st.integers(min_value=1, max_value=50),
        "doc_ids": st.none() | st.lists(WEIRD_TEXT, max_size=3),
        "principals": st.lists(WEIRD_TEXT, max_size=3),
        "tenant": st.none() | WEIRD_TEXT,
    },
)
mistyped = st.fixed_dictionaries(
    {
        "question": WEIRD_TEXT
        | st.integers()
        | st.none()
        | st.lists(st.text(max_size=5))
    },
    optional={
        "limit": _field(st.integers(min_value=-5, max_value=500)),
        "doc_ids": _field(st.lists(WEIRD_TEXT, max_size=3)),
        "principals": _field(st.lists(WEIRD_TEXT, max_size=3)),
        "tenant": _field(WEIRD_TEXT),
    },
)
payloads = well_typed | mistyped


@pytest.fixture()
def served(ingestor: Ingestor, retriever: Retriever, sample_corpus: Path) -> Any:
    ingestor.ingest_paths([sample_corpus])
    pipeline = build_pipeline(PipelineResources(retriever=retriever))
    with (
        running(create_app(pipeline)) as url,
        httpx.Client(base_url=url, timeout=60) as http,
    ):
        yield http


def _assert_clean(response: httpx.Response, sent: Any) -> None:
    assert response.status_code in (200, 400, 422), (
        response.status_code,
        response.text[:500],
        repr(sent)[:300],
    )
    if response.status_code != 200:
        for marker in LEAK_MARKERS:
            assert marker not in response.text, (marker, response.text[:500])
        detail = response.json().get("detail")
        assert detail, response.text[:300]


def test_every_listed_hostile_question_gets_results_or_a_clear_4xx(
    served: httpx.Client,
) -> None:
    for question in HOSTILE:
        for route in ("/retrieve/invoke", "/retrieve/stream"):
            response = served.post(
                route,
                content=json.dumps({"input": {"question": question}}),
                headers={"content-type": "application/json"},
            )
            _assert_clean(response, question)
            assert "event: error" not in response.text, (question[:40], route)


def test_fuzzed_queries_get_results_or_a_clear_4xx(served: httpx.Client) -> None:
    statuses: dict[int, int] = {}

    @property_settings(300)
    @given(payload=payloads)
    def check(payload: dict[str, Any]) -> None:
        # json.dumps escapes lone surrogates, as a hostile client may send them.
        response = served.post(
            "/retrieve/invoke",
            content=json.dumps({"input": payload}),
            headers={"Content-Type": "application/json"},
        )
        statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
        _assert_clean(response, payload)

    check()
    for question in HOSTILE:  # each fixed case once more, alone and well-formed
        response = served.post(
            "/retrieve/invoke",
            content=json.dumps({"input": {"question": question}}),
            headers={"Content-Type": "application/json"},
        )
        _assert_clean(response, question)
        statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
        if question.strip("\x00 \t\n") and len(question) <= 8_000:
            assert response.status_code == 200, (question[:80], response.text[:300])
    # Raw bytes that are not UTF-8 or not JSON at all.
    for body in (b'{"input": {"question": "\xff\xfe"}}', b"\x00\x01", b"{", b"[]"):
        response = served.post(
            "/retrieve/invoke",
            content=body,
            headers={"Content-Type": "application/json"},
        )
        _assert_clean(response, body)
    assert statuses.get(200, 0) > 0 and sum(statuses.values()) >= 250
    record_figure("query_fuzz_requests", sum(statuses.values()), statuses=statuses)


# --- ingestion ----------------------------------------------------------------------

GOOD = "---\ntitle: Good\nprincipals: [ops]\n---\n# Good\n\nA fine paragraph.\n"
TEMPLATES = [
    GOOD,
    "---\ntitle: Entities\nentities:\n  - name: Ledger\n    aliases: [Books]\n"
    "relations:\n  - {source: Ledger, target: Payments}\n---\n# H\n\nLedger text.\n",
    "# Title\n\n## Section\n\nSome text with `code` and [a link](x).\n\n| a | b |\n",
    "<html><head><title>T</title></head><body><p>para</p><script>x</script>",
]
BAD_META = [
    "title: [oops",
    "entities: 5",
    "entities:\n  - {aliases: 3}",
    "relations: [{source: A}]",
    "principals: {a: 1}",
    "updated_at: not-a-date",
    "tenant: [x]",
    "title_entity: maybe",
    ": : :",
    "\x00",
]


@st.composite
def source_files(draw: st.DrawFn) -> tuple[str, bytes]:
    kind = draw(
        st.sampled_from(
            ["truncated", "binary", "long_line", "front", "jsonl", "sidecar", "text"]
        )
    )
    if kind == "truncated":
        text = draw(st.sampled_from(TEMPLATES))
        cut = draw(st.integers(0, len(text)))
        return draw(st.sampled_from(["t.md", "t.html", "t.txt"])), text[:cut].encode()
    if kind == "binary":
        return draw(st.sampled_from(["b.md", "b.txt", "b.jsonl", "b.html"])), draw(
            st.binary(min_size=1, max_size=400)
        )
    if kind == "long_line":
        size = draw(st.integers(1_000, 60_000))
        word = draw(st.sampled_from(["a", "ledger ", "x-y_z.", "🙂"]))
        return "long.md", ("# Long\n\n" + word * (size // len(word))).encode()
    if kind == "front":
        meta = draw(st.sampled_from(BAD_META))
        return "front.md", f"---\n{meta}\n---\n# Body\n\ntext\n".encode()
    if kind == "jsonl":
        records = draw(
            st.lists(
                st.fixed_dictionaries(
                    {"_id": st.text(max_size=8), "text": st.text(max_size=40)},
                    optional={
                        "title": st.integers() | st.text(max_size=8),
                        "metadata": st.just("x")
                        | st.dictionaries(st.text(max_size=4), st.integers()),
                    },
                )
                | st.just("{broken")
                | st.just("[1, 2]"),
                max_size=5,
            )
        )
        lines = [r if isinstance(r, str) else json.dumps(r) for r in records]
        return "r.jsonl", "\n".join(lines).encode()
    if kind == "sidecar":
        meta = draw(st.sampled_from(BAD_META + ["{bad json", '{"entities": "x"}']))
        return "s.md.meta.yaml", meta.encode()
    return "plain.txt", draw(st.text(max_size=300)).encode("utf-8", "surrogatepass")


def _stored_documents_are_whole(ingestor: Ingestor) -> int:
    with ingestor.store.connection() as conn:
        orphans = conn.execute(
            "SELECT count(*) FROM documents d WHERE NOT EXISTS"
            " (SELECT 1 FROM chunks c WHERE c.document_id = d.id)"
        ).fetchone()[0]
        outside = conn.execute(
            "SELECT count(*) FROM chunks c JOIN documents d ON d.id = c.document_id"
            " WHERE c.char_start < 0 OR c.char_end > length(d.content)"
            " OR c.char_start > c.char_end"
        ).fetchone()[0]
        documents = conn.execute("SELECT count(*) FROM documents").fetchone()[0]
    assert orphans == 0 and outside == 0
    assert_stats_consistent(ingestor.store)
    return int(documents)


def test_fuzzed_files_fail_per_file_and_nothing_is_half_written(
    ingestor: Ingestor, tmp_path_factory: pytest.TempPathFactory
) -> None:
    tried = 0

    @property_settings(80)
    @given(files=st.lists(source_files(), min_size=1, max_size=4))
    def check(files: list[tuple[str, bytes]]) -> None:
        nonlocal tried
        root = tmp_path_factory.mktemp("fuzz")
        (root / "good.md").write_text(GOOD)
        (root / "s.md").write_text("# Sidecar target\n\ntext for the sidecar\n")
        for i, (name, data) in enumerate(files):
            (root / f"{i}-{name}").write_bytes(data)
            if name.endswith(".meta.yaml"):  # a sidecar belongs to s.md
                (root / "s.md.meta.yaml").write_bytes(data)
        with ingestor.store.connection() as conn:
            conn.execute(
                "TRUNCATE documents, chunks, chunk_terms, term_stats, corpus_stats,"
                " entities, mentions, relations CASCADE"
            )
        summary = ingestor.ingest_paths([root])
        tried += len(files)
        for path, reason in summary.failures:
            assert str(root) in path or path.startswith(root.name), path
            assert reason and "Traceback" not in reason, reason
        stored = _stored_documents_are_whole(ingestor)
        assert stored == summary.documents
        with ingestor.store.connection() as conn:
            good = conn.execute(
                "SELECT count(*) FROM documents WHERE title = 'Good'"
            ).fetchone()[0]
        assert good >= 1, summary.failures

    check()
    record_figure("ingest_fuzz_files", tried)
