"""Links between the pages of one ingest, through the real ingest and graph fusion."""

from __future__ import annotations

from pathlib import Path

from retrieval_pipeline.graph.builder import build_pipeline
from retrieval_pipeline.graph.context import Context
from retrieval_pipeline.graph.resources import PipelineResources
from retrieval_pipeline.ingest.job import Ingestor
from retrieval_pipeline.ingest.site import LINK_RELATION
from retrieval_pipeline.tools.retrieve import Retriever
from retrieval_pipeline.tools.store.graph import GraphStore
from retrieval_pipeline.tools.store.records import document_key

QUESTION = "How do I install the frobnicator daemon?"


def page(title: str, body: str) -> str:
    return (
        f"<html><head><title>{title}</title></head><body>"
        '<div class="navheader"><a accesskey="p" href="index.html">Prev</a>'
        '<a accesskey="n" href="index.html">Next</a></div>'
        f"<main><h1>{title}</h1>{body}</main>"
        "<footer>Example manual, all rights reserved</footer></body></html>"
    )


def make_site(root: Path) -> None:
    root.mkdir(parents=True)
    (root / "index.html").write_text(
        page(
            "Example manual",
            '<ul><li><a href="guide/install.html">Installing</a></li>'
            '<li><a href="guide/tuning.html">Tuning</a></li></ul>',
        )
    )
    (root / "guide").mkdir()
    (root / "guide" / "install.html").write_text(
        page(
            "Installing the frobnicator",
            "<p>To install the frobnicator daemon, unpack the release and run the "
            "installer as root. Before the first start, set the options described in "
            '<a href="../ref/options.html#spool">the options reference</a>.</p>',
        )
    )
    (root / "guide" / "tuning.html").write_text(
        page("Tuning", "<p>Throughput depends on the number of worker threads.</p>")
    )
    (root / "ref").mkdir()
    (root / "ref" / "options.html").write_text(
        page(
            "Options reference",
            '<h2 id="spool">spool_directory</h2><p>Where queued parcels wait; it '
            "must be writable and on a local disk.</p>",
        )
    )
    for n in range(6):
        (root / f"filler{n}.html").write_text(
            page(f"Geology {n}", f"<p>Rivers carve valley number {n} slowly.</p>")
        )


def test_links_become_relations_that_graph_fusion_follows(
    ingestor: Ingestor, retriever: Retriever, tmp_path: Path
) -> None:
    site = tmp_path / "site"
    make_site(site)
    summary = ingestor.ingest_paths([site])
    assert summary.failed == 0 and summary.documents == 10
    with retriever.store.connection() as conn:
        relations = conn.execute(
            "SELECT d.source_id, count(*) FROM relations r"
            " JOIN documents d ON d.id = r.document_id WHERE r.type = %s"
            " GROUP BY 1 ORDER BY 1",
            (LINK_RELATION,),
        ).fetchall()
        contents = [r[0] for r in conn.execute("SELECT content FROM chunks")]
    # index -> install, tuning; install -> options. The nav bars link nowhere.
    assert relations == [("guide/install.html", 1), ("index.html", 2)]
    for content in contents:  # chrome and the shared footer are gone
        assert "Prev" not in content and "all rights reserved" not in content

    expansion = GraphStore(retriever.store).expand(
        {document_key("", "guide/install.html"): 1.0},
        retriever.scope(),
        top_entities=8,
        max_hops=2,
        frontier_cap=16,
        document_cap=20,
    )
    found = dict(expansion.documents)
    options = document_key("", "ref/options.html")
    assert options in found and found[options] <= 1.0

    output = build_pipeline(PipelineResources(retriever=retriever)).invoke(
        {"question": QUESTION, "limit": 8},
        context=Context(reranker="none", candidate_pool=1),
    )
    added = [c["document_id"] for c in output["chunks"] if c["graph_boosted"]]
    assert "ref/options.html" in added
    assert output["retrieval_debug"]["graph_added"] >= 1


def test_site_links_off_writes_no_relations(
    ingestor: Ingestor, retriever: Retriever, tmp_path: Path
) -> None:
    site = tmp_path / "site"
    make_site(site)
    ingestor.ingest_paths([site], site_links=False)
    with retriever.store.connection() as conn:
        count = conn.execute("SELECT count(*) FROM relations").fetchone()
    assert count is not None and count[0] == 0


def test_cli_no_site_links_flag(store: object, tmp_path: Path) -> None:
    from retrieval_pipeline.cli import main

    def relations() -> int:
        with store.connection() as conn:  # type: ignore[attr-defined]
            row = conn.execute("SELECT count(*) FROM relations").fetchone()
        assert row is not None
        return int(row[0])

    make_site(tmp_path / "off")
    assert main(["ingest", str(tmp_path / "off"), "--no-site-links", "--json"]) == 0
    assert relations() == 0
    make_site(tmp_path / "on")
    assert main(["ingest", str(tmp_path / "on"), "--json"]) == 0
    assert relations() > 0


SiteState = tuple[dict[str, str], list[tuple[str, str]], set[str]]


def _site_state(store: object) -> SiteState:
    """Revisions by page, links_to relations (source page, target entity), and the
    page entities their pages declare (an explicit mention by their home).
    """
    with store.connection() as conn:  # type: ignore[attr-defined]
        revisions = dict(conn.execute("SELECT source_id, revision FROM documents"))
        links = conn.execute(
            "SELECT d.source_id, t.name FROM relations r"
            " JOIN documents d ON d.id = r.document_id"
            " JOIN entities t ON t.id = r.target_id WHERE r.type = %s ORDER BY 1, 2",
            (LINK_RELATION,),
        ).fetchall()
        declared = {
            row[0]
            for row in conn.execute(
                "SELECT e.name FROM mentions m JOIN entities e ON e.id = m.entity_id"
                " JOIN documents d ON d.id = m.document_id"
                " WHERE m.origin = 'explicit' AND e.name = 'page:' || d.source_id"
            )
        }
    return revisions, links, declared


def test_one_page_ingested_alone_keeps_boilerplate_removal_links_and_entity(
    ingestor: Ingestor, store: object, tmp_path: Path
) -> None:
    site = tmp_path / "site"
    make_site(site)
    assert ingestor.ingest_paths([site]).documents == 10
    before = _site_state(store)
    assert ("guide/install.html", "page:ref/options.html") in before[1]
    assert {"page:guide/install.html", "page:ref/options.html"} <= before[2]

    # Unchanged and ingested alone (its folder holds 2 pages, too few to count
    # boilerplate on): the footer is still removed, so the page is unchanged.
    alone = ingestor.ingest_paths([site / "guide" / "install.html"])
    assert alone.failed == 0 and alone.skipped == 1 and alone.documents == 0
    folder = ingestor.ingest_paths([site / "guide"])
    assert folder.failed == 0 and folder.skipped == 2
    assert _site_state(store) == before

    # Edited and ingested alone: rewritten in place, footer removed, its link to a
    # stored page kept, and its page entity (index.html links to it) still declared.
    install = site / "guide" / "install.html"
    install.write_text(install.read_text().replace("as root", "as the root user"))
    edited = ingestor.ingest_paths([install])
    assert edited.failed == 0 and edited.documents == 1
    revisions, links, declared = _site_state(store)
    assert revisions.keys() == before[0].keys()
    assert revisions["guide/install.html"] != before[0]["guide/install.html"]
    assert links == before[1] and declared == before[2]
    with store.connection() as conn:  # type: ignore[attr-defined]
        body = " ".join(
            r[0]
            for r in conn.execute(
                "SELECT c.content FROM chunks c"
                " JOIN documents d ON d.id = c.document_id"
                " WHERE d.source_id = 'guide/install.html'"
            )
        )
    assert "as the root user" in body and "all rights reserved" not in body

    # The whole site again: nothing else changed.
    again = ingestor.ingest_paths([site])
    assert again.failed == 0 and again.documents == 0 and again.skipped == 10
