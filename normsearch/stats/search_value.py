"""Did the search help? Measured on the scores of the searched proposals (lower is better), three ways:

1. **The trend** (:func:`trend`): did the sampler's proposals score lower as the search went on?
   Spearman's rho and Kendall's tau of proposal number against score, over the sampler's proposals
   (start-up and model-based), two-sided p-values (exact over the permutations up to 8 proposals).
2. **Against uniform draws** (:func:`shift_test`): did the sampler's model-based proposals score lower
   than architectures drawn uniformly from the space? A one-sided Mann-Whitney U test against the
   control proposals (``search.control``) and, separately, against the sampler's own random start-up
   proposals (also uniform draws), with the difference of the medians and the Hodges-Lehmann shift
   (the median of all pairwise differences) with its distribution-free 95% interval (Moses; exact
   null distribution of U up to 2,500 pairs, normal beyond).
3. **Front-loading** (:func:`front_loading`, the measure this module used to give as its answer): the
   sampler's best-so-far against the expected best of k draws in random order from its own proposals.
   It says whether the good proposals came early. A sampler that learns finds its best late and
   scores *behind* here, so it is no measure of whether the search helped; it is kept under its name.

An architecture whose every run failed, or that was pruned, scores ``inf`` (NaN is read as ``inf``):
worst, tied with the other failures, in every rank test; the medians and the shift may then be
infinite. Pure numpy and scipy (scipy imported inside the functions).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

EXACT_PERMUTATIONS = 8  # proposals up to which the trend's p-value is exact over every permutation
EXACT_PAIRS = 2500  # m * n up to which U's null distribution is exact (Moses' interval)


def _scores(xs: Sequence[float]) -> np.ndarray:
    """Scores as floats, a failure (NaN or None) as ``inf``."""
    a = np.asarray([np.inf if x is None else x for x in xs], float)
    return np.where(np.isnan(a), np.inf, a)


def _finite(x) -> float | None:
    """A Python float, or None for NaN (an infinity is kept: a median over failures)."""
    x = float(x)
    return None if math.isnan(x) else x


# --------------------------------------------------------------------------------------------------
# 1. The trend


@dataclass
class Trend:
    """Score against proposal number over the sampler's proposals (negative rho: later ones scored lower)."""

    n: int
    n_failed: int  # proposals whose every run failed (ranked worst, tied)
    rho: float | None  # Spearman
    p: float | None  # two-sided
    tau: float | None  # Kendall's tau-b
    tau_p: float | None
    exact: bool  # p is exact over every permutation (else Student's t approximation)
    verdict: str  # "improving" | "worsening" | "no trend" (rho's sign where p < alpha)


def _spearman_exact(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Spearman's rho and its exact two-sided p-value over every permutation of ``y``'s ranks."""
    import itertools

    from scipy.stats import rankdata

    rx, ry = rankdata(x), rankdata(y)

    def rho(a, b):
        a, b = a - a.mean(), b - b.mean(axis=-1, keepdims=True)
        return (b @ a) / np.sqrt((a @ a) * (b * b).sum(axis=-1))

    observed = float(rho(rx, ry[None, :])[0])
    perms = ry[np.array(list(itertools.permutations(range(len(ry)))))]
    null = rho(rx, perms)
    return observed, float(np.mean(np.abs(null) >= abs(observed) - 1e-12))


def trend(scores: Sequence[float], order: Sequence[float] | None = None, alpha: float = 0.05) -> Trend | None:
    """The trend of ``scores`` over ``order`` (default 0, 1, 2, ...); None with fewer than 3 scores or
    when every score is the same."""
    import warnings

    from scipy.stats import kendalltau, rankdata, spearmanr

    y = _scores(scores)
    x = np.arange(y.size, dtype=float) if order is None else np.asarray(list(order), float)
    if y.size < 3 or np.all(y == y[0]):
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ranks_y = rankdata(y)  # ties (failures: inf) share their mean rank
        if y.size <= EXACT_PERMUTATIONS:
            rho, p = _spearman_exact(x, ranks_y)
            exact = True
        else:
            r = spearmanr(x, ranks_y)
            rho, p, exact = float(r.statistic), float(r.pvalue), False
        k = kendalltau(x, ranks_y)
    rho_v, p_v = _finite(rho), _finite(p)
    verdict = "no trend"
    if rho_v is not None and p_v is not None and p_v < alpha and rho_v != 0:
        verdict = "improving" if rho_v < 0 else "worsening"
    return Trend(n=int(y.size), n_failed=int(np.sum(~np.isfinite(y))), rho=rho_v, p=p_v, tau=_finite(k.statistic),
                 tau_p=_finite(k.pvalue), exact=exact, verdict=verdict)


# --------------------------------------------------------------------------------------------------
# 2. Against uniform draws


@dataclass
class ShiftTest:
    """The sampler's model-based proposals (x) against uniform draws (y): one-sided Mann-Whitney U
    (the alternative: x scores lower), the medians, and the Hodges-Lehmann shift of x - y."""

    against: str  # "control" | "startup"
    n: int
    n_against: int
    n_failed: int
    n_failed_against: int
    median: float | None
    median_against: float | None
    median_diff: float | None  # median(x) - median(y); negative: the sampler's proposals scored lower
    u: float  # U of x (the pairs x > y, ties half): small when x is lower
    p: float | None  # one-sided, the alternative that x scores lower
    p_higher: float | None  # one-sided, the other direction (read only when p is not small)
    shift: float | None  # Hodges-Lehmann: the median of x_i - y_j
    shift_low: float | None  # its 95% interval (None: too few pairs for one)
    shift_high: float | None
    verdict: str  # "lower" (p < alpha) | "higher" (p_higher < alpha) | "no evidence"


def u_null_cdf(m: int, n: int) -> np.ndarray:
    """P(U <= u) for u = 0..m*n under the null with no ties: the exact distribution of Mann-Whitney's
    U for samples of m and n, by the recurrence on the largest observation."""
    # f[j] = counts of U for (i, j) samples, built for i = 0..m
    f = [np.ones(1)] * (n + 1)  # i = 0: U = 0 whatever j
    for i in range(1, m + 1):
        g = [np.ones(1)]  # j = 0: U = 0
        for j in range(1, n + 1):
            size = i * j + 1
            a = np.zeros(size)
            a[j:j + f[j].size] += f[j]  # the largest is an x: it beats the j y's
            a[:g[j - 1].size] += g[j - 1]  # the largest is a y
            g.append(a)
        f = g
    counts = f[n]
    return np.cumsum(counts) / counts.sum()


def _moses_rank(m: int, n: int, alpha: float) -> int:
    """C, the rank of the lower end of the 1 - alpha interval among the m*n sorted differences
    (1-indexed; the upper end is m*n + 1 - C); 0 when the samples are too small for one."""
    if m * n <= EXACT_PAIRS:
        cdf = u_null_cdf(m, n)
        ok = np.flatnonzero(cdf <= alpha / 2)  # u with P(U <= u) <= alpha/2; C = u + 1
        return int(ok[-1]) + 1 if ok.size else 0
    from scipy.stats import norm

    c = m * n / 2 - norm.ppf(1 - alpha / 2) * math.sqrt(m * n * (m + n + 1) / 12)
    return max(0, int(math.floor(c)))


def hodges_lehmann(x: Sequence[float], y: Sequence[float], alpha: float = 0.05
                   ) -> tuple[float | None, float | None, float | None]:
    """(the median of x_i - y_j, and its 1 - alpha interval). A failure (inf) minus a failure is 0: a tie."""
    a, b = _scores(x), _scores(y)
    with np.errstate(invalid="ignore"):
        d = a[:, None] - b[None, :]
    d = np.sort(np.where(np.isnan(d), 0.0, d).ravel())
    if d.size == 0:
        return None, None, None
    with np.errstate(invalid="ignore"):
        shift = _finite((d[(d.size - 1) // 2] + d[d.size // 2]) / 2)
    c = _moses_rank(a.size, b.size, alpha)
    if c < 1:
        return shift, None, None
    return shift, float(d[c - 1]), float(d[d.size - c])


def shift_test(x: Sequence[float], y: Sequence[float], against: str, alpha: float = 0.05) -> ShiftTest | None:
    """``x`` (the sampler's model-based proposals) against ``y`` (uniform draws); None unless both
    have 2 or more scores."""
    import warnings

    from scipy.stats import mannwhitneyu

    a, b = _scores(x), _scores(y)
    if a.size < 2 or b.size < 2:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tied = np.all(np.concatenate([a, b]) == a[0])
        lower = None if tied else mannwhitneyu(a, b, alternative="less")
        higher = None if tied else mannwhitneyu(a, b, alternative="greater")
    u = float(np.sum(a[:, None] > b[None, :]) + 0.5 * np.sum(a[:, None] == b[None, :]))
    p = None if lower is None else _finite(lower.pvalue)
    p_hi = None if higher is None else _finite(higher.pvalue)
    shift, low, high = hodges_lehmann(a, b, 0.05)
    med, med_b = float(np.median(a)), float(np.median(b))
    diff = 0.0 if math.isinf(med) and med == med_b else med - med_b  # both medians failures: a tie
    verdict = "lower" if p is not None and p < alpha else "higher" if p_hi is not None and p_hi < alpha else \
        "no evidence"
    return ShiftTest(against=against, n=int(a.size), n_against=int(b.size), n_failed=int(np.sum(np.isinf(a))),
                     n_failed_against=int(np.sum(np.isinf(b))), median=med, median_against=med_b, median_diff=diff,
                     u=u, p=p, p_higher=p_hi, shift=shift, shift_low=low, shift_high=high, verdict=verdict)


# --------------------------------------------------------------------------------------------------
# 3. Front-loading


def expected_best_of_k(pool: Sequence[float]) -> np.ndarray:
    """E[min of k draws without replacement from ``pool``] for k = 1..N, by order statistics.

    With the pool sorted ascending, s_(1) <= ... <= s_(N), the best of k draws is s_(i) with
    probability C(N - i, k - 1) / C(N, k). Ties need no special case. Returns an array of N values.
    """
    from scipy.special import gammaln

    s = np.sort(_scores(pool))
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
class FrontLoading:
    """The sampler's best-so-far against random order over the same pool: whether the good proposals
    came early (not whether the search helped: a sampler that learns is *behind* here)."""

    best_so_far: np.ndarray  # k = 1..n: the sampler's best after k proposals
    expected_random: np.ndarray  # k = 1..n: E[best of k random draws from the pool]
    n_ahead: int  # values of k where the sampler's best was lower (better)
    n_behind: int  # ... higher (worse)
    mean_gap: float  # mean over k of best_so_far - expected_random (negative: the best came early)
    k_reached_best: int | None  # proposals the sampler took to reach the pool's best (None: never)
    p_random_by_then: float | None  # probability that random order reaches it within as many
    verdict: str  # "ahead" | "behind" | "even" (by the sign of mean_gap)


def front_loading(trials: Sequence[float], pool: Sequence[float] | None = None) -> FrontLoading:
    """The sampler's best-so-far over ``trials`` (its scores in proposal order, baselines excluded)
    against random order over ``pool`` (default: the trials themselves). For k beyond the pool's size
    the expectation stays at the pool's best."""
    t = _scores(trials)
    if t.size == 0:
        raise ValueError("no trials")
    pool_arr = t if pool is None else _scores(pool)
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
    return FrontLoading(best_so_far=best, expected_random=exp, n_ahead=int(np.sum(gap < -tol)),
                        n_behind=int(np.sum(gap > tol)), mean_gap=mean_gap, k_reached_best=k_best,
                        p_random_by_then=p_by, verdict=verdict)


# --------------------------------------------------------------------------------------------------
# All of it


@dataclass
class SearchValue:
    """Did the search help: the searched proposals' scores and the three measures above."""

    scores: list  # the sampler's proposals' scores in proposal order (inf: failed)
    kinds: list  # "startup" | "model" for each
    orders: list  # their proposal numbers
    control_scores: list  # the control proposals' scores
    control_at: list  # where each control came among the sampler's proposals (for the plot)
    alpha: float
    trend: Trend | None
    vs_control: ShiftTest | None  # the model-based proposals against the controls
    vs_startup: ShiftTest | None  # ... against the sampler's random start-up proposals
    front_loading: FrontLoading | None
    n_startup: int = 0
    n_model: int = 0
    n_controls: int = 0
    startup_inferred: bool = False  # which proposals were start-up draws was worked out, not recorded

    @property
    def headline(self) -> ShiftTest | None:
        """The test against uniform draws to lead with: against the controls when there are, else
        against the start-up proposals."""
        return self.vs_control or self.vs_startup

    def to_dict(self) -> dict:
        """Plain data (``inf`` stays a float: :func:`normsearch.records.jsonable` writes it as null)."""
        d = asdict(self)
        for k in ("best_so_far", "expected_random"):
            if d["front_loading"] is not None:
                d["front_loading"][k] = [float(v) for v in d["front_loading"][k]]
        for k in ("scores", "control_scores"):
            d[k] = [float(v) for v in d[k]]
        return d


def search_value(scores: Sequence[float], kinds: Sequence[str] | None = None, controls: Sequence[float] = (),
                 orders: Sequence[float] | None = None, control_at: Sequence[float] | None = None,
                 alpha: float = 0.05) -> SearchValue:
    """Every measure for the sampler's proposals' ``scores`` in proposal order (``kinds``: "startup"
    or "model" each, default all "model"; ``orders``: their proposal numbers, default 0, 1, ...) and
    the control proposals' ``controls``."""
    s = _scores(scores)
    if s.size == 0 and len(controls) == 0:
        raise ValueError("no proposals")
    kinds = list(kinds) if kinds is not None else ["model"] * s.size
    if len(kinds) != s.size:
        raise ValueError("one kind per score")
    orders = list(orders) if orders is not None else list(range(s.size))
    c = _scores(controls)
    model = s[[k == "model" for k in kinds]] if s.size else s
    startup = s[[k == "startup" for k in kinds]] if s.size else s
    return SearchValue(
        scores=s.tolist(), kinds=kinds, orders=orders, control_scores=c.tolist(),
        control_at=list(control_at) if control_at is not None else [], alpha=alpha,
        trend=trend(s, orders, alpha), vs_control=shift_test(model, c, "control", alpha),
        vs_startup=shift_test(model, startup, "startup", alpha),
        front_loading=front_loading(s) if s.size else None,
        n_startup=int(startup.size), n_model=int(model.size), n_controls=int(c.size))
