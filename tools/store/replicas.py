"""Read replicas: which server answers a query, and when a replica may answer one.

A store with ``DATABASE_REPLICA_URLS`` (or ``replica_urls=``) keeps one small pool
per streaming standby. Query reads (:meth:`StoreConnection.read_connection`) take
the replicas in turn and use one only when it is

- up (a failed connection marks it down; a background connection attempt, at most
  once a second, brings it back),
- a standby (``pg_is_in_recovery()``), lagging at most the bound
  (``RETRIEVAL_PIPELINE_REPLICA_MAX_LAG_S``, default 5 s), and
- caught up with this store's own last write: its ``pg_last_wal_replay_lsn()`` has
  reached the primary's ``pg_current_wal_lsn()`` taken after that write
  (read-your-writes).

Otherwise the primary answers. A replica that fails in the middle of a query raises
:class:`ReplicaReadFailed`; a read method decorated with :func:`replica_read` then
runs once more on the primary (reads are idempotent), so the caller sees no error.
:func:`pin_primary` sends every read in its block to the primary. The consistency a
caller gets is written up in ``docs/replicas.md``.
"""

from __future__ import annotations

import functools
import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from retrieval_pipeline.errors import DatabaseUnavailableError
from retrieval_pipeline.settings import redact_url
from retrieval_pipeline.tools.store.liveness import check_idle_connection

logger = logging.getLogger(__name__)

PRIMARY = "primary"
"""The label of the primary in ``retrieval_debug.served_by``."""

CHECK_INTERVAL_S = 1.0
"""How long a replica's health and lag answer is reused before it is asked again."""
BORROW_TIMEOUT_S = 0.5
"""How long a query waits for a replica connection before it takes the primary."""

# One round trip: standby or not, how far it has replayed, and its lag in seconds.
# A standby that has replayed all it received is not behind (an idle primary sends
# nothing, so the age of the last replayed commit would overstate the lag).
STANDBY_STATE = """
SELECT pg_is_in_recovery(),
       pg_last_wal_replay_lsn()::text,
       CASE
         WHEN NOT pg_is_in_recovery() THEN 0.0
         WHEN pg_last_wal_receive_lsn() IS NOT NULL
              AND pg_last_wal_receive_lsn() <= pg_last_wal_replay_lsn() THEN 0.0
         ELSE coalesce(extract(epoch FROM clock_timestamp()
                                          - pg_last_xact_replay_timestamp()), 0.0)
       END::float8
"""
CURRENT_WAL_LSN = "SELECT pg_current_wal_insert_lsn()::text"

_FORCE_PRIMARY: ContextVar[bool] = ContextVar("rp_force_primary", default=False)
_SERVED_BY: ContextVar[set[str] | None] = ContextVar("rp_served_by", default=None)

P = ParamSpec("P")
R = TypeVar("R")


class ReplicaReadFailed(DatabaseUnavailableError):
    """A replica failed in the middle of a read (the read is retried on the primary)."""


def parse_lsn(text: str | None) -> int | None:
    """``'16/B374D848'`` as a number (``None`` stays ``None``)."""
    if not text:
        return None
    high, _, low = text.partition("/")
    return (int(high, 16) << 32) | int(low, 16)


def primary_pinned() -> bool:
    """Whether reads in this context must go to the primary."""
    return _FORCE_PRIMARY.get()


@contextmanager
def pin_primary() -> Iterator[None]:
    """Send every read in the block to the primary (strict read-after-write)."""
    token = _FORCE_PRIMARY.set(True)
    try:
        yield
    finally:
        _FORCE_PRIMARY.reset(token)


@contextmanager
def recording_servers() -> Iterator[set[str]]:
    """Collect the labels of the servers that answer reads in the block."""
    servers: set[str] = set()
    token = _SERVED_BY.set(servers)
    try:
        yield servers
    finally:
        _SERVED_BY.reset(token)


def note_server(label: str) -> None:
    """Record that ``label`` answered a read (when a recorder is active)."""
    servers = _SERVED_BY.get()
    if servers is not None:
        servers.add(label)


def replica_read(method: Callable[P, R]) -> Callable[P, R]:
    """Run a read again on the primary when its replica failed mid-query."""

    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return method(*args, **kwargs)
        except ReplicaReadFailed as exc:
            logger.warning("%s; retrying the read on the primary", exc)
            with pin_primary():
                return method(*args, **kwargs)

    return wrapper


@dataclass(frozen=True)
class ReplicaHealth:
    """What the last check of a replica found."""

    up: bool = True
    checked_at: float = float("-inf")
    standby: bool = True
    lag_s: float | None = None
    replay_lsn: int | None = None
    reason: str = "not checked yet"


class Replica:
    """One streaming standby: a small pool and its last health answer."""

    def __init__(
        self,
        index: int,
        conninfo: str,
        *,
        pool_size: int,
        configure: Callable[[psycopg.Connection[Any]], None],
    ) -> None:
        self.label = f"replica {index}"
        self.conninfo = conninfo
        # Down until a first connection attempt (in the background) succeeds.
        self.health = ReplicaHealth(up=False, reason="not reached yet")
        self._probe_lock = threading.Lock()
        # No connection at start: a replica that is down must not delay the store.
        self.pool = ConnectionPool(
            conninfo,
            min_size=0,
            max_size=pool_size,
            timeout=BORROW_TIMEOUT_S,
            check=check_idle_connection,
            configure=configure,
            reconnect_timeout=0,  # a failed connect is reported, not retried for 5 min
            open=False,
        )
        self.pool.open(wait=False)
        self._probe()

    def mark_down(self, reason: str) -> None:
        """Skip this replica until the next check finds it up."""
        if self.health.up:
            logger.warning("%s is down: %s", self.label, reason)
        self.health = ReplicaHealth(False, time.monotonic(), reason=reason)

    def _probe(self) -> None:
        """Start one connection attempt in the background, at most once a second.

        A query never waits for it: the replica rejoins once the attempt succeeds.
        """
        if time.monotonic() - self.health.checked_at < CHECK_INTERVAL_S:
            return
        if not self._probe_lock.acquire(blocking=False):
            return  # a probe is running
        threading.Thread(
            target=self._probe_now, name=f"probe {self.label}", daemon=True
        ).start()

    def _probe_now(self) -> None:
        try:
            psycopg.connect(self.conninfo, connect_timeout=2).close()
        except psycopg.Error as exc:
            self.mark_down(first_line(exc))
        else:
            if not self.health.up:
                logger.info("%s is up", self.label)
            self.health = ReplicaHealth(up=True, reason="up; not checked yet")
        finally:
            self._probe_lock.release()

    def check(self, conn: psycopg.Connection[Any]) -> ReplicaHealth:
        """Ask the replica whether it is a standby, its replay position and lag."""
        row = conn.execute(STANDBY_STATE).fetchone()
        assert row is not None
        standby, replay, lag = bool(row[0]), parse_lsn(row[1]), float(row[2])
        reason = "ok" if standby else "not a standby (pg_is_in_recovery() is false)"
        self.health = ReplicaHealth(
            True, time.monotonic(), standby, lag, replay, reason
        )
        return self.health

    def borrow(
        self, required_lsn: int | None, max_lag_s: float, *, stale_ok: bool = False
    ) -> psycopg.Connection[Any] | None:
        """A connection when this replica may answer now, else ``None``.

        ``required_lsn`` is the primary's position after this store's last write;
        ``stale_ok`` (the primary is down) waives it and the lag bound.
        """
        if not self.health.up:
            self._probe()
            return None
        try:
            conn = self.pool.getconn(timeout=BORROW_TIMEOUT_S)
        except PoolTimeout as exc:
            self.mark_down(f"no connection within {BORROW_TIMEOUT_S}s ({exc})")
            return None
        try:
            health = self.health
            behind = required_lsn is not None and (
                health.replay_lsn is None or health.replay_lsn < required_lsn
            )
            if behind or time.monotonic() - health.checked_at > CHECK_INTERVAL_S:
                health = self.check(conn)
            usable = health.standby and (
                stale_ok
                or (
                    (health.lag_s or 0.0) <= max_lag_s
                    and (
                        required_lsn is None or (health.replay_lsn or 0) >= required_lsn
                    )
                )
            )
        except psycopg.Error as exc:
            self.pool.putconn(conn)
            self.mark_down(first_line(exc))
            return None
        if not usable:
            self.pool.putconn(conn)
            return None
        return conn

    def close(self) -> None:
        """Close the replica's pool."""
        self.pool.close()


class ReplicaSet:
    """The replicas of one store, taken in turn (round-robin)."""

    def __init__(
        self,
        urls: Sequence[str],
        *,
        pool_size: int,
        max_lag_s: float,
        configure: Callable[[psycopg.Connection[Any]], None],
    ) -> None:
        self.max_lag_s = max_lag_s
        self.replicas = [
            Replica(i, url, pool_size=pool_size, configure=configure)
            for i, url in enumerate(urls, start=1)
        ]
        self._turn = itertools.count()

    def acquire(
        self, required_lsn: int | None, *, stale_ok: bool = False
    ) -> tuple[Replica, psycopg.Connection[Any]] | None:
        """The next replica that may answer, with a connection; ``None`` if none."""
        count = len(self.replicas)
        start = next(self._turn)
        for offset in range(count):
            replica = self.replicas[(start + offset) % count]
            conn = replica.borrow(required_lsn, self.max_lag_s, stale_ok=stale_ok)
            if conn is not None:
                return replica, conn
        return None

    def close(self) -> None:
        """Close every replica's pool."""
        for replica in self.replicas:
            replica.close()


@dataclass(frozen=True)
class ServerState:
    """One server as ``db status`` shows it."""

    label: str
    url: str  # redacted
    role: str  # primary, standby, or not a standby
    up: bool
    lag_s: float | None = None
    lag_bytes: int | None = None
    detail: str = ""


def server_states(primary_url: str, replica_urls: Sequence[str]) -> list[ServerState]:
    """Connect to each server directly and report its role, state and lag.

    Lag in bytes is the primary's current WAL position minus the replica's replay
    position (when both answer); lag in seconds is the replica's own estimate.
    """
    states: list[ServerState] = []
    primary_lsn: int | None = None
    try:
        with psycopg.connect(primary_url, connect_timeout=2) as conn:
            row = conn.execute(
                "SELECT pg_is_in_recovery(), CASE WHEN pg_is_in_recovery() THEN "
                "NULL ELSE pg_current_wal_lsn()::text END"
            ).fetchone()
        assert row is not None
        primary_lsn = parse_lsn(row[1])
        role = "primary" if not row[0] else "standby (expected the primary)"
        states.append(ServerState(PRIMARY, redact_url(primary_url), role, True))
    except psycopg.Error as exc:
        states.append(
            ServerState(
                PRIMARY,
                redact_url(primary_url),
                "primary",
                False,
                None,
                None,
                first_line(exc),
            )
        )
    for index, url in enumerate(replica_urls, start=1):
        label = f"replica {index}"
        try:
            with psycopg.connect(url, connect_timeout=2) as conn:
                row = conn.execute(STANDBY_STATE).fetchone()
            assert row is not None
        except psycopg.Error as exc:
            states.append(
                ServerState(
                    label,
                    redact_url(url),
                    "standby",
                    False,
                    None,
                    None,
                    first_line(exc),
                )
            )
            continue
        replay = parse_lsn(row[1])
        lag_bytes = (
            max(0, primary_lsn - replay)
            if primary_lsn is not None and replay is not None
            else None
        )
        role = "standby" if row[0] else "not a standby"
        states.append(
            ServerState(label, redact_url(url), role, True, float(row[2]), lag_bytes)
        )
    return states


def first_line(exc: BaseException) -> str:
    """The first line of an error's message (its type name when it has none)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
