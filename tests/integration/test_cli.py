from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from retrieval_pipeline.cli import EXIT_DATABASE, EXIT_USAGE, main
from retrieval_pipeline.tools.retrieve import Retriever
from retrieval_pipeline.tools.store import Store


@pytest.fixture()
def ingested(
    store: Store, sample_corpus: Path, capsys: pytest.CaptureFixture[str]
) -> Store:
    assert main(["ingest", str(sample_corpus), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "ingested 18 documents" in out and "failed 0" in out
    return store


class TestCli:
    def test_query_prints_ranked_chunks_with_sources(
        self, ingested: Store, capsys: pytest.CaptureFixture[str]
    ) -> None:
        assert main(["query", "ERR_CONN_RESET v2.3.1", "--limit", "3"]) == 0
        out = capsys.readouterr().out
        assert out.startswith("1. [")
        assert "runbooks/err-conn-reset" in out and "file://" in out

    def test_terminal_controls_from_documents_are_shown_escaped(
        self,
        store: Store,
        tmp_path: Path,
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        # A page that recolours its text and moves the cursor up to overwrite its
        # own provenance line; the name of a file is printed too.
        page = tmp_path / "esc\x1b[2Jpage.md"
        page.write_text(
            "# \x1b[31mHead\x1b[0m\n\nokapi9 \x1b[1A\x1b[2K file:///trusted.md "
            "\u202eevil \x9b\x07 bell\n"
        )
        assert main(["ingest", str(tmp_path), "--no-progress"]) == 0
        capsys.readouterr()
        assert main(["query", "okapi9", "--no-understanding", "--limit", "1"]) == 0
        out = capsys.readouterr().out
        assert "okapi9" in out
        assert not any(c in out for c in "\x1b\x07\x9b\u202e")
        assert "\\x1b[1A" in out and "\\u202e" in out and "esc\\x1b[2Jpage" in out
        assert main(["query", "okapi9", "--no-understanding", "--json"]) == 0
        assert "\u202e" in json.loads(capsys.readouterr().out)["chunks"][0]["text"]

    def test_query_json_is_the_machine_form(
        self, ingested: Store, capsys: pytest.CaptureFixture[str]
    ) -> None:
        assert (
            main(
                [
                    "query",
                    "who leads the identity team",
                    "--json",
                    "--limit",
                    "2",
                    "--debug",
                ]
            )
            == 0
        )
        payload = json.loads(capsys.readouterr().out)
        assert len(payload["chunks"]) == 2
        first = payload["chunks"][0]
        assert first["document_id"] == "teams/identity-team"
        assert {"chunk_id", "source_uri", "revision", "char_start", "ranks"} <= set(
            first
        )
        assert "graph_boosted" in first
        debug = payload["retrievalDebug"]
        expected = {
            "candidatePool",
            "graphAdded",
            "reranked",
            "assembledTokens",
            "rewrite",
            "rerankerKind",
            "subQueries",
            "stageMs",
            "tokenMethod",
            "indexRevision",
        }
        assert expected <= set(debug)
        assert debug["rerankerKind"] == "none" and debug["reranked"] is False

    @pytest.mark.parametrize("path", [[], ["--no-graph", "--no-understanding"]])
    def test_query_json_leaves_out_timings_scores_and_revision_without_debug(
        self, ingested: Store, capsys: pytest.CaptureFixture[str], path: list[str]
    ) -> None:
        args = ["query", "who leads the identity team", "--json", "--limit", "2"]
        assert main([*args, "--reranker", "none", *path]) == 0
        payload = json.loads(capsys.readouterr().out)
        debug = payload["retrievalDebug"]
        assert not {"stageMs", "indexRevision", "lexicalMode"} & set(debug)
        for branch in debug.get("branches", []):
            assert not [k for k in branch if k.endswith("Ms")]
        assert payload["chunks"]
        assert all("channel_scores" not in c for c in payload["chunks"])

    def test_principals_unlock_restricted_documents(
        self, ingested: Store, capsys: pytest.CaptureFixture[str]
    ) -> None:
        question = "refunds posted twice idempotency check skipped"
        main(["query", question, "--json", "--limit", "20"])
        public = {
            c["document_id"] for c in json.loads(capsys.readouterr().out)["chunks"]
        }
        main(["query", question, "--json", "--limit", "20", "--principals", "finance"])
        finance = {
            c["document_id"] for c in json.loads(capsys.readouterr().out)["chunks"]
        }
        assert "incidents/inc-2041" not in public
        assert "incidents/inc-2041" in finance

    def test_user_mistakes_are_one_line_errors_without_tracebacks(
        self, store: Store, capsys: pytest.CaptureFixture[str], tmp_path: Path
    ) -> None:
        assert main(["query", "   "]) == EXIT_USAGE
        assert main(["query", "ok", "--limit", "0"]) == EXIT_USAGE
        assert main(["db", "reset"]) == EXIT_USAGE  # refuses without --yes
        err = capsys.readouterr().err
        assert "Traceback" not in err
        assert "empty" in err and "limit" in err and "--yes" in err

    def test_ingest_reports_failures_per_file_and_exits_non_zero_when_all_fail(
        self, store: Store, capsys: pytest.CaptureFixture[str], tmp_path: Path
    ) -> None:
        (tmp_path / "bad.md").write_bytes(b"\x00\x01")
        assert main(["ingest", str(tmp_path), "--json"]) == 1
        summary = json.loads(capsys.readouterr().out)
        assert summary["failed"] == 1 and "binary" in summary["failures"][0]["reason"]

    def test_any_failed_file_fails_the_command_and_left_out_files_are_named(
        self, store: Store, capsys: pytest.CaptureFixture[str], tmp_path: Path
    ) -> None:
        (tmp_path / "good.md").write_text("# Good\n\nLedger reconciliation notes.\n")
        (tmp_path / "bad.md").write_bytes(b"\x00\x01")
        (tmp_path / "photo.png").write_bytes(b"\x89PNG")
        csv = tmp_path.parent / f"{tmp_path.name}-data.csv"
        csv.write_text("a,b\n")
        assert main(["ingest", str(tmp_path), str(csv), "--no-progress"]) == 1
        captured = capsys.readouterr()
        assert "ingested 1 documents" in captured.out and "failed 2" in captured.out
        assert f"failed: {csv}: unsupported file type '.csv'" in captured.err
        assert "not ingested (1): unsupported file type '.png'" in captured.err
        assert main(["ingest", str(tmp_path), "--json"]) == 1
        summary = json.loads(capsys.readouterr().out)
        assert summary["skipped"] == 1 and summary["failed"] == 1
        assert [n["path"] for n in summary["not_ingested"]] == [
            str(tmp_path / "photo.png")
        ]

    def test_a_data_directory_that_is_a_file_is_a_one_line_error(
        self, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: Any
    ) -> None:
        (tmp_path / "home").write_text("not a directory")
        monkeypatch.setenv("RETRIEVAL_PIPELINE_HOME", str(tmp_path / "home"))
        monkeypatch.delenv("DATABASE_URL", raising=False)
        assert main(["query", "ledger"]) == EXIT_USAGE
        err = capsys.readouterr().err
        assert "Traceback" not in err and "a file is in the way" in err

    def test_a_database_url_never_shows_its_password_whatever_its_scheme(
        self, capsys: pytest.CaptureFixture[str], monkeypatch: Any
    ) -> None:
        for url in (
            "postgresql+psycopg://bob:hunter2@127.0.0.1:9/db",  # langchain-postgres'
            "mysql://bob:hunter2@127.0.0.1:9/db",
        ):
            monkeypatch.setenv("DATABASE_URL", url)
            assert main(["query", "ledger"]) == EXIT_DATABASE
            err = capsys.readouterr().err
            assert "hunter2" not in err and "bob:***@" in err, err
            if url.startswith("postgresql+"):  # read as postgresql://: it connects
                assert "postgresql://bob:***@127.0.0.1:9/db" in err
                assert "missing" not in err

    def test_missing_path_is_reported(
        self, store: Store, capsys: pytest.CaptureFixture[str], tmp_path: Path
    ) -> None:
        assert main(["ingest", str(tmp_path / "nope"), "--no-progress"]) == 1
        assert "no such file" in capsys.readouterr().err

    def test_delete_removes_a_document(
        self, ingested: Store, capsys: pytest.CaptureFixture[str]
    ) -> None:
        assert main(["delete", "teams/platform-team"]) == 0
        assert "deleted: teams/platform-team" in capsys.readouterr().out
        assert ingested.counts()["documents"] == 17

    def test_delete_of_a_missing_id_exits_1_says_so_and_deletes_the_others(
        self, ingested: Store, capsys: pytest.CaptureFixture[str]
    ) -> None:
        assert main(["delete", "teams/platform-team", "missing-id"]) == 1
        captured = capsys.readouterr()
        assert "deleted: teams/platform-team" in captured.out
        assert "not found: missing-id" in captured.err
        assert "--tenant" in captured.err and "missing-id" not in captured.out
        assert ingested.counts()["documents"] == 17

    @pytest.mark.parametrize(
        "tenant", ["", " ", " acme", "acme\t"], ids=["empty", "blank", "lead", "trail"]
    )
    @pytest.mark.parametrize(
        "command",
        [["ingest", "--no-progress"], ["query", "ledger"], ["delete", "x"]],
        ids=["ingest", "query", "delete"],
    )
    def test_a_blank_or_padded_tenant_is_a_usage_error(
        self,
        store: Store,
        sample_corpus: Path,
        capsys: pytest.CaptureFixture[str],
        command: list[str],
        tenant: str,
    ) -> None:
        paths = [str(sample_corpus)] if command[0] == "ingest" else []
        with pytest.raises(SystemExit) as info:
            main([*command, *paths, "--tenant", tenant])
        assert info.value.code == EXIT_USAGE
        err = capsys.readouterr().err
        assert "argument --tenant" in err and repr(tenant) in err
        assert "omit --tenant" in err or "--tenant 'acme'" in err
        assert store.counts()["documents"] == 0

    @pytest.mark.parametrize("value", ["", " , "])
    def test_an_empty_query_principals_is_a_usage_error_not_public_only(
        self, ingested: Store, capsys: pytest.CaptureFixture[str], value: str
    ) -> None:
        with pytest.raises(SystemExit) as info:
            main(["query", "refunds posted twice", "--principals", value])
        assert info.value.code == EXIT_USAGE
        err = capsys.readouterr().err
        assert "names no principal" in err
        assert "omit --principals to search public documents only" in err

    @pytest.mark.parametrize("command", [["ingest"], ["query", "refunds"]])
    @pytest.mark.parametrize("value", ["hr,", "hr,,ops", ",hr"])
    def test_an_empty_principal_entry_is_a_usage_error(
        self,
        store: Store,
        sample_corpus: Path,
        capsys: pytest.CaptureFixture[str],
        command: list[str],
        value: str,
    ) -> None:
        paths = [str(sample_corpus)] if command[0] == "ingest" else []
        with pytest.raises(SystemExit) as info:
            main([*command, *paths, "--principals", value])
        assert info.value.code == EXIT_USAGE
        assert "has an empty entry" in capsys.readouterr().err
        assert store.counts()["documents"] == 0

    def test_a_failed_file_is_printed_once_and_the_library_still_logs_it(
        self,
        ingestor: Any,
        tmp_path: Path,
        capsys: pytest.CaptureFixture[str],
        caplog: pytest.LogCaptureFixture,
    ) -> None:
        (tmp_path / "bad.md").write_bytes(b"\x00\x01")
        assert main(["ingest", str(tmp_path), "--no-progress"]) == 1
        assert capsys.readouterr().err.count("bad.md") == 1  # the failed: line
        assert not [r for r in caplog.records if "bad.md" in r.getMessage()]
        ingestor.ingest_paths([tmp_path])  # a library caller keeps the log line
        (record,) = [r for r in caplog.records if "bad.md" in r.getMessage()]
        assert record.levelname == "WARNING"

    def test_db_status_reports_the_running_server(
        self, store: Store, capsys: pytest.CaptureFixture[str]
    ) -> None:
        assert main(["db", "status"]) == 0
        assert "running" in capsys.readouterr().out

    def test_unreachable_external_database_exits_with_the_database_code(
        self, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        monkeypatch.setenv("DATABASE_URL", "postgresql://u:pw123@127.0.0.1:1/x")
        assert main(["query", "hello"]) == EXIT_DATABASE
        err = capsys.readouterr().err
        assert "pw123" not in err and "cannot connect" in err


class TestMaintain:
    def test_maintain_after_a_re_ingest_keeps_every_row_and_every_index_working(
        self, ingestor: Any, store: Store, tmp_path: Path, capsys: Any
    ) -> None:
        for revision in range(3):  # each revision replaces every chunk and posting
            docs = tmp_path / "docs"
            docs.mkdir(exist_ok=True)
            for n in range(20):
                (docs / f"d{n}.md").write_text(
                    f"# Doc {n}\n\nRevision {revision} of page {n} on ledgers, "
                    f"postings and balances, take {revision}.\n"
                )
            ingestor.ingest_paths([docs])
        counts = store.counts()
        sizes = store.maintain(reindex=True)
        assert set(sizes) == set(store.MAINTAINED_TABLES)
        assert sizes["chunk_terms"][1] <= sizes["chunk_terms"][0]
        assert store.counts() == counts  # maintenance never loses a row
        hits = Retriever(store, ingestor.embedder).retrieve(
            "revision 2 ledgers", limit=3
        )
        assert hits and all("Revision 2" in h.text for h in hits)
        assert main(["db", "maintain"]) == 0
        assert "chunk_terms: " in capsys.readouterr().out
