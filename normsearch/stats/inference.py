"""Losses of successful runs: the pooled-variance model, intervals, comparisons under multiplicity,
equivalence, seeds needed, and P(best) with rank intervals.

The data are ``samples``: architecture -> {seed: final loss} over the successful runs at each
architecture's chosen learning rate. scipy and statsmodels are imported inside the functions so that
importing this module stays cheap. The rules are in ``docs/statistics.md``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

ALPHA = 0.05  # familywise error of the claims; also the level of the equal-variance test
MARGIN = 0.02  # equivalence margin, bits/byte
POWER = 0.8  # for seeds_needed
MAX_SEEDS = 1000  # seeds_needed above this is reported as None (not resolvable at this variance)
VERDICTS = ("better", "worse", "equivalent", "undecided")

Samples = Mapping[str, Mapping[int, float]]


@dataclass
class PooledFit:
    """loss ~ C(arch) + C(seed) by OLS over the successful runs, and Levene's test of equal variances."""

    archs: list[str]
    sigma: float  # residual standard deviation of the two-way model
    df: int  # its residual degrees of freedom
    n_obs: int
    seed_effects: bool  # False when the design could not separate seeds from architectures
    effects: np.ndarray  # per arch, relative to archs[0]
    effects_cov: np.ndarray  # their covariance (sigma^2 (X'X)^-1 block; zeros for archs[0])
    levene_stat: float | None  # Levene's statistic on each architecture's losses
    levene_p: float | None  # None when fewer than two architectures have two runs
    levene_center: str  # "median" (Brown-Forsythe) when every group has >= 4 runs, else "mean"
    homogeneous: bool  # levene_p is None or >= alpha
    alpha: float
    level_sigma: float | None  # pooled within-architecture SD (seed variation included), for levels
    level_df: int

    def contrast(self, a: str, b: str) -> tuple[float, float]:
        """Estimate and standard error of (arch a - arch b), seed effects removed."""
        i, j = self.archs.index(a), self.archs.index(b)
        c = self.effects_cov
        return float(self.effects[i] - self.effects[j]), math.sqrt(max(0.0, c[i, i] + c[j, j] - 2 * c[i, j]))


def pooled_fit(samples: Samples, alpha: float = ALPHA) -> PooledFit | None:
    """Fit the two-way additive model over every successful run; None when it has no residual df."""
    import statsmodels.api as sm
    from scipy import stats

    archs = [a for a in samples if samples[a]]
    ys = [(a, s, float(v)) for a in archs for s, v in samples[a].items()]
    if len(ys) < 2:
        return None
    seeds = sorted({s for _, s, _ in ys})
    y = np.array([v for *_, v in ys])
    arch_x = np.array([[a == b for b in archs[1:]] for a, _, _ in ys], dtype=float).reshape(len(ys), -1)
    seed_x = np.array([[s == t for t in seeds[1:]] for _, s, _ in ys], dtype=float).reshape(len(ys), -1)
    x = np.column_stack([np.ones(len(ys)), arch_x, seed_x])
    seed_effects = np.linalg.matrix_rank(x) == x.shape[1]
    if not seed_effects:  # e.g. every architecture ran on its own seeds: seeds confounded with archs
        x = x[:, : 1 + arch_x.shape[1]]
    df = len(ys) - x.shape[1]
    if df < 1:
        return None
    res = sm.OLS(y, x).fit()
    k = len(archs)
    effects = np.concatenate([[0.0], res.params[1:k]])
    cov = np.zeros((k, k))
    cov[1:, 1:] = np.asarray(res.cov_params())[1:k, 1:k]
    # on the raw losses: a seed effect adds the same variance to every architecture, while removing the
    # fitted one would spread a noisy architecture's variance over the others
    groups = [np.asarray(list(samples[a].values()), float) for a in archs]
    groups = [g for g in groups if g.size >= 2]
    stat = p = None
    # Brown-Forsythe (median-centred) is the robust choice, but with 3 runs a group's median-centred
    # deviations include a 0 and the test never rejects: below 4 runs, Levene's mean-centred original
    center = "median" if min((g.size for g in groups), default=0) >= 4 else "mean"
    if len(groups) >= 2:
        stat, p = (float(v) for v in stats.levene(*groups, center=center))
        if not math.isfinite(p):  # every group constant: nothing to test
            stat = p = None
    within = [np.asarray(list(samples[a].values()), float) for a in archs if len(samples[a]) >= 2]
    level_df = sum(w.size - 1 for w in within)
    level_sigma = math.sqrt(sum(((w - w.mean()) ** 2).sum() for w in within) / level_df) if level_df else None
    return PooledFit(archs=archs, sigma=math.sqrt(res.scale), df=int(round(res.df_resid)), n_obs=len(ys),
                     seed_effects=bool(seed_effects), effects=effects, effects_cov=cov, levene_stat=stat,
                     levene_p=p, levene_center=center, homogeneous=p is None or p >= alpha, alpha=alpha,
                     level_sigma=level_sigma, level_df=level_df)


@dataclass
class Interval:
    """An architecture's mean loss over its successful runs and a 95% interval for it."""

    arch: str
    n: int
    mean: float | None
    sd: float | None  # the SD the interval uses (pooled or this architecture's own)
    df: int | None
    ci_low: float | None
    ci_high: float | None
    method: str  # "pooled" | "per-arch" | "none" (one run and no pooled SD)


def interval(samples: Samples, arch: str, fit: PooledFit | None, level: float = 0.95) -> Interval:
    """Student-t interval of the mean; the SD is the pooled within-architecture SD (seed variation
    included, which a level needs and a difference does not) when variances are homogeneous, the
    architecture's own otherwise."""
    from scipy import stats

    v = np.asarray(list(samples.get(arch, {}).values()), float)
    if v.size == 0:
        return Interval(arch, 0, None, None, None, None, None, "none")
    mean = float(v.mean())
    if fit is not None and fit.homogeneous and fit.level_sigma is not None:
        sd, df, method = fit.level_sigma, fit.level_df, "pooled"
    elif v.size >= 2:
        sd, df, method = float(v.std(ddof=1)), v.size - 1, "per-arch"
    else:
        return Interval(arch, 1, mean, None, None, None, None, "none")
    half = float(stats.t.ppf(0.5 + level / 2, df)) * sd / math.sqrt(v.size)
    return Interval(arch, int(v.size), mean, sd, df, mean - half, mean + half, method)


@dataclass
class Comparison:
    """``arch`` against the baseline ``against``; ``diff`` is arch - against (negative is better)."""

    arch: str
    against: str
    n: int  # seeds with a successful run in both
    n_arch: int
    n_against: int
    method: str  # "pooled" (contrast of the two-way model) | "welch" | "none" (too few runs)
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
    p_improve: float | None = None  # posterior P(arch's mean loss < against's)
    seeds_needed: int | None = None  # per arm, to resolve an undecided comparison
    margin: float = MARGIN
    verdict: str = "undecided"  # better | worse | equivalent | undecided
    sd_arch: float | None = field(default=None, repr=False)  # per-run SDs used by seeds_needed
    sd_against: float | None = field(default=None, repr=False)


def compare(samples: Samples, arch: str, against: str, fit: PooledFit | None, margin: float = MARGIN,
            level: float = 0.95) -> Comparison:
    """The difference, its interval and its p-value (and TOST's), before any multiplicity step.

    Homogeneous variances: the contrast of the two-way model (seed effects removed, the pooled sigma
    and its df). Otherwise Welch's t-test on the two sets of successful runs.
    """
    from scipy import stats

    a, b = samples.get(arch, {}), samples.get(against, {})
    c = Comparison(arch=arch, against=against, n=len(set(a) & set(b)), n_arch=len(a), n_against=len(b),
                   method="none", margin=margin)
    if not a or not b:
        return c
    va, vb = np.asarray(list(a.values()), float), np.asarray(list(b.values()), float)
    c.diff = float(va.mean() - vb.mean())
    if fit is not None and fit.homogeneous and arch in fit.archs and against in fit.archs:
        c.method = "pooled"
        c.diff, c.se = fit.contrast(arch, against)
        c.df, c.sd_arch = fit.df, fit.sigma
        c.sd_against = fit.sigma
    elif va.size >= 2 and vb.size >= 2:
        c.method = "welch"
        c.sd_arch, c.sd_against = float(va.std(ddof=1)), float(vb.std(ddof=1))
        ea, eb = c.sd_arch ** 2 / va.size, c.sd_against ** 2 / vb.size
        c.se = math.sqrt(ea + eb)
        c.df = (ea + eb) ** 2 / (ea ** 2 / (va.size - 1) + eb ** 2 / (vb.size - 1)) if ea + eb > 0 else np.inf
    else:
        return c
    if c.se == 0:  # identical runs: no noise to test against
        c.method, c.se, c.df = "none", None, None
        return c
    t_crit = float(stats.t.ppf(0.5 + level / 2, c.df))
    c.ci_low, c.ci_high = c.diff - t_crit * c.se, c.diff + t_crit * c.se
    c.p_value = float(2 * stats.t.sf(abs(c.diff) / c.se, c.df))
    c.p_tost = max(float(stats.t.sf((c.diff + margin) / c.se, c.df)),  # H0: diff <= -margin
                   float(stats.t.cdf((c.diff - margin) / c.se, c.df)))  # H0: diff >= +margin
    return c


def adjust(comparisons: Sequence[Comparison], alpha: float = ALPHA, power: float = POWER) -> None:
    """Multiplicity and verdicts, in place, over the whole family ``comparisons``.

    Holm (familywise error ``alpha``) on the difference p-values and, separately, on the TOST
    p-values; Benjamini-Hochberg q-values on the difference p-values. Verdict: ``better``/``worse``
    when the Holm-adjusted difference p < alpha; else ``equivalent`` when the Holm-adjusted TOST
    p < alpha; else ``undecided``, with :func:`seeds_needed` at the Bonferroni level alpha/m.
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
            if c.sd_arch is not None:
                c.seeds_needed = seeds_needed(c.diff, c.sd_arch, c.sd_against, c.margin, alpha / m, power)


def seeds_needed(diff: float, sd_a: float, sd_b: float, margin: float = MARGIN, alpha: float = ALPHA,
                 power: float = POWER, max_seeds: int = MAX_SEEDS) -> int | None:
    """Seeds per arm for a comparison to resolve, if the true difference were ``diff`` and the run SDs
    stayed ``sd_a``, ``sd_b``: the smallest n at which either the two-sided difference test at
    ``alpha`` or TOST at ``alpha`` within ``margin`` reaches ``power``. Power of a t-test with 2n - 2
    df, by the shifted central t (noncentral t ~ t + ncp); for TOST the lower bound P(A) + P(B) - 1.
    None above ``max_seeds``.
    """
    from scipy import stats

    sd = math.sqrt(sd_a ** 2 + sd_b ** 2)
    if sd == 0:
        return 2

    def first_resolving(n: np.ndarray) -> int | None:
        se, df = sd / np.sqrt(n), 2 * n - 2
        t2, t1 = stats.t.ppf(1 - alpha / 2, df), stats.t.ppf(1 - alpha, df)
        p_diff = stats.t.sf(t2 - abs(diff) / se, df) + stats.t.cdf(-t2 - abs(diff) / se, df)
        p_tost = stats.t.sf(t1 - (diff + margin) / se, df) + stats.t.cdf(-t1 - (diff - margin) / se, df) - 1
        ok = np.flatnonzero((p_diff >= power) | (p_tost >= power))
        return int(n[ok[0]]) if ok.size else None

    # both powers grow with n: find the first power of two that resolves, then the n below it
    top = first_resolving(np.unique(np.minimum(2 ** np.arange(1, 1 + math.ceil(math.log2(max_seeds))), max_seeds)))
    if top is None:
        return None
    return first_resolving(np.arange(max(2, top // 2), top + 1))


@dataclass
class Ranks:
    """P(best) and rank intervals from posterior draws of every architecture's mean loss."""

    archs: list[str]
    draws: np.ndarray = field(repr=False)  # (n_draws, len(archs)); comparable within a draw
    ranks: np.ndarray = field(repr=False)  # 1 = best, hurdle tiers applied
    method: str  # "pooled posterior" | "per-arch posterior"
    p_best: dict[str, float] = field(default_factory=dict)
    rank_low: dict[str, int] = field(default_factory=dict)  # 2.5th percentile of the rank
    rank_high: dict[str, int] = field(default_factory=dict)  # 97.5th percentile

    def p_improve(self, a: str, b: str) -> float:
        """Posterior probability that a's mean loss is lower than b's."""
        i, j = self.archs.index(a), self.archs.index(b)
        return float(np.mean(self.draws[:, i] < self.draws[:, j]))


def posterior_ranks(samples: Samples, fit: PooledFit, tiers: Mapping[str, float] | None = None,
                    n_draws: int = 4000, seed: int = 0) -> Ranks:
    """Draws of the architectures' mean losses under a flat prior, then their ranks.

    Homogeneous variances: the two-way model's posterior, a multivariate t with the residual df
    (effects + sqrt(df / chi2_df) * L z, cov = L L'). Otherwise each architecture's own: mean + s/sqrt(n)
    * t_(n-1), an architecture with one run borrowing the pooled within-architecture SD. ``tiers``
    (the hurdle's failure rates) order architectures before their draws do: a draw ranks only within
    its tier. Ranks are 1 (best) to k; the interval is the 2.5th to 97.5th percentile.
    """
    rng = np.random.default_rng(seed)
    archs = list(fit.archs)
    k = len(archs)
    if fit.homogeneous:
        method = "pooled posterior"
        draws = np.tile(fit.effects, (n_draws, 1))
        if k > 1:
            chol = np.linalg.cholesky(fit.effects_cov[1:, 1:] + 1e-18 * np.eye(k - 1))
            scale = np.sqrt(fit.df / rng.chisquare(fit.df, n_draws))[:, None]
            draws[:, 1:] += scale * (rng.standard_normal((n_draws, k - 1)) @ chol.T)
    else:
        method = "per-arch posterior"
        draws = np.empty((n_draws, k))
        for i, a in enumerate(archs):
            v = np.asarray(list(samples[a].values()), float)
            sd, df = (v.std(ddof=1), v.size - 1) if v.size >= 2 else (fit.level_sigma or 0.0, max(1, fit.level_df))
            draws[:, i] = v.mean() + sd / math.sqrt(v.size) * rng.standard_t(df, n_draws)
    tier = np.array([(tiers or {}).get(a, 0.0) for a in archs])
    order = np.lexsort((draws, np.broadcast_to(tier, draws.shape)), axis=1)
    ranks = np.empty_like(order)
    np.put_along_axis(ranks, order, np.arange(1, k + 1)[None, :].repeat(n_draws, 0), axis=1)
    r = Ranks(archs=archs, draws=draws, ranks=ranks, method=method)
    for i, a in enumerate(archs):
        r.p_best[a] = float(np.mean(ranks[:, i] == 1))
        r.rank_low[a] = int(np.quantile(ranks[:, i], 0.025, method="inverted_cdf"))
        r.rank_high[a] = int(np.quantile(ranks[:, i], 0.975, method="inverted_cdf"))
    return r
