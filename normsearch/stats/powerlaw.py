"""Power laws L(N) = E + A N^-alpha over the rungs of a ladder (issues 17 and 26), tested before they are
used, and their refits over the draws of the rung means (:func:`normsearch.stats.rung.mean_draws`: a
parametric bootstrap of each rung mean from its own seeds, not a resampling of the seeds).

The fit is least squares over the seeds' losses: on each rung's mean loss weighted by its number of
successful seeds (unweighted when the seeds are not given), under the bounds E >= 0, A > 0 and
0 < alpha < 2, with N scaled by the smallest size fitted (``n_ref``) so that the numbers stay near 1.
Three parameters need :data:`MIN_RUNGS` = 5 rungs, so that :data:`MIN_RESID_DF` = 2 residual degrees
of freedom are left to test the form: the classic lack-of-fit F test compares the misfit of the rung
means to the curve (their residual mean square) with the seeds' own scatter about their rung means
(the pure-error variance, pooled over the rungs). Two solvers find the same minimum: a profile over
alpha (for each alpha the best E and A are closed form, bounds included), which is fast and vectorised
over the draws, and ``scipy.optimize.curve_fit`` started from the profile's optimum for the point
estimate. Rules: ``docs/statistics.md``.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

N_PARAMS = 3  # E, A, alpha
MIN_RESID_DF = 2  # residual degrees of freedom a fit must leave: the lack-of-fit test's numerator df
MIN_RUNGS = N_PARAMS + MIN_RESID_DF
LOF_ALPHA = 0.05  # a fit whose lack-of-fit p is below this fails
ALPHA_MAX = 2.0  # the exponent's upper bound (the lower is 0)
_GRID = np.linspace(0.005, ALPHA_MAX - 0.005, 200)  # the profile's coarse alpha grid
_FINE = np.linspace(-0.01, 0.01, 41)  # then +- one coarse step around each draw's best


@dataclass
class LackOfFit:
    """The lack-of-fit F test of a fit with replicate seeds: F = (SS_lof / df_lof) / (SS_pe / df_pe),
    SS_lof = sum_r n_r (mean_r - fitted_r)^2 on df_lof = rungs - 3, SS_pe = sum_r sum_seeds (loss -
    mean_r)^2 on df_pe = sum_r (n_r - 1). ``passed`` None: untested (``reason`` says why)."""

    df_lof: int
    df_pe: int
    ms_lof: float | None = None  # the fit's residual mean square (over the seeds)
    ms_pe: float | None = None  # the pure-error variance: the seeds' scatter about their rung means
    F: float | None = None
    p_value: float | None = None
    passed: bool | None = None
    reason: str = ""


@dataclass
class PowerFit:
    """One architecture's fit. ``status``: "fit" or "no fit" (then ``reason`` says why). A fit is used
    beyond its rungs only when it passes its lack-of-fit test (:attr:`extrapolable`)."""

    arch: str
    sizes: list[float]  # N of the rungs fitted (those with a successful run), increasing
    means: list[float]  # the mean loss there
    status: str
    reason: str = ""  # why there is no fit
    notes: list[str] = field(default_factory=list)  # caveats of a fit (a parameter at its bound)
    exact: bool = False  # kept for old readers of ladder.json: always False now (an exact fit is no fit)
    E: float | None = None
    A: float | None = None
    alpha: float | None = None
    n_ref: float | None = None  # N is scaled by this in the fit: L = E + B (N / n_ref)^-alpha, A = B n_ref^alpha
    rmse: float | None = None  # of the fit over the rung means fitted (unweighted)
    E_ci: tuple[float, float] | None = None  # 95% intervals over the draws (percentile)
    A_ci: tuple[float, float] | None = None
    alpha_ci: tuple[float, float] | None = None
    n_draws: int = 0  # draws that fitted a falling curve (the others fitted a flat line)
    draws: np.ndarray | None = field(default=None, repr=False)  # (n, 3): E, B, alpha per draw
    n_seeds: list[int] = field(default_factory=list)  # successful seeds per rung fitted: the weights (empty: 1 each)
    df_resid: int = 0  # rungs fitted - 3
    lack_of_fit: LackOfFit | None = None

    @property
    def ok(self) -> bool:
        return self.status == "fit"

    @property
    def verdict(self) -> str:
        """"no fit", "passes" (its lack-of-fit test), "fails" or "untested" (no replicate seeds)."""
        if not self.ok:
            return "no fit"
        lof = self.lack_of_fit
        return "untested" if lof is None or lof.passed is None else "passes" if lof.passed else "fails"

    @property
    def extrapolable(self) -> bool:
        """Fitted, and its lack-of-fit test ran and passed: the only fits carried beyond the rungs."""
        return self.verdict == "passes"

    @property
    def B(self) -> float | None:
        return None if self.A is None else self.A * self.n_ref ** -self.alpha

    def predict(self, n: float | np.ndarray) -> float | np.ndarray | None:
        """The fitted loss at size(s) ``n``; None without a fit."""
        if not self.ok:
            return None
        return self.E + self.B * (np.asarray(n, float) / self.n_ref) ** -self.alpha

    def predict_draws(self, n: float | np.ndarray) -> np.ndarray:
        """The draws' losses at ``n``: shape (draws,) or (draws, len(n))."""
        d = self.draws
        x = np.asarray(n, float) / self.n_ref
        if x.ndim == 0:
            return d[:, 0] + d[:, 1] * x ** -d[:, 2]
        return d[:, :1] + d[:, 1:2] * x[None, :] ** -d[:, 2:3]


def profile_fit(x: np.ndarray, y: np.ndarray, w: np.ndarray | None = None
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Least squares of y ~ E + B x^-alpha under E >= 0, B >= 0, 0 < alpha < 2, for every row of ``y``
    (shape (draws, points)), each point weighted by ``w`` (default 1). For fixed alpha the bounded
    two-parameter problem is solved exactly (the unconstrained optimum if feasible, else the best of
    the faces E = 0 and B = 0); alpha is searched on a grid and refined around each row's best.
    Returns E, B, alpha, the weighted SSE per row; B = 0 is a flat line (alpha then means nothing)."""
    y = np.atleast_2d(np.asarray(y, float))
    x = np.asarray(x, float)
    w = np.ones(x.size) if w is None else np.asarray(w, float)
    best = _scan(x, y, w, np.broadcast_to(_GRID, (y.shape[0], _GRID.size)))
    fine = np.clip(best[2][:, None] + _FINE[None, :], 1e-4, ALPHA_MAX - 1e-4)
    return _scan(x, y, w, fine)


def _scan(x, y, w, alphas):
    m = float(w.sum())
    sy, syy = (w * y).sum(1), (w * y * y).sum(1)
    out = [np.full(y.shape[0], np.nan) for _ in range(3)] + [np.full(y.shape[0], np.inf)]
    for g in range(alphas.shape[1]):
        a = alphas[:, g]
        z = x[None, :] ** -a[:, None]  # (draws, points)
        sz, szz, syz = (w * z).sum(1), (w * z * z).sum(1), (w * y * z).sum(1)
        det = m * szz - sz * sz
        with np.errstate(divide="ignore", invalid="ignore"):
            e_u = (szz * sy - sz * syz) / det
            b_u = (m * syz - sz * sy) / det
            b_0 = np.maximum(syz / szz, 0.0)  # the face E = 0
        e_1 = np.maximum(sy / m, 0.0)  # the face B = 0
        cands = [(e_u, b_u), (np.zeros_like(b_0), b_0), (e_1, np.zeros_like(e_1))]
        for e, b in cands:
            sse = syy - 2 * e * sy - 2 * b * syz + e * e * m + 2 * e * b * sz + b * b * szz
            ok = (e >= 0) & (b >= 0) & np.isfinite(sse) & (sse < out[3] - 1e-15)
            for k, v in enumerate((e, b, a, sse)):
                out[k] = np.where(ok, v, out[k])
    out[3] = np.maximum(out[3], 0.0)
    return tuple(out)


def lack_of_fit(means: Sequence[float], fitted: Sequence[float], seeds: Sequence[Sequence[float]],
                alpha: float = LOF_ALPHA) -> LackOfFit:
    """The classic lack-of-fit F test of a fit to rung means with replicate seeds (``seeds``: each
    rung's successful losses): the means' misfit to the curve, weighted by their seeds, against the
    seeds' pooled scatter about their own means. Untested without a residual df, without replicates,
    or when the seeds agree exactly."""
    from scipy.stats import f as f_dist

    n = np.array([len(v) for v in seeds], float)
    df_lof = len(means) - N_PARAMS
    df_pe = int(sum(max(len(v) - 1, 0) for v in seeds))
    out = LackOfFit(df_lof, df_pe)
    ss_lof = float((n * (np.asarray(means, float) - np.asarray(fitted, float)) ** 2).sum())
    ss_pe = float(sum(((np.asarray(v, float) - np.mean(v)) ** 2).sum() for v in seeds if len(v) > 1))
    out.ms_lof = ss_lof / df_lof if df_lof > 0 else None
    out.ms_pe = ss_pe / df_pe if df_pe > 0 else None
    if df_lof < 1:
        out.reason = "no residual degree of freedom"
    elif df_pe < 1:
        out.reason = "no replicate seeds at any rung: no pure-error variance to test the misfit against"
    elif not ss_pe > 0:
        out.reason = "the seeds agree exactly: no pure-error variance to test the misfit against"
    else:
        out.F = out.ms_lof / out.ms_pe
        out.p_value = float(f_dist.sf(out.F, df_lof, df_pe))
        out.passed = bool(out.p_value >= alpha)
    return out


def fit_power_law(arch: str, sizes, means, mean_draws: np.ndarray | None = None,
                  seeds: Sequence[Sequence[float]] | None = None, alpha: float = LOF_ALPHA) -> PowerFit:
    """Fit L(N) = E + A N^-alpha to an architecture's (size, mean loss) points (sizes increasing), test
    it against the seeds' scatter (``seeds``: each rung's successful losses, which also weight the
    means; without them the fit is unweighted and untested), and refit every row of ``mean_draws``
    (drawn means, shape (draws, points)) for the intervals. Fewer than :data:`MIN_RUNGS` points: no fit."""
    from scipy.optimize import OptimizeWarning, curve_fit

    sizes, means = [float(s) for s in sizes], [float(v) for v in means]
    fit = PowerFit(arch=arch, sizes=sizes, means=means, status="no fit")
    if len(sizes) < MIN_RUNGS:
        fit.reason = (f"{len(sizes)} rung(s) with a successful run; a power law's {N_PARAMS} parameters need "
                      f"{MIN_RUNGS}, to leave {MIN_RESID_DF} residual degrees of freedom that test its form")
        return fit
    if min(sizes) <= 0:
        fit.reason = "a size is not positive"
        return fit
    if len(set(sizes)) < len(sizes):
        fit.reason = "two rungs have the same size"
        return fit
    if seeds is not None and (len(seeds) != len(sizes) or any(len(v) == 0 for v in seeds)):
        raise ValueError("seeds: one non-empty list of successful losses per size")
    w = np.array([len(v) for v in seeds], float) if seeds is not None else np.ones(len(sizes))
    n_ref = min(sizes)
    x, y = np.asarray(sizes) / n_ref, np.asarray(means)
    e, b, a, sse = (float(v[0]) for v in profile_fit(x, y[None, :], w))
    if not b > 0:
        fit.reason = "the mean loss does not fall with size (the best bounded fit is a flat line)"
        return fit
    f = lambda xx, ee, bb, aa: ee + bb * xx ** -aa
    lo, hi = [0.0, 1e-12, 1e-6], [np.inf, np.inf, ALPHA_MAX - 1e-6]
    p0 = [max(e, 1e-9), max(b, 2e-12), min(max(a, 2e-6), ALPHA_MAX - 2e-6)]
    try:
        with warnings.catch_warnings():  # the covariance is not used here
            warnings.simplefilter("ignore", OptimizeWarning)
            p, _ = curve_fit(f, x, y, p0=p0, sigma=1 / np.sqrt(w), bounds=(lo, hi), maxfev=5000)
    except (RuntimeError, ValueError) as err:
        fit.reason = f"curve_fit failed: {err}"
        return fit
    if float((w * (f(x, *p) - y) ** 2).sum()) <= sse + 1e-12:  # keep whichever solver went lower
        e, b, a = (float(v) for v in p)
    fit.status, fit.E, fit.alpha, fit.n_ref = "fit", e, a, n_ref
    fit.A = b * n_ref ** a
    fit.rmse = math.sqrt(float(((f(x, e, b, a) - y) ** 2).mean()))
    fit.df_resid = len(sizes) - N_PARAMS
    fit.n_seeds = [len(v) for v in seeds] if seeds is not None else []
    fit.lack_of_fit = (lack_of_fit(means, f(x, e, b, a), seeds, alpha) if seeds is not None else
                       LackOfFit(fit.df_resid, 0, reason="the seeds' losses were not given"))
    if e <= 1e-6:
        fit.notes.append("E at its bound 0: these rungs do not pin the asymptote")
    if a >= ALPHA_MAX - 1e-3 or a <= 1e-3:
        fit.notes.append(f"alpha at its bound ({a:.3g}): the curve's shape is not pinned by these rungs")
    if mean_draws is not None and len(mean_draws):
        de, db, da, _ = profile_fit(x, mean_draws, w)
        fit.draws = np.column_stack([de, db, da])
        falling = db > 0
        fit.n_draws = int(falling.sum())
        fit.draws[~falling, 2] = 1.0  # a flat line: any alpha predicts E
        if fit.n_draws:
            ci = lambda v: (float(np.quantile(v, 0.025)), float(np.quantile(v, 0.975)))
            fit.E_ci, fit.alpha_ci = ci(de[falling]), ci(da[falling])
            fit.A_ci = ci(db[falling] * n_ref ** da[falling])
    return fit


def crossing(fa: PowerFit, fb: PowerFit, lo: float, hi: float, n_grid: int = 200) -> float | None:
    """The first size in [lo, hi] (either order) where the fitted curves of a and b cross, or None."""
    a, b = sorted((lo, hi))
    grid = np.geomspace(a, b, n_grid)
    d = np.asarray(fa.predict(grid)) - np.asarray(fb.predict(grid))
    flips = np.flatnonzero(np.sign(d[:-1]) * np.sign(d[1:]) < 0)
    if not flips.size:
        return None
    i = int(flips[0])
    t = d[i] / (d[i] - d[i + 1])
    return float(np.exp(math.log(grid[i]) + t * (math.log(grid[i + 1]) - math.log(grid[i]))))


def p_crossing(fa: PowerFit, fb: PowerFit, lo: float, hi: float, n_grid: int = 50) -> float | None:
    """The fraction of paired draws in which the two curves cross between lo and hi."""
    if fa.draws is None or fb.draws is None:
        return None
    grid = np.geomspace(*sorted((lo, hi)), n_grid)
    d = fa.predict_draws(grid) - fb.predict_draws(grid)
    return float(np.mean(np.any(np.sign(d[:, :-1]) * np.sign(d[:, 1:]) < 0, axis=1)))
