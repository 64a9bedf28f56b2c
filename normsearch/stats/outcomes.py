"""Runs as outcomes: failed (diverged or stalled) or trained, failure rates with Wilson intervals,
the learning rate each architecture is scored at, the hurdle order, and the learning-rate basin.

Pure Python and numpy; nothing here imports scipy or statsmodels. The rules and thresholds are
listed in ``docs/statistics.md``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from statistics import NormalDist

import numpy as np

# A run has stalled when its final loss is not at least this far below the unigram loss of the
# training bytes (or, without one, below its own loss at initialisation): max(absolute, relative x
# reference) bits/byte. At a unigram loss of 4.31 bits/byte that is 0.086: a run ending above 4.22.
STALL_ABS = 0.05
STALL_REL = 0.02

OUTCOMES = ("ok", "diverged", "stalled")

# The learning-rate basin: the log10(lr) range where the fitted curve is within
# max(BASIN_ABS, BASIN_REL x best) bits/byte of the architecture's own fitted best.
BASIN_ABS = 0.05
BASIN_REL = 0.02


@dataclass(frozen=True)
class Run:
    """One training run, as the statistics see it.

    ``loss`` is the final validation loss in bits/byte (None when the run produced none);
    ``init_loss`` the validation loss at initialisation; ``unigram_loss`` the unigram entropy of the
    training bytes in bits/byte (:func:`unigram_bits_per_byte`). Either may be None when unknown.
    """

    arch: str
    seed: int
    lr: float
    loss: float | None
    diverged: bool = False
    init_loss: float | None = None
    unigram_loss: float | None = None
    variant: str = ""  # the cell's variant besides the learning rate (normsearch.grid.variant_tag)

    @property
    def outcome(self) -> str:
        return classify_run(self.loss, self.diverged, self.init_loss, self.unigram_loss)

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"


def stall_margin(reference: float) -> float:
    """How far below ``reference`` (a unigram or init loss) a trained run must end, in bits/byte."""
    return max(STALL_ABS, STALL_REL * abs(reference))


def classify_run(loss: float | None, diverged: bool = False, init_loss: float | None = None,
                 unigram_loss: float | None = None) -> str:
    """``"diverged"``, ``"stalled"`` or ``"ok"``.

    - diverged: flagged by the trainer, or no finite final loss (None, NaN, inf);
    - stalled: the final loss is within :func:`stall_margin` of ``unigram_loss`` (or above it; the
      ranking passes what a model that learned only the training bytes' frequencies scores on the
      validation windows), or, whether or not the unigram loss is known, within that margin of the
      loss at initialisation (the run never improved);
    - ok: otherwise. Only ok runs have a loss that enters a mean, an interval or a test.
    """
    if diverged or loss is None or not math.isfinite(loss):
        return "diverged"
    for reference in (unigram_loss, init_loss):
        if reference is not None and math.isfinite(reference) and loss > reference - stall_margin(reference):
            return "stalled"
    return "ok"


def unigram_bits_per_byte(symbols: np.ndarray | bytes | Sequence[int], n_bytes: int | None = None) -> float:
    """The entropy of the symbols' empirical unigram distribution, in bits per byte.

    For a byte array this is the cross-entropy of the best context-free byte predictor, the loss a
    model has when it learned only byte frequencies. For token ids, pass ``n_bytes`` (the bytes
    those tokens encode): the bits per token are scaled by tokens per byte.
    """
    a = np.frombuffer(symbols, dtype=np.uint8) if isinstance(symbols, (bytes, bytearray)) else np.asarray(symbols)
    a = a.ravel()
    if a.size == 0:
        raise ValueError("no symbols")
    _, counts = np.unique(a, return_counts=True)
    p = counts / a.size
    bits_per_symbol = float(-(p * np.log2(p)).sum())
    return bits_per_symbol * a.size / (n_bytes if n_bytes is not None else a.size)


def wilson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion k/n (Wilson 1927); (0, 1) when n == 0."""
    if not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n, got k={k}, n={n}")
    if n == 0:
        return 0.0, 1.0
    z = NormalDist().inv_cdf(0.5 + level / 2)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    # at k == 0 and k == n the bound is exactly 0 or 1 in exact arithmetic; rounding can leave it 1e-16 inside,
    # which puts the observed rate outside its own interval (a negative error bar)
    lo = 0.0 if k == 0 else max(0.0, centre - half)
    hi = 1.0 if k == n else min(1.0, centre + half)
    return lo, hi


@dataclass(kw_only=True)
class LrCell:
    """The runs of one architecture at one cell (a learning rate in a variant of the tuned grid): seed
    -> loss of the successful ones, and the failed ones."""

    lr: float
    variant: str = ""
    n_diverged: int = 0
    n_stalled: int = 0
    losses: dict[int, float] = field(default_factory=dict)  # seed -> loss, successful runs only

    @property
    def n_ok(self) -> int:
        return len(self.losses)

    @property
    def n_failed(self) -> int:
        return self.n_diverged + self.n_stalled

    @property
    def n_runs(self) -> int:
        return self.n_ok + self.n_failed

    @property
    def failure_rate(self) -> float:
        """1 when nothing succeeded (as the hurdle order counts it)."""
        return self.n_failed / self.n_runs if self.n_ok else 1.0

    @property
    def failure_ci(self) -> tuple[float, float]:
        return wilson(self.n_failed, self.n_runs)

    @property
    def mean(self) -> float | None:
        """Mean loss over the successful runs; None when none succeeded."""
        return sum(self.losses.values()) / self.n_ok if self.losses else None

    @property
    def key(self) -> tuple[float, float]:
        """The hurdle key, smaller first: the failure rate, then the mean loss (inf when nothing
        succeeded)."""
        return (self.failure_rate, self.mean if self.losses else math.inf)


@dataclass
class ArchLr:
    """One architecture's sweep over the tuned grid (learning rate x variant) and the cell it is scored
    at."""

    arch: str
    cells: list[LrCell]  # by variant, then increasing lr
    best_lr: float | None  # None when no run in any cell succeeded
    best_variant: str = ""

    @property
    def best(self) -> LrCell | None:
        """The chosen cell (:func:`sweep`'s rule)."""
        return next((c for c in self.cells if c.lr == self.best_lr and c.variant == self.best_variant), None)

    @property
    def loss_optimal(self) -> LrCell | None:
        """The cell with the lowest mean loss over its successful runs, whatever failed there."""
        usable = [c for c in self.cells if c.n_ok]
        return min(usable, key=lambda c: (c.mean, c.lr, c.variant)) if usable else None

    @property
    def failure_free(self) -> LrCell | None:
        """The lowest mean among the cells where no run failed; None when every cell had a failure."""
        clean = [c for c in self.cells if c.n_ok and not c.n_failed]
        return min(clean, key=lambda c: (c.mean, c.lr, c.variant)) if clean else None

    def variant_cells(self, variant: str | None = None) -> list[LrCell]:
        """The cells of one variant (default: the chosen cell's), by increasing lr."""
        v = self.best_variant if variant is None else variant
        return [c for c in self.cells if c.variant == v]

    @property
    def fails_at_best_lr(self) -> bool:
        """Flag: some run failed at the chosen learning rate (or no run succeeded anywhere)."""
        return self.best is None or self.best.n_failed > 0

    @property
    def failure_rate(self) -> float:
        """The failure rate at the chosen learning rate (1 when nothing succeeded): the hurdle."""
        return 1.0 if self.best is None else self.best.failure_rate

    @property
    def key(self) -> tuple[float, float]:
        """The hurdle key at the chosen learning rate (see :func:`hurdle_key`)."""
        return (1.0, math.inf) if self.best is None else self.best.key

    @property
    def n_runs(self) -> int:
        return sum(c.n_runs for c in self.cells)

    @property
    def n_failed(self) -> int:
        return sum(c.n_failed for c in self.cells)


def sweep(runs: Iterable[Run]) -> dict[str, ArchLr]:
    """Group runs by architecture and cell (variant, learning rate) and choose each architecture's cell.

    The rule, the one the sampler's objective, the sweep's refinement, the ranking, the confirmation
    and the ladder all use: among the cells with at least one successful run, the one with the lowest
    failure rate, and among those the lowest mean loss over successful runs. When some cell had no
    failure this is "the lowest mean among failure-free cells"; when every cell had failures it is the
    least-failing one. Ties go to the smaller learning rate, then the variant first in name order. No
    failed run enters a mean: a failure counts in the failure rate alone.
    """
    by_arch: dict[str, dict[tuple[str, float], list[Run]]] = {}
    for r in runs:
        by_arch.setdefault(r.arch, {}).setdefault((r.variant, float(r.lr)), []).append(r)
    out = {}
    for arch, by_cell in by_arch.items():
        cells = []
        for variant, lr in sorted(by_cell):
            rs = by_cell[(variant, lr)]
            outcomes = [r.outcome for r in rs]
            cells.append(LrCell(lr=lr, variant=variant, n_diverged=outcomes.count("diverged"),
                                n_stalled=outcomes.count("stalled"),
                                losses={r.seed: float(r.loss) for r, o in zip(rs, outcomes) if o == "ok"}))
        usable = [c for c in cells if c.n_ok]
        best = min(usable, key=lambda c: (c.failure_rate, c.mean, c.lr, c.variant)) if usable else None
        out[arch] = ArchLr(arch=arch, cells=cells, best_lr=best.lr if best else None,
                           best_variant=best.variant if best else "")
    return out


def unbracketed(chosen: float | None, lrs: Iterable[float]) -> bool:
    """Whether the chosen learning rate is the lowest or the highest of two or more trained: the
    sweep did not bracket the optimum, which may lie beyond the trained range."""
    lrs = list(lrs)
    return chosen is not None and len(lrs) >= 2 and chosen in (min(lrs), max(lrs))


def hurdle_key(a: ArchLr | LrCell) -> tuple[float, float]:
    """The hurdle ranking's key, smaller first: the failure rate at the chosen learning rate, then
    the mean loss of the successful runs there (architectures with no success come last)."""
    return a.key


def hurdle_order(archs: Mapping[str, ArchLr | LrCell]) -> list[str]:
    """Architectures in hurdle order: failure rate at the chosen learning rate first (so every
    architecture that never failed there ranks ahead of any that did), then mean loss; name breaks
    exact ties. ``archs``: sweeps, or each architecture's runs at its chosen learning rate (a ladder's
    rung)."""
    return sorted(archs, key=lambda name: (*archs[name].key, name))


@dataclass
class LrBasin:
    """Where the fitted loss-vs-log10(lr) curve stays within ``tolerance`` of its own best."""

    width: float  # in decades of learning rate (log10 units), measured inside the sweep
    low_lr: float  # the basin's edges (learning rates)
    high_lr: float
    best_lr: float  # where the fitted curve is lowest inside the sweep
    best_loss: float  # the fitted curve's lowest value inside the sweep
    tolerance: float  # bits/byte
    at_edge: bool  # the basin reaches an end of the sweep: the true width may be larger
    n_points: int  # learning rates with at least one successful run
    coefficients: tuple[float, ...] = ()  # the fit, highest power first, in x = log10(lr)


def lr_basin(lr_means: Mapping[float, float], weights: Mapping[float, float] | None = None,
             tolerance: float | None = None) -> LrBasin | None:
    """Learning-rate basin from per-learning-rate mean losses over successful runs.

    Fits a quadratic in x = log10(lr) (least squares, weighted by ``weights`` such as the number of
    successful runs) and measures the part of the swept range [min x, max x] where the fit is within
    ``tolerance`` (default max(0.05, 0.02 x best) bits/byte) of the fit's minimum over that range. The
    fit is not extrapolated. None with fewer than 3 learning rates.
    """
    items = sorted((float(lr), float(v)) for lr, v in lr_means.items() if v is not None and math.isfinite(v))
    if len(items) < 3:
        return None
    x = np.log10([lr for lr, _ in items])
    y = np.array([v for _, v in items])
    w = None if weights is None else np.sqrt([float(weights[lr]) for lr, _ in items])
    coef = np.polyfit(x, y, 2, w=w)
    poly = np.poly1d(coef)
    lo, hi = float(x.min()), float(x.max())
    candidates = [lo, hi] + [float(r.real) for r in poly.deriv().roots if abs(r.imag) < 1e-12 and lo < r.real < hi]
    x_best = min(candidates, key=poly)
    best = float(poly(x_best))
    tol = tolerance if tolerance is not None else max(BASIN_ABS, BASIN_REL * abs(best))
    # the set {x in [lo, hi]: poly(x) <= best + tol}: split [lo, hi] at the roots and keep the pieces
    # whose midpoint is inside; with a quadratic this is one interval or two touching the ends
    cuts = sorted({lo, hi, *(float(r.real) for r in (poly - (best + tol)).roots
                            if abs(r.imag) < 1e-12 and lo < r.real < hi)})
    pieces = [(a, b) for a, b in zip(cuts, cuts[1:]) if poly((a + b) / 2) <= best + tol]
    pieces = [p for p in pieces if p[0] <= x_best <= p[1]] or pieces  # the piece holding the best
    a, b = pieces[0]
    return LrBasin(width=b - a, low_lr=10 ** a, high_lr=10 ** b, best_lr=10 ** x_best, best_loss=best,
                   tolerance=tol, at_edge=a <= lo or b >= hi, n_points=len(items),
                   coefficients=tuple(float(c) for c in coef))


def arch_basin(a: ArchLr, tolerance: float | None = None) -> LrBasin | None:
    """:func:`lr_basin` over an architecture's sweep in the chosen cell's variant, weighted by
    successful runs per learning rate."""
    cells = a.variant_cells()
    means = {c.lr: c.mean for c in cells if c.n_ok}
    return lr_basin(means, {c.lr: c.n_ok for c in cells if c.n_ok}, tolerance)
