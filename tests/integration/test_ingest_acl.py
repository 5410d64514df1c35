"""Ingestion fails closed on access-control metadata, end to end (real Postgres).

An ACL or tenant that cannot be read exactly is a per-file (per-row) failure that is
reported; the document is never stored public, never lands in another tenant, and a
stored earlier revision is never replaced by a half-read one.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import write_jsonl

from retrieval_pipeline.cli import main
from retrieval_pipeline.ingest.job import Ingestor
from retrieval_pipeline.ingest.langchain_postgres import (
    LangchainSource,
    import_langchain_postgres,
    parse_principals,
)
from retrieval_pipeline.tools.embeddings import Embedder
from retrieval_pipeline.tools.store import Store


def _stored(store: Store) -> dict[str, tuple[str, list[str]]]:
    """source_id -> (tenant, acl) of every stored document."""
    with store.connection() as conn:
        rows = conn.execute("SELECT source_id, tenant, acl FROM documents").fetchall()
    return {source_id: (tenant, list(acl)) for source_id, tenant, acl in rows}


def _md(path: Path, meta: str, body: str = "Salary bands for 2027.") -> Path:
    path.write_text(f"---\n{meta}\n---\n# Doc\n\n{body}\n", encoding="utf-8")
    return path


class TestFiles:
    def test_empty_or_ambiguous_acls_fail_per_file_and_are_never_public(
        self, ingestor: Ingestor, store: Store, tmp_path: Path
    ) -> None:
        _md(tmp_path / "good.md", "id: good\nprincipals: [hr]")
        _md(tmp_path / "empty-string.md", 'id: empty-string\nprincipals: ""')
        _md(tmp_path / "empty-list.md", "id: empty-list\nprincipals: []\nacl: [hr]")
        _md(tmp_path / "groups.md", "id: groups\ngroups: [hr]")
        write_jsonl(
            tmp_path / "c.jsonl",
            [{"_id": "row", "text": "t", "metadata": {"principals": []}}],
        )
        summary = ingestor.ingest_paths([tmp_path], principals=["hr"])
        failed = {Path(p.split(":")[0]).name: r for p, r in summary.failures}
        assert set(failed) == {
            "empty-string.md",
            "empty-list.md",
            "groups.md",
            "c.jsonl",
        }
        assert "empty" in failed["empty-string.md"]
        assert "'groups'" in failed["groups.md"]
        assert summary.documents == 1
        assert _stored(store) == {"good": ("", ["hr"])}

    def test_a_record_cannot_escape_the_cli_tenant(
        self, ingestor: Ingestor, store: Store, tmp_path: Path
    ) -> None:
        _md(tmp_path / "same.md", "id: same\ntenant: acme")
        _md(tmp_path / "other.md", "id: other\ntenant: globex")
        _md(tmp_path / "none.md", "id: none")
        summary = ingestor.ingest_paths([tmp_path], tenant="acme")
        ((path, reason),) = summary.failures
        assert path.endswith("other.md") and "globex" in reason and "acme" in reason
        assert _stored(store) == {"same": ("acme", []), "none": ("acme", [])}

    def test_a_broken_acl_keeps_the_stored_revision_instead_of_replacing_it(
        self, ingestor: Ingestor, store: Store, tmp_path: Path
    ) -> None:
        doc = _md(tmp_path / "doc.md", "id: doc\nprincipals: [hr]")
        assert ingestor.ingest_paths([tmp_path]).documents == 1
        _md(doc, 'id: doc\nprincipals: ""', body="Edited salary bands.")
        summary = ingestor.ingest_paths([tmp_path])
        assert summary.documents == 0 and summary.failed == 1
        assert _stored(store) == {"doc": ("", ["hr"])}
        with store.connection() as conn:
            content = conn.execute("SELECT content FROM documents").fetchone()[0]
        assert "Edited" not in content

    def test_prune_removes_a_stored_document_whose_acl_broke(
        self, ingestor: Ingestor, store: Store, tmp_path: Path
    ) -> None:
        doc = _md(tmp_path / "doc.md", "id: doc\nprincipals: [hr]")
        _md(tmp_path / "other.md", "id: other")
        ingestor.ingest_paths([tmp_path])
        _md(doc, "id: doc\ngroups: [hr]")
        summary = ingestor.ingest_paths([tmp_path], prune=True)
        assert summary.failed == 1 and summary.removed == 1
        assert _stored(store) == {"other": ("", [])}

    def test_the_cli_reports_each_refused_file(
        self,
        store: Store,
        tmp_path: Path,
        capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        _md(tmp_path / "ok.md", "id: ok")
        _md(tmp_path / "bad.md", 'id: bad\nprincipals: ""')
        code = main(["ingest", str(tmp_path), "--no-progress", "--principals", "hr"])
        captured = capsys.readouterr()
        assert code == 1  # the good file lands; the refused one fails the command
        assert "failed 1" in captured.out
        assert "bad.md" in captured.err and "empty" in captured.err
        assert _stored(store) == {"ok": ("", ["hr"])}


# --- langchain-postgres -------------------------------------------------------------

ACL_ROWS = [
    ("ok", "Quarterly payroll runs on the last Friday.", {"principals": ["hr"]}),
    ("empty-string", "Salary bands for engineers.", {"principals": ""}),
    ("empty-list", "Salary bands for managers.", {"principals": []}),
    ("blank-item", "Bonus pool sizes.", {"principals": ["hr", ""]}),
    ("alias-clash", "Severance terms.", {"principals": [], "acl": ["hr"]}),
    ("roles", "Promotion calendar.", {"roles": ["hr"]}),
    ("globex", "Globex merger notes.", {"tenant": "globex"}),
    ("acme", "Acme onboarding checklist.", {"tenant": "acme"}),
    ("absent", "Office opening hours.", {}),
]


@pytest.fixture()
def make_collection(
    pg_url: str, embedder: Embedder
) -> Iterator[Callable[[list[tuple[str, str, dict[str, Any]]]], str]]:
    from langchain_postgres import PGVector

    made: list[Any] = []

    def make(rows: list[tuple[str, str, dict[str, Any]]]) -> str:
        name = f"acl_{uuid.uuid4().hex[:8]}"
        vs = PGVector(
            embeddings=embedder.embeddings,
            collection_name=name,
            connection=pg_url.replace("postgresql://", "postgresql+psycopg://", 1),
            use_jsonb=True,
            collection_metadata={"embedding_model": "all-MiniLM-L6-v2"},
        )
        vs.add_texts(
            [text for _, text, _ in rows],
            metadatas=[meta for _, _, meta in rows],
            ids=[i for i, _, _ in rows],
        )
        made.append(vs)
        return name

    yield make
    for vs in made:
        vs.delete_collection()


class TestLangchainPostgres:
    def test_rows_with_unreadable_acls_or_another_tenant_fail_alone(
        self,
        ingestor: Ingestor,
        store: Store,
        pg_url: str,
        make_collection: Callable[[list[tuple[str, str, dict[str, Any]]]], str],
    ) -> None:
        name = make_collection(ACL_ROWS)
        source = LangchainSource(pg_url, collection=name)
        summary = import_langchain_postgres(
            ingestor, source, tenant="acme", principals=["hr"]
        )
        failed = {p.rsplit("/", 1)[1]: r for p, r in summary.failures}
        assert set(failed) == {
            "empty-string",
            "empty-list",
            "blank-item",
            "alias-clash",
            "roles",
            "globex",
        }
        assert all(p.startswith(source.origin + "/") for p, _ in summary.failures)
        assert "globex" in failed["globex"] and "acme" in failed["globex"]
        assert "both" in failed["alias-clash"]
        assert _stored(store) == {
            "ok": ("acme", ["hr"]),
            "acme": ("acme", ["hr"]),
            "absent": ("acme", ["hr"]),
        }

    def test_cli_import_reports_the_refused_rows(
        self,
        store: Store,
        pg_url: str,
        make_collection: Callable[[list[tuple[str, str, dict[str, Any]]]], str],
        capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        monkeypatch.setenv("DATABASE_URL", pg_url)
        name = make_collection(ACL_ROWS[:3] + ACL_ROWS[6:7])
        code = main(
            [
                "ingest",
                "--from-langchain-postgres",
                pg_url,
                "--collection",
                name,
                "--tenant",
                "acme",
                "--principals",
                "hr",
                "--json",
            ]
        )
        out = json.loads(capsys.readouterr().out)
        assert code == 1  # refused rows fail the command; the good row lands
        assert out["documents"] == 1 and out["failed"] == 3
        refused = {f["path"].rsplit("/", 1)[1] for f in out["failures"]}
        assert refused == {"empty-string", "empty-list", "globex"}
        assert _stored(store) == {"ok": ("acme", ["hr"])}


class TestParsePrincipals:
    """The helper the vector store uses: same rules, raised as ``ValueError``."""

    def test_absent_takes_the_default(self) -> None:
        assert parse_principals(None, ["b", "a", "a"]) == ("a", "b")

    def test_lists_and_comma_strings_are_read(self) -> None:
        assert parse_principals(["hr", "finance"]) == ("finance", "hr")
        assert parse_principals("hr, finance") == ("finance", "hr")

    @pytest.mark.parametrize("value", ["", " ", ",", [], ["hr", ""], [1], {"a": 1}])
    def test_empty_or_malformed_is_a_value_error(self, value: object) -> None:
        with pytest.raises(ValueError, match="principals"):
            parse_principals(value)


class TestCliPrincipals:
    @pytest.mark.parametrize("value", ["", " , "])
    def test_an_empty_principals_option_is_a_usage_error_not_public(
        self,
        store: Store,
        tmp_path: Path,
        value: str,
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        _md(tmp_path / "doc.md", "id: doc")
        with pytest.raises(SystemExit) as info:
            main(["ingest", str(tmp_path), "--no-progress", "--principals", value])
        assert info.value.code == 2
        assert "--principals" in capsys.readouterr().err
        assert _stored(store) == {}
