"""What the embedded server's start failures say (the cause first, safe advice)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from retrieval_pipeline.tools.store.embedded import EmbeddedPostgres


def test_a_permission_problem_says_fix_permissions_not_reset(tmp_path: Path) -> None:
    server = EmbeddedPostgres(tmp_path)
    error = PermissionError(
        13, "Permission denied", str(tmp_path / "pgdata/PG_VERSION")
    )
    message = server._start_failure(error)
    assert "Permission denied" in message and "permissions" in message
    assert "db reset" not in message


def test_the_cause_line_comes_first_without_the_command_lines(tmp_path: Path) -> None:
    server = EmbeddedPostgres(tmp_path)
    (tmp_path / "pgdata").mkdir()
    (tmp_path / "pgdata" / "log").write_text("old shutdown\n")
    noise = "\n".join(
        f"/usr/lib/postgresql/bin/pg_ctl -D x -o opt{i}" for i in range(40)
    )
    error = subprocess.SubprocessError(
        f"{noise}\npg_ctl: could not start server\n{noise}"
    )
    message = server._start_failure(error)
    first = message.split("\n", 1)[0]
    assert "could not start server" in first and "opt3" not in first
    assert "db reset --yes" in first and "deleting every document" in first
    assert "may predate this attempt" in message and "old shutdown" in message
