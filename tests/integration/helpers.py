"""Helpers shared by integration tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, settings


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def assert_stats_consistent(store: Any) -> None:
    """The BM25 statistics maintained at ingest equal a recount from scratch."""
    with store.connection() as conn:
        drift = conn.execute(
            """
            SELECT count(*) FROM (
                SELECT tenant, lexeme, count(*) AS df FROM chunk_terms
                GROUP BY tenant, lexeme
            ) AS actual FULL OUTER JOIN (SELECT * FROM term_stats WHERE df > 0) AS kept
            USING (tenant, lexeme)
            WHERE actual.df IS DISTINCT FROM kept.df
            """
        ).fetchone()[0]
        assert drift == 0, f"{drift} lexemes have a wrong document frequency"
        kept = conn.execute(
            "SELECT coalesce(sum(chunk_count), 0), coalesce(sum(total_length), 0)"
            " FROM corpus_stats"
        ).fetchone()
        actual = conn.execute(
            "SELECT count(*), coalesce(sum(lexeme_count), 0) FROM chunks"
        ).fetchone()
        assert tuple(kept) == tuple(actual)
        bad_lengths = conn.execute(
            """
            SELECT count(*) FROM chunks c
            WHERE c.lexeme_count <> coalesce(
                (SELECT sum(tf) FROM chunk_terms p WHERE p.chunk_id = c.id), 0)
            """
        ).fetchone()[0]
        assert bad_lengths == 0


def property_settings(max_examples: int) -> Any:
    """Hypothesis settings for the property and fuzz tests: reproducible in CI
    (derandomised, no example database), no per-example deadline (each example
    touches PostgreSQL), and fixtures shared across examples on purpose."""
    return settings(
        max_examples=max_examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )


def statements_sent(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every statement a psycopg connection executes from now on (to the test's end),
    as text with its whitespace collapsed (a composed statement is rendered first)."""
    sent: list[str] = []
    original = psycopg.Connection.execute

    def spy(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        text = query if isinstance(query, str | bytes) else query.as_string(self)
        if isinstance(text, bytes):
            text = text.decode()
        sent.append(" ".join(text.split()))
        return original(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Connection, "execute", spy)
    return sent
