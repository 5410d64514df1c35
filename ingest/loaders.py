"""Source loaders: markdown, plain text, HTML, BEIR-format JSONL, PDF and DOCX.

Each loader returns :class:`SourceDocument` values whose ``content`` is the exact text
that chunk offsets point into. Metadata comes from front matter (markdown), access
``<meta name=...>`` tags (HTML), a sidecar file (``NAME.meta.json`` /
``NAME.meta.yaml`` beside the source), a JSONL record's ``metadata`` object, and the
caller's defaults, in increasing order of precedence:
defaults < sidecar < front matter / HTML meta / record.

Recognised metadata keys: ``id``, ``title``, ``path``, ``tenant``, ``principals`` (or
its alias ``acl``), ``public``, ``created_at``, ``updated_at``, ``entities``,
``relations``, ``title_entity``; anything else is kept in ``metadata``. See README
"Metadata and entity sidecars" for the entity format. A sidecar is read strictly
(:func:`_read_sidecar`): one per file, string ``id``/``title``/``path``/``tenant``,
and a warning for a key that looks like a misspelt known one.

Access control fails closed; every loader reads it through
:func:`~retrieval_pipeline.ingest.access.resolve_access` (the rules are in
:mod:`retrieval_pipeline.ingest.access`).
"""

from __future__ import annotations

import bisect
import dataclasses
import difflib
import functools
import json
import os
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, time
from pathlib import Path
from typing import Any

import yaml

from retrieval_pipeline.errors import IngestError
from retrieval_pipeline.ingest.access import (
    ACCESS_KEYS,
    ACL_ALIAS,
    PRINCIPALS_KEY,
    PUBLIC_KEY,
    TENANT_KEY,
    Access,
    looks_like_access_control,
    read_principals,
    resolve_access,
)
from retrieval_pipeline.ingest.html import parse_html
from retrieval_pipeline.ingest.site import markdown_links
from retrieval_pipeline.tools.store.records import LIFECYCLES, EntitySpec, RelationSpec

__all__ = [  # the access-control names are re-exported from ingest/access.py
    "ACCESS_KEYS",
    "ACL_ALIAS",
    "BINARY_SUFFIXES",
    "MAX_BINARY_BYTES",
    "MAX_FILE_BYTES",
    "PARSER_VERSION",
    "PRINCIPALS_KEY",
    "PUBLIC_KEY",
    "SIDECAR_SUFFIXES",
    "SUFFIXES",
    "TENANT_KEY",
    "TEXT_SUFFIXES",
    "Access",
    "LoadDefaults",
    "SourceDocument",
    "discover",
    "load_file",
    "looks_like_access_control",
    "page_span",
    "read_principals",
    "resolve_access",
]

PARSER_VERSION = "rp-parse/1"
TEXT_SUFFIXES = {
    ".md": "markdown",
    ".markdown": "markdown",
    ".txt": "text",
    ".html": "html",
    ".htm": "html",
    ".jsonl": "jsonl",
}
BINARY_SUFFIXES = {
    ".pdf": "pdf",  # text layer via pypdfium2 (ingest/pdf_loader.py)
    ".docx": "docx",  # python-docx (ingest/docx_loader.py)
}
"""Formats read by a parser, never as text (``_read_text`` would refuse them)."""
SUFFIXES = {**TEXT_SUFFIXES, **BINARY_SUFFIXES}
SIDECAR_SUFFIXES = (".meta.json", ".meta.yaml", ".meta.yml")
MAX_FILE_BYTES = 50 * 1024 * 1024  # larger single files are almost surely not prose
MAX_BINARY_BYTES = 200 * 1024 * 1024  # a PDF's images count too; its text is far less
# Front matter: `---` on the first line, closed by `---` or YAML's end marker `...`
# (as Jekyll and pandoc read it); it may be empty.
_FRONT_MATTER = re.compile(
    r"\A---[ \t]*\r?\n(?:(.*?)\r?\n)?(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)", re.DOTALL
)
# A `---` line, after blank lines or none, followed by a `key:` line: meant as
# front matter. Not read as such, its `principals:` would be indexed as text and the
# document stored public.
_MEANT_AS_FRONT_MATTER = re.compile(
    r"\A(?P<blank>(?:[ \t]*\r?\n)*)---[ \t]*\r?\n"
    r"[ \t]*[A-Za-z_][\w.-]*[ \t]*:(?:[ \t]|\r?\n|\Z)"
)
_SIDECAR_KEYS = (
    "id",
    "title",
    "path",
    TENANT_KEY,
    PRINCIPALS_KEY,
    ACL_ALIAS,
    PUBLIC_KEY,
    "created_at",
    "created",
    "updated_at",
    "updated",
    "entities",
    "relations",
    "title_entity",
)
"""The keys read from a sidecar; any other is kept in ``metadata`` (by design)."""
_KNOWN_KEYS = {*_SIDECAR_KEYS, "_id", "text"}
"""The keys the loaders read (a JSONL record's ``_id`` and ``text`` too); any other
is kept in ``metadata``."""
_SIDECAR_STRINGS = ("id", "title", "path", TENANT_KEY)
"""Sidecar and front matter keys whose value must be a string (null: unset)."""


@dataclass(frozen=True)
class SourceDocument:
    """A loaded source document, before chunking."""

    source_id: str
    title: str
    path: str
    source_uri: str
    content: str  # the text offsets point into
    body_start: int  # where the body starts in ``content`` (after front matter)
    kind: str  # markdown | text | html | jsonl | pdf | docx
    tenant: str = ""
    principals: tuple[str, ...] = ()
    created_at: datetime | None = None
    updated_at: datetime | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    links: tuple[str, ...] = ()
    """Link targets in the body (``href`` / markdown link), for the site's graph."""
    entities: tuple[EntitySpec, ...] = ()
    relations: tuple[RelationSpec, ...] = ()
    title_entity: bool = False
    embedding: tuple[float, ...] | None = None
    """A stored vector for ``content`` (imports): reused when the document is one
    chunk whose indexed text is exactly ``content``; otherwise it is re-embedded."""
    embedding_origin: str = ""
    """Where a reused vector came from (recorded in the embedding version)."""
    pages: tuple[tuple[int, int], ...] = ()
    """Where each page starts in ``content``: ``(char_offset, page_number)`` pairs,
    ascending (PDF); empty for formats without pages. See :func:`page_span`."""
    warnings: tuple[str, ...] = ()
    """Problems that did not stop the load (a PDF page without a text layer)."""
    id_from_path: bool = False
    """``source_id`` is the file's path under the ingest root (no ``id`` was given):
    ingest may take over the id a stored copy of the same file has."""
    path_from_root: bool = False
    """``path`` is the file's path under the ingest root (no ``path`` was given):
    ingest keeps the path a stored copy of the same file has."""


def page_span(
    pages: Sequence[tuple[int, int]], char_start: int, char_end: int
) -> tuple[int | None, int | None]:
    """The first and last page of ``content[char_start:char_end]`` (None: no pages)."""
    if not pages:
        return None, None
    offsets = [offset for offset, _ in pages]
    first = max(bisect.bisect_right(offsets, char_start) - 1, 0)
    last = max(bisect.bisect_right(offsets, max(char_end - 1, char_start)) - 1, 0)
    return pages[first][1], pages[last][1]


@dataclass(frozen=True)
class LoadDefaults:
    """Caller-supplied defaults (CLI options) applied to every loaded document."""

    tenant: str = ""
    principals: tuple[str, ...] = ()
    title_entities: bool = False
    root: Path | None = None  # relative paths and ids are computed from here


_VCS_DIRECTORIES = frozenset({".git", ".hg", ".svn", ".bzr"})
_DANGLING = "a symbolic link to nothing (its target is missing, or a link loop)"
_SPECIAL = "not a regular file (a FIFO, socket or device)"
_ORPHAN_SIDECAR = (
    "a metadata sidecar of no file (a sidecar is named after the whole file name: "
    "NAME.EXT.meta.yaml)"
)


def discover(
    paths: list[Path], skipped: list[tuple[str, str]] | None = None
) -> Iterator[Path]:
    """Yield loadable files under the given files and directories, sorted, once each.

    A file named explicitly is always yielded (its loader says why it cannot be
    read, an unsupported type included), unless it is not a regular file (a FIFO or
    a device would block or never end): that is an :class:`IngestError`. Under a
    directory, what is left out is appended to ``skipped`` as ``(path, reason)``:
    files of an unsupported type, special files, dangling links, symbolic links to
    directories (not followed), directories that cannot be read and metadata
    sidecars of no file. Other sidecars and hidden files are not documents and are
    not listed.
    """
    seen: set[Path] = set()

    def skip(where: object, reason: str) -> None:
        if skipped is not None:
            skipped.append((str(where), reason))

    for path in paths:
        if not path.exists():
            reason = _DANGLING if path.is_symlink() else "no such file or directory"
            raise IngestError(str(path), reason)
        if not _utf8_name(path):
            raise IngestError(shown_path(path), _NOT_UTF8_NAME)
        walked = path.is_dir()
        if not walked and not path.is_file():
            raise IngestError(str(path), f"{_SPECIAL}; not read")
        for candidate in _walk(path, skip) if walked else [path]:
            name = candidate.name.lower()
            if name.startswith("."):
                continue
            if name.endswith(SIDECAR_SUFFIXES):
                if walked and not _sidecar_target_exists(candidate):
                    skip(candidate, _ORPHAN_SIDECAR)
                continue
            if candidate in seen:
                continue
            if not _utf8_name(candidate):
                # Its id, path and URI could not be stored (the database holds
                # UTF-8): one such name used to stop the whole run.
                skip(shown_path(candidate), _NOT_UTF8_NAME)
                continue
            if walked and candidate.suffix.lower() not in SUFFIXES:
                skip(
                    candidate,
                    f"unsupported file type '{candidate.suffix}'"
                    if candidate.suffix
                    else "no file extension, so no known file type",
                )
                continue
            seen.add(candidate)
            yield candidate


_NOT_UTF8_NAME = (
    "its name is not valid UTF-8 (an old Latin-1 file system or archive?); rename "
    "it, e.g. with convmv -f latin1 -t utf8"
)


def _utf8_name(path: Path) -> bool:
    """Whether ``path`` is valid UTF-8 (Python holds other bytes as surrogates)."""
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def shown_path(path: Path | str) -> str:
    """``path`` as printable text, bytes that are not UTF-8 shown escaped."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def _sidecar_target_exists(sidecar: Path) -> bool:
    """Whether the file a sidecar is named after exists (``NAME.EXT.meta.json``).

    A misnamed sidecar beside a document fails that document instead.
    """
    suffix = _sidecar_suffix(sidecar.name)
    return sidecar.with_name(sidecar.name[: -len(suffix)]).exists()


def _sidecar_suffix(name: str) -> str:
    """Which of :data:`SIDECAR_SUFFIXES` ``name`` ends with, in any letter case."""
    return next(s for s in SIDECAR_SUFFIXES if name.lower().endswith(s))


def _walk(root: Path, skip: Callable[[object, str], None]) -> list[Path]:
    """Regular files under ``root``, sorted; ``skip(path, reason)`` for the rest."""
    found: list[Path] = []

    def unreadable(error: OSError) -> None:
        skip(error.filename, f"cannot read this directory ({error.strerror})")

    for directory, subdirectories, names in os.walk(root, onerror=unreadable):
        here = Path(directory)
        for sub in [d for d in subdirectories if d in _VCS_DIRECTORIES]:
            subdirectories.remove(sub)  # its objects are no one's documents
            skip(here / sub, "version-control metadata (not entered)")
        for sub in subdirectories:
            if (here / sub).is_symlink():
                skip(
                    here / sub,
                    "a symbolic link to a directory (not followed; ingest its "
                    "target directly)",
                )
        for name in names:
            candidate = here / name
            if name.startswith(".") or candidate.is_file():
                found.append(candidate)
            elif candidate.is_symlink() and not candidate.exists():
                skip(candidate, _DANGLING)
            else:
                skip(candidate, _SPECIAL)
    return sorted(found)


def load_file(
    path: Path, defaults: LoadDefaults, *, aliases: Sequence[Path] = ()
) -> list[SourceDocument]:
    """Load one file into documents; raise :class:`IngestError` with the reason.

    ``aliases`` are the other paths this run reached the same file at (a symbolic
    link beside its target): their metadata sidecars count as the file's own
    (:func:`sidecars_of`).
    """
    kind = SUFFIXES.get(path.suffix.lower())
    if kind is None:
        raise IngestError(
            str(path),
            f"unsupported file type '{path.suffix}'; "
            f"supported: {', '.join(sorted(SUFFIXES))}",
        )
    if kind in BINARY_SUFFIXES.values():
        return [_load_binary(path, kind, defaults, aliases)]
    text = _read_text(path)
    sidecar, warnings = _read_sidecar(path, aliases)
    if kind == "jsonl":
        if "id" in sidecar:  # each record is a document with its own _id
            name = next(
                path.name + suffix
                for suffix in SIDECAR_SUFFIXES
                if path.with_name(path.name + suffix).exists()
            )
            warnings += (
                f"metadata sidecar {name}: 'id' is ignored for a JSONL file (each "
                "record is a document named by its own '_id'); remove it",
            )
        return list(_load_jsonl(path, text, sidecar, defaults, warnings))
    front: dict[str, Any] = {}
    body_start = 0
    if kind == "markdown":
        front, body_start = _front_matter(path, text)
    links: tuple[str, ...] = ()
    if kind == "html":
        text, html_title, front, links = _html(path, text)
        if html_title:
            sidecar.setdefault("title", html_title)
    elif kind == "markdown":
        links = markdown_links(text[body_start:])
    meta = _merge(sidecar, front)
    rel = _relative(path, defaults.root)
    title = str(meta.pop("title", "") or _first_heading(text[body_start:]) or path.stem)
    given_id, unset = _given_id(meta)
    source_id = str(given_id or rel)
    document = _document(
        path,
        source_id,
        title,
        rel,
        text,
        body_start,
        kind,
        meta,
        defaults,
        warnings=warnings + unset,
    )
    return [replace(document, links=links, id_from_path=not given_id)]


def _given_id(meta: dict[str, Any]) -> tuple[str, tuple[str, ...]]:
    """Pop the given ``id``; an empty one (``id:`` or ``id: null``) is a warning.

    The file's path names the document then, as without the key; the warning says
    so, since an id left empty is more often a template not filled in than a choice.
    """
    if "id" in meta and meta["id"] is None:
        meta.pop("id")
        return "", ("'id' is empty (null): the file's path names this document",)
    return str(meta.pop("id", "") or ""), ()


def _load_binary(
    path: Path, kind: str, defaults: LoadDefaults, aliases: Sequence[Path] = ()
) -> SourceDocument:
    """A PDF or DOCX: parsed by its library, never decoded as text."""
    _check_size(path, MAX_BINARY_BYTES)
    meta, warnings = _read_sidecar(path, aliases)
    given_title = str(meta.pop("title", "") or "")
    library = "pypdfium2" if kind == "pdf" else "python-docx"
    try:
        if kind == "pdf":
            from retrieval_pipeline.ingest.pdf_loader import read_pdf

            extracted = read_pdf(path, given_title)
        else:
            from retrieval_pipeline.ingest.docx_loader import read_docx

            extracted = read_docx(path, given_title)
    except ImportError as exc:
        raise IngestError(
            str(path),
            f"reading {kind.upper()} files needs {library} ({exc}); install "
            "retrieval-pipeline[documents]",
        ) from exc
    rel = _relative(path, defaults.root)
    given_id, unset = _given_id(meta)
    source_id = str(given_id or rel)
    content, title = extracted.content, extracted.title
    document = _document(path, source_id, title, rel, content, 0, kind, meta, defaults)
    return dataclasses.replace(
        document,
        pages=extracted.pages,
        warnings=warnings + unset + extracted.warnings,
        id_from_path=not given_id,
    )


def _check_size(path: Path, limit: int = MAX_FILE_BYTES) -> None:
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise IngestError(str(path), f"cannot read: {exc.strerror or exc}") from exc
    if size > limit:
        raise IngestError(
            str(path),
            f"file is {size:,} bytes; the limit is "
            f"{limit:,}. Split it into smaller documents.",
        )


def _read_text(path: Path) -> str:
    _check_size(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise IngestError(str(path), f"cannot read: {exc.strerror or exc}") from exc
    if b"\x00" in raw[:8192]:
        raise IngestError(str(path), "looks binary (contains NUL bytes), not text")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise IngestError(
            str(path),
            f"not valid UTF-8 text (byte {exc.start}); convert it to UTF-8 first",
        ) from exc
    # One newline convention so offsets mean the same thing on every platform.
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _sidecar_places(path: Path, aliases: Sequence[Path] = ()) -> list[Path]:
    """``path``, its aliases and their link targets, each location once."""
    places: dict[Path, Path] = {}
    for place in (path, *aliases):
        places.setdefault(place.absolute(), place)
        try:
            real = place.resolve(strict=True)
        except (OSError, RuntimeError):
            continue  # its loader says why it cannot be read
        places.setdefault(real, real)
    return list(places.values())


def sidecars_of(path: Path, aliases: Sequence[Path] = ()) -> list[Path]:
    """The metadata sidecars of the file at ``path``, one per sidecar file.

    A sidecar is looked for beside ``path``, beside each alias and, when a path is
    a symbolic link, beside the file it links to. One file has one set of
    metadata however it is reached: a link read before its target (``a.md`` ->
    ``z.md``) used to miss ``z.md.meta.yaml``, and the ``principals`` in it.
    """
    found: dict[Path, Path] = {}
    for place in _sidecar_places(path, aliases):
        for suffix in SIDECAR_SUFFIXES:
            sidecar = place.with_name(place.name + suffix)
            if sidecar.exists():
                found.setdefault(sidecar.resolve(), sidecar)
    return list(found.values())


def _read_sidecar(
    path: Path, aliases: Sequence[Path] = ()
) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The metadata of ``path``'s sidecar ({} without one) and warnings about it.

    Raises:
        IngestError: for two sidecars (beside the file, a link to it or its target),
            an unreadable one, a known key of the wrong type, or a key that
            misspells an access-control key.
    """
    found = sidecars_of(path, aliases)
    if not found:
        for place in _sidecar_places(path, aliases):
            _refuse_misnamed_sidecar(place)
        return {}, ()
    if len(found) > 1:
        here = path.parent.absolute()
        names = ", ".join(
            s.name if s.parent.absolute() == here else str(s) for s in found
        )
        linked = any(p.is_symlink() for p in (path, *aliases))
        raise IngestError(
            str(path),
            f"more than one metadata sidecar ({names}); "
            + (
                "a symbolic link and the file it links to are one document with one "
                "set of metadata: keep the sidecar beside the target and delete the "
                "others"
                if linked
                else "keep one: merge them into it and delete the others"
            ),
        )
    sidecar = found[0]
    try:
        raw = sidecar.read_text(encoding="utf-8")
        data = json.loads(raw) if sidecar.name.endswith(".json") else _yaml(raw)
    except (
        OSError,
        UnicodeDecodeError,
        json.JSONDecodeError,
        yaml.YAMLError,
    ) as exc:
        raise IngestError(
            str(path), f"bad metadata sidecar {sidecar.name}: {_one_line(exc)}"
        ) from exc
    if not isinstance(data, dict):
        raise IngestError(
            str(path),
            f"metadata sidecar {sidecar.name} must hold an "
            "object of keys, not " + type(data).__name__,
        )
    _require_strings(path, f"metadata sidecar {sidecar.name}", data)
    return data, _sidecar_key_warnings(path, sidecar.name, data)


class _NoAliasLoader(yaml.SafeLoader):
    """A YAML SafeLoader that refuses aliases.

    ``*a`` nested in ``&a`` lists grows 9-fold a level ("billion laughs"): a
    438-byte front matter became 39 MB of stored metadata.
    """

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]
            raise yaml.composer.ComposerError(
                None,
                None,
                f"an alias (*{event.anchor}) is not read in metadata; write the value "
                "out",
                event.start_mark,
            )
        return super().compose_node(parent, index)


def _one_line(exc: Exception, first_line: int = 1) -> str:
    """A parse error as one summary line (PyYAML's has a caret diagram).

    ``first_line`` is the file line the parsed text starts on (front matter: 2).
    """
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        what = "; ".join(str(p) for p in (exc.context, exc.problem) if p)
        return f"{what} (line {mark.line + first_line}, column {mark.column + 1})"
    return " ".join(str(exc).split())


def _yaml(text: str) -> Any:
    """Front matter or a sidecar's YAML: safe types, no aliases."""
    return yaml.load(text, Loader=_NoAliasLoader)  # noqa: S506 - a SafeLoader


def _require_strings(path: Path, origin: str, data: dict[str, Any]) -> None:
    """Refuse a non-string ``id``, ``title``, ``path`` or ``tenant`` (null: unset).

    YAML turns ``id: 0042`` into the octal 34 and ``title: [a, b]`` into a list:
    stored as their text they would name another document, or read as a repr.
    """
    for key in _SIDECAR_STRINGS:
        value = data.get(key)
        if key in ("id", "path") and isinstance(value, str) and not value.strip():
            raise IngestError(
                str(path),
                f"{origin}: '{key}' is blank ({value!r}); give it a value, or remove "
                "the key to use the file's path",
            )
        if value is not None and not isinstance(value, str):
            fix = (
                "write one string"
                if isinstance(value, list | dict)
                else "quote it, so that it is read as written"
            )
            raise IngestError(
                str(path),
                f"{origin}: '{key}' must be a string, got "
                f"{type(value).__name__} {value!r}; {fix}",
            )


@functools.lru_cache(maxsize=256)
def _lowercase_names(directory: str, _mtime_ns: int) -> dict[str, str]:
    """A directory's entry names by their lower-case form (cached per mtime)."""
    try:
        return {name.lower(): name for name in os.listdir(directory)}
    except OSError:
        return {}


def _refuse_misnamed_sidecar(path: Path) -> None:
    """Fail ``path`` when a sidecar meant for it is named so that it is not read.

    A sidecar is ``NAME.EXT.meta.yaml`` (the whole file name). ``NAME.meta.yaml``
    or ``NAME.EXT.META.json`` beside it would otherwise be skipped in silence, and
    the ``principals`` it holds with it: the document would be stored public.
    """
    misnamed = [
        path.with_name(path.stem + suffix)
        for suffix in SIDECAR_SUFFIXES
        if path.suffix and path.with_name(path.stem + suffix).is_file()
    ]
    if not misnamed:  # other letter cases: one listing per directory state
        try:
            mtime = path.parent.stat().st_mtime_ns
        except OSError:
            return
        names = _lowercase_names(str(path.parent), mtime)
        stems = [path.name.lower()] + ([path.stem.lower()] if path.suffix else [])
        misnamed = [
            path.with_name(names[stem + suffix])
            for stem in stems
            for suffix in SIDECAR_SUFFIXES
            if stem + suffix in names
        ]
    if misnamed:
        suffix = _sidecar_suffix(misnamed[0].name)
        raise IngestError(
            str(path),
            f"metadata sidecar {misnamed[0].name} is not read: a sidecar is named "
            f"after the whole file name, in lower case; rename it to "
            f"{path.name}{suffix} (its access control would be ignored)",
        )


def _sidecar_key_warnings(
    path: Path, name: str, data: dict[str, Any]
) -> tuple[str, ...]:
    """Warnings for sidecar keys that look like a mistake; the rest is metadata.

    Any key may carry extra metadata, so only near-misses of the keys a sidecar is
    read from are named. One that misspells an access-control key fails the file
    instead: ignoring ``principles: [hr]`` would store a public document.
    """
    warnings = []
    for raw_key in data:
        key = str(raw_key)
        if key in _SIDECAR_KEYS or looks_like_access_control(key):
            continue  # read, or refused by resolve_access
        if key in _KNOWN_KEYS:  # a JSONL record's own keys (_id, text)
            intended = "id" if key == "_id" else None
            problem = f"'{key}' is not read from a sidecar and is dropped"
        else:
            intended = _near_miss(key)
            if intended is None:
                continue
            problem = f"unknown key '{key}' is kept as extra metadata"
        if intended in ACCESS_KEYS:
            raise IngestError(
                str(path),
                f"metadata sidecar {name}: unknown key '{key}'; did you mean "
                f"'{intended}'? Access control is never guessed: rename the key "
                f"to '{intended}', or to a name unlike it if it is not access control",
            )
        hint = f"; did you mean '{intended}'?" if intended else ""
        warnings.append(f"metadata sidecar {name}: {problem}{hint}")
    return tuple(warnings)


def _near_miss(key: str) -> str | None:
    """The sidecar key that ``key`` probably misspells, or None.

    Compared word by word, so that ``created_by`` (a key of its own) is not taken
    for ``created_at`` while ``titel``, ``updatedAt`` and ``principles`` are.
    """
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", key)
    words = [w for w in re.split(r"[^a-z0-9]+", spaced.lower()) if w]
    for known in difflib.get_close_matches(
        "_".join(words), _SIDECAR_KEYS, n=3, cutoff=0.8
    ):
        known_words = known.split("_")
        if len(known_words) == len(words) and all(
            difflib.SequenceMatcher(None, word, known_word).ratio() >= 0.5
            for word, known_word in zip(words, known_words, strict=True)
        ):
            return known
    return None


def _front_matter(path: Path, text: str) -> tuple[dict[str, Any], int]:
    match = _FRONT_MATTER.match(text)
    if not match:
        _refuse_unread_front_matter(path, text)
        return {}, 0
    try:
        data = _yaml(match.group(1) or "") or {}
    except yaml.YAMLError as exc:
        raise IngestError(
            str(path), f"bad YAML front matter: {_one_line(exc, first_line=2)}"
        ) from exc
    if not isinstance(data, dict):
        raise IngestError(str(path), "front matter must be a mapping of keys")
    _require_strings(path, "front matter", data)
    return data, match.end()


def _refuse_unread_front_matter(path: Path, text: str) -> None:
    """Fail a file that opens front matter which is not read as front matter.

    A block never closed (a closing line typed ``--``, or none) or one after blank
    lines would be indexed as body text, its ``principals`` with it: the document
    would be stored public. Access control fails closed instead.
    """
    meant = _MEANT_AS_FRONT_MATTER.match(text)
    if meant is None:
        return
    blank = meant.group("blank").count("\n")
    if blank:
        raise IngestError(
            str(path),
            f"front matter must start on the first line, but line {blank + 1} opens "
            f"it after {blank} blank line{'s' if blank > 1 else ''}: remove "
            f"{'them' if blank > 1 else 'it'}",
        )
    raise IngestError(
        str(path),
        "front matter opened on line 1 is never closed: end it with a line '---' "
        "(or '...'); if the first line is a horizontal rule, write it as '***'",
    )


def _merge(*layers: dict[str, Any]) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for layer in layers:
        merged.update(layer)
    return merged


def _relative(path: Path, root: Path | None) -> str:
    resolved = path.resolve()
    if root is not None:
        try:
            return resolved.relative_to(root.resolve()).as_posix()
        except ValueError:
            pass
    return path.name


def _first_heading(text: str) -> str:
    match = re.search(r"^#{1,6}[ \t]+(.+?)[ \t#]*$", text, re.MULTILINE)
    return match.group(1).strip() if match else ""


def _load_jsonl(
    path: Path,
    text: str,
    sidecar: dict[str, Any],
    defaults: LoadDefaults,
    warnings: tuple[str, ...] = (),
) -> Iterator[SourceDocument]:
    first_line: dict[str, int] = {}  # record id -> the line it is on
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise IngestError(where, f"invalid JSON: {exc.msg}") from exc
        if not isinstance(record, dict):
            raise IngestError(where, "each line must be a JSON object")
        source_id = record.get("_id", record.get("id"))
        body = record.get("text")
        if source_id in (None, "") or not isinstance(body, str):
            raise IngestError(where, "a BEIR record needs '_id' and a string 'text'")
        if isinstance(source_id, bool) or not isinstance(source_id, str | int):
            raise IngestError(
                where,
                f"'_id' must be a string (or an integer), got "
                f"{type(source_id).__name__} {source_id!r}",
            )
        source_id = str(source_id)
        if source_id in first_line:
            # The whole file fails, as for any other bad line: keeping the first
            # record wrote half the file while it was reported failed.
            raise IngestError(
                where,
                f"duplicate '_id' {source_id!r} (also on line "
                f"{first_line[source_id]}); ids are unique within a file, so "
                "nothing of it is ingested",
            )
        first_line[source_id] = number
        for key in record:
            if key in ACCESS_KEYS or looks_like_access_control(key):
                raise IngestError(
                    where,
                    f"'{key}' is access control: it belongs inside the record's "
                    "'metadata' object, where it is applied (at the top level it "
                    "would be ignored)",
                )
        raw_extra = record.get("metadata")
        if raw_extra is not None and not isinstance(raw_extra, dict):
            raise IngestError(
                where,
                "'metadata' must be an object of keys, not " + type(raw_extra).__name__,
            )
        extra: dict[str, Any] = raw_extra or {}
        meta = _merge(sidecar, extra)
        meta.pop("id", None)
        title = str(record.get("title") or meta.pop("title", "") or "")
        meta.pop("title", None)
        yield _document(
            path,
            str(source_id),
            title,
            f"{_relative(path, defaults.root)}#{source_id}",
            body,
            0,
            "jsonl",
            meta,
            defaults,
            where=where,
            warnings=warnings,
        )


def _document(
    path: Path,
    source_id: str,
    title: str,
    rel: str,
    content: str,
    body_start: int,
    kind: str,
    meta: dict[str, Any],
    defaults: LoadDefaults,
    *,
    where: str | None = None,
    warnings: tuple[str, ...] = (),
) -> SourceDocument:
    where = where or str(path)
    access = resolve_access(
        where, meta, tenant=defaults.tenant, principals=defaults.principals
    )
    for key in ACCESS_KEYS:
        meta.pop(key, None)
    updated = _timestamp(where, meta.pop("updated_at", meta.pop("updated", None)))
    created = _timestamp(where, meta.pop("created_at", meta.pop("created", None)))
    if updated is None:
        updated = datetime.fromtimestamp(path.stat().st_mtime, tz=UTC)
    entities = _entities(where, meta.pop("entities", None))
    relations = _relations(where, meta.pop("relations", None))
    title_entity = meta.pop("title_entity", defaults.title_entities)
    if not isinstance(title_entity, bool):
        raise IngestError(
            where, f"'title_entity' must be true or false, got {title_entity!r}"
        )
    given_path = meta.pop("path", "")
    logical_path = str(given_path or rel)
    metadata = {k: _dates_as_text(v) for k, v in meta.items() if k not in _KNOWN_KEYS}
    try:
        json.dumps(metadata)
    except (TypeError, ValueError) as exc:
        raise IngestError(where, f"metadata is not JSON-serialisable: {exc}") from exc
    return SourceDocument(
        source_id=source_id,
        title=title.strip(),
        path=logical_path,
        path_from_root=not given_path,
        source_uri=path.resolve().as_uri()
        + ("#" + source_id if kind == "jsonl" else ""),
        content=content,
        body_start=body_start,
        kind=kind,
        tenant=access.tenant,
        principals=access.principals,
        created_at=created,
        updated_at=updated,
        metadata=metadata,
        entities=entities,
        relations=relations,
        title_entity=bool(title_entity),
        warnings=warnings,
    )


def _dates_as_text(value: Any) -> Any:
    """YAML dates and times in extra metadata as ISO 8601 text (JSON has no date).

    ``reviewed: 2024-05-01`` is a ``date`` to YAML; stored as ``"2024-05-01"`` it
    round-trips and filters like any string, where it used to fail the file.
    """
    if isinstance(value, date | time):  # datetime is a date
        return value.isoformat()
    if isinstance(value, dict):
        return {k: _dates_as_text(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_dates_as_text(v) for v in value]
    return value


def _timestamp(where: str, value: Any) -> datetime | None:
    if value in (None, ""):
        return None
    if isinstance(value, datetime):
        parsed = value
    elif hasattr(value, "isoformat"):  # a YAML date
        parsed = datetime.fromisoformat(value.isoformat())
    else:
        try:
            parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        except ValueError as exc:
            raise IngestError(where, f"timestamp '{value}' is not ISO 8601") from exc
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _entities(where: str, value: Any) -> tuple[EntitySpec, ...]:
    if value in (None, []):
        return ()
    if not isinstance(value, list):
        raise IngestError(where, "'entities' must be a list")
    specs = []
    for item in value:
        if isinstance(item, str):
            item = {"name": item}
        if (
            not isinstance(item, dict)
            or not isinstance(item.get("name"), str)
            or not item["name"].strip()
        ):
            raise IngestError(where, f"entity {item!r} needs a non-empty 'name'")
        lifecycle = item.get("lifecycle")
        if lifecycle is not None and lifecycle not in LIFECYCLES:
            raise IngestError(
                where,
                f"entity '{item['name']}' has lifecycle '{lifecycle}'; "
                f"valid: {', '.join(LIFECYCLES)}",
            )
        aliases = item.get("aliases", [])
        if not isinstance(aliases, list) or not all(
            isinstance(a, str) for a in aliases
        ):
            raise IngestError(
                where, f"entity '{item['name']}': 'aliases' must be strings"
            )
        count = item.get("count", 1)
        if not isinstance(count, int) or count < 1:
            raise IngestError(where, f"entity '{item['name']}': 'count' must be >= 1")
        specs.append(
            EntitySpec(
                name=item["name"].strip(),
                type=str(item["type"]) if item.get("type") else None,
                lifecycle=lifecycle,
                aliases=tuple(aliases),
                description=str(item.get("description", "")),
                count=count,
            )
        )
    return tuple(specs)


def _relations(where: str, value: Any) -> tuple[RelationSpec, ...]:
    if value in (None, []):
        return ()
    if not isinstance(value, list):
        raise IngestError(where, "'relations' must be a list")
    specs = []
    for item in value:
        if not isinstance(item, dict) or not all(
            isinstance(item.get(k), str) and item[k].strip()
            for k in ("source", "target")
        ):
            raise IngestError(
                where, f"relation {item!r} needs 'source' and 'target' names"
            )
        try:
            weight = float(item.get("weight", 1.0))
        except (TypeError, ValueError) as exc:
            raise IngestError(
                where, f"relation weight {item.get('weight')!r} is not a number"
            ) from exc
        if not weight > 0:
            raise IngestError(where, "relation weight must be positive")
        specs.append(
            RelationSpec(
                source=item["source"].strip(),
                target=item["target"].strip(),
                type=str(item.get("type", "related_to")),
                weight=weight,
            )
        )
    return tuple(specs)


def _html(path: Path, html: str) -> tuple[str, str, dict[str, Any], tuple[str, ...]]:
    """Text, title, access-control ``<meta name=...>`` tags, and content links.

    The page is read by :func:`retrieval_pipeline.ingest.html.parse_html` (main
    content only, as markdown).

    Meta names are case-insensitive in HTML. Only access-control names are lifted
    (``<meta name="principals" content="a,b">``, ``tenant``, ``acl``, ``public``
    with ``true``/``false``, and any look-alike so that it is refused); other meta
    tags stay out of the metadata.
    """
    parsed = parse_html(html)
    text, title, tags = parsed.text, parsed.title, parsed.meta
    for attribute, raw_name in parsed.other_meta:
        name = raw_name.strip().lower()
        if name in ACCESS_KEYS or looks_like_access_control(name):
            # Not read, it would leave the page public: fail closed.
            raise IngestError(
                str(path),
                f'<meta {attribute}="{raw_name}"> is not read; access control is '
                f'<meta name="{name}" content="...">',
            )
    meta: dict[str, Any] = {}
    for raw_name, content in tags:
        name = raw_name.strip().lower()
        if name not in ACCESS_KEYS and not looks_like_access_control(name):
            continue
        if name in meta:
            raise IngestError(
                str(path), f'<meta name="{name}"> appears more than once; keep one'
            )
        value: Any = content
        if name == PUBLIC_KEY and content.strip().lower() in ("true", "false"):
            value = content.strip().lower() == "true"
        meta[name] = value
    return text, title, meta, tuple(parsed.links)
