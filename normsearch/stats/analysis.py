"""One call from runs to everything a ranking reports: :func:`analyse`."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from .inference import (ALPHA, MARGIN, POWER, Comparison, Interval, Ranks, VarianceFit, adjust, compare, interval,
                        posterior_ranks, variance_fit)
from .outcomes import ArchLr, LrBasin, Run, arch_basin, hurdle_order, sweep, wilson


@dataclass
class ArchStats:
    """One architecture: its hurdle rank, failures at its chosen learning rate, its loss over the
    successful runs there, and where it could rank."""

    arch: str
    rank: int  # hurdle rank, 1 = best
    lr: ArchLr  # the sweep: per-lr failures and means, the chosen lr
    best_lr: float | None
    n_runs: int  # at the chosen lr
    n_failed: int
    failure_rate: float
    failure_ci_low: float  # Wilson 95%
    failure_ci_high: float
    fails_at_best_lr: bool
    interval: Interval  # mean over successful runs and its 95% interval
    p_best: float | None  # posterior P(ranks first), hurdle tiers applied; 0 with no success, None unknown
    rank_low: int  # 95% rank interval; without a posterior, the span of the unranked places
    rank_high: int
    basin: LrBasin | None  # None with fewer than 3 learning rates that had a successful run

    @property
    def score_mean(self) -> float | None:
        return self.interval.mean


@dataclass
class StudyStats:
    archs: dict[str, ArchStats]  # in hurdle order
    fit: VarianceFit | None  # None when no architecture has two successful runs (no variance at all)
    ranks: Ranks | None
    comparisons: list[Comparison] = field(default_factory=list)  # the Holm family
    alpha: float = ALPHA
    margin: float = MARGIN

    @property
    def variance_method(self) -> str:
        """What the intervals and comparisons used, for the report to say: one fixed sentence."""
        if self.fit is None:
            return "per-architecture variances: none estimated (no architecture has two successful runs)"
        return self.fit.method

    def comparisons_of(self, arch: str) -> list[Comparison]:
        return [c for c in self.comparisons if c.arch == arch]


def analyse(runs: Iterable[Run], against: Sequence[str] = (), compared: Sequence[str] | None = None,
            margin: float = MARGIN, alpha: float = ALPHA, power: float = POWER, n_draws: int = 4000,
            seed: int = 0) -> StudyStats:
    """Everything from the runs of a study.

    ``against``: the baselines; ``compared``: the architectures compared with each of them (default
    every architecture, a baseline not against itself). All those comparisons are one Holm family.
    """
    lrs = sweep(runs)
    order = hurdle_order(lrs)
    samples = {a: dict(lrs[a].best.losses) if lrs[a].best else {} for a in order}
    fit = variance_fit({a: s for a, s in samples.items() if s})
    tiers = {a: lrs[a].failure_rate for a in order}
    ranks = posterior_ranks(samples, fit, tiers, n_draws, seed) if fit is not None else None
    archs = {}
    n_ranked = len(ranks.archs) if ranks else sum(bool(s) for s in samples.values())
    n_trained = sum(bool(s) for s in samples.values())  # architectures with a successful run
    for i, a in enumerate(order, 1):
        lr = lrs[a]
        best = lr.best
        n_runs = best.n_runs if best else sum(c.n_runs for c in lr.cells)
        n_failed = best.n_failed if best else n_runs
        ranked = ranks is not None and a in ranks.archs
        lo, hi = wilson(n_failed, n_runs)
        archs[a] = ArchStats(
            arch=a, rank=i, lr=lr, best_lr=lr.best_lr, n_runs=n_runs, n_failed=n_failed,
            failure_rate=n_failed / n_runs if n_runs else 0.0, failure_ci_low=lo, failure_ci_high=hi,
            fails_at_best_lr=lr.fails_at_best_lr, interval=interval(samples, a),
            p_best=ranks.p_best[a] if ranked else 0.0 if best is None else 1.0 if n_trained == 1 else None,
            rank_low=ranks.rank_low[a] if ranked else 1 if best is not None and ranks is None else n_ranked + 1,
            rank_high=(ranks.rank_high[a] if ranked else n_trained if best is not None and ranks is None
                       else len(order)), basin=arch_basin(lr))
    pairs: list[tuple[str, str]] = []
    for b in (b for b in against if b in lrs):
        for a in (compared if compared is not None else order):
            if a != b and a in lrs and (b, a) not in pairs:  # two baselines are compared once
                pairs.append((a, b))
    comparisons = [compare(samples, a, b, margin, alpha=alpha) for a, b in pairs]
    adjust(comparisons, alpha, power)
    if ranks is not None:
        for c in comparisons:
            if c.arch in ranks.archs and c.against in ranks.archs:
                c.p_improve = ranks.p_improve(c.arch, c.against)
    return StudyStats(archs=archs, fit=fit, ranks=ranks, comparisons=comparisons, alpha=alpha, margin=margin)
