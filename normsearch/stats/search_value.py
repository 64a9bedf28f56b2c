"""Did the search help? The sampler's best-so-far against the expected best of k random draws from
the pool of evaluated scores (Dodge et al. 2019's expected validation performance, without
replacement and exact).

Lower is better throughout; a failed trial may be passed as ``inf`` or NaN (both count as worst).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


def expected_best_of_k(pool: Sequence[float]) -> np.ndarray:
    """E[min of k draws without replacement from ``pool``] for k = 1..N, by order statistics.

    With the pool sorted ascending, s_(1) <= ... <= s_(N), the best of k draws is s_(i) with
    probability C(N - i, k - 1) / C(N, k). Ties need no special case. Returns an array of N values.
    """
    from scipy.special import gammaln

    s = np.sort(np.nan_to_num(np.asarray(pool, float), nan=np.inf))
    n = s.size
    if n == 0:
        return np.empty(0)

    def log_comb(a, b):
        return gammaln(a + 1) - gammaln(b + 1) - gammaln(a - b + 1)

    i = np.arange(1, n + 1)[:, None]  # rank in the sorted pool
    k = np.arange(1, n + 1)[None, :]  # draws
    valid = (n - i) >= (k - 1)
    logp = np.where(valid, log_comb(np.maximum(n - i, 0), np.where(valid, k - 1, 0)) - log_comb(n, k), -np.inf)
    p = np.exp(logp)  # (i, k): P(best of k is s_(i))
    with np.errstate(invalid="ignore"):
        terms = np.where(p > 0, p * s[:, None], 0.0)
    return terms.sum(axis=0)


@dataclass
class SearchValue:
    """The sampler's curve against random order over the same pool."""

    best_so_far: np.ndarray  # k = 1..n: the sampler's best after k trials
    expected_random: np.ndarray  # k = 1..n: E[best of k random draws from the pool]
    n_ahead: int  # values of k where the sampler's best was lower (better)
    n_behind: int  # ... higher (worse)
    mean_gap: float  # mean over k of best_so_far - expected_random (negative: the sampler was ahead)
    k_reached_best: int | None  # trials the sampler took to reach the pool's best (None: never)
    p_random_by_then: float | None  # probability that random order reaches it within as many
    verdict: str  # "ahead" | "behind" | "even" (by the sign of mean_gap)


def search_value(trials: Sequence[float], pool: Sequence[float] | None = None) -> SearchValue:
    """Compare the sampler's best-so-far over ``trials`` (its scores in proposal order, baselines
    excluded) with random order over ``pool`` (default: the trials themselves). For k beyond the
    pool's size the expectation stays at the pool's best."""
    t = np.nan_to_num(np.asarray(trials, float), nan=np.inf)
    if t.size == 0:
        raise ValueError("no trials")
    pool_arr = t if pool is None else np.nan_to_num(np.asarray(pool, float), nan=np.inf)
    best = np.minimum.accumulate(t)
    exp = expected_best_of_k(pool_arr)
    exp = np.concatenate([exp, np.full(max(0, t.size - exp.size), exp[-1])])[: t.size]
    finite = np.isfinite(best) & np.isfinite(exp)
    gap = best[finite] - exp[finite]
    tol = 1e-12
    pool_best = float(pool_arr.min())
    reached = np.flatnonzero(best <= pool_best + tol)
    k_best = int(reached[0]) + 1 if reached.size else None
    p_by = None
    if k_best is not None:
        n, m = pool_arr.size, int(np.sum(pool_arr <= pool_best + tol))
        p_by = 1.0 - (math.comb(n - m, k_best) / math.comb(n, k_best) if k_best <= n - m else 0.0)
    mean_gap = float(gap.mean()) if gap.size else 0.0
    verdict = "ahead" if mean_gap < -tol else "behind" if mean_gap > tol else "even"
    return SearchValue(best_so_far=best, expected_random=exp, n_ahead=int(np.sum(gap < -tol)),
                       n_behind=int(np.sum(gap > tol)), mean_gap=mean_gap, k_reached_best=k_best,
                       p_random_by_then=p_by, verdict=verdict)
