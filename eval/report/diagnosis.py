"""Slices, failure diagnosis, assembly metrics and the negative and permission probes.

Slices are built from the data itself (how each is made is written beside it in the
report): identifiers and quoted phrases, paraphrases with little lexical overlap,
multi-passage questions, negative queries (questions from another data set, which
have no supporting evidence here), a permission boundary (half of each query's
relevant documents withheld by the SQL scope filter), and near-duplicate pressure
(queries whose candidate pool held near-duplicates the assembler dropped).

Failure diagnosis, for every relevant document missing from a query's top 10 at the
final step: *absent* (in no candidate list), *ranked low* (a candidate, but below
the pool cut), *omitted* (inside the pool, left out of the assembled context's top
10 by budget, duplicate drop, per-document share or order).
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from retrieval_pipeline.eval.datasets import BeirDataset
from retrieval_pipeline.eval.report.ladder import LIMIT, StepResult
from retrieval_pipeline.eval.stats import bootstrap_ci
from retrieval_pipeline.graph.context import Context

CAUSES = ("absent", "ranked_low", "omitted")
_WORD = re.compile(r"[a-z0-9]+")
_IDENTIFIER = re.compile(r"\w*[_\d]\w*|[a-z]+[A-Z]\w*|\"[^\"]+\"")


def _words(text: str) -> set[str]:
    return {w[:6] for w in _WORD.findall(text.lower()) if len(w) > 2}  # crude stem


def build_slices(
    dataset: BeirDataset, corpus_text: Mapping[str, str]
) -> dict[str, dict[str, Any]]:
    """Query-id lists for the automatic slices, with how each was made."""
    overlap = {}
    for qid, text in dataset.queries.items():
        relevant = [d for d, g in dataset.qrels[qid].items() if g > 0]
        q = _words(text)
        best = (
            max(
                (len(q & _words(corpus_text.get(d, ""))) / len(q) for d in relevant),
                default=0.0,
            )
            if q
            else 0.0
        )
        overlap[qid] = best
    cut = statistics.quantiles(sorted(overlap.values()), n=4)[0] if overlap else 0
    return {
        "identifiers_and_quotes": {
            "how": "query holds a quoted phrase, digits, underscores or camelCase",
            "ids": sorted(
                q for q, t in dataset.queries.items() if _IDENTIFIER.search(t)
            ),
        },
        "low_overlap_paraphrase": {
            "how": f"best share of query words found in a relevant document "
            f"<= {cut:.2f} (the lowest quartile)",
            "ids": sorted(q for q, v in overlap.items() if v <= cut),
        },
        "multi_passage": {
            "how": "two or more relevant documents",
            "ids": sorted(
                q
                for q, d in dataset.qrels.items()
                if q in dataset.queries and sum(g > 0 for g in d.values()) >= 2
            ),
        },
    }


def near_duplicate_slice(final: StepResult) -> dict[str, Any]:
    """Queries whose candidate pool held near-duplicates the assembler dropped."""
    ids = sorted(
        q for q, d in final.debug.items() if d.get("duplicates_dropped", 0) > 0
    )

    def mean_of(key: str) -> float:
        return statistics.mean(final.debug[q][key] for q in ids) if ids else 0.0

    return {
        "how": "queries whose candidate pool held near-duplicates (Jaccard >= 0.9) "
        "that the assembler dropped",
        "ids": ids,
        "queries": len(ids),
        "duplicates_dropped_mean": mean_of("duplicates_dropped"),
        "duplicate_share_in_context": mean_of("_duplicate_share"),
    }


def assembly_metrics(
    final: StepResult, dataset: BeirDataset, budget: int
) -> dict[str, Any]:
    """Token use, duplicate shares and first relevant position of the final step."""
    used, dup, in_context, distinct, first = [], [], [], [], []
    for qid, d in final.debug.items():
        used.append(d.get("assembled_tokens", 0) / budget)
        pool = max(d.get("candidate_pool", 0), 1)
        dup.append(d.get("duplicates_dropped", 0) / pool)
        in_context.append(d["_duplicate_share"])
        docs = d["_documents"][:10]
        distinct.append(len(set(docs)))
        relevant = {x for x, g in dataset.qrels[qid].items() if g > 0}
        pos = next(
            (i + 1 for i, x in enumerate(d["_documents"]) if x in relevant), None
        )
        if pos is not None:
            first.append(pos)
    return {
        "budget_tokens": budget,
        "tokens_used_share": bootstrap_ci(used).to_dict(),
        "duplicate_share_of_pool": bootstrap_ci(dup).to_dict(),
        "duplicate_share_in_context": bootstrap_ci(in_context).to_dict(),
        "distinct_documents_top10": bootstrap_ci(distinct).to_dict(),
        "first_relevant_position_median": statistics.median(first) if first else None,
        "first_relevant_found": len(first),
    }


def diagnose(
    final: StepResult, hybrid: StepResult, dataset: BeirDataset, pool: int
) -> dict[str, Any]:
    """Why each relevant document missing from the final top 10 is missing.

    Per missing (query, relevant document): *absent* from the deep fused candidate
    list (100 chunks per channel), *ranked_low* (a candidate below the pool cut), or
    *omitted* (inside the pool, left out of the top 10 of the assembled context).
    """
    missing = dict.fromkeys(CAUSES, 0)
    examples: dict[str, list[str]] = {k: [] for k in CAUSES}
    per_query: dict[str, dict[str, str]] = {}
    complete = 0
    for qid in sorted(dataset.queries):
        relevant = sorted(x for x, g in dataset.qrels[qid].items() if g > 0)
        top = set(final.result.run.get(qid, [])[:10])
        candidates = hybrid.result.run.get(qid, [])  # deep, fused
        rank = {doc: i + 1 for i, doc in reversed(list(enumerate(candidates)))}
        causes = {}
        for doc in relevant:
            if doc in top:
                continue
            if doc not in rank:
                cause = "absent"
            elif rank[doc] > pool:
                cause = "ranked_low"
            else:
                cause = "omitted"
            causes[doc] = cause
            missing[cause] += 1
            if qid not in examples[cause] and len(examples[cause]) < 5:
                examples[cause].append(qid)
        if causes:
            per_query[qid] = causes
        else:
            complete += 1
    return {
        "queries_complete": complete,
        "queries_with_missing": len(per_query),
        "missing_by_cause": missing,
        "examples": examples,
        "per_query": per_query,
    }


def negatives(
    graph: Any, dataset: BeirDataset, borrowed: Sequence[str], context: Context
) -> dict[str, Any]:
    """How often questions with no evidence here still return context."""
    empty = 0
    for text in borrowed:
        out = graph.invoke(
            {"question": text, "limit": LIMIT, "tenant": dataset.tenant},
            context=context,
        )
        if not out["chunks"]:
            empty += 1
    n = max(len(borrowed), 1)
    return {
        "how": "questions from another data set: nothing here supports them",
        "queries": len(borrowed),
        "empty_result_rate": empty / n,
        "false_positive_rate": (len(borrowed) - empty) / n,
        "note": "the pipeline has no abstention threshold, so every negative query "
        "returns context; the rate is reported so a threshold can be judged",
    }


def permission(
    graph: Any,
    dataset: BeirDataset,
    context: Context,
    corpus_ids: Sequence[str],
    max_queries: int = 60,
) -> dict[str, Any]:
    """Withhold every other relevant document through the SQL scope filter."""
    leaks = 0
    recall_visible = []
    tried = 0
    for qid in sorted(q for q in dataset.queries if len(dataset.qrels[q]) >= 2)[
        :max_queries
    ]:
        relevant = sorted(x for x, g in dataset.qrels[qid].items() if g > 0)
        withheld = set(relevant[1::2])
        if not withheld:
            continue
        tried += 1
        allowed = [d for d in corpus_ids if d not in withheld]
        out = graph.invoke(
            {
                "question": dataset.queries[qid],
                "limit": LIMIT,
                "tenant": dataset.tenant,
                "doc_ids": allowed,
            },
            context=context,
        )
        docs = {c["document_id"] for c in out["chunks"]}
        leaks += len(docs & withheld)
        visible = set(relevant) - withheld
        recall_visible.append(len(docs & visible) / len(visible))
    return {
        "how": "every other relevant document withheld by the document-scope filter "
        "(the same SQL predicate position as the ACL filter)",
        "queries": tried,
        "withheld_documents_returned": leaks,
        "recall_of_visible_evidence": bootstrap_ci(recall_visible).to_dict()
        if recall_visible
        else None,
    }
