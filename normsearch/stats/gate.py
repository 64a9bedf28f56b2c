"""The promotion gate of a scale ladder (issue 26): does a found placement's win over a baseline
survive the ladder? One verdict per (found placement, baseline) over every rung, from plain data
(:class:`~normsearch.stats.rung.Rung` s and the draws of their means), so it can be tested on
synthetic ladders without training.

Promoted when all three hold:

(a) **better at every rung**: at each rung the ladder's own comparison (:func:`rung_diff`: the failure
    hurdle by Fisher's exact test when the failure rates at the chosen learning rates differ, else mean
    loss by Welch's test), one-sided for the found placement; the claim "better at every rung" is an
    intersection-union test whose p is the largest of the rungs' one-sided p-values, and these p's are
    adjusted by Holm over every (found, baseline) pair of the ladder;
(b) **no less stable near its optimum**: at every rung its failure rate over the runs within a factor
    :data:`LR_WINDOW` of its own chosen learning rate (same variant) is no higher than the baseline's
    within the same factor of the baseline's own;
(c) **the gain holds with size**: the per-rung gap (found - baseline mean loss; negative = found
    better) regressed on log10(N) by weighted least squares (weights 1 / SE^2, Welch's SE of each
    gap), and the fitted line projected to :data:`HOLD_FACTOR` times the largest rung (the ladder's
    extrapolation limit): its 95% interval there (percentile, over the same parametric draws of the
    rung means as the ladder's other intervals, weights held fixed) must lie wholly on the gain's side.
    The burden is on the found placement, as in (b): a gap whose shrinking toward zero the ladder cannot
    exclude is not promoted ("shrinkage not excluded"), and one whose slope's interval lies wholly on the
    side that moves it toward zero is named as shrinking. Without a slope (fewer than 2 rungs with a
    gap, a rung without a size, a gap without an SE, no draws) it is not promoted either.

A gate that does not promote always says why (every criterion that failed). Rules:
``docs/statistics.md`` (section "Across model sizes", "The promotion gate").
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from .inference import ALPHA, compare, draw_scale, variance_fit
from .rung import LR_WINDOW, MAX_FACTOR, Rung, RungDiff, rung_diff

LEVEL = 0.95  # the slope's interval
HOLD_FACTOR = MAX_FACTOR  # (c): the gain must hold to this many times the largest rung


@dataclass
class GateRung:
    """One rung of a gate: the comparison, the failures near each one's chosen learning rate, the gap."""

    rung: str
    size: float | None  # N of the gap (the geometric mean of the two sizes)
    diff: RungDiff | None  # found - baseline by the hurdle; None: one of them was not run here
    p_one_sided: float | None  # H1: the found placement is better here (fewer failures, or lower loss)
    found_failed: int = 0  # within LR_WINDOW of its chosen learning rate
    found_runs: int = 0
    found_lrs: tuple[float, ...] = ()
    base_failed: int = 0  # within LR_WINDOW of the baseline's own chosen learning rate
    base_runs: int = 0
    base_lrs: tuple[float, ...] = ()
    gap: float | None = None  # mean loss, found - baseline (negative: found better)
    gap_se: float | None = None  # Welch's SE of the gap (one seed: the rung's pooled SD)

    @property
    def found_rate(self) -> float | None:
        return self.found_failed / self.found_runs if self.found_runs else None

    @property
    def base_rate(self) -> float | None:
        return self.base_failed / self.base_runs if self.base_runs else None


@dataclass
class Gate:
    """One found placement against one baseline over the whole ladder."""

    found: str
    baseline: str
    promoted: bool
    reason: str  # why promoted, or every reason it is not
    reasons: list[str] = field(default_factory=list)  # the failed criteria alone (empty: promoted)
    better: bool = False  # (a): significantly better at every rung, Holm over the pairs
    p_every: float | None = None  # (a)'s intersection-union p: the largest one-sided p over the rungs
    p_holm: float | None = None
    stable: bool = False  # (b)
    slope: float | None = None  # (c): d(gap)/d(log10 N), loss per decade of N
    slope_ci: tuple[float, float] | None = None
    shrinks: bool | None = None  # the slope's interval wholly toward zero; None: the slope was not estimated
    holds: bool = False  # (c): the gap's line at HOLD_FACTOR x the largest rung is wholly a gain
    hold_size: float | None = None  # N there
    hold_gap: float | None = None  # the fitted gap there
    hold_ci: tuple[float, float] | None = None  # its 95% interval over the draws
    zero_at: float | None = None  # where the fitted gap line reaches 0, when it shrinks
    slope_note: str = ""  # why the slope was not estimated
    window: float = LR_WINDOW
    rungs: list[GateRung] = field(default_factory=list)


def _se2(rung: Rung, arch: str) -> float | None:
    """The squared SE of an architecture's mean at a rung: its own SD, or (one successful seed) the
    rung's pooled within-architecture SD, as the draws use (:func:`draw_scale`)."""
    v = np.fromiter(rung.archs[arch].losses.values(), float)
    if v.size >= 2:
        return float(v.var(ddof=1)) / v.size
    fit = variance_fit({a: ra.losses for a, ra in rung.archs.items() if ra.losses})
    scale = draw_scale(fit, arch) if fit is not None and v.size else None
    return None if scale is None else scale[0] ** 2 / v.size


def _one_sided(rung: Rung, d: RungDiff, f: str, b: str) -> float | None:
    """The rung's p for "f is better than b" (fewer failures, or a lower mean loss)."""
    if d.by == "failures":
        from scipy.stats import fisher_exact

        x, y = rung.archs[f], rung.archs[b]
        return float(fisher_exact([[x.n_failed, x.n_ok], [y.n_failed, y.n_ok]], alternative="less")[1])
    if d.p_value is None or d.diff is None:
        return None
    return d.p_value / 2 if d.diff < 0 else 1 - d.p_value / 2


def _gate_rung(rung: Rung, f: str, b: str, window: float) -> GateRung:
    if f not in rung.archs or b not in rung.archs:
        return GateRung(rung.name, None, None, None)
    x, y = rung.archs[f], rung.archs[b]
    sizes = [s for s in (rung.size_of(f), rung.size_of(b)) if s is not None and s > 0]
    d = rung_diff(rung, f, b)
    if d.by == "failures" and x.failure_rate < y.failure_rate and x.n_ok and y.n_ok:
        # fewer failures than the baseline never count against it: judged on the loss of the successful runs
        # (Fisher's test on 0 of 6 against 1 of 7 failed would block a gain of 25 standard errors)
        c = compare({a: ra.losses for a, ra in rung.archs.items() if ra.losses}, f, b)
        d = RungDiff(rung.name, "loss", c.method, c.diff, c.ci_low, c.ci_high, c.p_value)
    kf, nf, lf = x.window(window)
    kb, nb, lb = y.window(window)
    g = GateRung(rung.name, math.exp(sum(map(math.log, sizes)) / len(sizes)) if sizes else None, d,
                 _one_sided(rung, d, f, b), kf, nf, lf, kb, nb, lb)
    if x.n_ok and y.n_ok:
        g.gap = x.mean - y.mean
        s2 = [_se2(rung, f), _se2(rung, b)]
        g.gap_se = math.sqrt(s2[0] + s2[1]) if None not in s2 else None
    return g


def _slope(rs: Sequence[GateRung], f: str, b: str, draws: Mapping[str, Mapping[str, np.ndarray]] | None,
           level: float, hold: float = HOLD_FACTOR) -> tuple | str:
    """(slope, the weighted mean gap, the slope's interval, N at ``hold`` x the largest rung, the fitted gap
    there, its interval) of the gap on log10 N, or why there is none. The intervals are None without
    draws."""
    pts = [r for r in rs if r.gap is not None]
    if len(pts) < 2:
        return "fewer than 2 rungs where both trained"
    if any(r.size is None for r in pts):
        return "a rung has no size"
    if any(not r.gap_se for r in pts):
        return "a gap has no standard error (one seed each and no pooled SD, or identical seeds)"
    x = np.log10([r.size for r in pts])
    if np.ptp(x) == 0:
        return "the rungs have the same size"
    w = 1 / np.array([r.gap_se for r in pts]) ** 2
    xc = x - (w * x).sum() / w.sum()
    coef = w * xc / (w * xc * xc).sum()  # slope = coef @ gaps, for any gaps
    g = np.array([r.gap for r in pts])
    n_hold = hold * max(r.size for r in pts)
    at = w / w.sum() + coef * (math.log10(n_hold) - (w * x).sum() / w.sum())  # the line at n_hold = at @ gaps
    ci = hold_ci = None
    if draws is not None:
        gd = np.column_stack([draws[r.rung][f] - draws[r.rung][b] for r in pts])
        s, h = gd @ coef, gd @ at
        ok = np.isfinite(s) & np.isfinite(h)
        if ok.any():
            q = ((1 - level) / 2, (1 + level) / 2)
            ci = tuple(float(v) for v in np.quantile(s[ok], q))
            hold_ci = tuple(float(v) for v in np.quantile(h[ok], q))
    return float(coef @ g), float((w * g).sum() / w.sum()), ci, float(n_hold), float(at @ g), hold_ci


def _fmt(v: float) -> str:
    return f"{v:+.4f}"


def gate(rungs: Sequence[Rung], f: str, b: str, draws=None, size_unit: str = "parameters",
         level: float = LEVEL, window: float = LR_WINDOW) -> Gate:
    """One gate before the Holm step of (a) (:func:`promotion_gates` does it over the pairs): the rung
    comparisons and their intersection-union p, the failures within ``window`` of the chosen learning
    rates, the gap's slope over log10 N."""
    out = Gate(f, b, False, "", window=window)
    out.rungs = [_gate_rung(r, f, b, window) for r in rungs]
    missing = [r.rung for r in out.rungs if r.diff is None]
    untested = [r.rung for r in out.rungs if r.diff is not None and r.p_one_sided is None]
    if missing:
        out.reasons.append(f"not trained at every rung (not at {', '.join(missing)})")
    elif untested:
        out.reasons.append(f"untested at {', '.join(untested)} (too few successful runs)")
    else:
        out.p_every = max(r.p_one_sided for r in out.rungs)
    behind = [r for r in out.rungs if r.diff is not None and r.diff.diff is not None and r.diff.diff >= 0]
    if behind:
        out.reasons.append("not ahead at every rung: " + "; ".join(
            f"{'more failures' if r.diff.by == 'failures' else 'a higher mean loss'} at {r.rung} "
            f"({_fmt(r.diff.diff)})" for r in behind))
    worse = [r for r in out.rungs if r.diff is not None and (r.found_rate is None or r.base_rate is None
                                                             or r.found_rate > r.base_rate)]
    out.stable = not worse
    if worse:
        out.reasons.append(f"less stable near its optimum: more failed runs within {window:g}x of its own "
                           f"learning rate (and at its nearest trained neighbours) than the baseline near its own, "
                           f"at " + "; ".join(
                               f"{r.rung} ({r.found_failed}/{r.found_runs} against {r.base_failed}/{r.base_runs})"
                               for r in worse))
    sl = _slope(out.rungs, f, b, draws, level)
    if isinstance(sl, str):
        out.slope_note = sl
        out.reasons.append(f"the gap's trend with size was not estimated ({sl}): that the gain holds is not shown")
        return out
    out.slope, centre, out.slope_ci, out.hold_size, out.hold_gap, out.hold_ci = sl
    if out.slope_ci is None or out.hold_ci is None:
        out.slope_note = "no draws of the rung means to give the slope an interval"
        out.reasons.append("the gap's trend with size has no interval (no draws): that the gain holds is not shown")
        return out
    if centre != 0:
        toward_zero = out.slope_ci[0] > 0 if centre < 0 else out.slope_ci[1] < 0
        out.shrinks = bool(toward_zero)
        if toward_zero and out.slope != 0:
            pts = [r for r in out.rungs if r.gap is not None and r.gap_se]
            w = np.array([1 / r.gap_se ** 2 for r in pts])
            xbar = float((w * np.log10([r.size for r in pts])).sum() / w.sum())
            out.zero_at = float(10 ** (xbar - centre / out.slope))
        if toward_zero and centre < 0:
            out.reasons.append(
                f"the gain shrinks with size: slope {_fmt(out.slope)} [{_fmt(out.slope_ci[0])}, "
                f"{_fmt(out.slope_ci[1])}] per decade of {size_unit}" +
                (f", the fitted gap reaching 0 near N = {out.zero_at:.3g}" if out.zero_at is not None else ""))
    out.holds = bool(centre < 0 and out.hold_ci[1] < 0)
    if not out.holds and not (out.shrinks and centre < 0):
        what = "shrinkage toward zero not excluded" if centre < 0 else "no gain over the rungs on average"
        out.reasons.append(
            f"{what}: the gap's line at {HOLD_FACTOR:g}x the largest rung "
            f"(N = {out.hold_size:.3g}) is {_fmt(out.hold_gap)} [{_fmt(out.hold_ci[0])}, {_fmt(out.hold_ci[1])}], "
            f"not wholly a gain (slope {_fmt(out.slope)} [{_fmt(out.slope_ci[0])}, {_fmt(out.slope_ci[1])}] "
            f"per decade of {size_unit})")
    return out


def promotion_gates(rungs: Sequence[Rung], found: Sequence[str], baselines: Sequence[str], draws=None,
                    alpha: float = ALPHA, size_unit: str = "parameters", level: float = LEVEL,
                    window: float = LR_WINDOW) -> list[Gate]:
    """Every found placement against every baseline (both run at some rung), each with its verdict;
    (a)'s intersection-union p-values adjusted by Holm over all of these pairs. ``window``: (b)'s
    neighbourhood of a chosen learning rate, [lr / window, lr x window]."""
    from statsmodels.stats.multitest import multipletests

    present = {a for r in rungs for a in r.archs}
    gates = [gate(rungs, f, b, draws, size_unit, level, window)
             for f in found if f in present for b in baselines if b in present and b != f]
    tested = [g for g in gates if g.p_every is not None]
    if tested:
        holm = multipletests([g.p_every for g in tested], alpha=alpha, method="holm")[1]
        for g, p in zip(tested, holm):
            g.p_holm = float(p)
    for g in gates:
        ahead = g.p_every is not None and all(r.diff.diff is not None and r.diff.diff < 0 for r in g.rungs)
        g.better = bool(ahead and g.p_holm is not None and g.p_holm < alpha)
        if ahead and not g.better:
            g.reasons.insert(0, f"ahead at every rung, but not significantly at all of them (the largest one-sided "
                                f"p over the rungs {g.p_every:.3g}, Holm p = {g.p_holm:.3g} over {len(tested)} pairs)")
        g.promoted = g.better and g.stable and g.holds
        if g.promoted:
            g.reason = (f"better at every rung (Holm p = {g.p_holm:.3g}), no more failures near its "
                        f"learning rate (within {g.window:g}x and its nearest trained neighbours) than the baseline "
                        f"near its own at any rung, and the gain holds with size: the gap's line at "
                        f"{HOLD_FACTOR:g}x the largest rung (N = {g.hold_size:.3g}) is {_fmt(g.hold_gap)} "
                        f"[{_fmt(g.hold_ci[0])}, {_fmt(g.hold_ci[1])}] (slope {_fmt(g.slope)} "
                        f"[{_fmt(g.slope_ci[0])}, {_fmt(g.slope_ci[1])}] per decade of {size_unit})")
        else:
            g.reason = "; ".join(g.reasons)
    return gates
