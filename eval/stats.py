"""Statistics for comparing rankers: bootstrap confidence intervals, paired tests.

The spec asks for confidence intervals or paired tests when comparing rankers; both
resample queries, the unit of independence.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

BOOTSTRAP_SAMPLES = 10_000
SEED = 20_260_429  # fixed so reports are reproducible


@dataclass(frozen=True)
class Interval:
    """A mean with a percentile bootstrap confidence interval."""

    mean: float
    low: float
    high: float
    level: float = 0.95

    def to_dict(self) -> dict[str, float]:
        """Return the JSON form."""
        return {
            "mean": self.mean,
            "low": self.low,
            "high": self.high,
            "level": self.level,
        }


def bootstrap_ci(
    values: Sequence[float],
    *,
    level: float = 0.95,
    samples: int = BOOTSTRAP_SAMPLES,
    seed: int = SEED,
) -> Interval:
    """Percentile bootstrap CI of the mean over queries."""
    data = np.asarray(values, dtype=float)
    if data.size == 0:
        return Interval(float("nan"), float("nan"), float("nan"), level)
    rng = np.random.default_rng(seed)
    means = data[rng.integers(0, data.size, size=(samples, data.size))].mean(axis=1)
    alpha = (1 - level) / 2
    low, high = np.quantile(means, [alpha, 1 - alpha])
    return Interval(float(data.mean()), float(low), float(high), level)


@dataclass(frozen=True)
class PairedComparison:
    """Result of a paired test of B against A over the same queries."""

    delta: float  # mean(B) - mean(A)
    interval: Interval  # bootstrap CI of the per-query differences
    p_value: float  # two-sided paired randomization (sign-flip) test
    queries: int

    def to_dict(self) -> dict[str, float | int | dict[str, float]]:
        """Return the JSON form."""
        return {
            "delta": self.delta,
            "ci": self.interval.to_dict(),
            "p_value": self.p_value,
            "queries": self.queries,
        }


def paired_test(
    a: Sequence[float],
    b: Sequence[float],
    *,
    samples: int = BOOTSTRAP_SAMPLES,
    seed: int = SEED,
) -> PairedComparison:
    """Paired randomization test (Smucker, Allan & Carterette 2007) plus a CI.

    Under the null hypothesis the sign of each per-query difference is exchangeable;
    the p-value counts random sign flips whose mean is at least as extreme.
    """
    x = np.asarray(a, dtype=float)
    y = np.asarray(b, dtype=float)
    if x.shape != y.shape:
        raise ValueError("paired samples must cover the same queries")
    diff = y - x
    observed = float(diff.mean()) if diff.size else 0.0
    rng = np.random.default_rng(seed)
    signs = rng.choice(np.array([-1.0, 1.0]), size=(samples, diff.size))
    flipped = np.abs((signs * diff).mean(axis=1))
    # Add one to both counts so p is never exactly zero (Phipson & Smyth 2010).
    p_value = (int((flipped >= abs(observed) - 1e-12).sum()) + 1) / (samples + 1)
    return PairedComparison(
        observed, bootstrap_ci(diff, seed=seed), p_value, int(diff.size)
    )
