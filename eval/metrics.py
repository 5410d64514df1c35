"""Ranking metrics with graded relevance, per query.

Definitions follow trec_eval / pytrec_eval as BEIR uses them: nDCG with linear gains
(gain = grade) and log2 discounts; Recall@k over documents with grade > 0; MRR@k the
reciprocal rank of the first relevant document within k (0 when none).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

Run = Mapping[str, Sequence[str]]  # query id -> ranked document ids
Qrels = Mapping[str, Mapping[str, int]]

METRICS = ("ndcg", "recall", "precision", "mrr")


def ndcg_at_k(ranked: Sequence[str], judged: Mapping[str, int], k: int) -> float:
    """Normalised discounted cumulative gain at ``k`` with linear gains."""
    dcg = sum(
        judged.get(doc, 0) / math.log2(rank + 1)
        for rank, doc in enumerate(ranked[:k], start=1)
        if judged.get(doc, 0) > 0
    )
    ideal = sorted((g for g in judged.values() if g > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(rank + 1) for rank, g in enumerate(ideal, start=1))
    return dcg / idcg if idcg > 0 else 0.0


def recall_at_k(ranked: Sequence[str], judged: Mapping[str, int], k: int) -> float:
    """Share of relevant documents found in the top ``k``."""
    relevant = {d for d, g in judged.items() if g > 0}
    if not relevant:
        return 0.0
    return len(relevant.intersection(ranked[:k])) / len(relevant)


def precision_at_k(ranked: Sequence[str], judged: Mapping[str, int], k: int) -> float:
    """Share of the top ``k`` positions holding a relevant document."""
    return sum(1 for d in ranked[:k] if judged.get(d, 0) > 0) / k


def mrr_at_k(ranked: Sequence[str], judged: Mapping[str, int], k: int) -> float:
    """Reciprocal rank of the first relevant document within ``k``."""
    for rank, doc in enumerate(ranked[:k], start=1):
        if judged.get(doc, 0) > 0:
            return 1.0 / rank
    return 0.0


_FUNCTIONS = {
    "ndcg": ndcg_at_k,
    "recall": recall_at_k,
    "precision": precision_at_k,
    "mrr": mrr_at_k,
}


def evaluate(
    run: Run,
    qrels: Qrels,
    *,
    ks: Sequence[int] = (10,),
    metrics: Sequence[str] = METRICS,
) -> dict[str, dict[str, float]]:
    """Return ``{"ndcg@10": {qid: value}, ...}`` over every judged query.

    A judged query missing from the run scores 0, as in trec_eval.
    """
    unknown = set(metrics) - set(_FUNCTIONS)
    if unknown:
        raise ValueError(f"unknown metrics {sorted(unknown)}; valid: {METRICS}")
    results: dict[str, dict[str, float]] = {}
    for metric in metrics:
        for k in ks:
            fn = _FUNCTIONS[metric]
            results[f"{metric}@{k}"] = {
                qid: fn(list(run.get(qid, ())), judged, k)
                for qid, judged in qrels.items()
            }
    return results


def chunks_to_documents(chunk_docs: Sequence[str]) -> list[str]:
    """Map a ranked list of chunks' document ids to documents: first occurrence wins."""
    seen: dict[str, None] = {}
    for doc in chunk_docs:
        seen.setdefault(doc, None)
    return list(seen)
