"""Document access control read from metadata: tenant and principals, failing closed.

Every loader (and the langchain-postgres import) reads access control through one
function, :func:`resolve_access`, with these rules:

- ``principals`` is a list of non-empty strings or a comma-separated string. An
  explicitly empty or malformed value (``""``, ``[]``, null, blanks, an empty or
  non-string item, an item holding a comma, another type) is an error for that file
  (JSONL line, imported row), never a public document. ``acl`` is a documented alias
  of ``principals`` and follows the same rules; setting both is an error.
- Absent means the caller's default (``--principals``), which with no default is
  public. A document's own principals replace the default (they are not merged: an
  ACL is "any of", so a union would widen it and an intersection would usually be
  empty). ``public: true`` marks a document public explicitly, even under a
  ``--principals`` default; ``public: false`` keeps the default and is an error
  without one; ``public`` together with ``principals``/``acl``, or not a boolean, is
  an error.
- Any other key that looks like access control (``groups``, ``roles``, ``allow*``,
  ``allowed_*``, ``deny*``, ``readers``, ``viewers``, ``permissions``, ``access*``,
  ``visibility``, ``audience``, ``private``, a differently-cased ``Principals``,
  ``tenant_id``, ... see :func:`looks_like_access_control`) is an error, not ignored.
- ``tenant`` is a string (a number is an error: quote it). With a caller tenant
  (``--tenant``) it is a boundary: a document naming another tenant (``""`` included)
  is an error, one naming the same tenant is fine, and one naming none takes it.
  Without a caller tenant, a document's own tenant is used, and one without a tenant
  gets none. Null or a blank tenant is an error.
- A JSONL record keeps these keys in its ``metadata`` object; at the record's top
  level they are an error, as is a ``metadata`` that is not an object.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from retrieval_pipeline.errors import IngestError

TENANT_KEY = "tenant"
PRINCIPALS_KEY = "principals"
ACL_ALIAS = "acl"  # documented alias of ``principals`` (kept for existing corpora)
PUBLIC_KEY = "public"
ACCESS_KEYS = (TENANT_KEY, PRINCIPALS_KEY, ACL_ALIAS, PUBLIC_KEY)
"""The access-control keys a document may carry; see :func:`resolve_access`."""
# Words that make a metadata key look like access control. A key that only looks like
# one is refused rather than ignored: ignoring ``groups: [hr]`` stores a public
# document that its author meant to restrict.
_ACCESS_WORDS = frozenset(
    {
        "acl",
        "acls",
        "principal",
        "principals",
        "group",
        "groups",
        "role",
        "roles",
        "permission",
        "permissions",
        "perms",
        "reader",
        "readers",
        "viewer",
        "viewers",
        "audience",
        "visibility",
        "tenant",
        "tenants",
    }
)
_ACCESS_FIRST_WORDS = frozenset(
    {"allow", "allowed", "allowlist", "deny", "denied", "denylist", "access"}
)
_ACCESS_NAMES = frozenset(
    {
        "public",
        "private",
        "is_public",
        "is_private",
        "restricted",
        "confidential",
        "shared_with",
        "visible_to",
    }
)
_ACCESS_HINT = (
    "put the ACL in 'principals' (or its alias 'acl'), the tenant in 'tenant', mark a "
    "public document with 'public: true', or rename the key if it is not access "
    "control"
)


@dataclass(frozen=True)
class Access:
    """Where a document lives and who may read it (empty principals = public)."""

    tenant: str
    principals: tuple[str, ...]


def looks_like_access_control(key: object) -> bool:
    """Whether a metadata key reads as access control (case and separators ignored).

    True for the recognised keys themselves and for unknown ones such as ``groups``,
    ``allowedUsers``, ``reader_groups``, ``Principals`` or ``tenant_id``;
    :func:`resolve_access` refuses every such key except the exact ``tenant``,
    ``principals``, ``acl`` and ``public``.
    """
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", str(key))
    words = [w for w in re.split(r"[^a-z0-9]+", spaced.lower()) if w]
    if not words:
        return False
    return (
        any(w in _ACCESS_WORDS for w in words)
        or words[0] in _ACCESS_FIRST_WORDS
        or "_".join(words) in _ACCESS_NAMES
    )


def read_principals(value: Any, *, key: str = PRINCIPALS_KEY) -> tuple[str, ...]:
    """Parse an explicitly given ACL value; raise ``ValueError`` unless it is exact.

    A list of non-empty strings or a comma-separated string, returned stripped,
    de-duplicated and sorted. Anything that names no principal, or that could be
    misread, is refused: an empty ACL means public, so guessing fails open.
    """
    refuse = (
        "an explicitly empty ACL is refused; omit the key to take the default "
        "principals, or write 'public: true' for a public document"
    )
    if value is None:
        raise ValueError(f"'{key}' is null; {refuse}")
    if isinstance(value, str):
        items: list[Any] = value.split(",")
        if not any(item.strip() for item in items):
            raise ValueError(f"'{key}' is empty ({value!r}); {refuse}")
    elif isinstance(value, list | tuple):
        items = list(value)
        if not items:
            raise ValueError(f"'{key}' is an empty list; {refuse}")
    else:
        raise ValueError(
            f"'{key}' must be a list of strings or a comma-separated string, "
            f"got {type(value).__name__} {value!r}"
        )
    principals = set()
    for number, item in enumerate(items, start=1):
        if not isinstance(item, str):
            raise ValueError(
                f"'{key}' entry {number} ({item!r}) must be a string, "
                f"not {type(item).__name__}"
            )
        if not item.strip():
            raise ValueError(
                f"'{key}' entry {number} is empty ({value!r}); every principal "
                "must be a non-empty name"
            )
        if isinstance(value, list | tuple) and "," in item:
            raise ValueError(
                f"'{key}' entry {item!r} contains a comma; list principals separately"
            )
        principals.add(item.strip())
    return tuple(sorted(principals))


def resolve_access(
    where: str,
    metadata: Mapping[str, Any],
    *,
    tenant: str = "",
    principals: Sequence[str] = (),
) -> Access:
    """The tenant and principals of one document, failing closed (module docstring).

    Args:
        where: the file, line or row, for the error.
        metadata: the document's merged metadata (not modified).
        tenant: the caller's tenant (``--tenant``); when set, a boundary.
        principals: the caller's default principals (``--principals``).

    Raises:
        IngestError: naming ``where`` and the reason, for any access key that is
            empty, malformed, contradictory, unknown, or outside ``tenant``.
    """
    for key in metadata:
        if key not in ACCESS_KEYS and looks_like_access_control(key):
            raise IngestError(
                where,
                f"'{key}' looks like access control but is not applied; "
                + _ACCESS_HINT,
            )
    return Access(
        tenant=_tenant(where, metadata, tenant),
        principals=_principals(where, metadata, principals),
    )


def _principals(
    where: str, metadata: Mapping[str, Any], default: Sequence[str]
) -> tuple[str, ...]:
    given = [k for k in (PRINCIPALS_KEY, ACL_ALIAS) if k in metadata]
    if PUBLIC_KEY in metadata and given:
        raise IngestError(
            where,
            f"both '{PUBLIC_KEY}' and '{given[0]}' are set; a document is either "
            "public or restricted, so keep one",
        )
    if len(given) > 1:
        raise IngestError(
            where,
            f"both '{PRINCIPALS_KEY}' and its alias '{ACL_ALIAS}' are set; keep one",
        )
    if given:
        try:
            return read_principals(metadata[given[0]], key=given[0])
        except ValueError as exc:
            raise IngestError(where, str(exc)) from exc
    fallback = tuple(sorted(set(default)))
    if PUBLIC_KEY not in metadata:
        return fallback
    public = metadata[PUBLIC_KEY]
    if not isinstance(public, bool):
        raise IngestError(
            where, f"'{PUBLIC_KEY}' must be true or false, got {public!r}"
        )
    if public:
        return ()
    if not fallback:
        raise IngestError(
            where,
            f"'{PUBLIC_KEY}: false' but no principals are given (neither "
            f"'{PRINCIPALS_KEY}' nor a default such as --principals); name who may "
            "read it",
        )
    return fallback


def _tenant(where: str, metadata: Mapping[str, Any], boundary: str) -> str:
    if TENANT_KEY not in metadata:
        return boundary
    value = metadata[TENANT_KEY]
    if isinstance(value, int | float) and not isinstance(value, bool):
        # YAML reads `tenant: 0042` as the octal 34 and `tenant: 1e3` as 1000.0:
        # a number is not trusted to name the tenant the author meant.
        raise IngestError(
            where,
            f"'{TENANT_KEY}' must be a string, got the number {value!r}; quote it "
            f'(tenant: "{value}") if that is the tenant\'s name',
        )
    if not isinstance(value, str):
        raise IngestError(
            where,
            f"'{TENANT_KEY}' must be a string, got {value!r}; write a tenant name "
            "or omit the key",
        )
    tenant = value
    if tenant and not tenant.strip():
        raise IngestError(where, f"'{TENANT_KEY}' is blank ({tenant!r})")
    if boundary and tenant != boundary:
        raise IngestError(
            where,
            f"'{TENANT_KEY}' is {tenant!r} but this run is limited to tenant "
            f"{boundary!r} (--tenant); a document cannot leave the run's tenant",
        )
    return tenant
