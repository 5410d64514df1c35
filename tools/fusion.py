"""Fusion of the channels' ranked lists: convex combination (default) or RRF."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from retrieval_pipeline.errors import ConfigurationError
from retrieval_pipeline.graph.context import FUSION, FUSIONS, RRF_K


def reciprocal_rank_fusion(
    ranked: Mapping[str, Sequence[str]],
    *,
    k: int = RRF_K,
    weights: Mapping[str, float] | None = None,
) -> list[tuple[str, float]]:
    """Fuse ranked id lists: ``sum_r w_r / (k + rank_r)`` with 1-based ranks.

    Cormack, Clarke & Buettcher (SIGIR 2009). Ties break by id, so the order is
    deterministic.
    """
    scores: dict[str, float] = {}
    for channel, ids in ranked.items():
        weight = 1.0 if weights is None else float(weights.get(channel, 1.0))
        for rank, item in enumerate(ids, start=1):
            scores[item] = scores.get(item, 0.0) + weight / (k + rank)
    return sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))


def convex_fusion(
    scored: Mapping[str, Sequence[tuple[str, float]]],
    *,
    weights: Mapping[str, float] | None = None,
) -> list[tuple[str, float]]:
    """Weighted mean of min-max normalised channel scores; absent from a channel = 0.

    Convex combination (Bruch, Gai & Ingber 2023, "An Analysis of Fusion Functions for
    Hybrid Retrieval"): unlike RRF it keeps how far apart two candidates are in each
    channel. Normalisation is over each channel's returned list; equal weights are
    the parameter-free default. Scores land in [0, 1]; ties break by id.
    """
    total = 0.0
    fused: dict[str, float] = {}
    for channel, hits in scored.items():
        weight = 1.0 if weights is None else float(weights.get(channel, 1.0))
        total += weight
        if not hits:
            continue
        values = [score for _, score in hits]
        low, span = min(values), (max(values) - min(values))
        for item, score in hits:
            normalised = (score - low) / span if span > 0 else 1.0
            fused[item] = fused.get(item, 0.0) + weight * normalised
    total = total or 1.0
    return sorted(
        ((i, s / total) for i, s in fused.items()), key=lambda kv: (-kv[1], kv[0])
    )


def fuse(
    scored: Mapping[str, Sequence[tuple[str, float]]],
    *,
    method: str = FUSION,
    k: int = RRF_K,
    weights: Mapping[str, float] | None = None,
) -> list[tuple[str, float]]:
    """Fuse channel lists with ``convex`` or ``rrf``; scores in [0, 1] either way.

    RRF scores are divided by the best a candidate can reach (rank 1 in every
    channel), so lists fused from different numbers of channels compare like with like.
    """
    match method:
        case "convex":
            return convex_fusion(scored, weights=weights)
        case "rrf":
            ranked = {c: [i for i, _ in hits] for c, hits in scored.items()}
            best = sum(
                1.0 if weights is None else float(weights.get(c, 1.0)) for c in scored
            ) / (k + 1)
            return [
                (i, s / best)
                for i, s in reciprocal_rank_fusion(ranked, k=k, weights=weights)
            ]
        case _:
            raise ConfigurationError(
                f"unknown fusion '{method}'; choose one of: {FUSIONS}"
            )
