"""One rung of a scale ladder (issue 17): each architecture's runs at the learning rate it is scored
at, what the table and the plot show of it, and the draws of its mean that the agreement and the
power-law intervals of :mod:`.ladder` rest on. Pure functions over plain data.

A :class:`Rung` holds, per architecture, a :class:`RungArch`: the :class:`LrCell` of its chosen
learning rate (the seeds' final losses of its successful runs and its failed runs;
:func:`rung_from_runs` builds one from :class:`Run` s with the same choice as :func:`analyse`), its
size and what was trained at the other learning rates.

Rules: ``docs/statistics.md`` (section "Across model sizes").
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from .inference import ALPHA, draw_scale, interval, variance_fit
from .outcomes import LrCell, Run, hurdle_order, sweep, unbracketed, wilson


@dataclass(kw_only=True)
class RungArch(LrCell):
    """One architecture at one rung: its runs at the chosen learning rate ``lr`` (None: not known, or
    no run succeeded anywhere, and then every run counts as failed). ``size``: its parameter count (or
    compute) there; None takes the rung's."""

    lr: float | None = None
    size: float | None = None
    lrs: tuple[float, ...] = ()  # every learning rate trained at this rung (a sweep with its extension)
    # every run of the rung, at every learning rate (None: only the chosen learning rate's are known)
    all_runs: int | None = None
    all_failed: int | None = None

    @property
    def n_runs_all(self) -> int:
        return self.n_runs if self.all_runs is None else self.all_runs

    @property
    def n_failed_all(self) -> int:
        return self.n_failed if self.all_failed is None else self.all_failed

    @property
    def at_edge(self) -> bool:
        """The chosen learning rate is the smallest or the largest of two or more trained: the sweep did
        not bracket the optimum, which may lie beyond the trained range (a wider sweep could find a lower
        loss)."""
        return unbracketed(self.lr, self.lrs)


@dataclass
class Rung:
    """One model size. ``size`` is the rung's N (parameters or compute) for architectures without their own."""

    name: str
    archs: dict[str, RungArch]
    size: float | None = None

    def size_of(self, arch: str) -> float | None:
        s = self.archs[arch].size
        return float(s) if s is not None else None if self.size is None else float(self.size)

    def order(self) -> list[str]:
        """The hurdle order (:func:`hurdle_order`: architectures that failed every run share the last
        place; name breaks exact ties)."""
        return hurdle_order(self.archs)


def rung_from_runs(name: str, runs: Iterable[Run], size: float | Mapping[str, float] | None = None) -> Rung:
    """A rung from its runs: each architecture at its chosen learning rate (:func:`sweep`, the rule of
    :func:`analyse`); one with no successful run anywhere counts all its runs as failed. The failures
    at every learning rate and the learning rates trained are kept beside the chosen one's."""
    archs = {}
    for arch, lr in sweep(runs).items():
        chosen = [lr.best] if lr.best is not None else lr.cells
        archs[arch] = RungArch(
            lr=lr.best_lr, losses=dict(lr.best.losses) if lr.best is not None else {},
            n_diverged=sum(c.n_diverged for c in chosen), n_stalled=sum(c.n_stalled for c in chosen),
            size=(float(size[arch]) if arch in size else None) if isinstance(size, Mapping) else None,
            lrs=tuple(c.lr for c in lr.cells), all_runs=lr.n_runs, all_failed=lr.n_failed)
    return Rung(name, archs, None if isinstance(size, Mapping) else size)


@dataclass
class RungPoint:
    """An architecture at one rung, as the table and the plot show it."""

    rung: str
    size: float | None
    rank: int  # hurdle place, 1 = best; architectures that failed every run share the last place
    n_runs: int  # at the chosen learning rate
    n_failed: int  # at the chosen learning rate: what the hurdle ranks by
    failure_rate: float
    failure_ci: tuple[float, float]  # Wilson 95%
    mean: float | None
    ci_low: float | None  # 95% interval of the mean (its own SD, as the ranking's)
    ci_high: float | None
    n_ok: int = 0  # successful seeds behind the mean
    n_runs_all: int = 0  # every run of the rung, at every learning rate
    n_failed_all: int = 0
    failure_rate_all: float = 0.0
    failure_ci_all: tuple[float, float] = (0.0, 1.0)
    lr: float | None = None  # the chosen learning rate
    lrs: tuple[float, ...] = ()  # the learning rates trained
    at_edge: bool = False  # the chosen one is an end of two or more trained: an unbracketed optimum


def rung_points(rungs: Sequence[Rung], alpha: float = ALPHA) -> dict[str, list[RungPoint]]:
    """Per architecture, its point at each rung it was run at (small to large)."""
    out: dict[str, list[RungPoint]] = {}
    for r in rungs:
        samples = {a: ra.losses for a, ra in r.archs.items() if ra.losses}
        order = r.order()
        n_tried = sum(1 for a in order if r.archs[a].n_ok)
        for place, a in enumerate(order, 1):
            ra = r.archs[a]
            iv = interval(samples, a)
            out.setdefault(a, []).append(RungPoint(
                r.name, r.size_of(a), place if ra.n_ok else n_tried + 1, ra.n_runs, ra.n_failed,
                ra.n_failed / ra.n_runs if ra.n_runs else 0.0, ra.failure_ci, ra.mean,
                iv.ci_low, iv.ci_high, ra.n_ok, ra.n_runs_all, ra.n_failed_all,
                ra.n_failed_all / ra.n_runs_all if ra.n_runs_all else 0.0, wilson(ra.n_failed_all, ra.n_runs_all),
                ra.lr, tuple(ra.lrs), ra.at_edge))
    return out


def mean_draws(rungs: Sequence[Rung], n_draws: int, seed: int,
               alpha: float = ALPHA) -> dict[str, dict[str, np.ndarray]]:
    """Per rung and architecture, ``n_draws`` draws of its mean loss from the uncertainty of its own
    per-rung interval (:func:`interval`, the one the tables print): mean + sd / sqrt(n) x t, with the
    architecture's own SD and t on n - 1 df, independently of the others. An architecture with one
    successful run borrows the rung's pooled within-architecture SD and its df (:func:`draw_scale`, as
    the ranking's draws do) when the rung has one, and is held at its mean when it has none. inf for an
    architecture with no successful run (it ranks last in every draw).

    Not a resampling of the seeds: with two seeds a resampled mean takes only three values, and the
    spread of tau and rho would be far narrower than the per-rung intervals allow."""
    rng = np.random.default_rng(seed)
    out: dict[str, dict[str, np.ndarray]] = {}
    for r in rungs:
        samples = {a: ra.losses for a, ra in r.archs.items() if ra.losses}
        fit = variance_fit(samples)
        out[r.name] = {}
        for a in sorted(r.archs):
            if a not in samples:
                out[r.name][a] = np.full(n_draws, math.inf)
                continue
            v = np.fromiter(samples[a].values(), float)
            scale = draw_scale(fit, a) if fit is not None else None
            if scale is None:
                out[r.name][a] = np.full(n_draws, float(v.mean()))
                continue
            out[r.name][a] = float(v.mean()) + scale[0] / math.sqrt(v.size) * rng.standard_t(scale[1], n_draws)
    return out
