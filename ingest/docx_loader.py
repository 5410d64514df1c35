"""DOCX text extraction with python-docx: heading styles, whole tables and lists.

The output is markdown-like text the structural chunker reads: the document title
as the ``#`` root, ``Heading n`` paragraphs as ``#`` * (n + 1) lines (so the heading
path is title > Heading 1 > Heading 2 ...), list paragraphs as consecutive ``-`` /
``1.`` items (one block, kept whole), and tables row by row as ``| a | b |`` lines
with the header row first and a separator line (one block, kept whole while it
fits the chunk size). A DOCX has no pages until it is laid out, so its chunks carry
no page numbers.
"""

from __future__ import annotations

import re
import zipfile
from pathlib import Path
from typing import Any

from retrieval_pipeline.errors import IngestError
from retrieval_pipeline.ingest.pdf_loader import ExtractedText

_HEADING_STYLE = re.compile(r"heading\s*(\d)$", re.IGNORECASE)
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_MAX_HEADING_LEVEL = 6


def _root_title(
    document: Any, blocks: list[Any], title: str, path: Path
) -> tuple[str, bool]:
    """The root heading, and whether it is the document's first Title paragraph.

    When it is, that paragraph is the root heading; otherwise a root line is written
    and Title paragraphs are ordinary text.
    """
    first_title = next(
        (
            _clean(b.text)
            for b in blocks
            if not hasattr(b, "rows")
            and _style_name(b).lower() == "title"
            and _clean(b.text)
        ),
        "",
    )
    core_title = _clean(document.core_properties.title or "")
    root = title.strip() or first_title or core_title or path.stem
    return root, bool(first_title) and root == first_title


def read_docx(path: Path, title: str = "") -> ExtractedText:
    """Extract ``path``'s text; raise :class:`IngestError` with the reason.

    Args:
        path: the DOCX file.
        title: the root heading; empty takes the first ``Title`` paragraph, then
            the core properties' title, then the file name.
    """
    import docx
    from docx.opc.exceptions import PackageNotFoundError

    try:
        document = docx.Document(str(path))
    except (PackageNotFoundError, zipfile.BadZipFile, KeyError, ValueError) as exc:
        raise IngestError(
            str(path),
            f"not a readable DOCX file ({type(exc).__name__}: {exc}); save it as "
            "Word .docx (not .doc) and ingest again",
        ) from exc
    blocks = list(document.iter_inner_content())
    root, titled = _root_title(document, blocks, title, path)
    body: list[str] = [] if titled else [f"# {root}", ""]
    skip = 0 if titled else 2
    in_list = False
    for block in blocks:
        if hasattr(block, "rows"):
            rows = _table_lines(block)
            if rows:
                _gap(body)
                body.extend(rows)
                body.append("")
            in_list = False
            continue
        text = _clean(block.text)
        style = _style_name(block)
        heading = _HEADING_STYLE.match(style)
        if style.lower() == "title" and text == root and titled:
            titled = False  # the first one only; later Title paragraphs are text
            _gap(body)
            body.extend([f"# {text}", ""])
            in_list = False
        elif heading and text:
            level = min(int(heading.group(1)) + 1, _MAX_HEADING_LEVEL)
            _gap(body)
            body.extend(["#" * level + " " + text, ""])
            in_list = False
        elif _is_list_item(block, style) and text:
            if not in_list:
                _gap(body)
            indent = "  " * _list_level(block)
            marker = "1." if "number" in style.lower() else "-"
            body.append(f"{indent}{marker} {text}")
            in_list = True
        elif text:
            _gap(body)
            # A paragraph that reads as markdown must stay text.
            if re.match(r"[ \t]{0,3}(#|```|~~~)", text):
                text = "    " + text
            body.extend([text, ""])
            in_list = False
    if not any(line.strip() for line in body[skip:]):
        raise IngestError(
            str(path), "the DOCX has no text (no paragraphs or tables with content)"
        )
    content = "\n".join(body).strip("\n") + "\n"
    content = re.sub(r"\n{3,}", "\n\n", content)
    return ExtractedText(content=content, title=root, heading_source="styles")


def _gap(body: list[str]) -> None:
    if body and body[-1] != "":
        body.append("")


def _clean(text: str) -> str:
    return " ".join(_CONTROL.sub("", text).split())


def _style_name(paragraph: Any) -> str:
    try:
        style = paragraph.style
    except (KeyError, ValueError):  # a style id the styles part does not define
        return ""
    return str(style.name or "") if style is not None else ""


def _numbering(paragraph: Any) -> Any:
    properties = paragraph._p.pPr
    return properties.numPr if properties is not None else None


def _is_list_item(paragraph: Any, style: str) -> bool:
    return style.lower().startswith("list") or _numbering(paragraph) is not None


def _list_level(paragraph: Any) -> int:
    numbering = _numbering(paragraph)
    if numbering is not None and numbering.ilvl is not None:
        return int(numbering.ilvl.val)
    match = re.search(r"(\d)$", _style_name(paragraph))
    return int(match.group(1)) - 1 if match else 0


def _table_lines(table: Any) -> list[str]:
    """Rows as ``| a | b |`` lines; the first row is the header (separator after)."""
    lines = []
    for row in table.rows:
        cells = [_clean(cell.text).replace("|", "\\|") for cell in row.cells]
        if not any(cells):
            continue
        lines.append("| " + " | ".join(cells) + " |")
        if len(lines) == 1:
            lines.append("| " + " | ".join("---" for _ in cells) + " |")
    return lines
