"""Bound a blocking provider call by a wall-clock deadline.

HTTP clients time out per phase (connect, each read), so a peer that drips its reply
or a client that sleeps out a ``Retry-After`` can run far past the caller's budget.
The call runs on a shared worker thread instead and the caller waits at most
``deadline_s``; a call past its deadline is abandoned (its client's own timeout ends
it) and the caller falls back at once.
"""

from __future__ import annotations

import contextvars
import functools
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, TypeVar

T = TypeVar("T")

_pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix="rp-provider")
_in_flight = 0
_in_flight_lock = threading.Lock()


def tracked(fn: Callable[..., T]) -> Callable[..., T]:
    """``fn``, counted in :func:`calls_in_flight` while it runs."""

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> T:
        global _in_flight
        with _in_flight_lock:
            _in_flight += 1
        try:
            return fn(*args, **kwargs)
        finally:
            with _in_flight_lock:
                _in_flight -= 1

    return run


def calls_in_flight() -> int:
    """Provider calls still running, abandoned past their deadline ones included.

    A command-line run that has answered need not wait for them: the interpreter
    would join their threads at exit, holding the shell until the client's own
    timeout ends a hung call.
    """
    with _in_flight_lock:
        return _in_flight


class DeadlineExceeded(TimeoutError):
    """The call did not answer within its deadline."""


def call_with_deadline(fn: Callable[[], T], deadline_s: float) -> T:
    """Run ``fn()`` with the caller's context variables; wait ``deadline_s`` at most."""
    context = contextvars.copy_context()

    def run() -> T:
        return context.run(fn)

    future = _pool.submit(tracked(run))
    try:
        return future.result(timeout=max(deadline_s, 0.0))
    except FutureTimeout:
        future.cancel()
        raise DeadlineExceeded(f"no answer within {deadline_s:g}s") from None
