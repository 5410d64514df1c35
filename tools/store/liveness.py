"""The pools' check on borrow: a dead connection is found without a round trip.

psycopg_pool's own check (``ConnectionPool.check_connection``) sends an empty query
on every borrow; a query borrows several times, so that was one extra round trip each
(about 35 us client time, and a statement for the server), nine per pipeline run.

An idle connection has nothing to read. When PostgreSQL closes one (a restart, a
terminated backend, a replica that stopped), it sends its FATAL message and closes the
socket, so the socket turns readable or reports a hang-up. Only then does the full
check run: it raises on a dead connection (the pool discards it and hands out another)
and consumes a stray notice on a live one. A connection psycopg already knows is
closed or broken fails at once.
"""

from __future__ import annotations

import select
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool


def check_idle_connection(conn: psycopg.Connection[Any]) -> None:
    """Raise if ``conn`` is dead; a round trip only when its socket has news."""
    if conn.closed or conn.broken:
        raise psycopg.OperationalError("the pooled connection is closed")
    try:
        poller = select.poll()  # poll, not select: no FD_SETSIZE limit on the fd
        poller.register(conn.fileno(), select.POLLIN | select.POLLPRI)
        pending = bool(poller.poll(0))
    except (AttributeError, OSError, ValueError, psycopg.Error):
        # No poll() on this platform, or no socket to look at: the full check.
        pending = True
    if pending:
        ConnectionPool.check_connection(conn)
