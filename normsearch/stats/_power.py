"""The degrees of freedom of a difference, and how many more seeds would decide an undecided one.

:func:`welch_df` is the one df rule of every comparison (:func:`normsearch.stats.compare`) and of the
planning here; :func:`seeds_needed` gives the seeds to add to each of two architectures for a
comparison to be decided with a given power, and :func:`planning_diff` the difference it plans for
(the observed one shrunk toward 0). Rules: ``docs/statistics.md``, "Seeds to decide".
"""

from __future__ import annotations

import numpy as np

ALPHA = 0.05  # familywise error of the claims
MARGIN = 0.02  # equivalence margin, bits/byte
POWER = 0.8  # for seeds_needed
MAX_SEEDS = 1000  # seeds_needed above this is reported as None (not resolvable at this variance)
#: the Satterthwaite df are computed at each variance's upper confidence limit at this level (not at its
#: estimate): an architecture with few seeds whose variance came out low by chance would otherwise lend
#: the difference the df of the other, and Welch's tail is then liberal (docs/statistics.md, section 5)
DF_HEDGE = 0.7
_X, _W = np.polynomial.legendre.leggauss(48)
_NODES, _WEIGHTS = (_X + 1) / 2, _W / 2  # Gauss-Legendre on (0, 1): over the quantiles of the estimated SE


def welch_df(e_a, e_b, d_a, d_b):
    """Satterthwaite's df of e_a + e_b, the squared standard errors s^2/n of two means with d_a, d_b df,
    each s^2 taken at its :data:`DF_HEDGE` upper confidence limit s^2 d / chi2_(d, 1 - DF_HEDGE). With
    equal d this is Welch's df exactly (the factor cancels); otherwise it leans toward the df of the arm
    with fewer seeds. Arrays broadcast."""
    from scipy import special

    d_a, d_b = np.asarray(d_a, float), np.asarray(d_b, float)
    u_a = np.asarray(e_a, float) * d_a / special.chdtri(d_a, DF_HEDGE)  # chdtri: the inverse survival function
    u_b = np.asarray(e_b, float) * d_b / special.chdtri(d_b, DF_HEDGE)
    return (u_a + u_b) ** 2 / (u_a ** 2 / d_a + u_b ** 2 / d_b)


def planning_diff(diff: float, se: float) -> float:
    """The observed difference shrunk toward 0 by diff^2 / (diff^2 + se^2): the posterior mean under a
    normal prior N(0, diff^2) on the true difference. An undecided difference is small against its SE,
    and planning for it as observed would promise too few seeds (the observed |diff| overstates the true
    one on average: E diff^2 = true^2 + se^2)."""
    d2 = diff * diff
    return diff * d2 / (d2 + se * se) if d2 + se * se > 0 else 0.0


def resolve_power(diff: float, sd_a: float, sd_b: float, n_a, n_b, margin: float = MARGIN,
                  alpha: float = ALPHA) -> np.ndarray:
    """P(a comparison with ``n_a``, ``n_b`` runs is decided) if the true difference is ``diff`` and the
    run SDs ``sd_a``, ``sd_b``: decided when the two-sided test at ``alpha`` rejects or TOST at ``alpha``
    within ``margin`` passes. The estimated mean difference is normal; its estimated SE is se x
    sqrt(chi2_v / v) with v Satterthwaite's df at the true SDs (integrated by quadrature); the critical
    values are those of :func:`welch_df` at the true SDs. ``n_a``, ``n_b`` broadcast."""
    from scipy import special

    n_a, n_b = np.atleast_1d(np.asarray(n_a, float)), np.atleast_1d(np.asarray(n_b, float))
    e_a, e_b = sd_a ** 2 / n_a, sd_b ** 2 / n_b
    se = np.sqrt(e_a + e_b)
    df_test = welch_df(e_a, e_b, n_a - 1, n_b - 1)[:, None]
    df_se = ((e_a + e_b) ** 2 / (e_a ** 2 / (n_a - 1) + e_b ** 2 / (n_b - 1)))[:, None]
    t2, t1 = special.stdtrit(df_test, 1 - alpha / 2), special.stdtrit(df_test, 1 - alpha)
    s = np.sqrt(special.chdtri(df_se, 1 - _NODES[None, :]) / df_se)  # estimated SE / se, at the nodes
    d = abs(diff) / se[:, None]
    hi = t2 * s  # |z| above this: the difference test rejects
    lo = np.maximum(margin / se[:, None] - t1 * s, 0.0)  # |z| below this: TOST passes
    cdf = special.ndtr
    between = np.where(lo < hi, cdf(hi - d) - cdf(lo - d) + cdf(-lo - d) - cdf(-hi - d), 0.0)
    return 1.0 - between @ _WEIGHTS


def seeds_needed(diff: float, sd_a: float, sd_b: float, n_a: int = 0, n_b: int = 0, margin: float = MARGIN,
                 alpha: float = ALPHA, power: float = POWER, max_seeds: int = MAX_SEEDS) -> int | None:
    """How many **more** seeds each of the two architectures needs (the same number added to both, on
    top of the ``n_a``, ``n_b`` successful runs they have) for the comparison to be decided with
    probability ``power`` (:func:`resolve_power`), if the true difference were ``diff`` and the run SDs
    ``sd_a``, ``sd_b``. With ``n_a = n_b = 0`` it is the seeds per architecture of a fresh study. At
    least 1 (and at least enough for two runs per arm); None above ``max_seeds``.
    """
    k_min = max(1, 2 - n_a, 2 - n_b)
    if sd_a == 0 and sd_b == 0:
        return k_min

    def first(ks: np.ndarray) -> int | None:  # the first k of ``ks`` (increasing) with the power
        ok = np.flatnonzero(resolve_power(diff, sd_a, sd_b, n_a + ks, n_b + ks, margin, alpha) >= power)
        return int(ks[ok[0]]) if ok.size else None

    # power grows with k: the first power of two that has it, then the k below it
    steps = np.unique(np.minimum(k_min * 2 ** np.arange(0, 2 + int(np.log2(max(max_seeds / k_min, 1)))), max_seeds))
    hi = first(steps)
    if hi is None or hi == k_min:
        return hi
    lo = int(steps[steps < hi][-1])  # without the power
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if first(np.array([mid])) is not None else (mid, hi)
    return hi
