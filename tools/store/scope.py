"""Who is asking: the access filter every channel applies inside its SQL."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from psycopg import sql

from retrieval_pipeline.tools.store import sql as q


@dataclass(frozen=True)
class AccessScope:
    """Who is asking: applied inside the SQL of every channel."""

    principals: tuple[str, ...] = ()
    tenant: str = ""
    doc_keys: tuple[str, ...] | None = None  # internal document ids; None = no scope
    constraint: str | None = None  # web-search phrases/exclusions every result obeys
    metadata: tuple[str, ...] | None = None
    """Document metadata filters: JSON objects, a document must contain one of them."""

    def filters(self, alias: str = "c") -> sql.Composable:
        """Return the SQL ``WHERE`` fragment for this scope (values stay parameters).

        ``alias`` names a chunk row (``c``) or a posting (``p``): both carry the
        tenant, ACL and document id.
        """
        if alias not in ("c", "p"):
            raise ValueError("alias must be 'c' (chunks) or 'p' (postings)")
        parts = [q.TENANT_FILTER, q.ACL_FILTER]
        if self.doc_keys is not None:
            parts.append(q.SCOPE_FILTER)
        if self.metadata is not None:
            parts.append(q.METADATA_FILTER)
        fragments = [sql.SQL(part.format(a=alias)) for part in parts]
        if self.constraint:
            fragments.append(sql.SQL(q.CONSTRAINT_FILTER[alias]))
        return sql.SQL(" AND ").join(fragments)

    def params(self) -> dict[str, Any]:
        """Return the parameters the filter fragment binds."""
        return {
            "tenant": self.tenant,
            "principals": list(self.principals),
            "doc_keys": list(self.doc_keys) if self.doc_keys is not None else None,
            "constraint": self.constraint,
            "metadata": list(self.metadata) if self.metadata is not None else None,
        }
