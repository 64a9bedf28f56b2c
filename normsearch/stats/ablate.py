"""A factorial ablation between two architectures A and B: which of the sites where they differ (and,
optionally, their inits) carry the gap between them.

Each factor has two levels, coded -1 (A's) and +1 (B's). A design is every combination (2^k) or the
half fraction whose defining relation is I = +(the product of all k factors): it holds B's corner,
and A's when k is even; its resolution is k, so from k = 5 on no main effect or two-way interaction
is aliased with another (:func:`design_points`, :func:`aliased`).

The data are ``samples``: combination -> {seed: loss} over its successful runs (a failed run never
enters a mean). An effect is a contrast of the combinations' means: the mean over the combinations at
B's level minus the mean over those at A's level (weights +-2/N over N combinations: +-1/2^(k-1) in the
full design); a two-way interaction likewise on the product of two factors' codes. Its standard error
comes from each combination's own variance (never pooled), its df from Welch-Satterthwaite with each
variance at its 70% upper confidence limit (:func:`normsearch.stats._power.welch_df`'s rule, for any
number of terms), and every effect and interaction is one Holm family. A combination with fewer than
two successful runs has no variance of its own: it is left out of every contrast, which then takes the
mean over the combinations it has at each level and says which it could not use. Rules:
``docs/statistics.md``, section 15.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from ._power import ALPHA, DF_HEDGE
from .outcomes import wilson

FULL, HALF = "full", "half"


def design_points(k: int, fraction: str = FULL) -> list[tuple[int, ...]]:
    """The combinations of ``k`` two-level factors coded -1 (A's level) and +1 (B's), A's corner first:
    all 2^k, or the half fraction I = +(product of all k) (B's corner always in it)."""
    points = [tuple(-x for x in p) for p in itertools.product((1, -1), repeat=k)]
    if fraction == HALF:
        points = [p for p in points if math.prod(p) == 1]
    return points


def aliased(points: Sequence[Sequence[int]], order: int = 2) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """The pairs of effects of order <= ``order`` (main effects, two-way interactions) whose columns over
    ``points`` are equal or opposite (aliased with each other), and those constant over them (aliased with
    the mean). Empty for a design of resolution >= 2 x order + 1."""
    x = np.asarray(points, float)
    k = x.shape[1] if x.size else 0
    words = [w for r in range(1, order + 1) for w in itertools.combinations(range(k), r)]
    cols = {w: x[:, list(w)].prod(axis=1) for w in words}
    out = [(w, ()) for w in words if abs(cols[w].sum()) == len(x)]
    for u, v in itertools.combinations(words, 2):
        if abs(float(cols[u] @ cols[v])) == len(x):
            out.append((u, v))
    return out


@dataclass
class Effect:
    """A main effect (one factor) or a two-way interaction (two): B's level minus A's, in bits/byte."""

    name: str
    factors: tuple[str, ...]
    estimate: float | None = None
    se: float | None = None
    df: float | None = None
    ci_low: float | None = None  # 95%, not adjusted for multiplicity
    ci_high: float | None = None
    p_value: float | None = None
    p_holm: float | None = None  # Holm over every effect and interaction of the analysis
    share: float | None = None  # estimate / (mean_B - mean_A): the part of the A-B gap it accounts for
    method: str = "none"  # welch | none (no combination on one side, or no noise)
    unused: list[str] = field(default_factory=list)  # combinations of the design it could not use
    significant: bool = False  # p_holm < alpha

    def to_dict(self) -> dict:
        return asdict(self)


def contrast(groups: Mapping[str, Sequence[float]], weights: Mapping[str, float],
             level: float = 0.95) -> tuple[float, float | None, float | None, float | None]:
    """sum_i w_i mean_i with its standard error sqrt(sum w_i^2 s_i^2 / n_i), each group's own variance,
    and Satterthwaite's df with each s_i^2 at its 70% upper confidence limit (the factor cancels when every
    group has as many runs): (estimate, se, df, p) with p two-sided for no difference; se, df and p None when
    a group has one value, or nothing varies."""
    from scipy import special

    est, e, d = 0.0, [], []
    for g, w in weights.items():
        v = np.asarray(groups[g], float)
        est += w * float(v.mean())
        if v.size < 2:
            return est, None, None, None
        e.append(w * w * float(v.var(ddof=1)) / v.size)
        d.append(v.size - 1.0)
    e_, d_ = np.asarray(e), np.asarray(d)
    if e_.sum() <= 0:
        return est, None, None, None
    u = e_ * d_ / special.chdtri(d_, DF_HEDGE)
    df = float(u.sum() ** 2 / (u ** 2 / d_).sum())
    se = math.sqrt(float(e_.sum()))
    return est, se, df, float(2 * special.stdtr(df, -abs(est) / se))


def holm(p: Sequence[float]) -> list[float]:
    """Holm's (1979) step-down adjusted p-values, in the order given (statsmodels' ``holm``, without its
    garbage collection on every call, which a simulation of many analyses cannot afford)."""
    m = len(p)
    out, running = [0.0] * m, 0.0
    for rank, i in enumerate(sorted(range(m), key=lambda i: p[i])):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out


def _finish(effects: list[Effect], gap: float | None, alpha: float, level: float = 0.95) -> None:
    """Intervals, Holm over the family, shares of the gap, in place."""
    from scipy import special

    for e in effects:
        if e.se is not None:
            t = float(special.stdtrit(e.df, 0.5 + level / 2))
            e.ci_low, e.ci_high = e.estimate - t * e.se, e.estimate + t * e.se
        if e.estimate is not None and gap:
            e.share = e.estimate / gap
    tested = [e for e in effects if e.p_value is not None]
    if tested:
        for e, p in zip(tested, holm([e.p_value for e in tested])):
            e.p_holm, e.significant = float(p), bool(p < alpha)


@dataclass
class Cell:
    """One combination: its runs, failures counted apart, and its mean over the successful ones."""

    label: str
    codes: tuple[int, ...]
    n_ok: int
    n_failed: int
    mean: float | None
    sd: float | None
    failure_rate: float | None
    failure_ci: tuple[float, float]

    @property
    def n_runs(self) -> int:
        return self.n_ok + self.n_failed


@dataclass
class Gap:
    """mean_B - mean_A over their successful runs (Welch), the number the shares divide."""

    estimate: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    p_value: float | None = None


@dataclass
class Factorial:
    factors: list[str]
    cells: list[Cell]
    effects: list[Effect]
    interactions: list[Effect]
    gap: Gap
    unusable: list[str]  # combinations with fewer than two successful runs (left out of every contrast)
    alpha: float = ALPHA

    def significant(self) -> list[Effect]:
        return [e for e in self.effects + self.interactions if e.significant]


def cells_of(codes: Mapping[str, Sequence[int]], samples: Mapping[str, Mapping[int, float]],
             failed: Mapping[str, int]) -> list[Cell]:
    out = []
    for label, c in codes.items():
        v = np.asarray(list(samples.get(label, {}).values()), float)
        k = int(failed.get(label, 0))
        n = v.size + k
        out.append(Cell(label, tuple(c), int(v.size), k, float(v.mean()) if v.size else None,
                        float(v.std(ddof=1)) if v.size >= 2 else None, k / n if n else None, wilson(k, n)))
    return out


def gap_of(samples: Mapping[str, Mapping[int, float]], a: str, b: str) -> Gap:
    from .inference import compare

    c = compare(samples, b, a)
    return Gap(c.diff, c.ci_low, c.ci_high, c.p_value)


def factorial(factors: Sequence[str], codes: Mapping[str, Sequence[int]], samples: Mapping[str, Mapping[int, float]],
              failed: Mapping[str, int] | None = None, a: str | None = None, b: str | None = None,
              alpha: float = ALPHA, in_design: Sequence[str] | None = None) -> Factorial:
    """Main effects and two-way interactions of ``factors`` over the combinations ``codes`` (label ->
    one code per factor, -1 A's level, +1 B's), from ``samples`` (label -> {seed: loss}, successful runs
    only) and ``failed`` (label -> failed runs). ``a``, ``b``: the labels of A's and B's corners (the
    gap); ``in_design``: the labels the contrasts use (default: every one; a corner trained beside a
    half fraction that lacks it is not)."""
    failed = failed or {}
    cells = cells_of(codes, samples, failed)
    design = list(codes) if in_design is None else [x for x in codes if x in set(in_design)]
    usable = [x for x in design if len(samples.get(x, {})) >= 2]
    unusable = [x for x in design if x not in usable]
    groups = {x: list(samples[x].values()) for x in usable}
    gap = gap_of(samples, a, b) if a is not None and b is not None else Gap()
    words = [(i,) for i in range(len(factors))] + list(itertools.combinations(range(len(factors)), 2))
    out: list[Effect] = []
    for w in words:
        e = Effect(" x ".join(factors[i] for i in w), tuple(factors[i] for i in w), unused=list(unusable))
        sign = {x: math.prod(codes[x][i] for i in w) for x in usable}
        plus, minus = [x for x in usable if sign[x] > 0], [x for x in usable if sign[x] < 0]
        if plus and minus:
            weights = {**{x: 1 / len(plus) for x in plus}, **{x: -1 / len(minus) for x in minus}}
            e.estimate, e.se, e.df, e.p_value = contrast(groups, weights)
            e.method = "welch" if e.se is not None else "none"
        out.append(e)
    _finish(out, gap.estimate, alpha)
    k = len(factors)
    return Factorial(list(factors), cells, out[:k], out[k:], gap, unusable, alpha)


def leave_one_out(a: str, variants: Sequence[str], samples: Mapping[str, Mapping[int, float]],
                  failed: Mapping[str, int] | None = None, b: str | None = None, alpha: float = ALPHA,
                  codes: Mapping[str, Sequence[int]] | None = None) -> Factorial:
    """Each of ``variants`` (A with one change) against A: the difference of the two means (Welch, each
    side's own variance, the same df rule), Holm over the variants; each as an 'effect' named by its
    label, with its share of the gap B - A when ``b`` was trained."""
    labels = [a, *variants] + ([b] if b is not None and b not in variants else [])
    codes = dict(codes or {x: () for x in labels})
    cells = cells_of({x: codes.get(x, ()) for x in labels}, samples, failed or {})
    usable = {x for x in labels if len(samples.get(x, {})) >= 2}
    gap = gap_of(samples, a, b) if b is not None else Gap()
    out = []
    for v in variants:
        e = Effect(v, (v,), unused=[x for x in (a, v) if x not in usable])
        if not e.unused:
            groups = {x: list(samples[x].values()) for x in (a, v)}
            e.estimate, e.se, e.df, e.p_value = contrast(groups, {v: 1.0, a: -1.0})
            e.method = "welch" if e.se is not None else "none"
        out.append(e)
    _finish(out, gap.estimate, alpha)
    return Factorial([], cells, out, [], gap, [x for x in labels if x not in usable], alpha)
