"""A generated corpus with canaries, API keys with generated grants, and the oracle.

Every document holds a unique canary token and the shared words of the probe
questions, so any query reaches every document the caller may see, and a response
that carries a canary the caller may not see is a leak wherever it appears (chunks,
debug block, stream events, errors).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from retrieval_pipeline.auth import ApiKeys, Identity

PRINCIPALS = ("hr", "finance", "ops", "legal")
TENANTS = (None, "acme", "globex")
WORDS = "ledger reconciliation payroll incident rotation owner gateway"
QUESTIONS = (
    "ledger reconciliation owner",
    "who owns payroll incident rotation",
    "gateway ledger",
)


@dataclass(frozen=True)
class Doc:
    id: str
    tenant: str | None
    principals: tuple[str, ...]
    canary: str


@dataclass(frozen=True)
class Key:
    secret: str
    identity: Identity


def generate_corpus(seed: int = 7, count: int = 18) -> list[Doc]:
    """Documents over every tenant and ACL shape (public, one, several principals)."""
    rng = random.Random(seed)
    docs: list[Doc] = []
    for i in range(count):
        tenant = TENANTS[i % len(TENANTS)]
        shape = i % 4
        if shape == 0:
            principals: tuple[str, ...] = ()
        else:
            principals = tuple(sorted(rng.sample(PRINCIPALS, k=min(shape, 2))))
        canary = f"zq{hashlib.sha256(f'{seed}-{i}'.encode()).hexdigest()[:10]}"
        docs.append(Doc(f"doc-{i:02d}", tenant, principals, canary))
    return docs


def write_corpus(root: Path, docs: Iterable[Doc]) -> Path:
    for doc in docs:
        front = [f"id: {doc.id}", f"title: Note {doc.canary}"]
        if doc.principals:
            front.append(f"principals: [{', '.join(doc.principals)}]")
        if doc.tenant:
            front.append(f"tenant: {doc.tenant}")
        (root / f"{doc.id}.md").write_text(
            "---\n"
            + "\n".join(front)
            + "\n---\n"
            + f"# {doc.canary} notes\n\nThe {WORDS} record {doc.canary} belongs "
            f"here. {WORDS}.\n",
            encoding="utf-8",
        )
    return root


def generate_keys(seed: int = 11) -> list[Key]:
    """Keys over every tenant, with none, one or several principals and grants."""
    rng = random.Random(seed)
    keys: list[Key] = []
    for i in range(9):
        tenant = TENANTS[i % len(TENANTS)]
        principals = tuple(rng.sample(PRINCIPALS, k=(i // 3) % 3))
        grants: frozenset[str] = frozenset()
        if i % 4 == 1:
            grants = frozenset({"debug"})
        elif i % 4 == 3:
            grants = frozenset({"metrics"})
        keys.append(
            Key(f"key-{i}-secret", Identity(f"k{i}", principals, tenant, grants))
        )
    return keys


def key_file(path: Path, keys: Sequence[Key]) -> ApiKeys:
    lines = ["keys:"]
    for key in keys:
        ident = key.identity
        lines.append(f"  - name: {ident.name}")
        lines.append(f"    sha256: {hashlib.sha256(key.secret.encode()).hexdigest()}")
        lines.append(f"    principals: [{', '.join(ident.principals)}]")
        if ident.tenant:
            lines.append(f"    tenant: {ident.tenant}")
        lines.append(f"    grants: [{', '.join(sorted(ident.grants))}]")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return ApiKeys.load(path)


def effective_principals(identity: Identity, item: dict[str, Any]) -> set[str]:
    """The oracle's reading of the scope rules (absent: the grant; a list narrows)."""
    granted = set(identity.principals)
    if "principals" in item and isinstance(item["principals"], list):
        return granted & {p for p in item["principals"] if isinstance(p, str)}
    return granted


def visible(doc: Doc, principals: set[str], tenant: str | None) -> bool:
    if doc.tenant != tenant:
        return False
    return not doc.principals or bool(set(doc.principals) & principals)


def hidden_canaries(
    docs: Iterable[Doc], principals: set[str], tenant: str | None
) -> list[str]:
    return [d.canary for d in docs if not visible(d, principals, tenant)]


GATED_DEBUG_FIELDS = (
    "stage_ms",
    "stageMs",
    "lexical_ms",
    "lexicalMs",
    "dense_ms",
    "denseMs",
    "embed_ms",
    "embedMs",
    "index_revision",
    "indexRevision",
    "lexical_postings",
    "lexicalPostings",
    "channel_scores",
)
"""Fields only a caller with the debug grant may receive."""
