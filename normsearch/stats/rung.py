"""One rung of a scale ladder (issue 17): each architecture's runs at the learning rate it is scored
at, what the table and the plot show of it, and the draws of its mean that the agreement and the
power-law intervals of :mod:`.ladder` rest on. Pure functions over plain data.

A :class:`Rung` holds, per architecture, a :class:`RungArch`: the :class:`LrCell` of its chosen
learning rate (the seeds' final losses of its successful runs and its failed runs;
:func:`rung_from_runs` builds one from :class:`Run` s with the same choice as :func:`analyse`), its
size and what was trained at the other learning rates (every cell, for the failures by learning
rate and the promotion gate's window around the chosen one); and, optionally, a :class:`RungInfo`:
what the rung was (parameters, tokens per parameter, the precision its runs recorded).
:func:`rung_diff` is the ladder's one comparison of two architectures at a rung (the failure hurdle,
then mean loss), which the reversals and the promotion gate both use.

Rules: ``docs/statistics.md`` (section "Across model sizes").
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from .inference import ALPHA, compare, draw_scale, interval, variance_fit
from .outcomes import LrCell, Run, hurdle_order, sweep, unbracketed, wilson

MAX_FACTOR = 4.0  # nothing is carried beyond this many times the largest size that backs it: the power laws'
# extrapolation (docs/statistics.md) and the promotion gate's projection of the gap
LR_WINDOW = 2.0  # the promotion gate's neighbourhood of a chosen learning rate: [lr / 2, lr x 2], and at
# least the nearest trained learning rate on each side (RungArch.window)


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
    # every cell trained at this rung (learning rate x variant), as :func:`sweep` grouped them; empty
    # when only the chosen learning rate's runs are known
    cells: tuple[LrCell, ...] = ()

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

    def window(self, factor: float = LR_WINDOW) -> tuple[int, int, tuple[float, ...]]:
        """(failed, runs, learning rates) over the cells of the chosen cell's variant whose learning
        rate lies within ``factor`` of the chosen one ([lr / factor, lr x factor]): how stable the
        architecture is near its optimum. Without a chosen learning rate (nothing succeeded) every
        cell counts; without cells, the chosen learning rate's own runs."""
        if not self.cells:
            return self.n_failed, self.n_runs, (() if self.lr is None else (float(self.lr),))
        if self.lr is None:
            near = list(self.cells)
        else:
            lo, hi = self.lr / factor * (1 - 1e-9), self.lr * factor * (1 + 1e-9)
            same = sorted((c for c in self.cells if c.variant == self.variant), key=lambda c: c.lr)
            near = [c for c in same if lo <= c.lr <= hi]
            # a sweep coarser than the window would leave the chosen learning rate alone in it: the nearest
            # trained neighbour on each side is always in (how stable the architecture is next to its optimum)
            below, above = [c for c in same if c.lr < lo], [c for c in same if c.lr > hi]
            if below and not any(c.lr < self.lr for c in near):
                near.insert(0, below[-1])
            if above and not any(c.lr > self.lr for c in near):
                near.append(above[0])
        return (sum(c.n_failed for c in near), sum(c.n_runs for c in near),
                tuple(sorted({float(c.lr) for c in near})))


@dataclass
class RungInfo:
    """What a rung was, for the record (``ladder.json``'s ``rung_info``): its parameter count (the
    rung's size: its first baseline's), training tokens per run and per parameter, steps, and the
    numeric precision its runs recorded (``precisions``: every one, ``mixed`` when they differ;
    ``precision`` None when no run recorded one)."""

    name: str
    n_params: int | None = None
    tokens: int | None = None
    steps: int | None = None
    tokens_per_param: float | None = None
    precision: str | None = None  # the one precision, or "mixed: a, b" when the runs differ
    precisions: list[str] = field(default_factory=list)
    mixed_precision: bool = False

    @classmethod
    def of(cls, name: str, n_params=None, tokens=None, steps=None, precisions: Iterable[str] = ()) -> RungInfo:
        seen = sorted({str(p) for p in precisions if p})
        per = float(tokens) / float(n_params) if tokens and n_params else None
        text = seen[0] if len(seen) == 1 else f"mixed: {', '.join(seen)}" if seen else None
        return cls(name, None if n_params is None else int(n_params), None if tokens is None else int(tokens),
                   None if steps is None else int(steps), per, text, seen, len(seen) > 1)


@dataclass
class Rung:
    """One model size. ``size`` is the rung's N (parameters or compute) for architectures without their own."""

    name: str
    archs: dict[str, RungArch]
    size: float | None = None
    info: RungInfo | None = None

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
            lr=lr.best_lr, variant=lr.best_variant, losses=dict(lr.best.losses) if lr.best is not None else {},
            n_diverged=sum(c.n_diverged for c in chosen), n_stalled=sum(c.n_stalled for c in chosen),
            size=(float(size[arch]) if arch in size else None) if isinstance(size, Mapping) else None,
            lrs=tuple(c.lr for c in lr.cells), all_runs=lr.n_runs, all_failed=lr.n_failed, cells=tuple(lr.cells))
    return Rung(name, archs, None if isinstance(size, Mapping) else size)


@dataclass
class RungDiff:
    """a - b at one rung: by the failure hurdle (Fisher's exact test on failed vs successful runs) when
    their failure rates differ, else by mean loss (the ranking's test: Welch, each architecture's own SD)."""

    rung: str
    by: str  # "failures" | "loss"
    method: str  # "fisher" | "welch" | "none"
    diff: float | None  # failure-rate difference or mean-loss difference, a - b
    ci_low: float | None  # for a loss difference, 95%, unadjusted
    ci_high: float | None
    p_value: float | None
    p_holm: float | None = None  # Holm over the family it is judged in (the reversals', or the gate's)
    significant: bool = False


def rung_diff(rung: Rung, a: str, b: str, samples: Mapping[str, Mapping[int, float]] | None = None) -> RungDiff:
    """a - b at ``rung`` by the hurdle: Fisher's exact test on the failure counts at the chosen learning
    rates when the failure rates differ, else the ranking's Welch test on the mean losses. ``samples``:
    the rung's successful losses per architecture (built from the rung when None)."""
    from scipy.stats import fisher_exact

    x, y = rung.archs[a], rung.archs[b]
    if x.failure_rate != y.failure_rate:
        p = float(fisher_exact([[x.n_failed, x.n_ok], [y.n_failed, y.n_ok]])[1])
        return RungDiff(rung.name, "failures", "fisher", x.failure_rate - y.failure_rate, None, None, p)
    if samples is None:
        samples = {k: ra.losses for k, ra in rung.archs.items() if ra.losses}
    c = compare(samples, a, b)
    return RungDiff(rung.name, "loss", c.method, c.diff, c.ci_low, c.ci_high, c.p_value)


@dataclass
class LrFailures:
    """An architecture's runs at one learning rate of a rung (every variant of it together)."""

    lr: float
    n_runs: int
    n_failed: int
    failure_rate: float
    failure_ci: tuple[float, float]  # Wilson 95%
    chosen: bool = False


def failures_by_lr(ra: RungArch) -> list[LrFailures]:
    """The failures of ``ra`` at each learning rate trained (empty without cells)."""
    runs: dict[float, list[int]] = {}
    for c in ra.cells:
        n = runs.setdefault(float(c.lr), [0, 0])
        n[0], n[1] = n[0] + c.n_runs, n[1] + c.n_failed
    return [LrFailures(lr, n, k, k / n if n else 0.0, wilson(k, n), ra.lr is not None and lr == float(ra.lr))
            for lr, (n, k) in sorted(runs.items())]


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
    by_lr: list[LrFailures] = field(default_factory=list)  # the failures at each learning rate trained


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
                ra.lr, tuple(ra.lrs), ra.at_edge, failures_by_lr(ra)))
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
