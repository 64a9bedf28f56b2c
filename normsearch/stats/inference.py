"""Losses of successful runs: each architecture's own variance, intervals, comparisons under
multiplicity, equivalence, and P(best) with rank intervals.

The data are ``samples``: architecture -> {seed: final loss} over the successful runs at each
architecture's chosen learning rate. Every interval and test uses each architecture's own seed-to-seed
variance, never a pooled one, and no test of equal variances switches anything: a difference has the
Welch standard error with Satterthwaite degrees of freedom (:func:`welch_df`). Runs are treated as
independent (a seed shared by two architectures is not paired). scipy and statsmodels are imported
inside the functions so that importing this module stays cheap. The rules, and the simulations that
chose them, are in ``docs/statistics.md``; seeds to decide are in :mod:`._power`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from ._power import ALPHA, MARGIN, MAX_SEEDS, POWER, planning_diff, seeds_needed, welch_df  # noqa: F401

VERDICTS = ("better", "worse", "equivalent", "undecided")
#: what the report says of the variance model, in one fixed sentence
VARIANCE_METHOD = ("per-architecture variances (each architecture's own seed-to-seed SD, never pooled; runs "
                   "independent), Welch-Satterthwaite df taken at the variances' 70% upper confidence limits")

Samples = Mapping[str, Mapping[int, float]]


def _values(samples: Samples, arch: str) -> np.ndarray:
    return np.asarray(list(samples.get(arch, {}).values()), float)


@dataclass
class VarianceFit:
    """Each architecture's own seed-to-seed SD over its successful runs (None with one run), and the
    pooled within-architecture SD that only the rank draws use, for an architecture with one run."""

    archs: list[str]  # those with a successful run
    n: dict[str, int]
    mean: dict[str, float]
    sd: dict[str, float | None]  # own sample SD (ddof 1); None with one run
    within_sd: float | None  # sqrt(sum (n_a - 1) s_a^2 / sum (n_a - 1)): borrowed by one-run draws only
    within_df: int

    method = VARIANCE_METHOD

    def sd_range(self) -> tuple[tuple[str, float], tuple[str, float]] | None:
        """((arch, lowest SD), (arch, highest SD)) over the architectures with two or more runs."""
        known = sorted((s, a) for a, s in self.sd.items() if s is not None)
        return ((known[0][1], known[0][0]), (known[-1][1], known[-1][0])) if known else None


def variance_fit(samples: Samples) -> VarianceFit | None:
    """Each architecture's own SD; None when no architecture has two successful runs (no variance at all)."""
    archs = [a for a in samples if samples[a]]
    vals = {a: _values(samples, a) for a in archs}
    within = [v for v in vals.values() if v.size >= 2]
    if not within:
        return None
    df = sum(v.size - 1 for v in within)
    return VarianceFit(archs=archs, n={a: int(v.size) for a, v in vals.items()},
                       mean={a: float(v.mean()) for a, v in vals.items()},
                       sd={a: float(v.std(ddof=1)) if v.size >= 2 else None for a, v in vals.items()},
                       within_sd=math.sqrt(sum(((v - v.mean()) ** 2).sum() for v in within) / df), within_df=df)


@dataclass
class Interval:
    """An architecture's mean loss over its successful runs and a 95% interval for it."""

    arch: str
    n: int
    mean: float | None
    sd: float | None  # this architecture's own SD
    df: int | None  # n - 1
    ci_low: float | None
    ci_high: float | None
    method: str  # "per-arch" | "none" (one run: no variance)


def interval(samples: Samples, arch: str, level: float = 0.95) -> Interval:
    """Student-t interval of the mean with the architecture's own SD and n - 1 df (seed-to-seed variation
    included, which a level needs); none with one run."""
    from scipy import stats

    v = _values(samples, arch)
    if v.size == 0:
        return Interval(arch, 0, None, None, None, None, None, "none")
    mean = float(v.mean())
    if v.size < 2:
        return Interval(arch, 1, mean, None, None, None, None, "none")
    sd, df = float(v.std(ddof=1)), v.size - 1
    half = float(stats.t.ppf(0.5 + level / 2, df)) * sd / math.sqrt(v.size)
    return Interval(arch, int(v.size), mean, sd, df, mean - half, mean + half, "per-arch")


@dataclass
class Comparison:
    """``arch`` against the baseline ``against``; ``diff`` is arch - against (negative is better)."""

    arch: str
    against: str
    n: int  # seeds with a successful run in both
    n_arch: int
    n_against: int
    method: str  # "welch" | "none" (too few runs, or no noise)
    diff: float | None = None
    se: float | None = None
    df: float | None = None
    ci_low: float | None = None  # 95%, not adjusted for multiplicity
    ci_high: float | None = None
    p_value: float | None = None  # two-sided test of no difference
    p_holm: float | None = None  # Holm-adjusted over the family of comparisons
    q_bh: float | None = None  # Benjamini-Hochberg q-value over the same family
    p_tost: float | None = None  # two one-sided tests of |diff| >= margin
    p_tost_holm: float | None = None
    margin_equivalent: float | None = None  # smallest margin within which TOST passes: max |end| of the 90% CI
    p_improve: float | None = None  # posterior P(arch's mean loss < against's)
    seeds_needed: int | None = None  # more seeds on each arm to resolve an undecided comparison
    diff_planned: float | None = None  # the shrunken difference seeds_needed planned for
    margin: float = MARGIN
    verdict: str = "undecided"  # better | worse | equivalent | undecided
    exploratory: bool = False  # the verdict depends on racing (seeds added from the results so far)
    sd_arch: float | None = field(default=None, repr=False)  # per-run SDs used by seeds_needed
    sd_against: float | None = field(default=None, repr=False)


def compare(samples: Samples, arch: str, against: str, margin: float = MARGIN, level: float = 0.95,
            alpha: float = ALPHA) -> Comparison:
    """The difference, its interval and its p-value (and TOST's), before any multiplicity step: Welch's
    standard error from each architecture's own SD, df by :func:`welch_df`. ``margin_equivalent`` is
    the margin at which TOST at ``alpha`` would just pass: max(|lo|, |hi|) of the 1 - 2 alpha interval."""
    from scipy.special import stdtr, stdtrit  # Student's t CDF and its inverse (cheaper than scipy.stats.t)

    a, b = samples.get(arch, {}), samples.get(against, {})
    c = Comparison(arch=arch, against=against, n=len(set(a) & set(b)), n_arch=len(a), n_against=len(b),
                   method="none", margin=margin)
    if not a or not b:
        return c
    va, vb = _values(samples, arch), _values(samples, against)
    c.diff = float(va.mean() - vb.mean())
    if va.size < 2 or vb.size < 2:
        return c
    c.sd_arch, c.sd_against = float(va.std(ddof=1)), float(vb.std(ddof=1))
    ea, eb = c.sd_arch ** 2 / va.size, c.sd_against ** 2 / vb.size
    if ea + eb == 0:  # identical runs: no noise to test against
        return c
    c.method, c.se = "welch", math.sqrt(ea + eb)
    c.df = float(welch_df(ea, eb, va.size - 1, vb.size - 1))
    t_crit = float(stdtrit(c.df, 0.5 + level / 2))
    c.ci_low, c.ci_high = c.diff - t_crit * c.se, c.diff + t_crit * c.se
    c.p_value = float(2 * stdtr(c.df, -abs(c.diff) / c.se))
    c.p_tost = max(float(stdtr(c.df, -(c.diff + margin) / c.se)),  # H0: diff <= -margin
                   float(stdtr(c.df, (c.diff - margin) / c.se)))  # H0: diff >= +margin
    c.margin_equivalent = abs(c.diff) + float(stdtrit(c.df, 1 - alpha)) * c.se
    return c


def adjust(comparisons: Sequence[Comparison], alpha: float = ALPHA, power: float = POWER) -> None:
    """Multiplicity and verdicts, in place, over the whole family ``comparisons``.

    Holm (familywise error ``alpha``) on the difference p-values and, separately, on the TOST
    p-values; Benjamini-Hochberg q-values on the difference p-values. Verdict: ``better``/``worse``
    when the Holm-adjusted difference p < alpha; else ``equivalent`` when the Holm-adjusted TOST
    p < alpha; else ``undecided``, with :func:`seeds_needed` at the Bonferroni level alpha/m, planned
    for the observed difference shrunk toward 0 (:func:`planning_diff`).
    """
    from statsmodels.stats.multitest import multipletests

    tested = [c for c in comparisons if c.p_value is not None]
    if tested:
        p = np.array([c.p_value for c in tested])
        holm = multipletests(p, alpha=alpha, method="holm")[1]
        bh = multipletests(p, alpha=alpha, method="fdr_bh")[1]
        tost = multipletests(np.array([c.p_tost for c in tested]), alpha=alpha, method="holm")[1]
        for c, ph, q, pt in zip(tested, holm, bh, tost):
            c.p_holm, c.q_bh, c.p_tost_holm = float(ph), float(q), float(pt)
    m = max(1, len(comparisons))
    for c in comparisons:
        if c.p_holm is not None and c.p_holm < alpha:
            c.verdict = "better" if c.diff < 0 else "worse"
        elif c.p_tost_holm is not None and c.p_tost_holm < alpha:
            c.verdict = "equivalent"
        else:
            c.verdict = "undecided"
            if c.se is not None:
                c.diff_planned = planning_diff(c.diff, c.se)
                c.seeds_needed = seeds_needed(c.diff_planned, c.sd_arch, c.sd_against, c.n_arch, c.n_against,
                                              c.margin, alpha / m, power)


@dataclass
class Ranks:
    """P(best) and rank intervals from posterior draws of every architecture's mean loss."""

    archs: list[str]
    draws: np.ndarray = field(repr=False)  # (n_draws, len(archs)); comparable within a draw
    ranks: np.ndarray = field(repr=False)  # 1 = best, hurdle tiers applied
    method: str  # "per-arch posterior"
    p_best: dict[str, float] = field(default_factory=dict)
    rank_low: dict[str, int] = field(default_factory=dict)  # 2.5th percentile of the rank
    rank_high: dict[str, int] = field(default_factory=dict)  # 97.5th percentile

    def p_improve(self, a: str, b: str) -> float:
        """Posterior probability that a's mean loss is lower than b's."""
        i, j = self.archs.index(a), self.archs.index(b)
        return float(np.mean(self.draws[:, i] < self.draws[:, j]))


def draw_scale(fit: VarianceFit, arch: str) -> tuple[float, int] | None:
    """(SD, df) of an architecture's posterior draws: its own SD with n - 1 df, or, with one run, the
    pooled within-architecture SD and its df (the only place a pooled SD is used); None without either."""
    if fit.sd.get(arch) is not None:
        return fit.sd[arch], fit.n[arch] - 1
    if fit.within_sd is not None and fit.within_df:
        return fit.within_sd, fit.within_df
    return None


def posterior_ranks(samples: Samples, fit: VarianceFit, tiers: Mapping[str, float] | None = None,
                    n_draws: int = 4000, seed: int = 0) -> Ranks:
    """Draws of the architectures' mean losses under a flat prior, then their ranks.

    Each architecture independently: mean + s / sqrt(n) * t_(n-1) with its own SD (the posterior under
    the flat prior on its mean and log SD); one with one run borrows the pooled within-architecture SD
    (:func:`draw_scale`). ``tiers`` (the hurdle's failure rates) order architectures before their draws
    do: a draw ranks only within its tier. Ranks are 1 (best) to k; the interval is the 2.5th to 97.5th
    percentile.
    """
    rng = np.random.default_rng(seed)
    archs = list(fit.archs)
    k = len(archs)
    draws = np.empty((n_draws, k))
    for i, a in enumerate(archs):
        scale = draw_scale(fit, a)
        draws[:, i] = fit.mean[a]
        if scale is not None:
            draws[:, i] += scale[0] / math.sqrt(fit.n[a]) * rng.standard_t(scale[1], n_draws)
    tier = np.array([(tiers or {}).get(a, 0.0) for a in archs])
    order = np.lexsort((draws, np.broadcast_to(tier, draws.shape)), axis=1)
    ranks = np.empty_like(order)
    np.put_along_axis(ranks, order, np.arange(1, k + 1)[None, :].repeat(n_draws, 0), axis=1)
    r = Ranks(archs=archs, draws=draws, ranks=ranks, method="per-arch posterior")
    for i, a in enumerate(archs):
        r.p_best[a] = float(np.mean(ranks[:, i] == 1))
        r.rank_low[a] = int(np.quantile(ranks[:, i], 0.025, method="inverted_cdf"))
        r.rank_high[a] = int(np.quantile(ranks[:, i], 0.975, method="inverted_cdf"))
    return r
