"""Shared fixtures: one embedded PostgreSQL and one local embedding model per session.

The server runs in a temporary data directory and is stopped at the end of the
session; nothing touches the user's own data directory.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
SAMPLE_CORPUS = REPO / "examples" / "sample_corpus"
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture(scope="session")
def rp_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    home = tmp_path_factory.mktemp("rp-home")
    previous = os.environ.get("RETRIEVAL_PIPELINE_HOME")
    os.environ["RETRIEVAL_PIPELINE_HOME"] = str(home)
    os.environ.pop("DATABASE_URL", None)
    yield home
    if previous is None:
        os.environ.pop("RETRIEVAL_PIPELINE_HOME", None)
    else:
        os.environ["RETRIEVAL_PIPELINE_HOME"] = previous


@pytest.fixture(scope="session")
def pg_url(rp_home: Path) -> Iterator[str]:
    from retrieval_pipeline.tools.store import EmbeddedPostgres

    server = EmbeddedPostgres(rp_home, keep_running=True)
    url = server.start()
    yield url
    server.stop()


@pytest.fixture(scope="session")
def session_store(pg_url: str):  # type: ignore[no-untyped-def]
    from retrieval_pipeline.tools.store import Store

    store = Store(pg_url)
    yield store
    store.close()


@pytest.fixture()
def store(session_store):  # type: ignore[no-untyped-def]
    """The session's store, emptied before each test."""
    with session_store.connection() as conn:
        conn.execute(
            "TRUNCATE documents, chunks, chunk_terms, term_stats, corpus_stats,"
            " entities, mentions, relations CASCADE"
        )
    return session_store


@pytest.fixture(scope="session")
def embedder():  # type: ignore[no-untyped-def]
    from retrieval_pipeline.tools.embeddings import resolve_embedder

    return resolve_embedder("local")


@pytest.fixture()
def ingestor(store, embedder):  # type: ignore[no-untyped-def]
    from retrieval_pipeline.ingest.job import Ingestor

    return Ingestor(store, embedder)


@pytest.fixture()
def retriever(store, embedder):  # type: ignore[no-untyped-def]
    from retrieval_pipeline.tools.retrieve import Retriever

    return Retriever(store, embedder)


@pytest.fixture()
def sample_corpus() -> Path:
    return SAMPLE_CORPUS


# Real-browser tests (tests/browser): headless Debian Chromium driven by selenium.
# Skipped, with the reason, when Chromium or chromedriver is missing (install them
# with ``apt-get install chromium chromium-driver``); ``RP_REQUIRE_BROWSER=1`` (set
# by ``.ci/run`` once they are installed) turns that skip into a failure. These live
# here, not in a tests/browser/conftest.py, because a second module named
# ``conftest`` shadows this one for ``from conftest import ...`` in the whole suite.

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")


def _binaries() -> tuple[str | None, str | None]:
    browser = next((p for n in CHROMIUM_NAMES if (p := shutil.which(n))), None)
    return browser, shutil.which("chromedriver")


def pytest_collection_modifyitems(
    config: pytest.Config, items: list[pytest.Item]
) -> None:
    browser, driver = _binaries()
    if browser and driver:
        return
    missing = " and ".join(
        name
        for name, found in (("chromium", browser), ("chromedriver", driver))
        if not found
    )
    reason = (
        f"{missing} not installed: the playground was NOT tested in a browser "
        "(apt-get install chromium chromium-driver)"
    )
    marked = [item for item in items if item.get_closest_marker("browser")]
    if marked and os.environ.get("RP_REQUIRE_BROWSER"):
        raise pytest.UsageError(f"RP_REQUIRE_BROWSER is set but {reason}")
    for item in marked:
        item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture()
def browser() -> Iterator[Any]:
    """A headless Chromium that keeps its console log."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary, driver = _binaries()
    assert binary and driver
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1280,1600",
    ):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    chrome = webdriver.Chrome(options=options, service=Service(driver))
    chrome.set_page_load_timeout(60)
    try:
        yield chrome
    finally:
        chrome.quit()
