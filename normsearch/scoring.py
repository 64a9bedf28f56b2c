"""How runs become an architecture's score. Torch-free; the study and the report share it.

For a learning rate ``lr``, ``L(lr)`` is the mean over seeds of the final validation bits per byte,
where a diverged run counts as its loss at initialisation and no run counts as worse than that
(Wortsman et al. 2023, arXiv 2309.14322, Section 3.2: ``min(loss, loss_at_init)``).

- best learning rate: the lr with the lowest ``L`` among those where no seed diverged (if every lr
  lost a seed, the lowest ``L`` overall)
- ``mean`` objective: ``L(best lr)``, the mean over seeds at the best learning rate
- learning-rate sensitivity: ``mean over lr of L(lr) - min over lr of L(lr)`` (Wortsman et al.)
- ``robust`` objective: ``mean over lr of L(lr)`` = best + sensitivity; it penalises divergence
  and a narrow learning-rate basin
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .records import RunResult


@dataclass
class Score:
    value: float  # by the study's objective
    score_mean: float  # L(best lr)
    robust: float  # mean over lr of L(lr)
    best_lr: float
    sensitivity: float
    per_lr: dict[float, float] = field(default_factory=dict)  # lr -> L(lr)
    seeds_at_best: dict[int, float] = field(default_factory=dict)  # seed -> run loss at the best lr
    n_runs: int = 0
    n_diverged: int = 0
    tokens_per_s: float = 0.0
    n_params: int = 0

    def to_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["per_lr"] = {repr(k): v for k, v in self.per_lr.items()}
        d["seeds_at_best"] = {str(k): v for k, v in self.seeds_at_best.items()}
        return d


def score_runs(runs: list[RunResult], objective: str = "mean") -> Score:
    """An architecture's score from its runs (each scored once, by :attr:`RunResult.loss`)."""
    if not runs:
        raise ValueError("no runs to score")
    by_lr: dict[float, list[RunResult]] = {}
    for r in runs:
        by_lr.setdefault(float(r.lr), []).append(r)
    per_lr = {lr: sum(r.loss for r in rs) / len(rs) for lr, rs in sorted(by_lr.items())}
    stable = [lr for lr, rs in by_lr.items() if not any(r.diverged for r in rs)]
    best_lr = min(stable or per_lr, key=per_lr.__getitem__)
    best = per_lr[best_lr]
    robust = sum(per_lr.values()) / len(per_lr)
    finished = [r for r in runs if r.finished]
    return Score(
        value=best if objective == "mean" else robust,
        score_mean=best,
        robust=robust,
        best_lr=best_lr,
        sensitivity=robust - min(per_lr.values()),
        per_lr=per_lr,
        seeds_at_best={int(r.seed): r.loss for r in by_lr[best_lr]},
        n_runs=len(runs),
        n_diverged=sum(bool(r.diverged) for r in runs),
        tokens_per_s=sum(r.tokens_per_s for r in finished) / len(finished) if finished else 0.0,
        n_params=int(runs[0].n_params or 0),
    )
