"""Faster response encoding for LangServe's ``/invoke`` and ``/batch``.

LangServe builds each response as a pydantic model and encodes it with FastAPI's
``jsonable_encoder``, which dumps the model to JSON-mode Python data in Rust and then
walks that data again in Python, object by object (``bench/serve.py``'s profile: two
thirds of LangServe's time per ``/invoke`` on a ten-chunk answer). The second walk
changes nothing for data that is already JSON-compatible. ``install()`` gives
LangServe's module an encoder that stops after the first, Rust, pass for pydantic v2
models (anything else still goes to FastAPI's), and a JSON response rendered by
orjson instead of the standard library. The bodies parse to the same values
(``tests/unit/test_serve_encoding.py``); only float spelling may differ
(``1e-07`` against ``1e-7``), and a non-finite float, which Starlette refuses with
a 500, is written as ``null``.

This swaps two names in ``langserve.api_handler``, LangServe's own module: LangServe
is in maintenance mode and pinned below 1 here. When either name is missing (a
LangServe that changed), nothing is swapped and LangServe's own encoding stands.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson
from fastapi.encoders import jsonable_encoder
from pydantic import BaseModel
from starlette.responses import JSONResponse

_log = logging.getLogger(__name__)


def fast_jsonable(obj: Any, *args: Any, **kwargs: Any) -> Any:
    """``jsonable_encoder`` for a pydantic v2 model as LangServe calls it, in Rust.

    LangServe passes the response model alone; any other call is FastAPI's own.
    """
    if isinstance(obj, BaseModel) and not args and not kwargs:
        return obj.model_dump(mode="json", by_alias=True)
    return jsonable_encoder(obj, *args, **kwargs)


class OrjsonResponse(JSONResponse):
    """A ``JSONResponse`` rendered by orjson (compact, UTF-8, like Starlette's)."""

    def render(self, content: Any) -> bytes:
        """Compact UTF-8 JSON (a non-finite float becomes ``null``)."""
        try:
            return orjson.dumps(content)
        except TypeError:  # something orjson cannot encode: Starlette's own rules
            return super().render(content)


def install() -> bool:
    """Swap LangServe's response encoder and response class; idempotent.

    Returns whether the swap is in place.
    """
    try:
        from langserve import api_handler
    except ImportError:  # pragma: no cover - the serve extra brings langserve
        return False
    if getattr(api_handler, "jsonable_encoder", None) is fast_jsonable:
        return True
    if not (
        hasattr(api_handler, "jsonable_encoder")
        and hasattr(api_handler, "JSONResponse")
        and hasattr(api_handler, "_json_encode_response")
    ):
        _log.info("LangServe's response encoding changed; keeping its own")
        return False
    api_handler.jsonable_encoder = fast_jsonable  # type: ignore[attr-defined]
    api_handler.JSONResponse = OrjsonResponse  # type: ignore[attr-defined,misc]
    return True
