"""Query embedding futures: a call that fails (or finishes) before its bookkeeping.

A provider that refuses at once (a 500 over a kept-alive connection, a refused
connection) can finish the query's future before ``query_future`` registers its
done-callback. The callback then runs at once, in the caller's thread; it must not
wait on a lock that thread already holds (it did: every later query of the process
hung on that lock).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator

import pytest
from langchain_core.embeddings import Embeddings

from retrieval_pipeline.tools.embeddings import Embedder, EmbeddingUnavailable


class _Refusing(Embeddings):
    """A provider that fails every call at once (the LangChain interface)."""

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        raise ConnectionRefusedError("refused")

    def embed_query(self, text: str) -> list[float]:
        raise ConnectionRefusedError("refused")


class _Instant(Embeddings):
    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self.embed_query(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return [float(len(text)), 1.0, 0.0]


@pytest.fixture()
def busy_switching() -> Iterator[None]:
    """Hand the GIL over as often as possible, so the race shows within a test."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def _within(seconds: float, work: object) -> None:
    done = threading.Event()
    failure: list[BaseException] = []

    def run() -> None:
        try:
            work()  # type: ignore[operator]
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test thread
            failure.append(exc)
        finally:
            done.set()

    threading.Thread(target=run, daemon=True).start()
    assert done.wait(seconds), "query embedding hung (a lock taken twice)"
    if failure:
        raise failure[0]


@pytest.mark.usefixtures("busy_switching")
def test_a_provider_failing_at_once_never_hangs_a_query() -> None:
    embedder = Embedder(_Refusing(), model="refusing", version="1", concurrency=None)

    def queries() -> None:
        for i in range(400):
            with pytest.raises(EmbeddingUnavailable, match="ConnectionRefusedError"):
                embedder.embed_query_within(f"question {i}", 5.0)

    _within(60.0, queries)
    assert embedder._pending == {}  # every finished call was forgotten


@pytest.mark.usefixtures("busy_switching")
def test_fast_answers_are_cached_and_forgotten_as_pending() -> None:
    embedder = Embedder(_Instant(), model="instant", version="1", concurrency=None)

    def queries() -> None:
        for i in range(400):
            text = f"q{i % 50}"
            expected = [float(len(text)), 1.0, 0.0]
            assert embedder.embed_query_within(text, 5.0) == expected

    _within(60.0, queries)
    assert embedder._pending == {}
