"""Who is calling, and what they may read: API keys, the request gate, scope binding.

One binding, in two halves that nothing in between can bypass:

1. :class:`RequestGate`, a pure ASGI middleware around the whole app, authenticates
   every HTTP request (every route but ``/healthz``) and puts the caller's
   :class:`Identity` in a context variable for the duration of the request. Work the
   request starts (LangServe's batch tasks, executor threads, SSE streams) copies the
   context, so it sees the same caller; no request body, config or header that
   LangServe forwards can set it.
2. :func:`bind_scope`, run as the first step of the served pipeline on every input
   (``/invoke``, each ``/batch`` item, ``/stream``, ``/stream_log``, the playground's
   config-hash routes), replaces the input's access fields with the caller's scope.

Scope rules (:func:`scope_for`):

- ``principals`` absent: the key's grant. A list: intersected with the grant (the
  empty list means public documents only). Anything else (``null``, a string, nested
  lists) is a 400: an access value we cannot read is never guessed at.
- ``tenant``: always the key's; a different value in the body is ignored and counted.
- ``debug`` (timings, raw channel scores, the index revision): only when asked for
  and the key carries the ``debug`` grant.
"""

from __future__ import annotations

import difflib
import hashlib
import hmac
import json
import os
from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from retrieval_pipeline.errors import (
    AccessDeniedError,
    ConfigurationError,
    InvalidQueryError,
    RetrievalPipelineError,
)
from retrieval_pipeline.tools.retrieve import check_scope_values

GRANTS = frozenset({"debug", "metrics"})
"""What a key may carry beyond principals: ``debug`` (the debug block's timings, raw
scores and index revision) and ``metrics`` (``/metrics``). ``admin`` means both."""
PUBLIC_PATHS = frozenset({"/healthz"})
"""Paths that answer without a key (a load balancer's health check)."""
MAX_BODY_BYTES = 1 << 20
"""A request body larger than this is refused (413) before anything parses it."""
_DRAIN_LIMIT = 16 * MAX_BODY_BYTES
MAX_JSON_DEPTH = 32
"""A JSON body nested deeper than this is refused (400); real inputs need about 5."""


@dataclass(frozen=True)
class Identity:
    """What an API key grants: a name (for logs), principals, a tenant, grants."""

    name: str
    principals: tuple[str, ...]
    tenant: str | None
    grants: frozenset[str] = frozenset()


_CALLER: ContextVar[Identity | None] = ContextVar(
    "retrieval_pipeline_caller", default=None
)


def current_identity() -> Identity | None:
    """The authenticated caller of the request being served (None outside one)."""
    return _CALLER.get()


@dataclass
class ApiKeys:
    """API keys mapped to identities, loaded from a JSON or YAML file.

    ::

        keys:
          - name: support-bot
            key_env: SUPPORT_BOT_KEY      # the key itself lives in the environment
            principals: [support]
            tenant: acme
          - name: ops
            sha256: 5e88...               # or the hex SHA-256 of the key
            principals: [ops, security]
            grants: [debug, metrics]      # optional: debug block details, /metrics

    Keys are compared as SHA-256 digests in constant time; the file never needs to
    hold a key in clear. Callers send ``Authorization: Bearer KEY`` or
    ``X-API-Key: KEY``.
    """

    by_digest: dict[bytes, Identity] = field(default_factory=dict)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> ApiKeys:
        """Read and validate a key file; errors name the file and the entry."""
        file = Path(path)
        try:
            raw = yaml.safe_load(file.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigurationError(f"cannot read API key file {file}: {exc}") from exc
        entries = raw.get("keys") if isinstance(raw, Mapping) else None
        if not isinstance(entries, list) or not entries:
            raise ConfigurationError(
                f"API key file {file} must hold a non-empty list under 'keys'"
            )
        keys = cls()
        for index, entry in enumerate(entries):
            where = f"{file}: keys[{index}]"
            if not isinstance(entry, Mapping) or not entry.get("name"):
                raise ConfigurationError(f"{where} needs a 'name'")
            _refuse_unknown_fields(entry, where)
            principals = entry.get("principals", [])
            if not isinstance(principals, list) or not all(
                isinstance(p, str) and p.strip() for p in principals
            ):
                raise ConfigurationError(
                    f"{where}: 'principals' must be a list of non-empty strings"
                )
            tenant = entry.get("tenant")
            if "tenant" in entry and not (isinstance(tenant, str) and tenant.strip()):
                # `tenant:` or `tenant: null` would read as "no tenant": the key
                # would see the untenanted documents instead of its tenant's.
                raise ConfigurationError(
                    f"{where}: 'tenant' must be a non-empty string, got {tenant!r}; "
                    "remove the key for a key with no tenant"
                )
            digest = _entry_digest(entry, where)
            if digest in keys.by_digest:
                raise ConfigurationError(f"{where}: duplicate key")
            keys.by_digest[digest] = Identity(
                str(entry["name"]),
                tuple(principals),
                tenant,
                _grants(entry.get("grants", []), where),
            )
        return keys

    def identify(self, key: str) -> Identity | None:
        """The identity of ``key``, or None (constant-time over all keys)."""
        digest = hashlib.sha256(key.encode("utf-8", "replace")).digest()
        found: Identity | None = None
        for candidate, identity in self.by_digest.items():
            if hmac.compare_digest(candidate, digest):
                found = identity
        return found


_ENTRY_FIELDS = frozenset(
    {"name", "key_env", "sha256", "principals", "tenant", "grants"}
)
MIN_KEY_LENGTH = 16
"""Shortest key read from ``key_env``: shorter ones can be guessed."""


def _refuse_unknown_fields(entry: Mapping[str, Any], where: str) -> None:
    """Refuse a field a key entry does not have (``tennant: acme``, ``tenants``).

    Ignored, a misspelt ``tenant`` would give the key no tenant, and so the
    untenanted documents: the file fails closed, as ingest does.
    """
    unknown = sorted(str(k) for k in entry if k not in _ENTRY_FIELDS)
    if not unknown:
        return
    hints = []
    for name in unknown:
        close = difflib.get_close_matches(name.lower(), sorted(_ENTRY_FIELDS), n=1)
        if close:
            hints.append(f"'{name}' (did you mean '{close[0]}'?)")
        else:
            hints.append(f"'{name}'")
    raise ConfigurationError(
        f"{where}: unknown field{'s' if len(unknown) > 1 else ''} "
        f"{', '.join(hints)}; an entry has {', '.join(sorted(_ENTRY_FIELDS))}"
    )


def _grants(value: object, where: str) -> frozenset[str]:
    if not isinstance(value, list) or not all(isinstance(g, str) for g in value):
        raise ConfigurationError(f"{where}: 'grants' must be a list of strings")
    grants = set(value)
    if "admin" in grants:
        grants = (grants - {"admin"}) | GRANTS
    unknown = grants - GRANTS
    if unknown:
        raise ConfigurationError(
            f"{where}: unknown grants {sorted(unknown)}; valid: "
            f"{', '.join(sorted(GRANTS | {'admin'}))}"
        )
    return frozenset(grants)


def _entry_digest(entry: Mapping[str, Any], where: str) -> bytes:
    if entry.get("key_env"):
        value = os.environ.get(str(entry["key_env"]))
        if not value:
            raise ConfigurationError(
                f"{where}: environment variable {entry['key_env']} is not set"
            )
        if len(value) < MIN_KEY_LENGTH:
            raise ConfigurationError(
                f"{where}: the key in {entry['key_env']} has {len(value)} characters; "
                f"a key needs at least {MIN_KEY_LENGTH}: make one with python -c "
                "'import secrets; print(secrets.token_urlsafe(32))'"
            )
        return hashlib.sha256(value.encode("utf-8")).digest()
    if entry.get("sha256"):
        try:
            digest = bytes.fromhex(str(entry["sha256"]))
        except ValueError:
            digest = b""
        if len(digest) != 32:
            raise ConfigurationError(f"{where}: 'sha256' must be 64 hex digits")
        return digest
    raise ConfigurationError(f"{where} needs 'key_env' or 'sha256'")


@dataclass(frozen=True)
class Scope:
    """The access fields a request runs with, and how the body's values were read."""

    principals: list[str]
    tenant: str | None
    debug: bool
    narrowed: bool = False  # the body named principals the key does not hold
    tenant_overridden: bool = False  # the body named another tenant


def scope_for(identity: Identity, requested: Mapping[str, Any]) -> Scope:
    """Principals, tenant and debug for one input: narrowed by it, never widened."""
    granted = list(identity.principals)
    narrowed = False
    if "principals" in requested:
        wanted = requested["principals"]
        if not isinstance(wanted, list | tuple):
            raise InvalidQueryError(
                "principals must be a list of strings (the empty list means public "
                "documents only); omit it to use the API key's grant"
            )
        check_scope_values(principals=list(wanted))
        asked = set(wanted)
        narrowed = bool(asked - set(granted))
        granted = [p for p in granted if p in asked]
    tenant = requested.get("tenant", identity.tenant)
    return Scope(
        principals=granted,
        tenant=identity.tenant,
        debug=requested.get("debug") is True and "debug" in identity.grants,
        narrowed=narrowed,
        tenant_overridden="tenant" in requested and tenant != identity.tenant,
    )


def bind_scope(
    payload: object,
    *,
    keyed: bool,
    on_scope: Callable[[Scope], None] | None = None,
) -> dict[str, Any]:
    """The pipeline input with the current caller's scope bound into it.

    ``keyed``: the app authenticates callers, so a missing caller is refused (fail
    closed); without keys (a loopback server) the body's access fields are trusted
    but still validated.
    """
    if not isinstance(payload, Mapping):
        raise InvalidQueryError("the input must be an object with a 'question'")
    body = dict(payload)
    if not keyed:
        check_scope_values(
            principals=body.get("principals", []),
            tenant=body.get("tenant"),
            doc_ids=body.get("doc_ids"),
        )
        body["debug"] = body.get("debug") is True
        return body
    identity = current_identity()
    if identity is None:
        raise AccessDeniedError("this request is not authenticated")
    scope = scope_for(identity, body)
    if on_scope is not None:
        on_scope(scope)
    body.update(principals=scope.principals, tenant=scope.tenant, debug=scope.debug)
    return body


# --- the request gate ---------------------------------------------------------------
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class RequestGate:
    """Pure ASGI middleware: authenticate, bound the body, bind the caller.

    - Every path except :data:`PUBLIC_PATHS` needs a valid key when keys are
      configured (401 otherwise); ``/metrics`` also needs the ``metrics`` grant (403).
    - ``allowed_hosts``: when given, a request whose ``Host`` is not one of these
      names is a 400 on every path. A server without keys trusts request bodies and
      answers only ``localhost`` names, so a web page that rebinds its own hostname to
      127.0.0.1 (DNS rebinding) cannot read through the visitor's browser.
    - A body (POST, PUT, PATCH) must be declared JSON (``application/json`` or
      ``application/*+json``; 415 otherwise): a browser sends a cross-site request
      with a plain-text, form or untyped body without asking first, never a JSON one.
    - A body above :data:`MAX_BODY_BYTES` is a 413, JSON nested deeper than
      :data:`MAX_JSON_DEPTH` a 400, before any framework code parses it.
    - The caller's identity is set in a context variable around the rest of the app.
    """

    def __init__(
        self,
        app: Any,
        api_keys: ApiKeys | None,
        on_denied: Callable[[str], None] | None = None,
        validate: Callable[[str, Any], None] | None = None,
        allowed_hosts: Iterable[str] | None = None,
    ) -> None:
        self.app = app
        self.api_keys = api_keys
        self.on_denied = on_denied or (lambda reason: None)
        self.validate = validate
        self.allowed_hosts = None if allowed_hosts is None else frozenset(allowed_hosts)

    async def __call__(
        self, scope: MutableMapping[str, Any], receive: Receive, send: Send
    ) -> None:
        """Gate one ASGI call."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = str(scope.get("path", ""))
        headers = scope.get("headers") or []
        if self.allowed_hosts is not None:
            host = request_host(headers)
            if host not in self.allowed_hosts:
                self.on_denied("host")
                await _reply(
                    send,
                    400,
                    f"this server does not answer requests for host {host!r}: address "
                    "it as one of " + ", ".join(sorted(self.allowed_hosts)) + ", or "
                    "list the name in RETRIEVAL_PIPELINE_ALLOWED_HOSTS",
                )
                return
        identity: Identity | None = None
        if self.api_keys is not None and path not in PUBLIC_PATHS:
            credentials = presented_credentials(headers)
            key = credentials[0] if len(credentials) == 1 and credentials[0] else None
            if key is None:
                self.on_denied("missing_key")
                await _reply(
                    send,
                    401,
                    (
                        "missing API key"
                        if not credentials
                        else "more than one credential (or an empty one)"
                    )
                    + ": send exactly one of 'Authorization: Bearer KEY' or "
                    "'X-API-Key: KEY'",
                )
                return
            identity = self.api_keys.identify(key)
            if identity is None:
                self.on_denied("invalid_key")
                await _reply(send, 401, "invalid API key")
                return
            if path.rstrip("/") == "/metrics" and "metrics" not in identity.grants:
                self.on_denied("missing_grant")
                await _reply(send, 403, "this API key has no 'metrics' grant")
                return
        token = _CALLER.set(identity)
        try:
            if scope.get("method") in ("POST", "PUT", "PATCH"):
                if not is_json_media_type(_header(headers, "content-type")):
                    await _reply(
                        send,
                        415,
                        "send the request body as JSON, with "
                        "'Content-Type: application/json'",
                    )
                    return
                body, value, problem = await _read_body(receive)
                if problem is None and self.validate is not None:
                    try:
                        self.validate(path, value)
                    except RetrievalPipelineError as exc:
                        status = 403 if isinstance(exc, AccessDeniedError) else 400
                        problem = (status, str(exc))
                if problem is not None:
                    await _reply(send, *problem)
                    return
                receive = _replay(body, receive)
            await self.app(scope, receive, send)
        finally:
            _CALLER.reset(token)


def presented_credential(headers: Iterable[tuple[Any, Any]]) -> str | None:
    """The one credential request headers present; None when absent or ambiguous.

    ``Authorization: Bearer KEY`` or ``X-API-Key: KEY``. Two credentials (both
    headers, or either twice) are refused rather than resolved: a proxy's injected
    header must not be overridable by a client's. Names and values may be bytes.
    """
    found = presented_credentials(headers)
    if len(found) != 1 or not found[0]:
        return None
    return found[0]


def presented_credentials(headers: Iterable[tuple[Any, Any]]) -> list[str]:
    """Every credential the headers present, in order ('' for a non-Bearer one)."""
    found: list[str] = []
    for raw_name, raw_value in headers:
        name = _text(raw_name).lower()
        value = _text(raw_value).strip()
        if name == "authorization":
            scheme, _, token = value.partition(" ")
            found.append(token.strip() if scheme.lower() == "bearer" else "")
        elif name == "x-api-key":
            found.append(value)
    return found


def _header(headers: Iterable[tuple[Any, Any]], wanted: str) -> str | None:
    """The first value of header ``wanted`` (a lower-case name), or None."""
    for raw_name, raw_value in headers:
        if _text(raw_name).lower() == wanted:
            return _text(raw_value)
    return None


def request_host(headers: Iterable[tuple[Any, Any]]) -> str:
    """The host name a request addresses (its ``Host`` header), without the port.

    Lower-case; an IPv6 literal loses its brackets (``[::1]:8000`` is ``::1``); no
    ``Host`` header is ''.
    """
    value = (_header(headers, "host") or "").strip().lower()
    if value.startswith("["):
        return value[1:].partition("]")[0]
    return value.partition(":")[0].rstrip(".")


def is_json_media_type(content_type: str | None) -> bool:
    """True for ``application/json`` and ``application/*+json``, parameters aside."""
    media = (content_type or "").partition(";")[0].strip().lower()
    kind, _, subtype = media.partition("/")
    return kind == "application" and (subtype == "json" or subtype.endswith("+json"))


def _text(value: Any) -> str:
    return (
        bytes(value).decode("latin-1")
        if isinstance(value, bytes | bytearray)
        else str(value)
    )


async def _read_body(
    receive: Receive,
) -> tuple[bytes, Any, tuple[int, str] | None]:
    chunks: list[bytes] = []
    size = 0
    more = True
    while more:
        message = await receive()
        if message["type"] == "http.disconnect":
            return b"", None, (400, "the client disconnected")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            # Read (and drop) a bounded rest, so the client sees the 413 instead of
            # a connection reset while it is still sending.
            more = bool(message.get("more_body"))
            while more and size < _DRAIN_LIMIT:
                message = await receive()
                size += len(message.get("body", b""))
                more = bool(message.get("more_body"))
            return (
                b"",
                None,
                (
                    413,
                    f"the request body is larger than {MAX_BODY_BYTES:,} bytes; send "
                    "fewer batch items or a shorter question",
                ),
            )
        chunks.append(chunk)
        more = bool(message.get("more_body"))
    body = b"".join(chunks)
    value, problem = _parse_json(body)
    return body, value, problem


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _parse_json(body: bytes) -> tuple[Any, tuple[int, str] | None]:
    """The JSON document of a request body, or why it is not one we accept.

    Strict JSON (UTF-8, no NaN or Infinity, which no response could echo back), nested
    at most :data:`MAX_JSON_DEPTH` levels (a deeper document is an attack, and
    recursive code further in would fail on it).
    """
    too_deep = (400, f"the JSON body is nested more than {MAX_JSON_DEPTH} levels deep")
    try:
        value = json.loads(body.decode("utf-8"), parse_constant=_reject_constant)
    except RecursionError:
        return None, too_deep
    except UnicodeDecodeError:  # UTF-16 and UTF-32 included: JSON is UTF-8 (RFC 8259)
        return None, (400, "the request body is not UTF-8 JSON")
    except ValueError as exc:
        return None, (400, f"the request body is not valid JSON ({str(exc)[:80]})")
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            if deepest > MAX_JSON_DEPTH:
                return None, too_deep
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return value, None


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> MutableMapping[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # after the body: wait for the disconnect

    return replay


async def _reply(send: Send, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


# --- LangGraph Agent Server -----------------------------------------------------------
AGENT_USER_KEY = "langgraph_auth_user"
"""Where LangGraph's Agent Server puts the authenticated user in ``configurable``."""
SCOPE_CLAIM = "retrieval_pipeline_scope"
"""The field of that user our auth handler (:mod:`retrieval_pipeline.agent_auth`)
fills with the key's principals, tenant and grants."""


def _user_field(user: object, name: str) -> Any:
    if isinstance(user, Mapping):
        return user.get(name)
    try:
        return user[name]  # type: ignore[index]
    except (KeyError, TypeError, IndexError):
        return getattr(user, name, None)


def agent_server_identity() -> Identity | None:
    """The identity the Agent Server authenticated for this run, if any.

    Read from the run's config (``configurable.langgraph_auth_user``), which the
    server sets from our auth handler and a client cannot set. None outside a
    LangGraph run or when no key scope was authenticated (a trusted local server).
    """
    try:
        from langgraph.config import get_config

        config = get_config()
    except (ImportError, RuntimeError):
        return None
    user = (config.get("configurable") or {}).get(AGENT_USER_KEY)
    if user is None:
        return None
    claim = _user_field(user, SCOPE_CLAIM)
    if claim is None:
        return None
    if not isinstance(claim, Mapping):
        raise AccessDeniedError("the authenticated user carries a malformed scope")
    principals = claim.get("principals") or []
    tenant = claim.get("tenant")
    grants = claim.get("grants") or []
    if (
        not isinstance(principals, list | tuple)
        or not all(isinstance(p, str) for p in principals)
        or (tenant is not None and not isinstance(tenant, str))
        or not isinstance(grants, list | tuple)
    ):
        raise AccessDeniedError("the authenticated user carries a malformed scope")
    return Identity(
        str(claim.get("name") or "agent-server"),
        tuple(principals),
        tenant,
        frozenset(str(g) for g in grants) & GRANTS,
    )


def bind_state(state: Mapping[str, Any]) -> Mapping[str, Any]:
    """The pipeline state with the Agent Server caller's scope bound, if there is one.

    Every stage reads the caller's principals, tenant and debug flag through this
    function, so a run served by ``langgraph dev`` / ``up`` with our auth handler
    holds the key's scope exactly as an HTTP request through :class:`RequestGate`
    does (the same :func:`scope_for` rules). Elsewhere the state is returned as is:
    LangServe binds it into the input before the graph starts, and Python callers
    fix it when they build the retriever. Binding twice changes nothing.
    """
    identity = agent_server_identity()
    if identity is None:
        return state
    scope = scope_for(identity, state)
    return {
        **state,
        "principals": scope.principals,
        "tenant": scope.tenant,
        "debug": scope.debug,
    }
