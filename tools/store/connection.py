"""The connection owner: pool, migrations, health. Every store component builds on it.

:class:`StoreConnection` opens the pool, applies the numbered migrations under an
advisory lock, and turns a dead server or a cancelled statement into a clear error.
The search, write, maintenance and embedding-index parts of :class:`~.store.Store`
are subclasses that borrow connections through :meth:`StoreConnection.connection`
(the primary); the query paths borrow through :meth:`StoreConnection.read_connection`,
which a read replica answers when one is configured and may (:mod:`.replicas`).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from importlib import resources
from typing import Any, Self

import psycopg
from psycopg import sql
from psycopg_pool import ConnectionPool, PoolTimeout

from retrieval_pipeline.errors import DatabaseTimeoutError, DatabaseUnavailableError
from retrieval_pipeline.settings import (
    STATEMENT_TIMEOUT_ENV,
    redact_url,
    replica_max_lag,
    replica_urls,
    statement_timeout,
)
from retrieval_pipeline.tools.store import sql_admin as qa
from retrieval_pipeline.tools.store.liveness import check_idle_connection
from retrieval_pipeline.tools.store.replicas import (
    CURRENT_WAL_LSN,
    PRIMARY,
    Replica,
    ReplicaReadFailed,
    ReplicaSet,
    first_line,
    note_server,
    parse_lsn,
    pin_primary,
    primary_pinned,
)

logger = logging.getLogger(__name__)

_MIGRATION_NAME = re.compile(r"^(\d{3})_[a-z0-9_]+\.sql$")
# An advisory lock key so that concurrent processes migrate one at a time.
MIGRATION_LOCK = 7_310_421


@dataclass(frozen=True)
class Migration:
    """A numbered SQL file."""

    version: int
    name: str
    sql: str


def load_migrations() -> list[Migration]:
    """Return the packaged migrations in version order."""
    folder = resources.files("retrieval_pipeline.tools.store") / "migrations"
    found = []
    for entry in folder.iterdir():
        match = _MIGRATION_NAME.match(entry.name)
        if match:
            found.append(Migration(int(match.group(1)), entry.name, entry.read_text()))
    return sorted(found, key=lambda m: m.version)


_FIRST_WAIT_S = 0.25
"""How long a borrow waits before checking whether the server is up at all."""
_PROBE_TTL_S = 1.0
"""How long the answer of that check is reused."""


class StoreConnection:
    """A pool of configured connections to a migrated database."""

    def __init__(
        self,
        conninfo: str,
        *,
        pool_size: int = 4,
        connect_timeout: float = 10,
        statement_timeout_ms: int | None = None,
        replica_urls: Sequence[str] | None = None,
        replica_max_lag_s: float | None = None,
    ) -> None:
        """Open a pool; ``statement_timeout_ms`` caps every statement (0 = none).

        The default comes from ``RETRIEVAL_PIPELINE_STATEMENT_TIMEOUT_MS`` (60000).
        ``replica_urls`` (default: ``DATABASE_REPLICA_URLS``) are streaming standbys
        that answer query reads; ``replica_max_lag_s`` (default:
        ``RETRIEVAL_PIPELINE_REPLICA_MAX_LAG_S``, 5 s) is the lag past which a
        replica is skipped.
        """
        self._conninfo = conninfo
        self._written_lsn: int | None = None
        self.statement_timeout_ms = (
            statement_timeout()
            if statement_timeout_ms is None
            else statement_timeout_ms
        )
        # One direct attempt first: a wrong URL or a stopped server fails at once with
        # the driver's reason, instead of pool retries until a timeout.
        try:
            psycopg.connect(
                conninfo, connect_timeout=max(1, int(connect_timeout))
            ).close()
        except psycopg.Error as exc:
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
            reason = redact_url(reason)  # the driver may quote the URL it was given
            raise DatabaseUnavailableError(
                f"cannot connect to PostgreSQL at {redact_url(conninfo)}: {reason}. "
                "Check that the server is running and DATABASE_URL is right, or unset "
                "DATABASE_URL to use the embedded server."
            ) from None
        self._pool = ConnectionPool(
            conninfo,
            min_size=1,
            max_size=pool_size,
            timeout=connect_timeout,
            check=check_idle_connection,  # recover after a server restart
            configure=self._configure_connection,
            open=False,
        )
        try:
            self._pool.open(wait=True, timeout=connect_timeout)
        except PoolTimeout as exc:
            self._pool.close()
            raise DatabaseUnavailableError(
                f"cannot connect to PostgreSQL at {redact_url(conninfo)} within "
                f"{connect_timeout:.0f}s. Is the server running? Check DATABASE_URL, "
                "or "
                "unset it to use the embedded server (`retrieval-pipeline db start`)."
            ) from exc
        self._pgvector_version: tuple[int, ...] | None = None
        self._server_probe: tuple[float, bool] = (-_PROBE_TTL_S - 1.0, True)
        urls = _replica_list(replica_urls)
        self._replicas = (
            ReplicaSet(
                urls,
                pool_size=pool_size,
                max_lag_s=(
                    replica_max_lag()
                    if replica_max_lag_s is None
                    else replica_max_lag_s
                ),
                configure=self._configure_connection,
            )
            if urls
            else None
        )
        self.migrate()
        if self._replicas is not None:
            # Known now, while the primary answers: reads keep going if it stops.
            self.pgvector_version()

    # --- lifecycle ----------------------------------------------------------------
    def _configure_connection(self, conn: psycopg.Connection[Any]) -> None:
        # Statements run in autocommit unless wrapped in ``conn.transaction()``.
        # Vectors travel as text literals cast in SQL, so no type registration needed.
        conn.autocommit = True
        conn.execute(
            qa.SET_STATEMENT_TIMEOUT.format(sql.Literal(int(self.statement_timeout_ms)))
        )

    def pool_stats(self) -> dict[str, int]:
        """The connection pool's counters (``pool_size``, ``pool_available``, ...)."""
        return dict(self._pool.get_stats())

    def close(self) -> None:
        """Close every pooled connection (the replicas' too)."""
        self._pool.close()
        if self._replicas is not None:
            self._replicas.close()

    @property
    def replicas(self) -> list[Replica]:
        """The configured read replicas (empty without any)."""
        return [] if self._replicas is None else list(self._replicas.replicas)

    @staticmethod
    def pin_primary() -> AbstractContextManager[None]:
        """A context in which every read goes to the primary (see :mod:`.replicas`)."""
        return pin_primary()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _borrow_timeout(self) -> float:
        """Seconds to wait for a pooled connection; fail fast when the server is down.

        A short wait first; if no connection came, one direct connection attempt
        tells a busy pool (wait the rest of the pool's timeout) from a server that is
        down (fail now, in about a second, instead of after the full timeout). The
        answer is kept for a second, so a busy pool is not probed by every waiter.
        """
        now = time.monotonic()
        checked_at, up = self._server_probe
        if now - checked_at > _PROBE_TTL_S:
            try:
                psycopg.connect(self._conninfo, connect_timeout=1).close()
                up = True
            except psycopg.Error:
                up = False
            self._server_probe = (time.monotonic(), up)
        return max(0.0, float(self._pool.timeout) - _FIRST_WAIT_S) if up else 0.0

    @contextmanager
    def _borrow(self) -> Iterator[psycopg.Connection[Any]]:
        try:
            conn = self._pool.getconn(timeout=_FIRST_WAIT_S)
        except PoolTimeout:
            rest = self._borrow_timeout()
            if rest <= 0:
                raise
            conn = self._pool.getconn(timeout=rest)
        try:
            with conn:  # the pool's own context behaviour: commit or roll back
                yield conn
        finally:
            self._pool.putconn(conn)

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        """Borrow a primary connection; a dead server becomes a clear error.

        With replicas configured, the primary's WAL position after the block is kept,
        so later reads go only to replicas that have replayed this store's writes.
        """
        with self._primary() as conn:
            yield conn
            if self._replicas is not None:
                row = conn.execute(CURRENT_WAL_LSN).fetchone()
                lsn = parse_lsn(row[0]) if row else None
                if lsn is not None and (self._written_lsn or 0) < lsn:
                    self._written_lsn = lsn

    @contextmanager
    def read_connection(self) -> Iterator[psycopg.Connection[Any]]:
        """Borrow a connection for a query read: a replica when one may answer.

        A replica answers when it is up, within the lag bound and has replayed this
        store's last write; else the primary does. When the primary is down, any
        replica that is up answers, however far behind. A replica failing inside the
        block raises :class:`~.replicas.ReplicaReadFailed`, which a
        :func:`~.replicas.replica_read` method retries on the primary.
        """
        chosen = None
        if self._replicas is not None and not primary_pinned():
            chosen = self._replicas.acquire(self._written_lsn)
        if chosen is None:
            entered = False
            try:
                with self._primary() as conn:
                    entered = True
                    note_server(PRIMARY)
                    yield conn
                return
            except DatabaseUnavailableError:
                # A failure inside the block, or no replica at all: nothing to try.
                if entered or self._replicas is None:
                    raise
                chosen = self._replicas.acquire(None, stale_ok=True)
                if chosen is None:
                    raise
        replica, conn = chosen
        try:
            with conn:
                note_server(replica.label)
                yield conn
        except psycopg.errors.QueryCanceled:
            raise DatabaseTimeoutError(
                f"a database statement ran past the {self.statement_timeout_ms} ms "
                f"statement timeout on {replica.label} and was cancelled. Retry; "
                "if it keeps happening, narrow the query or raise "
                f"{STATEMENT_TIMEOUT_ENV}."
            ) from None
        except (psycopg.OperationalError, psycopg.errors.SerializationFailure) as exc:
            # Lost connection, or a query cancelled by a recovery conflict.
            if isinstance(exc, psycopg.OperationalError):
                replica.mark_down(first_line(exc))
            raise ReplicaReadFailed(
                f"{replica.label} ({redact_url(replica.conninfo)}) failed mid-read: "
                f"{type(exc).__name__}"
            ) from None
        finally:
            replica.pool.putconn(conn)

    @contextmanager
    def _primary(self) -> Iterator[psycopg.Connection[Any]]:
        """Borrow a primary connection; a dead server becomes a clear error."""
        try:
            with self._borrow() as conn:
                yield conn
        except PoolTimeout as exc:
            role = "" if self._replicas is None else "the primary, "
            hint = (
                ""
                if self._replicas is None
                else " Queries go on from the read replicas; writes (ingest, delete)"
                " need the primary: retry them once it is up."
            )
            raise DatabaseUnavailableError(
                f"no database connection available from {role}"
                f"{redact_url(self._conninfo)} ({exc}). Check that PostgreSQL is "
                f"running.{hint}"
            ) from exc
        except psycopg.errors.QueryCanceled:
            raise DatabaseTimeoutError(
                f"a database statement ran past the {self.statement_timeout_ms} ms "
                "statement timeout and was cancelled (nothing was half-written). "
                "Retry; if it keeps happening, narrow the query or raise "
                f"{STATEMENT_TIMEOUT_ENV}."
            ) from None
        except psycopg.OperationalError as exc:
            # The server went away mid-statement (restart, crash, terminated backend).
            # The pool discards the broken connection; the transaction rolled back.
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            raise DatabaseUnavailableError(
                f"lost the connection to PostgreSQL at {redact_url(self._conninfo)} "
                f"({first or type(exc).__name__}); the statement was rolled back, "
                "nothing was half-written. Retry once the server is up."
            ) from None

    def migrate(self) -> list[int]:
        """Apply pending migrations in order; return the versions applied."""
        applied: list[int] = []
        with self.connection() as conn, conn.transaction():
            conn.execute(qa.ADVISORY_XACT_LOCK, (MIGRATION_LOCK,))
            conn.execute(qa.CREATE_SCHEMA_VERSION)
            done = {row[0] for row in conn.execute(qa.SCHEMA_VERSIONS)}
            for migration in load_migrations():
                if migration.version in done:
                    continue
                conn.execute(migration.sql.encode())
                conn.execute(qa.RECORD_MIGRATION, (migration.version, migration.name))
                applied.append(migration.version)
        if applied:
            logger.info("applied migrations %s", applied)
        return applied

    def schema_versions(self) -> list[int]:
        """Return the migration versions recorded in the database."""
        with self.connection() as conn:
            return [r[0] for r in conn.execute(qa.SCHEMA_VERSIONS)]

    def pgvector_version(self) -> tuple[int, ...]:
        """Return the installed pgvector version, e.g. ``(0, 8, 0)``."""
        if self._pgvector_version is None:
            with self.connection() as conn:
                row = conn.execute(qa.PGVECTOR_VERSION).fetchone()
            text = row[0] if row else "0"
            self._pgvector_version = tuple(int(p) for p in re.findall(r"\d+", text))
        return self._pgvector_version


def _replica_list(urls: Sequence[str] | None) -> list[str]:
    """The replica URLs given, else ``DATABASE_REPLICA_URLS``; blanks dropped."""
    given = replica_urls() if urls is None else urls
    return [url.strip() for url in given if url and url.strip()]
