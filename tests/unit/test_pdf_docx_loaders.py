"""PDF (real files from shared/data/documents/pdf) and DOCX (generated) loading."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import docx
import pypdfium2 as pdfium
import pytest
from conftest import SHARED_DATA

from retrieval_pipeline.errors import IngestError
from retrieval_pipeline.ingest.chunker import Chunk
from retrieval_pipeline.ingest.job import chunk_document
from retrieval_pipeline.ingest.loaders import (
    LoadDefaults,
    SourceDocument,
    discover,
    load_file,
    page_span,
)
from retrieval_pipeline.retriever import citation_label, format_evidence
from retrieval_pipeline.tools.store.records import page_label
from retrieval_pipeline.tools.tokens import default_token_counter

PDFS = SHARED_DATA / "documents" / "pdf"
needs_pdfs = pytest.mark.skipif(
    not PDFS.is_dir(), reason=f"the shared PDF fixtures are not at {PDFS}"
)


def load(path: Path) -> SourceDocument:
    (doc,) = load_file(path, LoadDefaults(root=path.parent))
    return doc


@functools.cache
def shared(name: str) -> SourceDocument:
    """A shared PDF, loaded once per session (the book takes about a second)."""
    return load(PDFS / name)


def chunks(doc: SourceDocument) -> list[Chunk]:
    return chunk_document(doc, default_token_counter())


def flat(text: str) -> str:
    return " ".join(text.split())


def page_texts(path: Path) -> list[str]:
    document = pdfium.PdfDocument(str(path))
    try:
        return [
            flat(document[i].get_textpage().get_text_range().replace("\ufffe", ""))
            for i in range(len(document))
        ]
    finally:
        document.close()


def body_lines(body: str) -> list[str]:
    return [
        line.strip()
        for line in body.split("\n")
        if line.strip() and not line.startswith("#")
    ]


@needs_pdfs
class TestPdfPages:
    def test_every_page_starts_where_its_text_is(self) -> None:
        path = PDFS / "pdflatex-4-pages.pdf"
        doc = load(path)
        assert [number for _, number in doc.pages] == [1, 2, 3, 4]
        texts = page_texts(path)
        for (start, number), end in zip(
            doc.pages, [s for s, _ in doc.pages[1:]] + [len(doc.content)], strict=True
        ):
            lines = body_lines(doc.content[start:end])
            assert flat(lines[0])[:40] in texts[number - 1]
            assert flat(lines[-1])[-40:] in texts[number - 1]

    @pytest.mark.parametrize(
        "name", ["pdflatex-4-pages.pdf", "GeoTopo-komprimiert.pdf"]
    )
    def test_every_chunk_spans_the_pages_its_text_is_on(self, name: str) -> None:
        path = PDFS / name
        doc = shared(name)
        texts = page_texts(path)
        found = chunks(doc)
        assert len(found) > 1
        spans = [page_span(doc.pages, c.char_start, c.char_end) for c in found]
        if name.startswith("GeoTopo"):  # chunks that cross a page break
            assert sum(first != last for first, last in spans) > 10
        for chunk, (first, last) in zip(found, spans, strict=True):
            assert first is not None and last is not None and 1 <= first <= last
            lines = body_lines(chunk.body)
            assert flat(lines[0])[:30] in texts[first - 1]
            assert flat(lines[-1])[-30:] in texts[last - 1]

    def test_page_numbers_and_running_heads_are_not_text(self) -> None:
        doc = shared("pdflatex-4-pages.pdf")
        assert not [line for line in doc.content.split("\n") if line.strip() == "1"]
        assert min(c.token_count for c in chunks(doc)) > 20

    def test_page_span_maps_offsets_to_pages(self) -> None:
        pages = ((0, 1), (100, 2), (250, 3))
        assert page_span(pages, 0, 50) == (1, 1)
        assert page_span(pages, 90, 100) == (1, 1)  # the end is exclusive
        assert page_span(pages, 90, 101) == (1, 2)
        assert page_span(pages, 120, 400) == (2, 3)
        assert page_span((), 0, 10) == (None, None)


@needs_pdfs
class TestPdfHeadings:
    def test_outline_gives_the_heading_path_on_the_bookmarked_page(self) -> None:
        doc = shared("GeoTopo-komprimiert.pdf")
        assert doc.title == "Geometrie und Topologie"  # the PDF's metadata title
        found = chunks(doc)
        metric = [c for c in found if c.heading_path[-1:] == ("1.2 Metrische Räume",)]
        assert metric
        assert metric[0].heading_path == (
            "Geometrie und Topologie",
            "1 Topologische Grundbegriffe",
            "1.2 Metrische Räume",
        )
        # The bookmark targets page 10 (index 9); the section's first chunk is there.
        assert page_span(doc.pages, metric[0].char_start, metric[0].char_end)[0] == 10

    def test_mistitled_outline_entries_are_placed_by_their_destination(self) -> None:
        doc = load(PDFS / "mistitled_outlines_example.pdf")
        headings = [line for line in doc.content.split("\n") if line.startswith("#")]
        assert "## First" in headings and "### Second" in headings
        assert len(headings) == 1 + 27  # the root plus every bookmark

    def test_without_an_outline_larger_fonts_become_headings(self) -> None:
        doc = shared("multicolumn.pdf")
        assert "## Two-Column Document with Lorem Ipsum" in doc.content.split("\n")
        paths = {c.heading_path for c in chunks(doc)}
        assert ("multicolumn", "Two-Column Document with Lorem Ipsum") in {
            p[:2] for p in paths
        }

    def test_a_plain_page_has_the_document_title_as_its_path(self) -> None:
        doc = load(PDFS / "pdflatex-4-pages.pdf")
        assert {c.heading_path for c in chunks(doc)} == {("pdflatex-4-pages",)}


@needs_pdfs
class TestPdfReadingOrder:
    def test_two_columns_read_column_by_column(self) -> None:
        text = flat(shared("multicolumn.pdf").content)
        # The left column ends mid-sentence and the right column continues it; a
        # reader going across both columns line by line would break both sentences.
        assert "Donec nonummy pellentesque ante." in text
        assert "Curabitur dictum gravida mauris. Nam arcu libero" in text

    def test_hyphenated_line_ends_are_joined(self) -> None:
        text = shared("multicolumn.pdf").content
        assert "adipiscing elit" in text and "\ufffe" not in text


@needs_pdfs
class TestPdfFailures:
    def test_an_encrypted_pdf_is_a_clear_error(self) -> None:
        with pytest.raises(IngestError, match="encrypted"):
            load(PDFS / "libreoffice-writer-password.pdf")

    def test_an_image_only_pdf_is_an_error_that_names_ocr(self) -> None:
        with pytest.raises(IngestError, match="no text layer.*OCR is not enabled"):
            load(PDFS / "grayscale-image.pdf")

    def test_an_image_only_page_is_a_warning_and_the_rest_is_kept(
        self, tmp_path: Path
    ) -> None:
        merged = pdfium.PdfDocument.new()
        for name in ("minimal-document.pdf", "grayscale-image.pdf"):
            source = pdfium.PdfDocument(str(PDFS / name))
            merged.import_pages(source)
        path = tmp_path / "mixed.pdf"
        merged.save(str(path))
        doc = load(path)
        assert doc.warnings and "page(s) 2 have no text layer" in doc.warnings[0]
        assert "OCR is not enabled" in doc.warnings[0]
        assert [n for _, n in doc.pages] == [1, 2]
        assert all(
            page_span(doc.pages, c.char_start, c.char_end) == (1, 1)
            for c in chunks(doc)
        )

    def test_a_damaged_pdf_is_a_clear_error(self) -> None:
        # Its page tree and metadata objects are zeroed out; neither PDFium nor pypdf
        # can open it, so it is reported, not skipped and not a crash.
        with pytest.raises(IngestError, match="damaged"):
            load(PDFS / "unreadablemetadata.pdf")

    def test_a_file_that_is_not_a_pdf_is_a_clear_error(self, tmp_path: Path) -> None:
        path = tmp_path / "notes.pdf"
        path.write_text("just text with a .pdf name")
        with pytest.raises(IngestError, match="damaged or not a PDF"):
            load(path)

    @pytest.mark.parametrize("name", ["habibi.pdf", "habibi-rotated.pdf"])
    def test_arabic_and_rotated_pages_are_read(self, name: str) -> None:
        doc = load(PDFS / name)
        assert "habibi" in doc.content and "\u062d" in doc.content  # Arabic letter
        assert len(doc.pages) == (4 if "rotated" in name else 1)

    def test_every_other_shared_pdf_loads(self) -> None:
        failing = {
            "libreoffice-writer-password.pdf",
            "grayscale-image.pdf",
            "unreadablemetadata.pdf",
        }
        for path in sorted(PDFS.glob("*.pdf")):
            if path.name not in failing:
                doc = load(path)
                assert doc.kind == "pdf" and chunks(doc), path.name


class TestDocx:
    def make(self, path: Path, build: object) -> Path:
        document = docx.Document()
        build(document)  # type: ignore[operator]
        document.save(str(path))
        return path

    def test_heading_styles_become_the_heading_path(self, tmp_path: Path) -> None:
        def build(d: docx.document.Document) -> None:
            d.add_heading("Operations Guide", level=0)  # the Title style
            d.add_paragraph("Intro text.")
            d.add_heading("Backups", level=1)
            d.add_paragraph("Backups run nightly.")
            d.add_heading("Restore", level=2)
            d.add_paragraph("Restore with the restore command.")

        doc = load(self.make(tmp_path / "guide.docx", build))
        assert doc.title == "Operations Guide" and doc.pages == ()
        by_text = {c.body.strip(): c.heading_path for c in chunks(doc)}
        assert by_text["Restore with the restore command."] == (
            "Operations Guide",
            "Backups",
            "Restore",
        )

    def test_tables_are_rows_with_separators_and_header_kept_whole(
        self, tmp_path: Path
    ) -> None:
        def build(d: docx.document.Document) -> None:
            d.add_heading("Error codes", level=1)
            table = d.add_table(rows=3, cols=2)
            for row, (code, name) in zip(
                table.rows,
                [("Code", "Name"), ("40P01", "deadlock_detected"), ("42P01", "x|y")],
                strict=True,
            ):
                row.cells[0].text, row.cells[1].text = code, name

        doc = load(self.make(tmp_path / "codes.docx", build))
        (chunk,) = chunks(doc)
        assert chunk.body.split("\n") == [
            "| Code | Name |",
            "| --- | --- |",
            "| 40P01 | deadlock_detected |",
            "| 42P01 | x\\|y |",
        ]
        assert chunk.heading_path == ("codes", "Error codes")

    def test_a_list_stays_one_block(self, tmp_path: Path) -> None:
        def build(d: docx.document.Document) -> None:
            d.add_paragraph("Steps:")
            for step in ("Stop the service", "Copy the data", "Start it again"):
                d.add_paragraph(step, style="List Number")
            d.add_paragraph("Done.")

        doc = load(self.make(tmp_path / "steps.docx", build))
        assert "1. Stop the service\n1. Copy the data\n1. Start it again" in doc.content
        assert any(
            "Copy the data" in c.body and "Start it" in c.body for c in chunks(doc)
        )

    def test_markdown_looking_text_stays_text(self, tmp_path: Path) -> None:
        def build(d: docx.document.Document) -> None:
            d.add_paragraph("# not a heading, a shell comment")

        doc = load(self.make(tmp_path / "shell.docx", build))
        assert {c.heading_path for c in chunks(doc)} == {("shell",)}

    def test_a_sidecar_title_is_the_root(self, tmp_path: Path) -> None:
        def build(d: docx.document.Document) -> None:
            d.add_heading("Inner title", level=0)
            d.add_heading("Part", level=1)
            d.add_paragraph("Body.")

        path = self.make(tmp_path / "t.docx", build)
        (tmp_path / "t.docx.meta.json").write_text(json.dumps({"title": "Given"}))
        doc = load(path)
        assert doc.title == "Given"
        assert ("Given", "Part") in {c.heading_path for c in chunks(doc)}

    def test_an_empty_docx_is_a_clear_error(self, tmp_path: Path) -> None:
        path = self.make(tmp_path / "empty.docx", lambda d: None)
        with pytest.raises(IngestError, match="no text"):
            load(path)

    def test_a_broken_docx_is_a_clear_error(self, tmp_path: Path) -> None:
        path = tmp_path / "broken.docx"
        path.write_bytes(b"PK\x03\x04 not really a zip")
        with pytest.raises(IngestError, match="not a readable DOCX"):
            load(path)


class TestDiscoveryAndCitations:
    def test_pdf_and_docx_files_are_discovered(self, tmp_path: Path) -> None:
        for name in ("a.pdf", "b.docx", "c.doc", "d.md"):
            (tmp_path / name).write_bytes(b"x")
        assert [p.name for p in discover([tmp_path])] == ["a.pdf", "b.docx", "d.md"]

    def test_page_labels(self) -> None:
        assert page_label(14, 14) == "p. 14"
        assert page_label(14, 15) == "pp. 14\u201315"
        assert page_label(None, None) == ""

    def test_citations_and_evidence_carry_pages(self) -> None:
        chunk = {
            "chunk_id": "c_1",
            "document_id": "manuals/octave.pdf",
            "title": "Octave",
            "text": "plot(x)",
            "source_uri": "file:///srv/manuals/octave.pdf",
            "page_start": 14,
            "page_end": 15,
        }
        assert citation_label(chunk) == "octave.pdf pp. 14\u201315"
        text, _ = format_evidence([chunk])
        assert "source: file:///srv/manuals/octave.pdf pp. 14\u201315" in text
        plain = {**chunk, "page_start": None, "page_end": None}
        assert citation_label(plain) == "octave.pdf"
