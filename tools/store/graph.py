"""Entity-graph local search in SQL (GraphRAG-style), scoped by access control.

1. Seed entities: those mentioned in the seed documents, rolled up to their canonical
   entity, served lifecycle only. Each carries the retrieval score of the strongest
   seed that mentions it; the top 8 by that score, then by mention count, are kept.
2. Frontier expansion, 1-2 hops, over two kinds of edge: typed relations, and "A's
   own page (a document titled A) mentions B" (how a wiki page links its neighbours). A
   neighbour's weight is damped by the inverse log of its degree, so hubs cannot
   dominate, and each hop keeps at most ``frontier_cap`` entities, which bounds cost.
3. Resolution: entities to documents. An entity's own page carries
   the entity's weight; a page that mentions it, that weight over log2(1 + the
   number of pages mentioning it). A seed that would gain nothing is left out.

Every edge, mention and document is filtered by the caller's tenant, principals and
document scope inside the SQL: evidence from documents the caller cannot see neither
creates edges nor appears in the result, so graph fusion reveals nothing about them.
That includes entity *names*: ingest links every known name into chunk text, so a
name declared only by a hidden document (its title, say) would otherwise connect
visible documents and betray that the hidden one exists. An entity reached through
such an 'extracted' mention is followed only when a document the caller may see
attests it (a title or explicit mention, or a relation); see ``_attested``.

Curation follows the same rule (issue 15): an entity's lifecycle, the canonical entity
it is an alias of, and its type apply to a caller only when a document the caller may
see declares them, and each goes with its document (``entity_curation``, migration
005; see ``_curation``). The columns on ``entities`` are ingest's last write and are
never read here. An entity's own page is likewise any visible document titled with
its name, not the last one ingest recorded.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from retrieval_pipeline.tools.store import sql as q
from retrieval_pipeline.tools.store import sql_admin as qa
from retrieval_pipeline.tools.store.replicas import replica_read
from retrieval_pipeline.tools.store.store import AccessScope, Store

# Documents the caller may see: the chunk filter's own tenant and ACL predicates.
_VISIBLE = f"{q.TENANT_FILTER} AND {q.ACL_FILTER}"
_DOC_FILTER = sql.SQL(_VISIBLE.format(a="d"))  # alias `d`
_DOC_SCOPE = sql.SQL(" AND d.id = ANY(%(doc_keys)s::text[])")


def _attested(entity: str) -> sql.Composable:
    """SQL: a document the caller may see declares ``entity`` (a column expression).

    Access only, not the document scope: a scope narrows results, it is not a
    boundary, and an entity declared outside it is still the caller's to follow.
    """
    visible = _VISIBLE.format(a="ad")
    return sql.SQL(
        f"""(EXISTS (
        SELECT 1 FROM mentions am
        JOIN documents ad ON ad.id = am.document_id AND ad.tenant = am.tenant
        WHERE am.entity_id = {entity} AND am.origin <> 'extracted' AND {visible}
    ) OR EXISTS (
        SELECT 1 FROM relations ar
        JOIN documents ad ON ad.id = ar.document_id AND ad.tenant = ar.tenant
        WHERE (ar.source_id = {entity} OR ar.target_id = {entity}) AND {visible}
    ))"""
    )


def _curation(entity: str) -> sql.Composable:
    """SQL: one row ``(canonical, lifecycle, type)``, ``entity`` as the caller sees it.

    Each value is the newest declaration (by ingest time, then document id) made by a
    document the caller may see, else the default: its own canonical, ``served``,
    ``thing``. A declaration in a document the caller cannot see changes nothing for
    that caller, and it goes with its document (migration 005). Access only, not the
    document scope, as for attestation. For ``CROSS JOIN LATERAL (...)``.
    """
    visible = _VISIBLE.format(a="cur_d")
    order = "cur_d.ingested_at DESC, cur_d.id DESC"

    def newest(column: str) -> str:
        return (
            f"(array_agg(cur.{column} ORDER BY {order})"
            f" FILTER (WHERE cur.{column} IS NOT NULL))[1]"
        )

    # One index probe per entity (most have no curation row at all), one row always:
    # an aggregate without GROUP BY.
    return sql.SQL(
        f"SELECT coalesce({newest('canonical_id')}, {entity}) AS canonical,"
        f" coalesce({newest('lifecycle')}, 'served') AS lifecycle,"
        f" coalesce({newest('type')}, 'thing') AS type"
        f" FROM entity_curation cur JOIN documents cur_d"
        f" ON cur_d.id = cur.document_id AND cur_d.tenant = cur.tenant"
        f" WHERE cur.entity_id = {entity} AND {visible}"
    )


def _own_page(mention: str) -> str:
    """SQL: the mention ``mention`` (an alias of ``mentions``) is its entity's own page.

    A title entity (ingest's ``title_entities``), or an entity the document declares
    whose name is the document's title (case- and space-insensitive, as entity ids
    are): a service page titled "Auth Gateway" that declares Auth Gateway is its page,
    whether or not its corpus was ingested with title entities.
    """
    norm = "lower(btrim(regexp_replace({}, '\\s+', ' ', 'g')))"
    return (
        f"({mention}.origin = 'title' OR ({mention}.origin = 'explicit' AND EXISTS ("
        f"SELECT 1 FROM documents pd JOIN entities pe ON pe.id = {mention}.entity_id"
        f" AND pe.tenant = {mention}.tenant"
        f" WHERE pd.id = {mention}.document_id AND pd.tenant = {mention}.tenant"
        f" AND {norm.format('pd.title')} = {norm.format('pe.name')})))"
    )


# A relation the question names (its type's words, stemmed, among the question's):
# "who owns X" asks for the far end of an ``owns`` edge at X. One InitPlan per call.
# Structural relations say nothing a question asks for: a site's hyperlinks
# (ingest/site.py's LINK_RELATION) would otherwise answer every question with "link",
# and the untyped default ``related_to`` every question with "related".
STRUCTURAL_RELATIONS = ("links_to", "related_to")
_ASKED = sql.SQL(
    "(r.type <> ALL(ARRAY[{structural}]::text[]) AND"
    " tsvector_to_array(to_tsvector('english'::regconfig,"
    " replace(coalesce(r.type, ''), '_', ' '))) && (SELECT"
    " tsvector_to_array(to_tsvector('english'::regconfig, %(question)s))))"
).format(structural=sql.SQL(", ").join(sql.Literal(t) for t in STRUCTURAL_RELATIONS))


def _members(ids: str) -> sql.Composable:
    """SQL rows ``(id, canonical)``: the entities ``ids`` and the aliases followed.

    Each canonical entity of the ``text[]`` expression ``ids`` maps to itself, and each
    entity the caller sees declared an alias of one of them maps to that one.
    """
    return sql.SQL(
        """SELECT i.id, i.id AS canonical FROM unnest({ids}) AS i(id)
    UNION
    SELECT x.entity_id, x.canonical_id FROM entity_curation x
    CROSS JOIN LATERAL ({curation}) xc
    WHERE x.tenant = %(tenant)s AND x.canonical_id = ANY({ids})
      AND xc.canonical = x.canonical_id"""
    ).format(ids=sql.SQL(ids), curation=_curation("x.entity_id"))


SEED_ENTITIES = sql.SQL(
    """
WITH seeds AS (
    SELECT * FROM unnest(%(seed_docs)s::text[], %(seed_scores)s::float8[])
        AS s(document_id, score)
)
SELECT ec.canonical AS entity_id, max(s.score) AS weight,
       sum(m.count)::float8 AS mentions
FROM mentions m
JOIN seeds s ON s.document_id = m.document_id
JOIN documents d ON d.id = m.document_id AND d.tenant = m.tenant
CROSS JOIN LATERAL ({curation_e}) ec
CROSS JOIN LATERAL ({curation_c}) cc  -- the canonical's own curation
WHERE {doc_filter}
  AND ec.lifecycle = 'served' AND cc.lifecycle = 'served'
  AND (m.origin <> 'extracted' OR {attested_e})
GROUP BY 1
ORDER BY weight DESC, mentions DESC, entity_id
LIMIT %(top)s
"""
)

NEIGHBOURS = sql.SQL(
    """
WITH frontier AS (
    SELECT * FROM unnest(%(ids)s::text[], %(weights)s::float8[]) AS f(entity_id, weight)
),
members AS (  -- the frontier's canonical entities and the aliases the caller follows
    {members}
),
relation_edges AS (
    SELECT ms.canonical AS src, tc.canonical AS dst,
           least(greatest(r.weight, 0), 1)::float8 AS w,  -- an edge keeps at most all
           {asked} AS asked
    FROM relations r
    JOIN members ms ON ms.id = r.source_id
    JOIN documents d ON d.id = r.document_id AND d.tenant = r.tenant
    CROSS JOIN LATERAL ({curation_target}) tc
    WHERE tc.lifecycle = 'served' AND {doc_filter}
    UNION ALL
    SELECT mt.canonical, sc.canonical, least(greatest(r.weight, 0), 1)::float8,
           {asked}
    FROM relations r
    JOIN members mt ON mt.id = r.target_id
    JOIN documents d ON d.id = r.document_id AND d.tenant = r.tenant
    CROSS JOIN LATERAL ({curation_source}) sc
    WHERE sc.lifecycle = 'served' AND {doc_filter}
),
page_edges AS (  -- a frontier entity's own page (its title) mentions another entity
    SELECT hm.entity_id AS src, oc.canonical AS dst,
           least(m.count, 3)::float8 / 3 AS w, false AS asked
    FROM mentions hm
    JOIN documents d ON d.id = hm.document_id AND d.tenant = hm.tenant
    JOIN mentions m ON m.document_id = hm.document_id AND m.tenant = hm.tenant
    CROSS JOIN LATERAL ({curation_o}) oc
    WHERE hm.entity_id = ANY(%(ids)s::text[]) AND {own_page_hm}
      AND oc.lifecycle = 'served' AND {doc_filter}
      AND (m.origin <> 'extracted' OR {attested_o})
),
edges AS (
    SELECT src, dst, w, asked FROM relation_edges
    UNION ALL SELECT src, dst, w, asked FROM page_edges
),
candidates AS (  -- the strongest single link: never a sum over entities and edges,
                 -- so a neighbour reached several ways cannot outgrow its source
    SELECT e.dst AS entity_id, max(f.weight * e.w) AS raw,
           max(f.weight * e.w) FILTER (WHERE e.asked) AS asked
    FROM edges e JOIN frontier f ON f.entity_id = e.src
    WHERE e.dst <> ALL(%(exclude)s::text[])
    GROUP BY e.dst
),
candidate_members AS (
    {candidate_members}
),
degree AS (  -- visible documents mentioning each candidate (through any alias)
    SELECT a.canonical AS entity_id, count(DISTINCT m.document_id) AS n
    FROM candidate_members a
    JOIN mentions m ON m.entity_id = a.id AND m.tenant = %(tenant)s
    JOIN documents d ON d.id = m.document_id AND d.tenant = m.tenant
    WHERE {doc_filter}
    GROUP BY a.canonical
)
-- The degree damping only ever lowers a weight (ln(2 + 0) < 1 once raised one). A
-- neighbour reached through a relation the question names is the hop it asks for:
-- it keeps its link undamped.
SELECT c.entity_id,
       greatest(coalesce(c.asked, 0), c.raw / greatest(1, ln(2 + coalesce(g.n, 0))))
           AS weight,
       c.asked IS NOT NULL AS asked
FROM candidates c
CROSS JOIN LATERAL ({curation_c}) ce
LEFT JOIN degree g ON g.entity_id = c.entity_id
WHERE ce.lifecycle = 'served'
ORDER BY weight DESC, c.entity_id
LIMIT %(cap)s
"""
)

ENTITY_DOCUMENTS = sql.SQL(
    """
WITH weighted AS (
    SELECT * FROM unnest(%(ids)s::text[], %(weights)s::float8[]) AS w(entity_id, weight)
),
seeds AS (
    SELECT * FROM unnest(%(seed_docs)s::text[], %(seed_scores)s::float8[])
        AS s(document_id, score)
),
members AS (  -- the entities, and the aliases the caller follows to them
    {members}
),
mentioning AS (  -- visible documents mentioning each entity (through any alias)
    SELECT m.canonical, mn.document_id
    FROM members m
    JOIN mentions mn ON mn.entity_id = m.id AND mn.tenant = %(tenant)s
    JOIN documents d ON d.id = mn.document_id AND d.tenant = mn.tenant
    WHERE {doc_filter}
    GROUP BY 1, 2
),
degree AS (
    SELECT canonical, count(*) AS n FROM mentioning GROUP BY canonical
),
evidence AS (  -- an entity's own page (its title) carries its weight; a page that
               -- mentions it, the weight damped by the inverse log of its degree
    SELECT hm.document_id, w.weight AS score,
           m.canonical = ANY(%(asked)s::text[]) AS answer
    FROM members m
    JOIN mentions hm
        ON hm.entity_id = m.id AND hm.tenant = %(tenant)s AND {own_page_hm}
    JOIN weighted w ON w.entity_id = m.canonical
    UNION ALL
    SELECT mg.document_id, w.weight / log(2.0, 1 + g.n::numeric)::float8, false
    FROM mentioning mg
    JOIN degree g ON g.canonical = mg.canonical
    JOIN weighted w ON w.entity_id = mg.canonical
)
SELECT e.document_id, max(e.score) AS score,
       bool_or(e.answer) AS answer
FROM evidence e
JOIN documents d ON d.id = e.document_id AND d.tenant = %(tenant)s
LEFT JOIN seeds s ON s.document_id = e.document_id
WHERE {doc_filter}
GROUP BY e.document_id
-- A seed whose own score is at least the link's cannot gain from it: leave it out.
HAVING max(e.score) > coalesce(max(s.score), 0)
ORDER BY score DESC, e.document_id
LIMIT %(cap)s
"""
)


MENTIONING_TYPES = sql.SQL(
    """
SELECT DISTINCT m.document_id
FROM mentions m
JOIN documents d ON d.id = m.document_id AND d.tenant = m.tenant
CROSS JOIN LATERAL ({curation_e}) ec
CROSS JOIN LATERAL ({curation_c}) cc  -- the canonical's own curation
WHERE m.document_id = ANY(%(docs)s::text[]) AND {doc_filter}
  AND ec.lifecycle = 'served' AND cc.lifecycle = 'served'
  AND lower(cc.type) = ANY(%(types)s::text[])
  AND (m.origin <> 'extracted' OR {attested_e})
"""
)

# Each statement's curation and attestation fragments (the caller's access filter
# and document scope are added per call).
_SEED_PARTS = {
    "curation_e": _curation("m.entity_id"),
    "curation_c": _curation("ec.canonical"),
    "attested_e": _attested("m.entity_id"),
}
_NEIGHBOUR_PARTS = {
    "members": _members("%(ids)s::text[]"),
    "curation_target": _curation("r.target_id"),
    "curation_source": _curation("r.source_id"),
    "curation_o": _curation("m.entity_id"),
    "attested_o": _attested("m.entity_id"),
    "candidate_members": _members("ARRAY(SELECT entity_id FROM candidates)"),
    "curation_c": _curation("c.entity_id"),
    "own_page_hm": sql.SQL(_own_page("hm")),
    "asked": _ASKED,
}
_DOCUMENT_PARTS = {
    "members": _members("%(ids)s::text[]"),
    "own_page_hm": sql.SQL(_own_page("hm")),
}
_TYPE_PARTS = _SEED_PARTS


@dataclass(frozen=True)
class GraphExpansion:
    """What graph fusion found: weighted entities per hop and resolved documents.

    Weights are in the seeds' score units: a seed entity carries the score of the
    strongest seed document that mentions it, and a resolved document the weight of
    its strongest link (so a linked passage can inherit at most its seed's score).
    """

    seeds: list[tuple[str, float]]
    hops: list[list[tuple[str, float]]]
    documents: list[tuple[str, float]]  # internal document ids, strongest first
    answers: frozenset[str] = frozenset()
    """Documents that are the own page of an entity reached through a relation the
    question names (``who owns X``: the owner's page): the hop the question asks for."""


class GraphStore:
    """Local search over the entity graph of one store."""

    def __init__(self, store: Store) -> None:
        self.store = store

    @staticmethod
    def _filter(scope: AccessScope) -> sql.Composable:
        if scope.doc_keys is None:
            return _DOC_FILTER
        return sql.Composed([_DOC_FILTER, _DOC_SCOPE])

    @replica_read
    def expand(
        self,
        seed_documents: Sequence[str] | Mapping[str, float],
        scope: AccessScope,
        *,
        top_entities: int,
        max_hops: int,
        frontier_cap: int,
        document_cap: int,
        question: str = "",
    ) -> GraphExpansion:
        """Run the three steps for seed documents (internal ids) under a scope.

        ``seed_documents`` maps each seed to its retrieval score; a plain sequence
        gives every seed the score 1. ``question`` names the relations asked for (a
        neighbour reached through one keeps its link undamped; see ``answers``).

        Every weight stays at or below the score of the seed it came from: a seed
        entity carries its strongest seed's score, a hop the strongest single link
        (weight x edge weight in [0, 1], never summed), a document the strongest
        entity it is the page of or mentions (damped, never raised).
        """
        seeds_by_doc = (
            dict(seed_documents)
            if isinstance(seed_documents, Mapping)
            else dict.fromkeys(seed_documents, 1.0)
        )
        if not seeds_by_doc:
            return GraphExpansion([], [], [])
        seed_params = {
            "seed_docs": list(seeds_by_doc),
            "seed_scores": [float(v) for v in seeds_by_doc.values()],
        }
        doc_filter = self._filter(scope)
        params = scope.params()
        with (
            self.store.read_connection() as conn,
            conn.pipeline(),
            conn.transaction(),
        ):
            # These statements are large (curation and attestation per entity) and
            # cheap to run: planning them cost more than running them (3.9 ms
            # against 2.6 ms). Prepared once per connection, with a generic plan.
            # In pipeline mode BEGIN and the setting travel with the seeds.
            conn.execute(qa.GENERIC_PLANS)
            seeds = [
                (r[0], float(r[1]))
                for r in conn.execute(
                    SEED_ENTITIES.format(doc_filter=doc_filter, **_SEED_PARTS),
                    params | seed_params | {"top": top_entities},
                    prepare=True,
                ).fetchall()
            ]
            if not seeds:
                return GraphExpansion([], [], [])
            reached: dict[str, float] = dict(seeds)
            asked: set[str] = set()
            hops = self._hops(
                conn,
                NEIGHBOURS.format(doc_filter=doc_filter, **_NEIGHBOUR_PARTS),
                params | {"cap": frontier_cap, "question": question},
                seeds,
                max_hops - 1,
                reached,
                asked,
            )
            ordered = sorted(reached.items(), key=lambda kv: (-kv[1], kv[0]))
            rows = conn.execute(
                ENTITY_DOCUMENTS.format(doc_filter=doc_filter, **_DOCUMENT_PARTS),
                params
                | seed_params
                | {
                    "ids": [e for e, _ in ordered],
                    "weights": [w for _, w in ordered],
                    "asked": sorted(asked),
                    "cap": document_cap,
                },
                prepare=True,
            ).fetchall()
        documents = [(r[0], float(r[1])) for r in rows]
        answers = frozenset(r[0] for r in rows if r[2])
        return GraphExpansion(seeds, hops, documents, answers)

    @staticmethod
    def _hops(
        conn: psycopg.Connection[Any],
        statement: sql.Composed,
        params: dict[str, Any],
        seeds: list[tuple[str, float]],
        count: int,
        reached: dict[str, float],
        asked: set[str],
    ) -> list[list[tuple[str, float]]]:
        """Walk ``count`` hops out from the seeds; ``reached`` and ``asked`` fill in.

        ``reached`` keeps each entity's strongest weight; ``asked`` the entities
        reached through a relation the question names.
        """
        frontier = list(seeds)
        hops: list[list[tuple[str, float]]] = []
        for _ in range(count):
            if not frontier:
                break
            rows = conn.execute(
                statement,
                params
                | {
                    "ids": [e for e, _ in frontier],
                    "weights": [w for _, w in frontier],
                    "exclude": list(reached),
                },
                prepare=True,
            ).fetchall()
            frontier = [(r[0], float(r[1])) for r in rows]
            asked.update(r[0] for r in rows if r[2])
            hops.append(frontier)
            for entity, weight in frontier:
                reached[entity] = max(reached.get(entity, 0.0), weight)
        return hops

    @replica_read
    def documents_mentioning_types(
        self, document_ids: Sequence[str], types: Sequence[str], scope: AccessScope
    ) -> set[str]:
        """Of these (internal) documents, those mentioning a served entity of a type.

        Types compare case-insensitively, through the canonical entity's type; a
        name-linked mention counts only when a document the caller may see attests
        the entity (as everywhere in graph fusion).
        """
        wanted = sorted({t.strip().casefold() for t in types if t and t.strip()})
        if not document_ids or not wanted:
            return set()
        statement = MENTIONING_TYPES.format(doc_filter=_DOC_FILTER, **_TYPE_PARTS)
        params = scope.params() | {"docs": list(document_ids), "types": wanted}
        with self.store.read_connection() as conn:
            return {r[0] for r in conn.execute(statement, params).fetchall()}
