"""What guards the served routes: the endpoint set, input checks, error statuses.

A stream cannot answer 400 once its first event is out, so every data route's inputs
are checked before the pipeline runs (:func:`validate_inputs`, called by
:class:`~retrieval_pipeline.auth.RequestGate`), and the project's errors map to a
status and a message that names no server path (:func:`error_response`).
"""

from __future__ import annotations

import logging
from typing import Any, Literal, get_args

from fastapi.responses import JSONResponse, Response

from retrieval_pipeline.auth import bind_scope
from retrieval_pipeline.errors import (
    AccessDeniedError,
    ConfigurationError,
    DatabaseTimeoutError,
    DatabaseUnavailableError,
    InvalidQueryError,
    RetrievalPipelineError,
)

_log = logging.getLogger("retrieval_pipeline.serve")

EndpointName = Literal[
    "invoke",
    "batch",
    "stream",
    "stream_log",
    "input_schema",
    "output_schema",
    "config_schema",
    "playground",
]

SERVED_ENDPOINTS: tuple[EndpointName, ...] = get_args(EndpointName)
"""LangServe endpoints the app enables (``stream_events`` and feedback are off)."""

DATA_ROUTES = ("invoke", "batch", "stream", "stream_log")
MAX_BATCH_ITEMS = 64
"""Inputs one ``/batch`` request may hold: one caller cannot hold the server for
minutes (2,000 items took 28 s and stalled every other caller)."""


def validate_inputs(path: str, body: Any, *, keyed: bool) -> None:
    """Check a data route's inputs before any response starts.

    A stream cannot answer 400 once its first event is out, so the question, limit
    and access fields of ``/invoke``, ``/stream``, ``/stream_log`` and each
    ``/batch`` item are validated here, with the caller bound, exactly as the
    pipeline will read them. Inputs of the wrong shape are left to LangServe's 422.
    """
    from retrieval_pipeline.graph.routing import validate_input

    route = path.rstrip("/").rsplit("/", 1)[-1]
    if not path.startswith("/retrieve/") or route not in DATA_ROUTES:
        return
    if not isinstance(body, dict):
        raise InvalidQueryError("the request body must be a JSON object")
    config = body.get("config")
    if route == "batch":
        inputs = body.get("inputs")
        if not isinstance(inputs, list):
            raise InvalidQueryError("'inputs' must be a list of pipeline inputs")
        if len(inputs) > MAX_BATCH_ITEMS:
            raise InvalidQueryError(
                f"a batch holds at most {MAX_BATCH_ITEMS} inputs, got {len(inputs)}; "
                "split it into several requests"
            )
        if not all(isinstance(item, dict) for item in inputs):
            raise InvalidQueryError(
                "each item of 'inputs' must be an object with a 'question'"
            )
        if isinstance(config, list) and len(config) != len(inputs):
            raise InvalidQueryError(
                "'config' as a list needs one entry per item of 'inputs'"
            )
        configs = config if isinstance(config, list) else [config]
    else:
        inputs = [body.get("input")]
        configs = [config]
    if not all(c is None or isinstance(c, dict) for c in configs):
        raise InvalidQueryError("'config' must be an object (or, for batch, a list)")
    if body.get("kwargs") is not None and not isinstance(body["kwargs"], dict):
        raise InvalidQueryError("'kwargs' must be an object")
    for item in inputs:
        if isinstance(item, dict) and "question" in item:
            validate_input(bind_scope(item, keyed=keyed))  # type: ignore[arg-type]


def error_response(exc: RetrievalPipelineError) -> Response:
    """Map the project's errors to a status and a message that names no server path."""
    if isinstance(exc, DatabaseTimeoutError):
        _log.warning("database timeout: %s", exc)
        return JSONResponse(
            {
                "detail": "a database statement ran past the statement timeout and "
                "was cancelled (nothing was half-written); retry, or narrow the query"
            },
            503,
        )
    if isinstance(exc, DatabaseUnavailableError):
        _log.warning("database unavailable: %s", exc)
        return JSONResponse(
            {"detail": "the database is unavailable; retry shortly"},
            503,
            headers={"Retry-After": "1"},
        )
    if isinstance(exc, AccessDeniedError):
        return JSONResponse({"detail": str(exc)}, 403)
    if isinstance(exc, InvalidQueryError | ConfigurationError):
        return JSONResponse({"detail": str(exc)}, 400)
    # Another project error a request caused (a rejected record, a dimension
    # mismatch): the message is written for the user and names no secret.
    return JSONResponse({"detail": str(exc)}, 400)
