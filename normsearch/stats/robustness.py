"""Across recipe variants (``normsearch robustness``): per contrast (a found placement against a
baseline), its gap in every variant, in how many variants the gap's sign holds, its average over
variants from a random-effects model, and the trend of the gap with training length. Pure functions
over plain data: each variant is a :class:`~normsearch.stats.rung.Rung` (each architecture's runs at
its chosen learning rate), as the ladder's rungs are.

Rules (``docs/statistics.md``, "Across recipe variants"):

- **Per variant**, each contrast is the Welch comparison of the ranking (each architecture's own SD,
  no variance pre-test), Holm-adjusted over that variant's contrasts: a variant is one experiment.
- **The sign holds** in a variant when the found placement's mean is below the baseline's there (no
  test: a count); a variant where either side has no successful run is a failure, counted apart; one
  where either side has no run at all yet (the stage is still training) is *not trained*, neither.
- **The average advantage** is the mean of a random-effects model, gap_v = mu + u_v + e_v, with the
  variant as the random effect (u_v ~ N(0, tau^2)) and e_v the variant's own sampling error (its
  Welch SE): tau^2 by REML, the interval by Hartung-Knapp (t on k - 1 df, its variance factor held at
  >= 1 so the interval is never narrower than the fixed-effect one). With one variant there is none.
  The model's mean is the advantage over *these* variants as a population of recipe changes; tau
  says how much a recipe change moves the gap.
- **The trend with training length**: the gaps at 1x, 4x and 16x the steps, regressed on log10 of the
  factor, weighted by 1 / SE^2; the slope's interval uses t on the smallest Welch df of the points
  (their SEs are estimated from few seeds). A gap *shrinks toward zero* when the slope's interval lies
  wholly on the side opposite the gap's sign; *grows* when wholly on its side; else no clear trend.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from .inference import ALPHA, Comparison, adjust, compare
from .rung import Rung


@dataclass
class VariantGap:
    """One contrast in one variant."""

    variant: str
    diff: float | None  # found - baseline, bits per byte (negative: the found placement is better)
    se: float | None
    df: float | None
    ci_low: float | None
    ci_high: float | None
    p_holm: float | None
    verdict: str  # better | worse | equivalent | undecided | failed | not trained
    n_arch: int = 0
    n_against: int = 0
    failed: str | None = None  # which side had no successful run, or (not trained) no run yet


@dataclass
class Pooled:
    """The random-effects mean of a contrast's gaps over variants."""

    k: int
    mean: float
    se: float
    df: int
    ci_low: float
    ci_high: float
    tau: float  # between-variant SD of the true gap
    method: str = "REML, Hartung-Knapp"


@dataclass
class Trend:
    """A gap against log10 of a factor (training length)."""

    factors: list[float]
    diffs: list[float]
    slope: float  # change of the gap per 10x the factor
    se: float
    df: float
    ci_low: float
    ci_high: float
    verdict: str  # "shrinks toward zero" | "grows" | "no clear trend"


@dataclass
class ContrastSummary:
    arch: str
    against: str
    gaps: list[VariantGap] = field(default_factory=list)
    sign_holds: int = 0  # variants where the found placement's mean is lower
    n_estimated: int = 0  # variants with a gap (both sides had a successful run)
    n_better: int = 0  # significantly better under the variant's Holm
    n_worse: int = 0
    n_failed: int = 0  # variants where either side had no successful run
    pooled: Pooled | None = None
    length: Trend | None = None
    n_untrained: int = 0  # variants where either side has no run yet (a stage in progress): neither loss nor failure

    def to_dict(self) -> dict:
        return asdict(self)


def variant_gaps(rungs: Sequence[Rung], pairs: Sequence[tuple[str, str]],
                 alpha: float = ALPHA) -> dict[tuple[str, str], list[VariantGap]]:
    """Every pair's gap in every variant, Holm over each variant's pairs."""
    out: dict[tuple[str, str], list[VariantGap]] = {p: [] for p in pairs}
    for r in rungs:
        samples = {a: ra.losses for a, ra in r.archs.items() if ra.losses}
        comps: dict[tuple[str, str], Comparison] = {}
        for a, b in pairs:
            if a in samples and b in samples:
                comps[(a, b)] = compare(samples, a, b)
        adjust(list(comps.values()), alpha)
        for a, b in pairs:
            untrained = [x for x in (a, b) if x not in r.archs]
            if untrained:  # no run at all yet, failed or not: the variant is still training, not a failure
                out[(a, b)].append(VariantGap(r.name, None, None, None, None, None, None, "not trained",
                                              failed=f"no run yet: {' and '.join(untrained)}"))
                continue
            if (a, b) not in comps:
                side = " and ".join(x for x in (a, b) if x not in samples) or "neither"
                out[(a, b)].append(VariantGap(r.name, None, None, None, None, None, None, "failed",
                                              failed=f"no successful run: {side}"))
                continue
            c = comps[(a, b)]
            out[(a, b)].append(VariantGap(r.name, c.diff, c.se, c.df, c.ci_low, c.ci_high, c.p_holm, c.verdict,
                                          c.n_arch, c.n_against))
    return out


def random_effects(y: Sequence[float], se: Sequence[float], level: float = 0.95) -> Pooled | None:
    """The REML random-effects mean of ``y`` (each with its sampling SE), Hartung-Knapp interval."""
    from scipy import stats

    y, v = np.asarray(y, float), np.asarray(se, float) ** 2
    k = y.size
    if k < 2 or not np.all(np.isfinite(v)) or np.any(v <= 0):
        return None
    tau2 = max(0.0, float(np.var(y, ddof=1) - v.mean()))  # a moment start
    for _ in range(200):  # REML by Fisher scoring
        w = 1.0 / (v + tau2)
        mu = float((w * y).sum() / w.sum())
        new = float((w ** 2 * ((y - mu) ** 2 - v)).sum() / (w ** 2).sum() + 1.0 / w.sum())
        new = max(0.0, new)
        if abs(new - tau2) < 1e-12 * max(1.0, tau2):
            tau2 = new
            break
        tau2 = new
    w = 1.0 / (v + tau2)
    mu = float((w * y).sum() / w.sum())
    q = float((w * (y - mu) ** 2).sum() / (k - 1))
    se_hk = math.sqrt(max(1.0, q) / float(w.sum()))
    t = float(stats.t.ppf(0.5 + level / 2, k - 1))
    return Pooled(k, mu, se_hk, k - 1, mu - t * se_hk, mu + t * se_hk, math.sqrt(tau2))


def gap_trend(factors: Sequence[float], diffs: Sequence[float], ses: Sequence[float], dfs: Sequence[float],
              level: float = 0.95) -> Trend | None:
    """The weighted regression of a gap on log10(factor) (see the module's rules)."""
    from scipy import stats

    x, y, s = np.log10(np.asarray(factors, float)), np.asarray(diffs, float), np.asarray(ses, float)
    if x.size < 2 or np.ptp(x) == 0 or not np.all(np.isfinite(s)) or np.any(s <= 0):
        return None
    w = 1.0 / s ** 2
    xm = float((w * x).sum() / w.sum())
    sxx = float((w * (x - xm) ** 2).sum())
    slope = float((w * (x - xm) * (y - (w * y).sum() / w.sum())).sum() / sxx)
    se = math.sqrt(1.0 / sxx)
    df = float(min(dfs)) if len(dfs) else math.inf
    t = float(stats.t.ppf(0.5 + level / 2, df)) if math.isfinite(df) else float(stats.norm.ppf(0.5 + level / 2))
    lo, hi = slope - t * se, slope + t * se
    sign = math.copysign(1.0, float((w * y).sum() / w.sum()))
    if (lo > 0 or hi < 0) and math.copysign(1.0, slope) != sign:
        verdict = "shrinks toward zero"
    elif lo > 0 or hi < 0:
        verdict = "grows"
    else:
        verdict = "no clear trend"
    return Trend([float(f) for f in factors], [float(d) for d in diffs], slope, se, df, lo, hi, verdict)


def summarise(rungs: Sequence[Rung], pairs: Sequence[tuple[str, str]],
              lengths: Mapping[str, float] | None = None, alpha: float = ALPHA) -> list[ContrastSummary]:
    """Per pair: its gaps in every variant; over the recipe variants (those not in ``lengths`` beyond
    1x) the sign count and the random-effects mean; and over the training-length series
    (``lengths``: variant name -> factor on the steps, the reference at 1) the trend with length."""
    gaps = variant_gaps(rungs, pairs, alpha)
    lengths = dict(lengths or {})
    out = []
    for (a, b), every in gaps.items():
        # the recipe variants (and the reference): the training-length series is read apart, as a trend
        gs = [g for g in every if lengths.get(g.variant, 1) == 1]
        ok = [g for g in gs if g.diff is not None]
        s = ContrastSummary(a, b, gs, sign_holds=sum(g.diff < 0 for g in ok), n_estimated=len(ok),
                            n_better=sum(g.verdict == "better" for g in gs),
                            n_worse=sum(g.verdict == "worse" for g in gs),
                            n_failed=sum(g.verdict == "failed" for g in gs),
                            n_untrained=sum(g.verdict == "not trained" for g in gs))
        tested = [g for g in ok if g.se is not None]
        s.pooled = random_effects([g.diff for g in tested], [g.se for g in tested])
        s.gaps = list(every)
        if lengths:
            series = sorted(((lengths[g.variant], g) for g in every if g.variant in lengths and g.se is not None),
                            key=lambda fg: fg[0])
            if len(series) >= 2:
                s.length = gap_trend([f for f, _ in series], [g.diff for _, g in series], [g.se for _, g in series],
                                     [g.df for _, g in series if g.df is not None])
        out.append(s)
    return out
