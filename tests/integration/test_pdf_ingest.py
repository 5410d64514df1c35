"""PDF and DOCX through ingest, the store, retrieval, the agent and the CLI."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import docx
import pypdfium2 as pdfium
import pytest
from conftest import SHARED_DATA

from retrieval_pipeline.cli import main
from retrieval_pipeline.graph.agent import build_agent
from retrieval_pipeline.graph.builder import build_pipeline
from retrieval_pipeline.graph.resources import PipelineResources
from retrieval_pipeline.ingest.job import Ingestor
from retrieval_pipeline.tools.retrieve import Retriever
from retrieval_pipeline.tools.store import Store

PDFS = SHARED_DATA / "documents" / "pdf"
pytestmark = pytest.mark.skipif(
    not PDFS.is_dir(), reason=f"the shared PDF fixtures are not at {PDFS}"
)
GOOD = ("pdflatex-outline.pdf",)
BAD = ("libreoffice-writer-password.pdf", "grayscale-image.pdf")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("docs")
    for name in GOOD + BAD:
        shutil.copy(PDFS / name, root / name)
    mixed = pdfium.PdfDocument.new()
    for name in ("minimal-document.pdf", "grayscale-image.pdf"):
        mixed.import_pages(pdfium.PdfDocument(str(PDFS / name)))
    mixed.save(str(root / "mixed.pdf"))
    guide = docx.Document()
    guide.add_heading("Runbook", level=0)
    guide.add_heading("Restarting the quokka service", level=1)
    guide.add_paragraph("Run quokkactl restart and wait for the health check.")
    guide.save(str(root / "runbook.docx"))
    return root


@pytest.fixture(scope="module")
def ingested(session_store: Store, embedder: Any, corpus: Path) -> dict[str, Any]:
    """One ingest for the whole module (embedding is the slow part)."""
    with session_store.connection() as conn:
        conn.execute(
            "TRUNCATE documents, chunks, chunk_terms, term_stats, corpus_stats,"
            " entities, mentions, relations CASCADE"
        )
    return Ingestor(session_store, embedder).ingest_paths([corpus]).to_dict()


@pytest.fixture(scope="module")
def retriever(session_store: Store, embedder: Any) -> Retriever:
    return Retriever(session_store, embedder)


def test_bad_files_fail_with_their_reason_and_the_rest_is_ingested(
    ingested: dict[str, Any],
) -> None:
    assert ingested["documents"] == len(GOOD) + 2  # + mixed.pdf and runbook.docx
    reasons = {Path(f["path"]).name: f["reason"] for f in ingested["failures"]}
    assert set(reasons) == set(BAD)
    assert "encrypted" in reasons["libreoffice-writer-password.pdf"]
    assert "OCR is not enabled" in reasons["grayscale-image.pdf"]
    (warning,) = ingested["warnings"]
    assert Path(warning["path"]).name == "mixed.pdf"
    assert "page(s) 2 have no text layer" in warning["reason"]


def test_every_pdf_chunk_has_its_pages_and_docx_chunks_have_none(
    ingested: dict[str, Any], session_store: Store
) -> None:
    with session_store.connection() as conn:
        rows = conn.execute(
            "SELECT d.path, c.page_start, c.page_end, c.heading_path"
            " FROM chunks c JOIN documents d ON d.id = c.document_id"
        ).fetchall()
    pdf = [r for r in rows if r[0].endswith(".pdf")]
    assert pdf and all(1 <= r[1] <= r[2] for r in pdf)
    assert {r[2] for r in pdf if r[0] == "pdflatex-outline.pdf"} == {1, 2, 3, 4}
    assert ["pdflatex-outline", "Foo"] in [r[3] for r in pdf]  # from the outline
    docx_rows = [r for r in rows if r[0].endswith(".docx")]
    assert docx_rows and all(r[1] is None and r[2] is None for r in docx_rows)
    assert ["Runbook", "Restarting the quokka service"] in [r[3] for r in docx_rows]


def test_retrieved_chunks_carry_pages(
    ingested: dict[str, Any], retriever: Retriever
) -> None:
    top = retriever.retrieve("Huardest gefburn Kjift blind text", limit=3)[0]
    assert top.document_id == "pdflatex-outline.pdf"
    out = top.to_dict()
    assert out["page_start"] is not None and out["page_end"] >= out["page_start"]


def test_agent_citations_name_the_file_and_page(
    ingested: dict[str, Any], retriever: Retriever
) -> None:
    agent = build_agent(
        build_pipeline(PipelineResources(retriever=retriever)),
        None,
        resolve_model=False,
    )
    out = agent.invoke({"question": "Huardest gefburn Kjift blind text", "limit": 3})
    labels = [c["label"] for c in out["citations"]]
    assert any(
        re.fullmatch(r"pdflatex-outline\.pdf pp?\. \d(\u2013\d)?", x) for x in labels
    )
    assert re.search(r"source: file://\S+\.pdf pp?\. \d", out["answer"])
    docx_out = agent.invoke({"question": "quokkactl restart", "limit": 1})
    assert docx_out["citations"][0]["label"] == "runbook.docx"


def test_query_prints_the_page(
    ingested: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    assert main(["query", "Huardest gefburn Kjift", "--limit", "2"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"pdflatex-outline\.pdf pp?\. \d", out)
