"""What guards the served routes: the endpoint set, input checks, error statuses.

A stream cannot answer 400 once its first event is out, so every data route's inputs
are checked before the pipeline runs (:func:`validate_inputs`, called by
:class:`~retrieval_pipeline.auth.RequestGate`), and the project's errors map to a
status and a message that names no server path (:func:`error_response`).
"""

from __future__ import annotations

import functools
import json
import logging
from typing import Any, Literal, get_args

from fastapi.responses import JSONResponse, Response

from retrieval_pipeline.auth import bind_scope
from retrieval_pipeline.errors import (
    AccessDeniedError,
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


def served_route(path: str) -> str:
    """The LangServe endpoint a path names under ``/retrieve/`` (``invoke``, ...)."""
    if not path.startswith("/retrieve/"):
        return ""
    return path.rstrip("/").rsplit("/", 1)[-1]


def validate_inputs(path: str, body: Any, *, keyed: bool) -> None:
    """Check a data route's inputs before any response starts.

    A stream cannot answer 400 once its first event is out, so the question, limit
    and access fields of ``/invoke``, ``/stream``, ``/stream_log`` and each
    ``/batch`` item are validated here, with the caller bound, exactly as the
    pipeline will read them. Inputs of the wrong shape are left to LangServe's 422.
    """
    from retrieval_pipeline.graph.routing import validate_input

    route = served_route(path)
    if route not in DATA_ROUTES:
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
    if route == "batch":  # LangServe's batch path answers a bad item with a 500
        for number, item in enumerate(inputs, 1):
            check_input_shape(item, where=f"item {number} of 'inputs'")
    for item in inputs:
        if isinstance(item, dict) and "question" in item:
            validate_input(bind_scope(item, keyed=keyed))  # type: ignore[arg-type]


@functools.cache
def _input_adapter() -> Any:
    from pydantic import TypeAdapter

    from retrieval_pipeline.graph.state import PipelineInput

    return TypeAdapter(PipelineInput)


def check_input_shape(item: Any, *, where: str) -> None:
    """Raise a 400-mapped error when ``item`` is not a pipeline input.

    The same (lax) validation LangServe gives ``/invoke`` (its 422): a missing
    question, a tenant that is not text, a debug flag that is not a boolean. The
    message names the field and the rule, never the value sent.
    """
    from pydantic import ValidationError

    try:
        _input_adapter().validate_python(item)
    except ValidationError as exc:
        first = exc.errors(include_input=False, include_url=False)[0]
        field = ".".join(str(part) for part in first["loc"]) or "the input"
        raise InvalidQueryError(f"{where}: '{field}': {first['msg']}") from None


def error_status(exc: RetrievalPipelineError) -> tuple[int, str]:
    """The status and message a project error answers with (no server path in it)."""
    if isinstance(exc, DatabaseTimeoutError):
        _log.warning("database timeout: %s", exc)
        return (
            503,
            "a database statement ran past the statement timeout and was cancelled "
            "(nothing was half-written); retry, or narrow the query",
        )
    if isinstance(exc, DatabaseUnavailableError):
        _log.warning("database unavailable: %s", exc)
        return 503, "the database is unavailable; retry shortly"
    if isinstance(exc, AccessDeniedError):
        return 403, str(exc)
    # A bad query or setting, or another project error a request caused (a rejected
    # record, a dimension mismatch): the message is written for the user and names
    # no secret.
    return 400, str(exc)


def error_response(exc: RetrievalPipelineError) -> Response:
    """Map the project's errors to a status and a message that names no server path."""
    status, detail = error_status(exc)
    headers = (
        {"Retry-After": "1"} if isinstance(exc, DatabaseUnavailableError) else None
    )
    return JSONResponse({"detail": detail}, status, headers=headers)


STREAM_ROUTES = ("stream", "stream_log")


def _project_error(exc: BaseException) -> RetrievalPipelineError | None:
    """The project error ``exc`` is, or holds (an exception group's, at any depth)."""
    if isinstance(exc, RetrievalPipelineError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _project_error(inner)
            if found is not None:
                return found
    return None


class StreamErrors:
    """Pure ASGI middleware: a failing stream ends with its real status, cleanly.

    LangServe answers any error inside ``/stream`` or ``/stream_log`` with an
    ``error`` event saying 500 ``Internal Server Error`` and then re-raises, so the
    response body is cut off (a client reads an incomplete chunked body) and the log
    gets a traceback, even for a database outage that ``/invoke`` answers with a
    503. Here that error event is held back until the failure is known: a project
    error rewrites it to the status and message :func:`error_status` gives (503
    "the database is unavailable"), anything else keeps LangServe's 500 and is
    logged once with its traceback. Either way the body then ends properly. A
    client that goes away is not answered.
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        """Guard one ASGI call (streams only; everything else passes through)."""
        if scope["type"] != "http" or served_route(scope["path"]) not in STREAM_ROUTES:
            await self.app(scope, receive, send)
            return
        held: list[Any] = []
        started = ended = False

        async def guarded(message: Any) -> None:
            nonlocal started, ended
            if message["type"] == "http.response.start":
                started = True
            elif message["type"] == "http.response.body":
                if message.get("body", b"").startswith(b"event: error"):
                    held.append(message)
                    return
                if not message.get("more_body", False):
                    ended = True
                    for early in held:  # an error event no exception followed
                        await send(early)
                    held.clear()
            await send(message)

        try:
            await self.app(scope, receive, guarded)
        except BaseException as exc:
            error = _project_error(exc)
            if not started or ended or (error is None and not held):
                raise  # nothing sent yet (FastAPI answers), or a client gone away
            if error is None:
                _log.error("stream failed", exc_info=exc)
                status, detail = 500, "Internal Server Error"
            else:
                status, detail = error_status(error)
            from sse_starlette.sse import ServerSentEvent

            event = ServerSentEvent(
                event="error",
                data=json.dumps({"status_code": status, "message": detail}),
            )
            await send(
                {
                    "type": "http.response.body",
                    "body": event.encode(),
                    "more_body": True,
                }
            )
            await send({"type": "http.response.body", "body": b"", "more_body": False})
