"""The tuned grid of a study: learning rate x init (x warmup), one *cell* per point.

Every architecture, baseline or found, is trained over the same grid and scored at its own chosen
cell (the rule: :func:`normsearch.stats.outcomes.sweep`). The settings besides the learning rate form
the cell's *variant* (``{"init": "small", "warmup": 60}``, from ``train.grid``); the learning rate
is a sweep that the study refines around the chosen cell (:func:`next_points`) until the optimum is
bracketed on both sides by successful runs at a step of at most ``train.lr_resolution`` decades.

Torch-free: the search, the stages and the report share it. The rules are in docs/statistics.md.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

GRID_KEYS = ("init", "warmup")  # the settings a grid may tune besides the learning rate, in tag order
PAPER = "paper"  # init: the baseline's own, from its authors' code or paper (normsearch.baselines)


class RunSpec(NamedTuple):
    """One run of an architecture: a seed at one cell (learning rate and variant tag)."""

    seed: int
    lr: float
    tag: str = ""


def variant_tag(variant: Mapping) -> str:
    """The variant as a name in run keys and file names: ``init-small_warmup-60``; '' for none."""
    return "_".join(f"{k}-{variant[k]}" for k in GRID_KEYS if k in variant)


def parse_tag(tag: str) -> dict:
    """The inverse of :func:`variant_tag`."""
    out: dict = {}
    for part in filter(None, tag.split("_")):
        key, _, value = part.partition("-")
        out[key] = int(value) if key == "warmup" else value
    return out


def describe(variant: Mapping) -> str:
    """``init small, warmup 60``; '' for no variant."""
    return ", ".join(f"{k} {variant[k]}" for k in GRID_KEYS if k in variant)


def grid_text(grid: Mapping) -> str:
    """A tuned grid in words: ``init gpt, small, paper; warmup 20, 60``."""
    return "; ".join(f"{k} {', '.join(map(str, v))}" for k, v in grid.items())


def init_kinds() -> tuple[str, ...]:
    """The model's init rules (``model.init``), read from its config so that a new rule is a grid choice."""
    import typing

    from .config import ModelConfig

    hints = typing.get_type_hints(ModelConfig)
    return tuple(typing.get_args(hints["init"]))


def grid_problem(grid, steps: int) -> str | None:
    """Why ``train.grid`` is not a grid, or None."""
    from .errors import unknown

    if not isinstance(grid, Mapping):
        return f"train.grid must be a mapping such as {{init: [gpt, small, paper]}}, not {grid!r}"
    for key, values in grid.items():
        if key not in GRID_KEYS:
            return f"train.grid: {unknown('setting', key, GRID_KEYS)} (the learning rate is train.lr)"
        if not isinstance(values, list) or not values or len(set(map(str, values))) != len(values):
            return f"train.grid.{key} must be a list of distinct values, not {values!r}"
        if key == "init":
            kinds = (*init_kinds(), PAPER)
            for v in values:
                if v not in kinds:
                    return f"train.grid.init: {unknown('init', v, kinds)}"
        if key == "warmup":
            for v in values:
                if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= steps:
                    return f"train.grid.warmup: {v!r} is not a number of steps in [0, train.steps = {steps}]"
    return None


def variants(t, baseline: str | None = None) -> list[dict]:
    """The variants one architecture is trained in, in grid order. ``init: paper`` becomes the
    baseline's own init; it is left out for a found placement (which has no paper) and where it equals
    another init of the grid (the same runs, bit for bit). No grid: one empty variant."""
    grid = dict(getattr(t, "grid", None) or {})
    if "init" in grid:
        inits = []
        for v in grid["init"]:
            if v == PAPER:
                v = paper_init(baseline)
            if v is not None and v not in inits:
                inits.append(v)
        grid["init"] = inits
    keys = [k for k in GRID_KEYS if k in grid]
    return [dict(zip(keys, combo)) for combo in itertools.product(*(grid[k] for k in keys))]


def paper_init(baseline: str | None) -> str | None:
    """The baseline's paper init (None for a found placement, or a baseline that names none)."""
    from .baselines import paper_init as of_baseline

    return of_baseline(baseline) if baseline else None


def plan(t, baseline: str | None = None) -> list[RunSpec]:
    """Every run of one architecture before refinement: variant, then learning rate, then seed."""
    return [RunSpec(seed, lr, variant_tag(v)) for v in variants(t, baseline) for lr in t.lr for seed in t.seeds]


def apply(model, t, tag: str):
    """(model config, training settings) of a run in variant ``tag``."""
    v = parse_tag(tag)
    if "init" in v:
        model = replace(model, init=v["init"])
    if "warmup" in v:
        t = replace(t, warmup=int(v["warmup"]))
    return model, t


def round_lr(lr: float) -> float:
    return float(f"{lr:.4g}")


SLACK = 0.005  # decades: learning rates are rounded to 4 significant digits, so gaps are not exact


# -- refining the learning rate around the chosen cell ----------------------------------------------


@dataclass(frozen=True)
class Bracket:
    """Where the chosen cell stands in its variant's learning-rate sweep."""

    bracketed: bool  # a trained neighbour with a successful run on each side, each within the resolution
    below: float | None  # the neighbouring learning rates (None at an end)
    above: float | None
    step: float | None  # the larger log10 gap to a neighbour, in decades


def _lrs(cells, tag: str) -> list[float]:
    return sorted(c.lr for c in cells if c.variant == tag)


def bracket(a, resolution: float | None = None, cell=None) -> Bracket | None:
    """The chosen cell's bracket (``a``: an :class:`normsearch.stats.outcomes.ArchLr`); None when no
    cell was chosen. ``cell``: another of its cells (the loss-optimal one) instead."""
    c = cell if cell is not None else a.best
    if c is None:
        return None
    lrs = _lrs(a.cells, c.variant)
    i = lrs.index(c.lr)
    below = lrs[i - 1] if i > 0 else None
    above = lrs[i + 1] if i + 1 < len(lrs) else None
    gaps = [abs(math.log10(c.lr / x)) for x in (below, above) if x is not None]
    step = max(gaps) if gaps else None

    def ok(x):
        n = next(d for d in a.cells if d.variant == c.variant and d.lr == x)
        return n.n_ok > 0 and (resolution is None or abs(math.log10(c.lr / x)) <= resolution + SLACK)

    return Bracket(bracketed=below is not None and above is not None and ok(below) and ok(above),
                   below=below, above=above, step=step)


def next_points(a, lr0: Sequence[float], resolution: float | None, extend: int) -> list[tuple[float, str]]:
    """The cells to train next so that the chosen cell (and the loss-optimal one, where it differs) is
    bracketed: one step of the starting sweep's ratio beyond an end that holds it (at most ``extend``
    such points per variant), and, with a ``resolution``, the geometric midpoint towards each neighbour
    farther than that. Empty when both are bracketed, or nothing more may be added."""
    lr0 = sorted(lr0)
    ratio = (lr0[-1] / lr0[0]) ** (1 / (len(lr0) - 1)) if len(lr0) > 1 else None
    out: list[tuple[float, str]] = []
    targets = [a.best, a.loss_optimal]
    for c in [c for i, c in enumerate(targets) if c is not None and c not in targets[:i]]:
        lrs = _lrs(a.cells, c.variant)
        i = lrs.index(c.lr)
        outside = sum(1 for x in lrs if x < lr0[0] * (1 - 1e-9) or x > lr0[-1] * (1 + 1e-9))
        for j, sign in ((i - 1, -1), (i + 1, 1)):
            if 0 <= j < len(lrs):
                gap = abs(math.log10(lrs[j] / c.lr))
                if resolution is not None and gap > resolution + SLACK:
                    out.append((round_lr(math.sqrt(lrs[j] * c.lr)), c.variant))
            elif ratio is not None and outside < extend:
                out.append((round_lr(c.lr * ratio ** sign), c.variant))
    have = {(c.lr, c.variant) for c in a.cells}
    seen: list[tuple[float, str]] = []
    for p in out:
        if p not in have and p not in seen:
            seen.append(p)
    return seen


def vertex(a, cell=None) -> float | None:
    """The learning rate at the vertex of a quadratic in log10(lr) fitted, weighted by successful runs,
    to the chosen cell's successful mean and up to two neighbours' on each side in its variant; None
    when fewer than 3 points, the fit is not convex, or its vertex lies outside those points."""
    import numpy as np

    c = cell if cell is not None else a.best
    if c is None:
        return None
    pts = [d for d in a.cells if d.variant == c.variant and d.n_ok]
    pts.sort(key=lambda d: d.lr)
    i = pts.index(c) if c in pts else None
    if i is None:
        return None
    near = pts[max(0, i - 2): i + 3]
    if len(near) < 3:
        return None
    x = np.log10([d.lr for d in near])
    y = np.array([d.mean for d in near])
    coef = np.polyfit(x, y, 2, w=np.sqrt([d.n_ok for d in near]))
    if coef[0] <= 0:
        return None
    xv = -coef[1] / (2 * coef[0])
    if not x.min() <= xv <= x.max():
        return None
    return round_lr(10 ** xv)

