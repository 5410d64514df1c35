from __future__ import annotations

import json
import os
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

    @pytest.mark.parametrize(
        ("text", "reason"),
        [
            # Each used to be indexed as body text: the document was stored public.
            ("---\nprincipals: [finance]\n# Pay\npay bands\n", "never closed"),
            ("---\nprincipals: [finance]\n--\n# Pay\npay bands\n", "never closed"),
            ("\n---\nprincipals: [finance]\n---\npay bands\n", "after 1 blank line"),
            ("\n \n---\nacl: [finance]\n---\npay\n", "line 3 opens it after 2"),
        ],
    )
    def test_front_matter_that_is_not_read_fails_closed(
        self, tmp_path: Path, text: str, reason: str
    ) -> None:
        path = write(tmp_path / "pay.md", text)
        with pytest.raises(IngestError, match=reason) as info:
            load_file(path, DEFAULTS)
        assert info.value.path.endswith("pay.md")

    @pytest.mark.parametrize(
        ("text", "principals", "body"),
        [
            ("---\nprincipals: [finance]\n...\npay bands\n", ("finance",), "pay"),
            ("---\n---\npay bands\n", DEFAULTS.principals, "pay"),  # empty
            ("---\n\nA rule, then text.\n", DEFAULTS.principals, "---"),  # a rule
            ("---\n# Heading\ntext\n", DEFAULTS.principals, "---"),
        ],
    )
    def test_front_matter_closed_by_dots_or_empty_and_a_leading_rule(
        self, tmp_path: Path, text: str, principals: tuple[str, ...], body: str
    ) -> None:
        (doc,) = load_file(write(tmp_path / "pay.md", text), DEFAULTS)
        assert doc.principals == principals
        assert doc.content[doc.body_start :].startswith(body)

    def test_yaml_aliases_are_refused_in_front_matter_and_sidecars(
        self, tmp_path: Path
    ) -> None:
        # Nine-fold per level: 7 levels of this were 39 MB of stored metadata.
        levels = ['a0: &a0 ["lol", "lol", "lol"]'] + [
            f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 7)
        ]
        path = write(tmp_path / "bomb.md", "---\n" + "\n".join(levels) + "\n---\nx\n")
        with pytest.raises(IngestError, match=r"an alias \(\*a0\) is not read"):
            load_file(path, DEFAULTS)
        plain = write(tmp_path / "p.md", "text\n")
        write(tmp_path / "p.md.meta.yaml", "a: &x [1]\nb: *x\n")
        with pytest.raises(IngestError, match=r"bad metadata sidecar .*alias \(\*x\)"):
            load_file(plain, DEFAULTS)

    def test_a_file_name_that_is_not_utf8_is_listed_not_ingested(
        self, tmp_path: Path
    ) -> None:
        bad = Path(os.fsdecode(os.fsencode(tmp_path) + b"/bad\xffname.md"))
        bad.write_text("# Bad\n\nbody\n")
        write(tmp_path / "ok.md", "# Ok\n\nbody\n")
        skipped: list[tuple[str, str]] = []
        assert list(discover([tmp_path], skipped)) == [tmp_path / "ok.md"]
        ((where, reason),) = skipped
        assert where.endswith("bad\\xffname.md") and "not valid UTF-8" in reason
        with pytest.raises(IngestError, match="not valid UTF-8"):
            list(discover([bad]))

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
        path = write(tmp_path / "x.rtf", "text")
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

    def test_what_a_walk_leaves_out_is_listed_with_the_reason(
        self, tmp_path: Path
    ) -> None:
        import os

        write(tmp_path / "ok.md", "x")
        write(tmp_path / "README", "read me")
        write(tmp_path / "d" / "image.png", b"\x89PNG")
        write(tmp_path / "elsewhere" / "e.md", "e")
        write(tmp_path / "ok.md.meta.json", "{}")  # a sidecar: not a document
        write(tmp_path / "a.md.meta.json", "{}")  # a sidecar of no file: listed
        write(tmp_path / ".hidden.md", "z")  # hidden: not a document
        (tmp_path / "d" / "linked").symlink_to(tmp_path / "elsewhere")
        (tmp_path / "gone.md").symlink_to(tmp_path / "missing.md")
        os.mkfifo(tmp_path / "pipe.md")
        write(tmp_path / ".git" / "HEAD", "ref: refs/heads/main")  # one entry in all
        write(tmp_path / ".git" / "notes.md", "never a document")
        skipped: list[tuple[str, str]] = []
        found = [p.name for p in discover([tmp_path], skipped)]
        assert found == ["e.md", "ok.md"]  # elsewhere/e.md sorts first
        reasons = {Path(p).relative_to(tmp_path).as_posix(): r for p, r in skipped}
        assert set(reasons) == {
            "README",
            "d/image.png",
            "d/linked",
            "gone.md",
            "pipe.md",
            ".git",
            "a.md.meta.json",
        }
        assert "sidecar of no file" in reasons["a.md.meta.json"]
        assert "version-control metadata" in reasons[".git"]
        assert "no file extension" in reasons["README"]
        assert "unsupported file type '.png'" in reasons["d/image.png"]
        assert "not followed" in reasons["d/linked"]
        assert "link to nothing" in reasons["gone.md"]
        assert "not a regular file" in reasons["pipe.md"]

    def test_a_named_file_is_always_loaded_or_refused_never_dropped(
        self, tmp_path: Path
    ) -> None:
        import os

        csv = write(tmp_path / "data.csv", "a,b")
        assert list(discover([csv])) == [csv]  # its loader says why it is refused
        with pytest.raises(IngestError, match="unsupported file type"):
            load_file(csv, LoadDefaults())
        os.mkfifo(tmp_path / "pipe.md")
        with pytest.raises(IngestError, match="not a regular file"):
            list(discover([tmp_path / "pipe.md"]))  # reading it would block forever
        (tmp_path / "loop.md").symlink_to(tmp_path / "loop.md")
        with pytest.raises(IngestError, match="link"):
            list(discover([tmp_path / "loop.md"]))


def front(tmp_path: Path, meta: str, name: str = "acl.md") -> Path:
    return write(tmp_path / name, f"---\n{meta}\n---\n# Body\n\ntext\n")


class TestAccessControlFailsClosed:
    """An ACL or tenant that cannot be read exactly is an error, never public."""

    @pytest.mark.parametrize(
        ("meta", "reason"),
        [
            ('principals: ""', "empty"),
            ("principals: []", "empty"),
            ('principals: "   "', "empty"),
            ('principals: " , ,"', "empty"),
            ("principals:", "null"),
            ('principals: [hr, ""]', "empty"),
            ("principals: [hr, 3]", "must be a string"),
            ("principals: [[hr]]", "must be a string"),
            ("principals: {hr: 1}", "list of strings"),
            ("principals: true", "list of strings"),
            ('principals: ["hr,finance"]', "comma"),
            ("acl: []", "empty"),
            ('acl: ""', "empty"),
            ("principals: []\nacl: [hr]", "both"),
            ("principals: [hr]\nacl: [hr]", "both"),
        ],
    )
    def test_an_empty_or_malformed_acl_is_an_error(
        self, tmp_path: Path, meta: str, reason: str
    ) -> None:
        path = front(tmp_path, meta)
        with pytest.raises(IngestError, match=reason) as info:
            load_file(path, LoadDefaults(principals=("staff",)))
        assert info.value.path == str(path)

    @pytest.mark.parametrize(
        "key",
        [
            "groups",
            "group",
            "roles",
            "allow",
            "allowed_groups",
            "allowedUsers",
            "allow-list",
            "readers",
            "viewers",
            "permissions",
            "access",
            "access_control",
            "visibility",
            "private",
            "Principals",
            "ACL",
            "reader_groups",
            "tenant_id",
            "TenantId",
            "Tenant",
            "Public",
        ],
    )
    def test_an_unknown_acl_like_key_is_an_error_not_ignored(
        self, tmp_path: Path, key: str
    ) -> None:
        path = front(tmp_path, f"{key}: [hr]")
        with pytest.raises(IngestError, match=f"'{key}'") as info:
            load_file(path, DEFAULTS)
        assert "access" in info.value.reason

    def test_ordinary_metadata_keys_are_not_mistaken_for_acls(
        self, tmp_path: Path
    ) -> None:
        meta = "owner: ops\nkind: runbook\nurl: http://x\nallowance: 3\ntopics: [a]"
        (doc,) = load_file(front(tmp_path, meta), DEFAULTS)
        assert doc.principals == ("staff",)
        assert set(doc.metadata) == {"owner", "kind", "url", "allowance", "topics"}

    def test_acl_is_a_documented_alias_of_principals(self, tmp_path: Path) -> None:
        (doc,) = load_file(front(tmp_path, "acl: [hr, finance]"), DEFAULTS)
        assert doc.principals == ("finance", "hr")
        assert "acl" not in doc.metadata

    def test_a_comma_string_is_split_and_trimmed(self, tmp_path: Path) -> None:
        (doc,) = load_file(front(tmp_path, "principals: ' hr , finance '"), DEFAULTS)
        assert doc.principals == ("finance", "hr")

    def test_an_absent_acl_takes_the_cli_default(self, tmp_path: Path) -> None:
        (doc,) = load_file(front(tmp_path, "title: T"), DEFAULTS)
        assert doc.principals == ("staff",)

    def test_a_record_acl_replaces_the_cli_default(self, tmp_path: Path) -> None:
        (doc,) = load_file(front(tmp_path, "principals: [hr]"), DEFAULTS)
        assert doc.principals == ("hr",)

    def test_public_true_is_the_explicit_public_marker(self, tmp_path: Path) -> None:
        (doc,) = load_file(front(tmp_path, "public: true"), DEFAULTS)
        assert doc.principals == ()
        assert "public" not in doc.metadata

    def test_public_false_keeps_the_cli_default(self, tmp_path: Path) -> None:
        (doc,) = load_file(front(tmp_path, "public: false"), DEFAULTS)
        assert doc.principals == ("staff",)

    @pytest.mark.parametrize(
        ("meta", "defaults", "reason"),
        [
            ("public: true\nprincipals: [hr]", DEFAULTS, "both"),
            ("public: true\nacl: [hr]", DEFAULTS, "both"),
            ('public: "yes"', DEFAULTS, "true or false"),
            ("public:", DEFAULTS, "true or false"),
            ("public: false", LoadDefaults(), "no principals"),
        ],
    )
    def test_a_contradictory_public_marker_is_an_error(
        self, tmp_path: Path, meta: str, defaults: LoadDefaults, reason: str
    ) -> None:
        with pytest.raises(IngestError, match=reason):
            load_file(front(tmp_path, meta), defaults)

    def test_an_empty_acl_in_front_matter_beats_no_sidecar_fallback(
        self, tmp_path: Path
    ) -> None:
        path = front(tmp_path, 'principals: ""')
        write(tmp_path / "acl.md.meta.json", json.dumps({"principals": ["hr"]}))
        with pytest.raises(IngestError, match="empty"):
            load_file(path, DEFAULTS)

    def test_an_empty_acl_in_a_sidecar_is_an_error(self, tmp_path: Path) -> None:
        path = write(tmp_path / "plain.txt", "text\n")
        write(tmp_path / "plain.txt.meta.yaml", "principals: []\n")
        with pytest.raises(IngestError, match="empty") as info:
            load_file(path, DEFAULTS)
        assert info.value.path == str(path)


class TestTenantBoundary:
    def test_a_record_naming_another_tenant_than_the_cli_is_an_error(
        self, tmp_path: Path
    ) -> None:
        path = front(tmp_path, "tenant: globex")
        with pytest.raises(IngestError, match="globex") as info:
            load_file(path, LoadDefaults(tenant="acme"))
        assert "acme" in info.value.reason and info.value.path == str(path)

    def test_a_record_naming_the_cli_tenant_is_fine(self, tmp_path: Path) -> None:
        (doc,) = load_file(front(tmp_path, "tenant: acme"), LoadDefaults(tenant="acme"))
        assert doc.tenant == "acme"

    def test_without_a_cli_tenant_the_record_names_its_own(
        self, tmp_path: Path
    ) -> None:
        (doc,) = load_file(front(tmp_path, "tenant: globex"), LoadDefaults())
        assert doc.tenant == "globex"

    def test_an_empty_tenant_names_the_shared_scope_and_cannot_escape_the_cli(
        self, tmp_path: Path
    ) -> None:
        (doc,) = load_file(front(tmp_path, 'tenant: ""'), LoadDefaults())
        assert doc.tenant == ""
        with pytest.raises(IngestError, match="tenant"):
            load_file(front(tmp_path, 'tenant: ""'), LoadDefaults(tenant="acme"))

    @pytest.mark.parametrize("meta", ['tenant: "  "', "tenant:", "tenant: [x]"])
    def test_a_malformed_tenant_is_an_error(self, tmp_path: Path, meta: str) -> None:
        with pytest.raises(IngestError, match="'tenant'"):
            load_file(front(tmp_path, meta), LoadDefaults())

    @pytest.mark.parametrize(
        ("meta", "wrong"),
        [
            ("tenant: 7", "int 7"),
            ("tenant: 0042", "int 34"),  # YAML 1.1 octal: another tenant's name
            ("tenant: 1.5", "float 1.5"),
            ("id: 0042", "int 34"),
            ("title: [Payments, API]", "list"),
            ("path: yes", "bool True"),
        ],
    )
    def test_a_front_matter_identity_key_of_another_type_fails_with_the_fix(
        self, tmp_path: Path, meta: str, wrong: str
    ) -> None:
        with pytest.raises(IngestError, match="front matter: '") as info:
            load_file(front(tmp_path, meta), LoadDefaults())
        assert "must be a string" in info.value.reason and wrong in info.value.reason
        assert (
            "quote it" in info.value.reason or "write one string" in info.value.reason
        )

    @pytest.mark.parametrize("meta", ['id: ""', 'id: "  "', 'path: ""', "path: ' '"])
    def test_a_blank_id_or_path_fails_instead_of_naming_the_document(
        self, tmp_path: Path, meta: str
    ) -> None:
        with pytest.raises(IngestError, match="is blank") as info:
            load_file(front(tmp_path, meta), LoadDefaults())
        assert "remove the key to use the file's path" in info.value.reason

    @pytest.mark.parametrize("meta", ["id:", "id: null", "id: ~"])
    def test_an_empty_id_falls_back_to_the_path_with_a_warning(
        self, tmp_path: Path, meta: str
    ) -> None:
        path = front(tmp_path, meta)
        (doc,) = load_file(path, LoadDefaults(root=tmp_path))
        assert doc.source_id == path.name and doc.id_from_path
        assert any("'id' is empty" in w for w in doc.warnings)
        (plain,) = load_file(front(tmp_path, "title: T"), LoadDefaults(root=tmp_path))
        assert not plain.warnings

    def test_a_numeric_tenant_in_jsonl_metadata_fails_the_file(
        self, tmp_path: Path
    ) -> None:
        path = tmp_path / "c.jsonl"
        path.write_text(
            json.dumps({"_id": "1", "text": "a", "metadata": {"tenant": 7}}) + "\n"
        )
        with pytest.raises(IngestError, match="quote it"):
            load_file(path, LoadDefaults())


class TestSidecarKeys:
    """A sidecar key of the wrong type fails its file; a misspelt one is named."""

    @pytest.mark.parametrize(
        ("sidecar", "text", "wrong"),
        [
            ("meta.yaml", "title: [Payments, API]\n", "list"),
            ("meta.json", json.dumps({"title": {"en": "Payments"}}), "dict"),
            ("meta.yaml", "id: 0042\n", "int"),  # YAML 1.1 reads it as octal 34
            ("meta.yaml", "path: yes\n", "bool"),
        ],
    )
    def test_a_known_key_of_the_wrong_type_fails_naming_sidecar_key_and_type(
        self, tmp_path: Path, sidecar: str, text: str, wrong: str
    ) -> None:
        path = write(tmp_path / "doc.md", "# Doc\n\ntext\n")
        write(tmp_path / f"doc.md.{sidecar}", text)
        with pytest.raises(IngestError, match="must be a string") as info:
            load_file(path, DEFAULTS)
        assert info.value.path == str(path)
        assert f"doc.md.{sidecar}" in info.value.reason and wrong in info.value.reason

    def test_an_integer_tenant_is_refused_not_turned_into_text(
        self, tmp_path: Path
    ) -> None:
        path = write(tmp_path / "doc.md", "text\n")
        write(tmp_path / "doc.md.meta.yaml", "tenant: 7\n")
        with pytest.raises(IngestError, match="'tenant' must be a string") as info:
            load_file(path, LoadDefaults())
        assert "int 7" in info.value.reason and "quote it" in info.value.reason
        write(tmp_path / "doc.md.meta.yaml", 'tenant: "7"\n')
        (doc,) = load_file(path, LoadDefaults())
        assert doc.tenant == "7"

    @pytest.mark.parametrize(
        "misnamed",
        ["doc.meta.yaml", "doc.meta.json", "doc.md.META.json", "DOC.md.meta.yml"],
    )
    def test_a_misnamed_sidecar_fails_its_file_instead_of_publishing_it(
        self, tmp_path: Path, misnamed: str
    ) -> None:
        # Skipped in silence, its principals would be lost: the file stored public.
        path = write(tmp_path / "doc.md", "# Doc\n\nsalaries\n")
        write(tmp_path / misnamed, "principals: [hr]\n")
        with pytest.raises(IngestError, match="is not read") as info:
            load_file(path, DEFAULTS)
        assert misnamed in info.value.reason
        assert "rename it to doc.md.meta." in info.value.reason
        skipped: list[tuple[str, str]] = []
        assert list(discover([tmp_path], skipped)) == [path]  # it fails at load
        (tmp_path / misnamed).rename(tmp_path / "doc.md.meta.yaml")
        (doc,) = load_file(path, DEFAULTS)
        assert doc.principals == ("hr",)

    def test_two_sidecars_for_one_file_fail_it_naming_both(
        self, tmp_path: Path
    ) -> None:
        path = write(tmp_path / "doc.md", "text\n")
        write(tmp_path / "doc.md.meta.json", json.dumps({"title": "From JSON"}))
        write(tmp_path / "doc.md.meta.yaml", "principals: [hr]\n")
        with pytest.raises(IngestError, match="more than one metadata sidecar") as info:
            load_file(path, DEFAULTS)
        assert "doc.md.meta.json" in info.value.reason
        assert "doc.md.meta.yaml" in info.value.reason

    @pytest.mark.parametrize(
        ("key", "closest"),
        [("titel", "title"), ("updatedAt", "updated_at"), ("_id", "id")],
    )
    def test_a_misspelt_key_is_a_warning_naming_the_closest_and_the_file_loads(
        self, tmp_path: Path, key: str, closest: str
    ) -> None:
        path = write(tmp_path / "doc.md", "# Heading\n\ntext\n")
        write(tmp_path / "doc.md.meta.yaml", f"{key}: Payments\n")
        (doc,) = load_file(path, DEFAULTS)
        assert doc.title == "Heading"
        (warning,) = doc.warnings
        assert "doc.md.meta.yaml" in warning and f"'{key}'" in warning
        assert f"did you mean '{closest}'?" in warning

    def test_extra_metadata_keys_are_kept_without_warnings(
        self, tmp_path: Path
    ) -> None:
        path = write(tmp_path / "doc.md", "text\n")
        extra = {"author": "Ana", "created_by": "ana", "updated_by": "bo", "team": "x"}
        write(tmp_path / "doc.md.meta.json", json.dumps(extra))
        (doc,) = load_file(path, DEFAULTS)
        assert doc.metadata == extra and doc.warnings == ()

    def test_yaml_dates_in_extra_metadata_are_kept_as_iso_text(
        self, tmp_path: Path
    ) -> None:
        path = front(
            tmp_path,
            "reviewed: 2024-05-01\nreviews: [2024-05-01, 2024-06-02T10:00:00Z]\n"
            "audit: {at: 2024-05-01}",
        )
        (doc,) = load_file(path, DEFAULTS)
        assert doc.metadata["reviewed"] == "2024-05-01"
        assert doc.metadata["reviews"] == ["2024-05-01", "2024-06-02T10:00:00+00:00"]
        assert doc.metadata["audit"] == {"at": "2024-05-01"}

    @pytest.mark.parametrize(
        ("key", "closest"), [("principles", "principals"), ("tenat", "tenant")]
    )
    def test_a_misspelt_access_key_fails_the_file_instead_of_publishing_it(
        self, tmp_path: Path, key: str, closest: str
    ) -> None:
        path = write(tmp_path / "doc.md", "text\n")
        write(tmp_path / "doc.md.meta.yaml", f"{key}: [hr]\n")
        with pytest.raises(IngestError, match=f"did you mean '{closest}'"):
            load_file(path, LoadDefaults())


class TestAccessControlInOtherFormats:
    def test_html_meta_principals_and_tenant_are_applied(self, tmp_path: Path) -> None:
        path = write(
            tmp_path / "p.html",
            '<html><head><meta name="principals" content="hr, finance">'
            '<meta name="tenant" content="acme"><title>P</title></head>'
            "<body><p>text</p></body></html>",
        )
        (doc,) = load_file(path, LoadDefaults(tenant="acme"))
        assert doc.principals == ("finance", "hr") and doc.tenant == "acme"

    @pytest.mark.parametrize(
        ("head", "reason"),
        [
            ('<meta name="principals" content="">', "empty"),
            ('<meta name="groups" content="hr">', "'groups'"),
            ('<meta name="tenant" content="globex">', "globex"),
            (
                '<meta name="principals" content="hr">'
                '<meta name="principals" content="x">',
                "more than once",
            ),
            # Not read, each left the page public.
            ('<meta property="principals" content="hr">', 'property="principals"'),
            ('<meta http-equiv="ACL" content="hr">', 'http-equiv="ACL"'),
            ('<meta itemprop="allowed_groups" content="hr">', "is not read"),
        ],
    )
    def test_html_meta_acl_errors(self, tmp_path: Path, head: str, reason: str) -> None:
        path = write(
            tmp_path / "p.html",
            f"<html><head>{head}</head><body><p>text</p></body></html>",
        )
        with pytest.raises(IngestError, match=reason):
            load_file(path, LoadDefaults(tenant="acme"))

    def test_unrelated_html_meta_is_ignored(self, tmp_path: Path) -> None:
        path = write(
            tmp_path / "p.html",
            '<html><head><meta name="viewport" content="width=device-width">'
            '<meta charset="utf-8"><meta property="og:title" content="T">'
            '<meta http-equiv="refresh" content="30"></head>'
            "<body><p>text</p></body></html>",
        )
        (doc,) = load_file(path, DEFAULTS)
        assert doc.principals == ("staff",) and doc.metadata == {}

    @pytest.mark.parametrize(
        ("record", "reason"),
        [
            ({"metadata": {"principals": ""}}, "empty"),
            ({"metadata": {"principals": []}}, "empty"),
            ({"metadata": {"principals": [], "acl": ["hr"]}}, "both"),
            ({"metadata": {"roles": ["hr"]}}, "'roles'"),
            ({"metadata": {"tenant": "globex"}}, "globex"),
            ({"metadata": "hr"}, "'metadata' must be an object"),
            ({"principals": ["hr"]}, "inside the record's 'metadata'"),
            ({"tenant": "acme"}, "inside the record's 'metadata'"),
        ],
    )
    def test_jsonl_record_acl_errors_name_the_line(
        self, tmp_path: Path, record: dict[str, object], reason: str
    ) -> None:
        path = write(
            tmp_path / "c.jsonl",
            '{"_id": "ok", "text": "fine"}\n'
            + json.dumps({"_id": "2", "text": "t", **record})
            + "\n",
        )
        with pytest.raises(IngestError, match=reason) as info:
            load_file(path, LoadDefaults(tenant="acme"))
        assert info.value.path.endswith("c.jsonl:2")
