"""API keys for LangGraph's Agent Server (``langgraph dev`` / ``langgraph up``).

``langgraph.json`` names :data:`auth` as the server's auth handler. It reads the same
key file as ``retrieval-pipeline serve`` (``RETRIEVAL_PIPELINE_API_KEYS``) and puts
the key's principals, tenant and grants on the authenticated user; every stage of the
pipeline then reads the caller's scope through
:func:`retrieval_pipeline.auth.bind_state`, with the same rules as the LangServe
endpoint: a run's ``principals`` can only narrow the key's grant (``[]`` means public
documents only), its tenant is always the key's, debug details need the ``debug``
grant.

Without a key file every request is let through without a scope and the run's own
``principals`` and ``tenant`` are trusted, as on a loopback LangServe server: set
``RETRIEVAL_PIPELINE_API_KEYS`` for anything but a local ``langgraph dev``.
"""

from __future__ import annotations

import os
from functools import lru_cache
from typing import Any

from langgraph_sdk import Auth

from retrieval_pipeline.auth import (
    SCOPE_CLAIM,
    ApiKeys,
    Identity,
    presented_credential,
)

API_KEYS_ENV = "RETRIEVAL_PIPELINE_API_KEYS"

auth = Auth()


@lru_cache(maxsize=4)
def _keys(path: str) -> ApiKeys:
    return ApiKeys.load(path)


def identify(headers: dict[bytes, bytes] | dict[str, str]) -> Identity | None:
    """The identity of the one credential in ``headers``; raises 401 without one."""
    path = os.environ.get(API_KEYS_ENV)
    if not path:
        return None
    key = presented_credential(headers.items())
    if key is None:
        raise Auth.exceptions.HTTPException(
            status_code=401,
            detail="send exactly one of 'Authorization: Bearer KEY' or "
            "'X-API-Key: KEY'",
        )
    identity = _keys(path).identify(key)
    if identity is None:
        raise Auth.exceptions.HTTPException(status_code=401, detail="invalid API key")
    return identity


@auth.authenticate
async def authenticate(headers: dict[bytes, bytes]) -> dict[str, Any]:
    """Authenticate one Agent Server request by its API key."""
    identity = identify(headers)
    if identity is None:
        return {"identity": "local", "is_authenticated": True}
    return {
        "identity": identity.name,
        "is_authenticated": True,
        SCOPE_CLAIM: {
            "name": identity.name,
            "principals": list(identity.principals),
            "tenant": identity.tenant,
            "grants": sorted(identity.grants),
        },
    }
