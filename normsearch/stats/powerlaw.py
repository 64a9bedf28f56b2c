"""Power laws L(N) = E + A N^-alpha over the rungs of a ladder (issue 17), and their refits over the draws
of the rung means (:func:`normsearch.stats.rung.mean_draws`: parametric draws, not a bootstrap).

The fit is least squares on each rung's mean loss (unweighted), under the bounds E >= 0, A > 0 and
0 < alpha < 2, with N scaled by the smallest size fitted (``n_ref``) so that the numbers stay near 1.
Two solvers find the same minimum: a profile over alpha (for each alpha the best E and A are closed
form, bounds included), which is fast and vectorised over the draws, and
``scipy.optimize.curve_fit`` started from the profile's optimum for the point estimate. Rules:
``docs/statistics.md``.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import numpy as np

ALPHA_MAX = 2.0  # the exponent's upper bound (the lower is 0)
_GRID = np.linspace(0.005, ALPHA_MAX - 0.005, 200)  # the profile's coarse alpha grid
_FINE = np.linspace(-0.01, 0.01, 41)  # then +- one coarse step around each draw's best


@dataclass
class PowerFit:
    """One architecture's fit. ``status``: "fit" or "no fit" (then ``reason`` says why)."""

    arch: str
    sizes: list[float]  # N of the rungs fitted (those with a successful run), increasing
    means: list[float]  # the mean loss there
    status: str
    reason: str = ""  # why there is no fit
    notes: list[str] = field(default_factory=list)  # caveats of a fit (exactly determined, at a bound)
    exact: bool = False  # three points for three parameters: the curve passes through them
    E: float | None = None
    A: float | None = None
    alpha: float | None = None
    n_ref: float | None = None  # N is scaled by this in the fit: L = E + B (N / n_ref)^-alpha, A = B n_ref^alpha
    rmse: float | None = None  # of the fit over the points fitted (0 when exactly determined)
    E_ci: tuple[float, float] | None = None  # 95% intervals over the draws (percentile)
    A_ci: tuple[float, float] | None = None
    alpha_ci: tuple[float, float] | None = None
    n_draws: int = 0  # draws that fitted a falling curve (the others fitted a flat line)
    draws: np.ndarray | None = field(default=None, repr=False)  # (n, 3): E, B, alpha per draw

    @property
    def ok(self) -> bool:
        return self.status == "fit"

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


def profile_fit(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Least squares of y ~ E + B x^-alpha under E >= 0, B >= 0, 0 < alpha < 2, for every row of ``y``
    (shape (draws, points)). For fixed alpha the bounded two-parameter problem is solved exactly (the
    unconstrained optimum if feasible, else the best of the faces E = 0 and B = 0); alpha is searched
    on a grid and refined around each row's best. Returns E, B, alpha, SSE per row; B = 0 is a flat
    line (alpha then means nothing)."""
    y = np.atleast_2d(np.asarray(y, float))
    x = np.asarray(x, float)
    best = _scan(x, y, np.broadcast_to(_GRID, (y.shape[0], _GRID.size)))
    fine = np.clip(best[2][:, None] + _FINE[None, :], 1e-4, ALPHA_MAX - 1e-4)
    return _scan(x, y, fine)


def _scan(x, y, alphas):
    m = x.size
    sy, syy = y.sum(1), (y * y).sum(1)
    out = [np.full(y.shape[0], np.nan) for _ in range(3)] + [np.full(y.shape[0], np.inf)]
    for g in range(alphas.shape[1]):
        a = alphas[:, g]
        z = x[None, :] ** -a[:, None]  # (draws, points)
        sz, szz, syz = z.sum(1), (z * z).sum(1), (y * z).sum(1)
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


def fit_power_law(arch: str, sizes, means, mean_draws: np.ndarray | None = None) -> PowerFit:
    """Fit L(N) = E + A N^-alpha to an architecture's (size, mean loss) points (sizes increasing), and
    refit every row of ``mean_draws`` (drawn means, shape (draws, points)) for the intervals."""
    from scipy.optimize import OptimizeWarning, curve_fit

    sizes, means = [float(s) for s in sizes], [float(v) for v in means]
    fit = PowerFit(arch=arch, sizes=sizes, means=means, status="no fit")
    if len(sizes) < 3:
        fit.reason = f"{len(sizes)} rung(s) with a successful run; a power law needs 3"
        return fit
    if min(sizes) <= 0:
        fit.reason = "a size is not positive"
        return fit
    if len(set(sizes)) < len(sizes):
        fit.reason = "two rungs have the same size"
        return fit
    n_ref = min(sizes)
    x, y = np.asarray(sizes) / n_ref, np.asarray(means)
    e, b, a, sse = (float(v[0]) for v in profile_fit(x, y[None, :]))
    if not b > 0:
        fit.reason = "the mean loss does not fall with size (the best bounded fit is a flat line)"
        return fit
    f = lambda xx, ee, bb, aa: ee + bb * xx ** -aa
    lo, hi = [0.0, 1e-12, 1e-6], [np.inf, np.inf, ALPHA_MAX - 1e-6]
    p0 = [max(e, 1e-9), max(b, 2e-12), min(max(a, 2e-6), ALPHA_MAX - 2e-6)]
    try:
        with warnings.catch_warnings():  # exactly determined: no covariance, which is not used here
            warnings.simplefilter("ignore", OptimizeWarning)
            p, _ = curve_fit(f, x, y, p0=p0, bounds=(lo, hi), maxfev=5000)
    except (RuntimeError, ValueError) as err:
        fit.reason = f"curve_fit failed: {err}"
        return fit
    if float(((f(x, *p) - y) ** 2).sum()) <= sse + 1e-12:  # keep whichever solver went lower
        e, b, a = (float(v) for v in p)
    fit.status, fit.E, fit.alpha, fit.n_ref = "fit", e, a, n_ref
    fit.A = b * n_ref ** a
    fit.rmse = math.sqrt(float(((f(x, e, b, a) - y) ** 2).mean()))
    fit.exact = len(sizes) == 3
    if fit.exact:
        fit.notes.append("3 rungs for 3 parameters: no residual degree of freedom checks the functional form"
                         + (" (and with E at its bound the curve misses the points)" if e <= 1e-6 else
                            ", the curve passes through the points"))
    if e <= 1e-6:
        fit.notes.append("E at its bound 0: these rungs do not pin the asymptote")
    if a >= ALPHA_MAX - 1e-3 or a <= 1e-3:
        fit.notes.append(f"alpha at its bound ({a:.3g}): the curve's shape is not pinned by these rungs")
    if mean_draws is not None and len(mean_draws):
        de, db, da, _ = profile_fit(x, mean_draws)
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
