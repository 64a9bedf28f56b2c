"""How runs become an architecture's score for the sampler and the sweep. Torch-free.

One rule chooses an architecture's cell everywhere (:func:`normsearch.stats.outcomes.sweep`): among
the cells (learning rate x variant of the tuned grid) with a successful run, the lowest failure rate,
then the lowest mean loss over the successful runs. A failed run (diverged or stalled) never enters a
mean: no loss at initialisation or other stand-in is plugged in anywhere.

- ``mean`` objective: the chosen cell's mean loss over its successful runs;
- ``robust`` objective: the mean over the learning rates of the chosen cell's variant of each one's
  successful mean (it penalises a narrow learning-rate basin); learning rates where nothing succeeded
  are left out of it and show in the failure rate;
- learning-rate sensitivity: ``robust - (the lowest of those means)``;
- an architecture with no successful run has no loss: its objective is +inf, the worst, which no
  mean or interval ever takes in (the ranking puts it last by its failure rate).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from .records import RunResult


@dataclass
class Score:
    value: float  # by the study's objective; +inf when no run succeeded
    score_mean: float | None  # the chosen cell's mean over successful runs
    robust: float | None
    best_lr: float | None
    sensitivity: float | None
    variant: dict = field(default_factory=dict)  # the chosen cell's variant ({} without a grid)
    per_lr: dict[float, float] = field(default_factory=dict)  # lr -> successful mean, the chosen variant
    seeds_at_best: dict[int, float] = field(default_factory=dict)  # seed -> loss, successful runs at the cell
    failure_rate: float = 0.0  # at the chosen cell (1 when nothing succeeded)
    n_runs: int = 0
    n_diverged: int = 0
    tokens_per_s: float = 0.0
    n_params: int = 0

    def to_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["per_lr"] = {repr(k): v for k, v in self.per_lr.items()}
        d["seeds_at_best"] = {str(k): v for k, v in self.seeds_at_best.items()}
        if not math.isfinite(d["value"]):
            d["value"] = None
        return d


def stat_run(r: RunResult, arch: str = "", unigram: float | None = None):
    """A run as the statistics see it (:class:`normsearch.stats.outcomes.Run`)."""
    from .grid import variant_tag
    from .stats.outcomes import Run

    return Run(arch=arch, seed=int(r.seed), lr=float(r.lr), loss=r.value, diverged=bool(r.diverged),
               init_loss=r.init_loss if r.curve else None,
               unigram_loss=unigram if unigram is not None else r.unigram_bpb, variant=variant_tag(r.variant or {}))


def arch_sweep(runs: list[RunResult], unigram: float | None = None):
    """The one architecture's :class:`~normsearch.stats.outcomes.ArchLr` from its runs."""
    from .stats.outcomes import sweep

    return sweep([stat_run(r, "a", unigram) for r in runs])["a"]


def score_runs(runs: list[RunResult], objective: str = "mean") -> Score:
    """An architecture's score from its runs, at the cell the one rule chooses."""
    from .grid import parse_tag

    if not runs:
        raise ValueError("no runs to score")
    a = arch_sweep(runs)
    best = a.best
    per_lr = {c.lr: c.mean for c in a.variant_cells() if c.n_ok}
    finished = [r for r in runs if r.finished]
    common = dict(n_runs=len(runs), n_diverged=sum(bool(r.diverged) for r in runs),
                  tokens_per_s=sum(r.tokens_per_s for r in finished) / len(finished) if finished else 0.0,
                  n_params=int(runs[0].n_params or 0))
    if best is None:
        return Score(value=math.inf, score_mean=None, robust=None, best_lr=None, sensitivity=None,
                     failure_rate=1.0, **common)
    robust = sum(per_lr.values()) / len(per_lr)
    return Score(
        value=best.mean if objective == "mean" else robust, score_mean=best.mean, robust=robust,
        best_lr=best.lr, sensitivity=robust - min(per_lr.values()), variant=parse_tag(best.variant),
        per_lr=per_lr, seeds_at_best=dict(best.losses), failure_rate=best.failure_rate, **common)
