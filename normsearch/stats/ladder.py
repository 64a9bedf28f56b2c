"""Across the rungs of a scale ladder (issue 17): does the order found at small size hold as the model
grows? Pure functions over plain data, so that they can be tested without training.

A :class:`Rung` (:mod:`.rung`) holds, per architecture, the seeds' final losses of its successful runs
and its failed runs (at the learning rate it is scored at; :func:`rung_from_runs` builds one from
:class:`Run` s with the same choice as :func:`analyse`). :func:`analyse_ladder` gives a
:class:`LadderStats`:

1. per rung, the hurdle order (failure rate first, then mean loss; architectures that failed every
   run share the last place) and each architecture's mean with its 95% interval;
2. for every pair of rungs, Kendall's tau-b and Spearman's rho between the orders of the architectures
   ranked at both (an architecture that failed every run at both rungs is left out of that pair:
   tied last at both, it would count as agreement), with 95% intervals from parametric draws of each
   (architecture, rung) mean, consistent with its own per-rung interval (failure rates held fixed);
   and between the smallest rung and each larger one, the pairwise decision accuracy (the share of
   architecture pairs ordered as at the smallest rung), with its interval from the same draws;
3. every rank reversal between any two rungs, with the difference at each rung and whether it is
   significant (Holm over those differences);
4. the promotion gate of each found placement against each baseline (:mod:`.gate`);
5. per architecture, a power law L(N) = E + A N^-alpha over the rungs (:mod:`.powerlaw`) when there
   are at least five, with its lack-of-fit test, and at a named size N* (no further than
   :data:`MAX_FACTOR` times the largest rung) the extrapolated losses of the fits that pass it, their
   order, P(best) and the crossings to warn of (the fitted curves cross, or more than
   :data:`P_CROSS_WARN` of the draws do);
6. per architecture, whether the learning rate chosen at the smallest rung carries to the larger
   ones, and what it would cost there (:mod:`.lr_transfer`);
7. what the numbers rest on: the rungs where an architecture failed every run, the means with fewer
   than :data:`FEW_SEEDS` successful seeds, and the chosen learning rates at an end of what was
   trained (an optimum the sweep did not bracket: it may lie beyond the trained range); and what each
   rung was (:class:`RungInfo`: parameters, tokens per parameter, precision).

Rules: ``docs/statistics.md`` (section "Across model sizes").
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from ..records import jsonable
from .gate import Gate, promotion_gates
from .inference import ALPHA
from .lr_transfer import LrTransfer, lr_transfer
from .powerlaw import PowerFit, crossing, fit_power_law, p_crossing
from .rung import MAX_FACTOR, Rung, RungDiff, RungInfo, RungPoint, mean_draws, rung_diff, rung_points
from .rung import RungArch, rung_from_runs  # noqa: F401  (re-exported: their home was this module)

N_DRAWS = 2000  # draws of every rung mean (:func:`mean_draws`): parametric, not a bootstrap of the seeds
REVERSAL_VERDICTS = ("both significant", "one significant", "within noise")
P_CROSS_WARN = 0.10  # warn of a pair whose drawn curves cross before N* in more than this share of draws
FEW_SEEDS = 3  # a mean over fewer successful seeds gets a warning: its SD, and so its interval, is barely estimated


@dataclass
class DecisionAccuracy:
    """The share of architecture pairs ordered at a larger rung as at the smallest one (pairs tied at
    the smallest rung left out; a pair tied at the larger one counts as not the same), with a 95%
    percentile interval over the draws of the rung means."""

    value: float | None
    low: float | None
    high: float | None
    n_pairs: int  # pairs ordered (not tied) at the smallest rung


@dataclass
class Agreement:
    """Rank agreement between two rungs over the architectures present at both."""

    rung_a: str
    rung_b: str
    adjacent: bool
    archs: list[str]  # ranked at both rungs (a successful run at each)
    left_out: list[str]  # run at both, but every run failed at both: tied last at both, they would agree
    tau: float | None  # Kendall's tau-b (ties counted)
    tau_ci: tuple[float, float] | None
    rho: float | None  # Spearman's rho (average ranks for ties)
    rho_ci: tuple[float, float] | None
    n_draws: int  # draws where both were defined
    decision_accuracy: DecisionAccuracy | None = None  # only between the smallest rung and a larger one


@dataclass
class Reversal:
    """``a`` ranks above ``b`` at ``rung_a`` and below it at ``rung_b``."""

    a: str
    b: str
    rung_a: str
    rung_b: str
    kind: str  # "adjacent" | "first-last" | "other" (any other pair of rungs)
    at_a: RungDiff
    at_b: RungDiff
    verdict: str = "within noise"  # one of REVERSAL_VERDICTS


@dataclass
class Projection:
    """One architecture's fitted loss at the target size."""

    arch: str
    loss: float
    ci: tuple[float, float] | None
    rank: int
    p_best: float | None  # share of draws where it is the lowest


@dataclass
class Crossing:
    """A pair to warn of: the fitted curves cross between the largest rung and the target, or more than
    :data:`P_CROSS_WARN` of the draws' curves do."""

    a: str
    b: str
    at: float | None  # where the fitted curves cross between the largest rung and the target (None: they do not)
    p_cross: float | None  # share of draws in which they cross there


@dataclass
class Extrapolation:
    target: float
    largest: float  # the largest size fitted
    projections: list[Projection]  # in extrapolated order
    p_order: float | None  # share of draws reproducing the whole extrapolated order
    crossings: list[Crossing]  # pairs whose curves (or > P_CROSS_WARN of the draws) cross between largest and target
    left_out: dict[str, str]  # arch -> why it is not extrapolated (no fit, a failed or untested fit, every run
    # failed at the largest rung, a target too far)
    failing: list[str]  # fitted architectures with failures at the largest rung (failures are not extrapolated)
    max_factor: float = MAX_FACTOR
    refused: str | None = None  # "not extrapolated: beyond 4x the largest rung" when the target is

    @property
    def order(self) -> list[str]:
        return [p.arch for p in self.projections]


@dataclass
class LadderStats:
    rungs: list[str]  # small to large
    size_unit: str  # what N is: "parameters", "FLOPs", ...
    orders: dict[str, list[str]]  # per rung, hurdle order
    points: dict[str, list[RungPoint]]  # per architecture, by rung
    agreements: list[Agreement]
    reversals: list[Reversal]
    fits: dict[str, PowerFit]
    extrapolation: Extrapolation | None
    n_draws: int  # of every rung mean (:func:`mean_draws`)
    seed: int
    alpha: float = ALPHA
    all_failed: dict[str, list[str]] = field(default_factory=dict)  # arch -> the rungs where every run failed
    few_seeds: list[tuple[str, str, int]] = field(default_factory=list)  # (arch, rung, n) with 0 < n < FEW_SEEDS
    at_edge: list[tuple[str, str, float]] = field(default_factory=list)  # (arch, rung, lr): an unbracketed optimum
    rung_info: list[RungInfo] = field(default_factory=list)  # per rung, as ``rungs``: parameters, tokens, precision
    promotion: list[Gate] = field(default_factory=list)  # every found placement against every baseline
    lr_transfer: list[LrTransfer] = field(default_factory=list)  # per architecture: does the first rung's lr carry?

    def agreement(self, a: str, b: str) -> Agreement | None:
        return next((g for g in self.agreements if {g.rung_a, g.rung_b} == {a, b}), None)

    def to_dict(self) -> dict:
        """Everything as JSON-ready values (NaN and inf become None; the fits' draws are left out)."""
        d = asdict(self)
        for f in d["fits"].values():
            f.pop("draws", None)
        # issue 26: rungs[*] is each rung's record (name, n_params, tokens_per_param, precision, ...); the
        # names alone, which ladder.json's first readers took from ``rungs``, are kept as ``rung_names``
        d["rung_names"] = list(d["rungs"])
        if d.get("rung_info"):
            d["rungs"] = [dict(r) for r in d["rung_info"]]
        return jsonable(d)


# --------------------------------------------------------------------------------------------------
# Ranks and their agreement


def _scores(rung: Rung, archs: Sequence[str], means: np.ndarray) -> np.ndarray:
    """A scalar per architecture (columns of ``means``, rows = draws) that sorts as the hurdle key:
    failure tier first, then mean; architectures with no success tie at the end."""
    rates = np.array([rung.archs[a].failure_rate for a in archs])
    tier = np.searchsorted(np.unique(rates), rates).astype(float)
    finite = means[np.isfinite(means)]
    lo, span = (float(finite.min()), float(finite.max() - finite.min())) if finite.size else (0.0, 0.0)
    within = np.where(np.isfinite(means), means - lo, 0.0)
    return tier[None, :] * (span + 1.0) + within


def _rank(scores: np.ndarray) -> np.ndarray:
    from scipy.stats import rankdata

    return rankdata(scores, method="average", axis=1)


def kendall_tau_b(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Kendall's tau-b between the rows of x and y (draws, k); NaN where either row is all tied."""
    i, j = np.triu_indices(x.shape[1], 1)
    sx, sy = np.sign(x[:, i] - x[:, j]), np.sign(y[:, i] - y[:, j])
    den = np.sqrt((sx != 0).sum(1) * (sy != 0).sum(1).astype(float))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, (sx * sy).sum(1) / den, np.nan)


def spearman_rho(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Spearman's rho between the rows of x and y (average ranks); NaN where a row is all tied."""
    rx, ry = _rank(x), _rank(y)
    rx, ry = rx - rx.mean(1, keepdims=True), ry - ry.mean(1, keepdims=True)
    den = np.sqrt((rx * rx).sum(1) * (ry * ry).sum(1))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, (rx * ry).sum(1) / den, np.nan)


def _ci(v: np.ndarray) -> tuple[float, float] | None:
    v = v[np.isfinite(v)]
    return (float(np.quantile(v, 0.025)), float(np.quantile(v, 0.975))) if v.size else None


def _point(v: np.ndarray) -> float | None:
    return float(v[0]) if np.isfinite(v[0]) else None


def decision_share(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Per row of x and y (draws, k): the share of pairs strictly ordered in x that y orders the same
    way; NaN where x orders none."""
    i, j = np.triu_indices(x.shape[1], 1)
    sx, sy = np.sign(x[:, i] - x[:, j]), np.sign(y[:, i] - y[:, j])
    n = (sx != 0).sum(1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(n > 0, ((sx * sy) > 0).sum(1) / n, np.nan)


def _agreement(ra: Rung, rb: Rung, adjacent: bool, draws: dict, first: bool = False) -> Agreement:
    """tau and rho over the architectures run at both rungs. One that failed every run at both is left
    out (and named): it has no loss at either and ties last at both, so keeping it would count a shared
    last place as agreement, and several of them would make any two orders look alike. One that failed
    every run at one rung only stays: its fall to last place (or its rise from it) is a reversal."""
    common = [a for a in ra.archs if a in rb.archs]
    archs = [a for a in common if ra.archs[a].n_ok or rb.archs[a].n_ok]
    left_out = [a for a in common if a not in archs]
    obs = [np.array([[r.archs[a].key[1] for a in archs]]) for r in (ra, rb)]
    if len(archs) < 2:
        acc = DecisionAccuracy(None, None, None, 0) if first else None
        return Agreement(ra.name, rb.name, adjacent, archs, left_out, None, None, None, None, 0, acc)
    xa, xb = _scores(ra, archs, obs[0]), _scores(rb, archs, obs[1])
    cols = [np.column_stack([draws[r.name][a] for a in archs]) for r in (ra, rb)]
    da, db = _scores(ra, archs, cols[0]), _scores(rb, archs, cols[1])
    tau, rho = kendall_tau_b(da, db), spearman_rho(da, db)
    acc = None
    if first:
        i, j = np.triu_indices(len(archs), 1)
        ci = _ci(decision_share(da, db))
        acc = DecisionAccuracy(_point(decision_share(xa, xb)), *(ci or (None, None)),
                               int((np.sign(xa[0, i] - xa[0, j]) != 0).sum()))
    return Agreement(ra.name, rb.name, adjacent, archs, left_out, _point(kendall_tau_b(xa, xb)), _ci(tau),
                     _point(spearman_rho(xa, xb)), _ci(rho), int(np.sum(np.isfinite(tau) & np.isfinite(rho))), acc)


# --------------------------------------------------------------------------------------------------
# Reversals


def _reversals(rungs: Sequence[Rung], alpha: float) -> list[Reversal]:
    from statsmodels.stats.multitest import multipletests

    n = len(rungs)
    pairs = [(i, j, "adjacent" if j == i + 1 else "first-last" if (i, j) == (0, n - 1) else "other")
             for i, j in itertools.combinations(range(n), 2)]
    samples = {r.name: {a: ra.losses for a, ra in r.archs.items() if ra.losses} for r in rungs}
    diffs: dict[tuple[str, str, str], RungDiff] = {}  # (rung, a, b) -> the difference it rests on

    def diff(r: Rung, a: str, b: str) -> RungDiff:
        if (r.name, a, b) not in diffs:
            diffs[r.name, a, b] = rung_diff(r, a, b, samples[r.name])
        return diffs[r.name, a, b]

    out = []
    for i, j, kind in pairs:
        ri, rj = rungs[i], rungs[j]
        common = [a for a in ri.order() if a in rj.archs]
        for a, b in itertools.combinations(common, 2):  # a is ahead of (or tied with) b at rung i
            if ri.archs[a].key < ri.archs[b].key and rj.archs[a].key > rj.archs[b].key:
                out.append(Reversal(a, b, ri.name, rj.name, kind, diff(ri, a, b), diff(rj, a, b)))
    tested = [d for d in diffs.values() if d.p_value is not None]
    if tested:
        holm = multipletests([d.p_value for d in tested], alpha=alpha, method="holm")[1]
        for d, p in zip(tested, holm):
            d.p_holm, d.significant = float(p), bool(p < alpha)
    for r in out:
        r.verdict = REVERSAL_VERDICTS[2 - r.at_a.significant - r.at_b.significant]
    return out


# --------------------------------------------------------------------------------------------------
# Fits and extrapolation


def _all_failed(rungs: Sequence[Rung]) -> dict[str, list[str]]:
    """arch -> the rungs where it was run and every run failed (only those with one)."""
    out: dict[str, list[str]] = {}
    for r in rungs:
        for a, ra in r.archs.items():
            if not ra.n_ok:
                out.setdefault(a, []).append(r.name)
    return out


def _fits(rungs: Sequence[Rung], draws, dead: Mapping[str, list[str]]) -> dict[str, PowerFit]:
    """A power law per architecture over the rungs where it trained; a rung where every run failed
    is named, as the reason for a missing fit or as a note on one made without it."""
    out = {}
    for a in dict.fromkeys(a for r in rungs for a in r.archs):
        here = [r for r in rungs if a in r.archs and r.archs[a].n_ok and r.size_of(a) is not None]
        here.sort(key=lambda r: r.size_of(a))
        cols = np.column_stack([draws[r.name][a] for r in here]) if here else None
        f = fit_power_law(a, [r.size_of(a) for r in here], [r.archs[a].mean for r in here], cols,
                          seeds=[list(r.archs[a].losses.values()) for r in here])
        if a in dead:
            failed = f"every run failed at {', '.join(dead[a])}"
            if f.ok:
                f.notes.append(f"{failed}: fitted over the other rungs, so the curve says nothing of those failures")
            else:
                f.reason = f"{failed}; {f.reason}"
        out[a] = f
    return out


def extrapolate(fits: Mapping[str, PowerFit], target: float, failing: Sequence[str] = (),
                left_out: Mapping[str, str] | None = None, largest: float | None = None,
                max_factor: float = MAX_FACTOR) -> Extrapolation:
    """The fitted losses at ``target``, their order with P(best) and P(whole order) over the fits' paired
    draws, and every pair whose fitted curves cross between the largest size fitted and ``target``, or
    whose draws' curves cross there in more than :data:`P_CROSS_WARN` of the draws. Only fits that pass
    their lack-of-fit test are carried to ``target``, and none when ``target`` is more than
    ``max_factor`` times ``largest`` (the largest rung; default the largest size fitted): then
    ``refused`` says so and nothing is extrapolated. A fit is also left out (with the reason) when ``target``
    is more than ``max_factor`` times beyond its own largest fitted size or below its own smallest: an
    architecture trained at the lower rungs only is not carried from there.
    ``failing``: architectures to flag for failures at the largest rung; ``left_out``: architecture ->
    reason, kept out of the order (as are those without a fit)."""
    out = {a: f"no fit: {f.reason}" for a, f in fits.items() if not f.ok}
    for a, f in fits.items():
        lof = f.lack_of_fit
        if f.verdict == "fails":
            out[a] = (f"its power law fails the lack-of-fit test (F = {lof.F:.3g} on {lof.df_lof} and {lof.df_pe} df, "
                      f"p = {lof.p_value:.3g})")
        elif f.verdict == "untested":
            out[a] = f"its power law is untested: {lof.reason if lof is not None else 'no lack-of-fit test'}"
    for a, why in (left_out or {}).items():
        out.setdefault(a, why)
    for a, f in fits.items():  # each fit vouches for its own sizes only: an architecture missing the top rungs
        if a in out or not f.sizes:  # is not carried further than the factor from its own largest size
            continue
        if target > max_factor * max(f.sizes):
            out[a] = (f"not extrapolated: N* is more than {max_factor:g}x its own largest fitted size "
                      f"({max(f.sizes):.3g})")
        elif target < min(f.sizes) / max_factor:
            out[a] = (f"not extrapolated: N* is more than {max_factor:g}x below its own smallest fitted size "
                      f"({min(f.sizes):.3g})")
    if largest is None:
        largest = max((max(f.sizes) for f in fits.values() if f.sizes), default=target)
    if target > max_factor * largest:
        why = f"not extrapolated: beyond {max_factor:g}x the largest rung ({largest:.3g})"
        return Extrapolation(float(target), float(largest), [], None, [], {a: why for a in fits}, [],
                             max_factor, why)
    ok = [f for a, f in fits.items() if f.ok and a not in out]
    pred = {f.arch: float(f.predict(target)) for f in ok}
    order = sorted(pred, key=lambda a: (pred[a], a))
    have_draws = bool(ok) and all(f.draws is not None for f in ok)
    draws = np.column_stack([fits[a].predict_draws(target) for a in order]) if have_draws else None
    best = np.argmin(draws, axis=1) if draws is not None else None
    projections = [Projection(a, pred[a], _ci(draws[:, i]) if draws is not None else None, i + 1,
                              float(np.mean(best == i)) if best is not None else None) for i, a in enumerate(order)]
    p_order = float(np.mean(np.all(np.diff(draws, axis=1) > 0, axis=1))) if draws is not None else None
    crossings = []
    for a, b in itertools.combinations(order, 2):
        start = min(largest, max(fits[a].sizes), max(fits[b].sizes))  # where the data of both end
        at = crossing(fits[a], fits[b], start, target)
        p = p_crossing(fits[a], fits[b], start, target)
        if at is not None or (p is not None and p > P_CROSS_WARN):
            crossings.append(Crossing(a, b, at, p))
    return Extrapolation(float(target), float(largest), projections, p_order, crossings, out,
                         [a for a in order if a in failing], max_factor)


def analyse_ladder(rungs: Sequence[Rung], target: float | None = None, size_unit: str = "parameters",
                   n_draws: int = N_DRAWS, seed: int = 0, alpha: float = ALPHA,
                   baselines: Sequence[str] = ()) -> LadderStats:
    """Everything across the rungs (ordered small to large): per-rung orders and points, rank agreement
    for every pair of rungs and the decision accuracy from the smallest, the reversals between any two,
    the promotion gate of every other architecture against each of ``baselines``, the power-law fits
    and, when ``target`` (N*) is given, the extrapolation to it; and the caveats (rungs where an
    architecture failed every run, means on few seeds, unbracketed learning rates). Fixed ``seed``:
    the same numbers every time."""
    if len(rungs) < 2:
        raise ValueError(f"a ladder needs at least 2 rungs, got {len(rungs)}")
    if len({r.name for r in rungs}) < len(rungs):
        raise ValueError("rung names must be distinct")
    if n_draws < 1:
        raise ValueError(f"n_draws must be at least 1, got {n_draws}")
    if target is not None and not target > 0:
        raise ValueError(f"the target size must be positive, got {target}")
    draws = mean_draws(rungs, n_draws, seed, alpha)
    agreements = [_agreement(rungs[i], rungs[j], j == i + 1, draws, first=i == 0)
                  for i, j in itertools.combinations(range(len(rungs)), 2)]
    dead = _all_failed(rungs)
    fits = _fits(rungs, draws, dead)
    last = rungs[-1]
    failing = [a for a, ra in last.archs.items() if ra.n_failed]
    gone = {a: f"every run failed at the largest rung ({last.name})" for a, ra in last.archs.items() if not ra.n_ok}
    few = [(a, r.name, ra.n_ok) for r in rungs for a, ra in r.archs.items() if 0 < ra.n_ok < FEW_SEEDS]
    edge = [(a, r.name, float(ra.lr)) for r in rungs for a, ra in r.archs.items() if ra.at_edge]
    sizes = [s for r in rungs for a in r.archs if (s := r.size_of(a)) is not None]
    found = [a for a in dict.fromkeys(a for r in rungs for a in r.archs) if a not in set(baselines)]
    info = [r.info if r.info is not None else
            RungInfo(r.name, n_params=int(r.size) if r.size is not None and size_unit == "parameters" else None)
            for r in rungs]
    return LadderStats(
        rungs=[r.name for r in rungs], size_unit=size_unit, orders={r.name: r.order() for r in rungs},
        points=rung_points(rungs, alpha), agreements=agreements, reversals=_reversals(rungs, alpha), fits=fits,
        extrapolation=(extrapolate(fits, target, failing, gone, max(sizes) if sizes else None)
                       if target is not None else None), n_draws=n_draws,
        seed=seed, alpha=alpha, all_failed=dead, few_seeds=few, at_edge=edge, rung_info=info,
        promotion=promotion_gates(rungs, found, list(baselines), draws, alpha, size_unit) if baselines else [],
        lr_transfer=lr_transfer(rungs))
