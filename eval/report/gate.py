"""The regression gate: a fresh ladder against the committed baseline."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from retrieval_pipeline.eval.report.ladder import HEADLINE
from retrieval_pipeline.eval.stats import paired_test


def check_against_baseline(
    current: Mapping[str, Any], baseline: Mapping[str, Any], *, alpha: float = 0.05
) -> list[str]:
    """Steps whose nDCG@10 dropped significantly against the committed baseline."""
    problems = []
    base_steps = {s["name"]: s for s in baseline["steps"]}
    for step in current["steps"]:
        old = base_steps.get(step["name"])
        if old is None:
            continue
        a, b = old["per_query"][HEADLINE], step["per_query"][HEADLINE]
        ids = sorted(set(a) & set(b))
        if not ids:
            continue
        cmp = paired_test([a[q] for q in ids], [b[q] for q in ids])
        if cmp.delta < 0 and cmp.p_value < alpha:
            problems.append(
                f"{current['dataset']} {step['name']}: nDCG@10 {cmp.delta:+.4f} "
                f"(p = {cmp.p_value:.4f}, {len(ids)} queries) against the baseline"
            )
    return problems
