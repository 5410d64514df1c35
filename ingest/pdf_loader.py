"""PDF text extraction with page boundaries and headings (pypdfium2's text layer).

Why pypdfium2 and not pypdf (measured on the 15 PDFs in ``shared/data/documents/pdf``,
see README "PDF and DOCX"): PDFium extracted the 117-page book in 0.96 s against
pypdf's 13.5 s (14x) and every small file 3-30x faster; it joins hyphenated line
ends (it marks the hyphen U+FFFE and drops the break, so ``adip-`` / ``iscing``
becomes ``adipiscing``), resolves ligatures (``fi`` instead of U+FB01), and gives
character boxes, font sizes and outline destinations with a position, which the
headings below need. Both follow the content stream for reading order, which on
``multicolumn.pdf`` (pdfTeX, two columns) is the left column, then the right one.

The output is markdown-like text: a ``# title`` root line, then each page's text
with a blank line between pages, and ``##``.. heading lines where the outline
(bookmarks) points. With no outline, lines set in a clearly larger font than the
body become headings. Page starts are returned as ``(char_offset, page_number)``
so every chunk can carry the pages it spans.
"""

from __future__ import annotations

import re
import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from retrieval_pipeline.errors import IngestError

_LINE_BREAK = re.compile(r"\r\n|\r|\n")
# Control characters PDFium emits for generated or unmappable glyphs; NUL cannot be
# stored in PostgreSQL text at all.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ufffe\uffff]")
_MAX_HEADING_LEVEL = 6  # the chunker reads markdown headings up to ######
HEADING_FONT_RATIO = 1.15
"""A line is a heading (no outline) when its font is this much larger than the
body's: pdfTeX's \\subsection is 1.2x the body, \\section 1.44x."""
_MAX_FONT_HEADING_CHARS = 120  # longer "large" lines are display text, not headings
_FONT_HEADING_LEVELS = 3  # distinct larger sizes kept as levels (##, ###, ####)
_PARAGRAPH_GAP = 1.4  # a step this many usual line steps down starts a paragraph


@dataclass(frozen=True)
class ExtractedText:
    """Text of a binary document, ready for the chunker."""

    content: str
    title: str
    pages: tuple[tuple[int, int], ...] = ()  # (char offset, 1-based page) starts
    warnings: tuple[str, ...] = ()
    page_count: int = 0
    heading_source: str = ""  # outline | font-size | none | styles


@dataclass
class _Line:
    text: str
    top: float | None = None  # of its first character; PDF space, y grows upwards
    last_top: float | None = None  # of its last (PDFium joins hyphenated lines)
    height: float = 0.0
    size: float = 0.0
    headings: list[tuple[int, str, bool]] = field(default_factory=list)
    """(level, title, replace): replace marks this line itself as the heading."""


def read_pdf(path: Path, title: str = "") -> ExtractedText:
    """Extract ``path``'s text layer; raise :class:`IngestError` with the reason.

    Args:
        path: the PDF file.
        title: the title to use as the root heading; empty takes the PDF's own
            metadata title, else the file name.
    """
    import pypdfium2 as pdfium

    try:
        document = pdfium.PdfDocument(str(path))
    except pdfium.PdfiumError as exc:
        raise IngestError(str(path), _open_error(str(exc))) from exc
    try:
        return _extract(path, document, title)
    except IngestError:
        raise
    except Exception as exc:  # noqa: BLE001 - one odd file must not stop the run
        raise IngestError(
            str(path),
            f"PDF text extraction failed ({type(exc).__name__}: {exc}); repair or "
            "re-export the file and ingest again",
        ) from exc
    finally:
        document.close()


def _open_error(message: str) -> str:
    if "password" in message.lower():
        return (
            "the PDF is encrypted (it needs a password to open); decrypt it first, "
            "e.g. `qpdf --decrypt --password=... in.pdf out.pdf`, and ingest the "
            "decrypted copy"
        )
    return (
        f"cannot open the PDF ({message}); the file is damaged or not a PDF. "
        "Repair it (e.g. `qpdf in.pdf out.pdf` or re-export it) and ingest again"
    )


def _extract(path: Path, document: object, title: str) -> ExtractedText:
    import pypdfium2 as pdfium
    import pypdfium2.raw as pdfium_c

    assert isinstance(document, pdfium.PdfDocument)
    page_count = len(document)
    if page_count == 0:
        raise IngestError(str(path), "the PDF has no pages")
    pages: list[list[_Line]] = []
    image_only: list[int] = []
    for index in range(page_count):
        try:
            page = document[index]
        except pdfium.PdfiumError as exc:
            raise IngestError(
                str(path), f"page {index + 1} cannot be read ({exc}); repair the file"
            ) from exc
        try:
            lines = _page_lines(page, pdfium_c)
            if not any(line.text.strip() for line in lines):
                images = page.get_objects(filter=[pdfium_c.FPDF_PAGEOBJ_IMAGE])
                if next(iter(images), None) is not None:
                    image_only.append(index + 1)
        finally:
            page.close()
        pages.append(lines)
    if not any(line.text.strip() for lines in pages for line in lines):
        what = (
            "it holds only images (a scan)"
            if image_only
            else "it contains no extractable text"
        )
        raise IngestError(
            str(path),
            f"no text layer on any of its {page_count} page(s): {what}. OCR is not "
            "enabled; run OCR first (e.g. `ocrmypdf in.pdf out.pdf`) and ingest the "
            "result",
        )
    warnings = []
    if image_only:
        listed = ", ".join(str(n) for n in image_only[:20])
        more = f" and {len(image_only) - 20} more" if len(image_only) > 20 else ""
        warnings.append(
            f"page(s) {listed}{more} have no text layer (images only); OCR is not "
            "enabled, so their content is not indexed"
        )
    _drop_page_furniture(pages)
    source = "outline" if _mark_outline(document, pages) else ""
    if not source:
        source = "font-size" if _mark_font_headings(pages) else "none"
    root = title.strip() or _metadata_title(document) or path.stem
    content, starts = _render(root, pages)
    return ExtractedText(
        content=content,
        title=root,
        pages=starts,
        warnings=tuple(warnings),
        page_count=page_count,
        heading_source=source,
    )


def _page_lines(page: object, pdfium_c: object) -> list[_Line]:
    """The page's text lines with the top, height and font size of each."""
    textpage = page.get_textpage()  # type: ignore[attr-defined]
    try:
        raw: str = textpage.get_text_range()
        # PDFium's text index counts UTF-16 units; boxes are looked up only when the
        # extracted string lines up with them one to one.
        aligned = textpage.count_chars() == len(raw)
        lines = []
        position = 0
        for match in [*_LINE_BREAK.finditer(raw), None]:
            end = match.start() if match else len(raw)
            segment = raw[position:end]
            line = _Line(_CONTROL.sub("", segment).rstrip())
            first = len(segment) - len(segment.lstrip())
            if aligned and line.text.strip() and position + first < len(raw):
                index = position + first
                _left, bottom, _right, top = textpage.get_charbox(index)
                line.top, line.height = top, max(top - bottom, 0.0)
                last = position + len(segment.rstrip()) - 1
                line.last_top = textpage.get_charbox(last)[3] if last > index else top
                line.size = float(
                    pdfium_c.FPDFText_GetFontSize(  # type: ignore[attr-defined]
                        textpage.raw, index
                    )
                )
            lines.append(line)
            position = match.end() if match else len(raw)
        return lines
    finally:
        textpage.close()


def _drop_page_furniture(pages: list[list[_Line]]) -> None:
    """Blank page numbers and running heads/feet: they are layout, not content.

    Only a page's first and last text lines are candidates: one that is just a
    number (``12``, ``xii``), or one whose wording (digits aside) opens or closes
    at least three pages and a fifth of them. Left in, each becomes a one-token
    chunk or glues the wrong words to a passage.
    """
    edges: list[tuple[int, int]] = []
    for page, lines in enumerate(pages):
        texts = [i for i, line in enumerate(lines) if line.text.strip()]
        edges.extend((page, i) for i in {*texts[:1], *texts[-1:]})
    keys = Counter(_furniture_key(pages[p][i].text) for p, i in edges)
    needed = max(3, len(pages) // 5)
    for page, index in edges:
        line = pages[page][index]
        text = line.text.strip()
        key = _furniture_key(text)
        if _PAGE_NUMBER.fullmatch(text) or (key and keys[key] >= needed):
            line.text = ""


_PAGE_NUMBER = re.compile(r"(?:page\s+)?(?:\d{1,4}|[ivxlcdm]{1,7})", re.IGNORECASE)


def _furniture_key(text: str) -> str:
    return " ".join(re.sub(r"\d+", "#", text).split()).casefold()


def _metadata_title(document: object) -> str:
    try:
        value = document.get_metadata_value("Title")  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - broken metadata must not fail the file
        return ""
    text = _CONTROL.sub("", str(value or "")).strip()
    return " ".join(text.split())


def _normal(text: str) -> str:
    return " ".join(text.split()).casefold()


def _mark_outline(document: object, pages: list[list[_Line]]) -> bool:
    """Place each bookmark as a heading on its target page; False without outline.

    A bookmark's destination gives a page and usually a position (XYZ ``top``): the
    heading goes on the first line at or below that position. When that line (or
    one of the next two) reads as the bookmark's title, that line becomes the
    heading and keeps its own wording (``1.2 Metrische Räume``); otherwise a heading
    line with the bookmark's title is inserted there (outline titles that do not
    match the text). Without a position, the title is searched on the page, and
    failing that the heading goes at the top of the page.
    """
    try:
        items = list(document.get_toc())  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - a broken outline leaves the text usable
        return False
    placed = False
    for item in items:
        try:
            title = " ".join(_CONTROL.sub("", item.get_title() or "").split())
            dest = item.get_dest()
            page_index = dest.get_index() if dest is not None else None
        except Exception:  # noqa: BLE001 - one broken bookmark is skipped, not fatal
            continue
        if not title or page_index is None or not 0 <= page_index < len(pages):
            continue
        level = min(item.level + 2, _MAX_HEADING_LEVEL)
        lines = pages[page_index]
        at = _line_at(lines, dest)
        wanted = _normal(title)
        match = None
        window = range(at, min(at + 3, len(lines))) if at is not None else range(0)
        if at is None:
            window = range(len(lines))
        for index in window:
            text = _normal(lines[index].text)
            if (
                text
                and wanted in text
                and len(text) <= len(wanted) + 16
                and not any(h[2] for h in lines[index].headings)
            ):
                match = index
                break
        if match is not None:
            lines[match].headings.append((level, title, True))
        else:
            target = at if at is not None else 0
            if not lines:
                lines.append(_Line(""))
            lines[min(target, len(lines) - 1)].headings.append((level, title, False))
        placed = True
    return placed


def _line_at(lines: list[_Line], dest: object) -> int | None:
    """The first text line at or below the destination's ``top`` (XYZ views)."""
    try:
        mode, view = dest.get_view()  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - an odd destination: fall back to the title
        return None
    if mode != 1 or len(view) < 2 or not view[1]:  # 1 = PDFDEST_VIEW_XYZ
        return None
    top = float(view[1])
    for index, line in enumerate(lines):
        if line.top is not None and line.top <= top + 1.0 and line.text.strip():
            return index
    return None


def _mark_font_headings(pages: list[list[_Line]]) -> bool:
    """Lines in a clearly larger font than the body become headings (no outline)."""
    weights: Counter[float] = Counter()
    for lines in pages:
        for line in lines:
            if line.size > 0:
                weights[round(line.size, 1)] += len(line.text)
    if not weights:
        return False
    body = weights.most_common(1)[0][0]
    sizes = sorted(
        {
            round(line.size, 1)
            for lines in pages
            for line in lines
            if line.size >= body * HEADING_FONT_RATIO
            and 0 < len(line.text.strip()) <= _MAX_FONT_HEADING_CHARS
            and re.search(r"[^\W\d_]", line.text)
        },
        reverse=True,
    )[:_FONT_HEADING_LEVELS]
    if not sizes:
        return False
    levels = {size: 2 + rank for rank, size in enumerate(sizes)}
    marked = False
    for lines in pages:
        previous: _Line | None = None
        for line in lines:
            level = levels.get(round(line.size, 1))
            text = " ".join(line.text.split())
            if level is None or not text or len(text) > _MAX_FONT_HEADING_CHARS:
                previous = None
                continue
            if previous is not None and previous.headings:
                # A heading wrapped over two lines: one heading, not two.
                old_level, old_title, _ = previous.headings[-1]
                if old_level == level:
                    previous.headings[-1] = (level, f"{old_title} {text}", True)
                    line.headings.append((level, "", True))
                    continue
            line.headings.append((level, text, True))
            previous = line
            marked = True
    return marked


def _line_spacing(lines: list[_Line]) -> float:
    """The page's usual distance from one line's top to the next (0: unknown)."""
    known = [line for line in lines if line.top is not None and line.text.strip()]
    steps = [
        float(a.last_top or 0.0) - float(b.top or 0.0)
        for a, b in zip(known, known[1:], strict=False)
    ]
    steps = [step for step in steps if step > 0.5]
    return statistics.median(steps) if steps else 0.0


def _render(
    title: str, pages: list[list[_Line]]
) -> tuple[str, tuple[tuple[int, int], ...]]:
    """Markdown-like text and the offset where each page starts."""
    parts: list[str] = [f"# {' '.join(title.split())}\n\n"]
    offset = len(parts[0])
    starts: list[tuple[int, int]] = []
    for number, lines in enumerate(pages, start=1):
        starts.append((0 if number == 1 else offset, number))
        out: list[str] = []
        spacing = _line_spacing(lines)
        previous_top: float | None = None
        for line in lines:
            text = line.text
            for level, heading, replace in line.headings:
                if replace and not heading:
                    text = ""  # second line of a wrapped heading, already merged
                    continue
                if out and out[-1] != "":
                    out.append("")
                out.append("#" * level + " " + heading)
                out.append("")
                if replace:
                    text = ""
            if not text.strip():
                previous_top = line.last_top if text else previous_top
                continue
            if (
                previous_top is not None
                and line.top is not None
                and spacing > 0
                and not -0.5 * spacing
                <= previous_top - line.top
                <= _PARAGRAPH_GAP * spacing
                and out
                and out[-1] != ""
            ):
                out.append("")  # a paragraph gap (or a jump to the next column)
            previous_top = line.last_top
            # A line that reads as markdown would change the structure: a leading
            # space keeps "# define" a line of text, not a heading.
            if re.match(r"[ \t]{0,3}(#|```|~~~)", text):
                text = "    " + text.lstrip() if text.lstrip() else text
            out.append(text)
        body = "\n".join(out).strip("\n")
        if not body:
            continue
        chunk = body + "\n\n"
        parts.append(chunk)
        offset += len(chunk)
    return "".join(parts).rstrip("\n") + "\n", tuple(starts)
