from __future__ import annotations

import json
from pathlib import Path

import pytest

from retrieval_pipeline.errors import IngestError
from retrieval_pipeline.ingest.loaders import LoadDefaults, discover, load_file

DEFAULTS = LoadDefaults(tenant="acme", principals=("staff",))


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


class TestMarkdown:
    def test_front_matter_sets_metadata_and_overrides_defaults(
        self, tmp_path: Path
    ) -> None:
        path = write(
            tmp_path / "a.md",
            "---\nid: doc-a\ntitle: Alpha\ntenant: other\nprincipals: [x, y]\n"
            "updated_at: 2026-01-02T03:04:05Z\nowner: ops\n---\n# Heading\n\nBody.\n",
        )
        (doc,) = load_file(path, LoadDefaults(root=tmp_path))
        assert (doc.source_id, doc.title, doc.tenant) == ("doc-a", "Alpha", "other")
        assert doc.principals == ("x", "y")
        assert doc.metadata == {"owner": "ops"}
        assert doc.updated_at is not None and doc.updated_at.year == 2026
        assert doc.content[doc.body_start :].startswith("# Heading")

    def test_defaults_apply_without_front_matter(self, tmp_path: Path) -> None:
        path = write(tmp_path / "sub" / "b.md", "# Beta\n\ntext\n")
        (doc,) = load_file(path, LoadDefaults(tenant="acme", root=tmp_path))
        assert doc.source_id == "sub/b.md"
        assert doc.title == "Beta"
        assert doc.tenant == "acme"
        assert doc.principals == ()

    def test_sidecar_metadata_is_read_and_front_matter_wins(
        self, tmp_path: Path
    ) -> None:
        path = write(tmp_path / "c.md", "---\ntitle: From front matter\n---\ntext\n")
        write(
            tmp_path / "c.md.meta.json",
            json.dumps({"title": "From sidecar", "principals": "a,b", "team": "x"}),
        )
        (doc,) = load_file(path, DEFAULTS)
        assert doc.title == "From front matter"
        assert doc.principals == ("a", "b")
        assert doc.metadata == {"team": "x"}

    def test_entities_and_relations_are_parsed(self, tmp_path: Path) -> None:
        path = write(
            tmp_path / "e.md",
            "---\nentities:\n  - name: Svc\n    type: service\n    aliases: [svc-1]\n"
            "  - Other\nrelations:\n  - {source: Svc, target: Other, type: uses,"
            " weight: 2}\n---\ntext\n",
        )
        (doc,) = load_file(path, DEFAULTS)
        assert [e.name for e in doc.entities] == ["Svc", "Other"]
        assert doc.entities[0].aliases == ("svc-1",)
        assert doc.entities[1].type is None and doc.entities[1].lifecycle is None
        assert doc.relations[0].type == "uses" and doc.relations[0].weight == 2.0

    @pytest.mark.parametrize(
        ("front", "reason"),
        [
            ("title: [unclosed", "bad YAML front matter"),
            ("- a list", "must be a mapping"),
            ("entities: [{type: x}]", "needs a non-empty 'name'"),
            ("entities: [{name: X, lifecycle: live}]", "lifecycle 'live'"),
            ("relations: [{source: A}]", "needs 'source' and 'target'"),
            ("relations: [{source: A, target: B, weight: -1}]", "must be positive"),
            ("updated_at: yesterday", "not ISO 8601"),
            ("principals: 7", "'principals' must be"),
        ],
    )
    def test_bad_front_matter_names_the_file_and_reason(
        self, tmp_path: Path, front: str, reason: str
    ) -> None:
        path = write(tmp_path / "bad.md", f"---\n{front}\n---\ntext\n")
        with pytest.raises(IngestError, match=reason) as info:
            load_file(path, DEFAULTS)
        assert info.value.path.endswith("bad.md")

    def test_bad_sidecar_is_reported(self, tmp_path: Path) -> None:
        path = write(tmp_path / "s.md", "text\n")
        write(tmp_path / "s.md.meta.json", "{not json")
        with pytest.raises(IngestError, match="bad metadata sidecar"):
            load_file(path, DEFAULTS)

    def test_crlf_is_normalised_so_offsets_are_portable(self, tmp_path: Path) -> None:
        path = write(tmp_path / "w.md", b"# T\r\n\r\nline\r\n")
        (doc,) = load_file(path, DEFAULTS)
        assert "\r" not in doc.content


class TestMalformedFiles:
    def test_binary_file_with_text_extension_is_rejected(self, tmp_path: Path) -> None:
        path = write(tmp_path / "x.md", b"\x89PNG\r\n\x1a\n\x00\x00\x00")
        with pytest.raises(IngestError, match="binary"):
            load_file(path, DEFAULTS)

    def test_invalid_utf8_is_rejected(self, tmp_path: Path) -> None:
        path = write(tmp_path / "x.txt", b"caf\xe9 au lait")
        with pytest.raises(IngestError, match="UTF-8"):
            load_file(path, DEFAULTS)

    def test_unsupported_extension_is_rejected(self, tmp_path: Path) -> None:
        path = write(tmp_path / "x.pdf", "text")
        with pytest.raises(IngestError, match="unsupported"):
            load_file(path, DEFAULTS)

    def test_missing_path_is_reported(self, tmp_path: Path) -> None:
        with pytest.raises(IngestError, match="no such file"):
            list(discover([tmp_path / "absent"]))


class TestJsonl:
    def test_beir_records_become_documents(self, tmp_path: Path) -> None:
        path = write(
            tmp_path / "corpus.jsonl",
            '{"_id": "1", "title": "T1", "text": "one"}\n\n'
            '{"_id": "2", "title": "", "text": "two",'
            ' "metadata": {"principals": ["p"]}}\n',
        )
        docs = load_file(path, DEFAULTS)
        assert [d.source_id for d in docs] == ["1", "2"]
        assert docs[0].title == "T1" and docs[0].content == "one"
        assert docs[1].principals == ("p",)
        assert docs[0].principals == ("staff",)
        assert docs[0].source_uri.endswith("corpus.jsonl#1")

    @pytest.mark.parametrize(
        ("line", "reason"),
        [
            ("{bad json", "invalid JSON"),
            ("[1, 2]", "JSON object"),
            ('{"title": "no id", "text": "x"}', "needs '_id'"),
            ('{"_id": "1", "text": 5}', "string 'text'"),
        ],
    )
    def test_bad_lines_name_the_line_number(
        self, tmp_path: Path, line: str, reason: str
    ) -> None:
        path = write(
            tmp_path / "c.jsonl", '{"_id": "ok", "text": "fine"}\n' + line + "\n"
        )
        with pytest.raises(IngestError, match=reason) as info:
            load_file(path, DEFAULTS)
        assert info.value.path.endswith("c.jsonl:2")


class TestHtml:
    def test_headings_survive_and_scripts_do_not(self, tmp_path: Path) -> None:
        path = write(
            tmp_path / "p.html",
            "<html><head><title>Page</title><script>var x=1;</script></head>"
            "<body><h1>Top</h1><p>Para &amp; text.</p><h2>Sub</h2><ul><li>a</li>"
            "<li>b</li></ul></body></html>",
        )
        (doc,) = load_file(path, DEFAULTS)
        assert doc.title == "Page"
        assert "# Top" in doc.content and "## Sub" in doc.content
        assert "Para & text." in doc.content
        assert "var x" not in doc.content


class TestDiscovery:
    def test_directories_are_walked_and_sidecars_skipped(self, tmp_path: Path) -> None:
        write(tmp_path / "a.md", "x")
        write(tmp_path / "a.md.meta.json", "{}")
        write(tmp_path / "d" / "b.txt", "y")
        write(tmp_path / "d" / "image.png", b"\x89PNG")
        write(tmp_path / ".hidden.md", "z")
        found = [p.relative_to(tmp_path).as_posix() for p in discover([tmp_path])]
        assert found == ["a.md", "d/b.txt"]
