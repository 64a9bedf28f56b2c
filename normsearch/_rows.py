"""The ranking's rows: one architecture each, with the cells of its sweep (:mod:`normsearch.ranking`
fills them in; ``ranking.json`` is their ``to_dict``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from .records import RunResult


@dataclass
class LrPoint:
    """One cell of an architecture's sweep (a learning rate in a variant of the tuned grid): failures,
    and the mean over successful runs."""

    lr: float
    n_runs: int
    n_diverged: int
    n_stalled: int
    mean: float | None  # over the successful runs; None when all failed
    failure_ci_low: float
    failure_ci_high: float
    variant: str = ""  # normsearch.grid.variant_tag; '' without a grid

    @property
    def n_failed(self) -> int:
        return self.n_diverged + self.n_stalled


RANKED = "COMPLETE"  # the state of a ranked row (a trial that finished with an evaluated run)


@dataclass
class Row:
    rank: int | None  # the hurdle rank (failure rate at the chosen lr, then loss); None: not ranked
    label: str
    is_baseline: bool
    arch_id: str
    sites: str
    placement: dict
    state: str  # COMPLETE (ranked), PRUNED, or INCOMPLETE (finished without any evaluated run)
    score_mean: float | None  # mean loss over the successful runs at the chosen lr; None if all failed
    ci_low: float | None  # its 95% interval (see Ranking.variance_method)
    ci_high: float | None
    n_seeds: int  # successful seeds behind score_mean
    n_runs: int  # every run of the sweep
    n_diverged: int  # every run of the sweep that diverged
    best_lr: float | None  # the chosen learning rate
    lr_sensitivity: float | None  # Wortsman et al.'s, over capped losses (counts divergences); kept for old reports
    n_params: int
    tokens_per_s: float
    kernels: str
    precision: str
    triton_version: str = ""
    device: str = ""
    n_norm_params: int = 0
    wall_time: float = 0.0  # seconds, summed over the runs
    trials: list[int] = field(default_factory=list)
    params: dict[str, str] = field(default_factory=dict)  # the search-space choices (empty outside the space)
    seeds: dict[int, float] = field(default_factory=dict)  # seed -> loss at the chosen lr (successful runs)
    per_lr: dict[float, float] = field(default_factory=dict)  # lr -> mean over successful runs
    n_failed: int = 0  # at the chosen lr: diverged or stalled
    n_stalled: int = 0  # at the chosen lr
    failure_rate: float = 0.0  # at the chosen lr
    failure_ci_low: float = 0.0  # Wilson 95%
    failure_ci_high: float = 1.0
    fails_at_best_lr: bool = False
    ci_method: str = ""  # per-arch (its own SD) | none (one successful run)
    p_best: float | None = None
    rank_low: int | None = None  # 95% rank interval
    rank_high: int | None = None
    lr_basin: float | None = None  # width in log10(lr) within tolerance of its own best (None: < 3 points)
    lr_basin_low: float | None = None
    lr_basin_high: float | None = None
    lr_points: list[LrPoint] = field(default_factory=list)
    # the chosen cell besides its learning rate: the init it was trained with and its variant of the grid
    init: str | None = None
    variant: dict = field(default_factory=dict)
    lr_bracketed: bool | None = None  # a successful neighbour on each side within train.lr_resolution
    lr_vertex: float | None = None  # the vertex of a quadratic in log10(lr) around the chosen cell
    # the two cells every gap is also given at: the lowest mean over successful runs whatever failed
    # there, and the lowest mean where nothing failed: {lr, variant, mean, n_ok, n_failed, failure_rate}
    loss_optimal: dict | None = None
    failure_free: dict | None = None
    n_other_precision: int = 0  # runs left out: of a precision the ranking does not compare (Judgement.precision)
    # what the row's norms cost against the best baseline (normsearch._throughput; docs/statistics.md §13):
    # median tokens/s over the chosen cells' runs, this row's over the baseline's
    throughput_ratio: float | None = None
    step_speedup: float | None = None  # steps the baseline needs to reach this row's final loss / this row's steps
    effective_speedup: float | None = None  # step_speedup x throughput_ratio: compute the baseline needs, per ours
    speedup_lower_bound: bool = False  # the baseline never reached this loss: both speed-ups are lower bounds
    # the other way round: the baseline's steps over the steps this row needs to reach the baseline's final loss on
    # its own curve, x throughput_ratio (exact where effective_speedup is only a bound: a row ahead per step)
    speedup_at_baseline_loss: float | None = None
    speedup_note: str = ""  # why a speed-up is null
    speedup_against: str = ""  # the best baseline (the best-ranked baseline row)
    # where the tokens/s of throughput_ratio come from: measured (throughput.json: every architecture timed in one
    # process, interleaved) or runs (what the runs recorded); noisy: from the runs, and this row's or the baseline's
    # vary by more than normsearch._throughput.NOISY_CV between runs (no per-second verdict is drawn from it)
    throughput_source: str = ""
    throughput_noisy: bool = False
    throughput_cv: float | None = None  # the coefficient of variation of its chosen cell's runs' tokens/s (2+ runs)
    measured_tokens_per_s: float | None = None  # throughput.json's median tokens/s, when it holds this architecture
    # the measured ratio's distribution-free 95% interval (normsearch._throughput.paired_ratio; None from the runs)
    throughput_ratio_low: float | None = None
    throughput_ratio_high: float | None = None
    comparisons: list[Any] = field(default_factory=list)  # normsearch.stats.Comparison, this row vs a baseline
    runs: list[RunResult] = field(default_factory=list, repr=False)  # the runs (plots); not serialised

    def comparison(self, against: str):
        return next((c for c in self.comparisons if c.against == against), None)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("runs")
        d["seeds"] = {str(k): v for k, v in self.seeds.items()}
        d["seed_scores"] = d["seeds"]  # the same numbers, under the name older readers of ranking.json use
        d["per_lr"] = {repr(k): v for k, v in self.per_lr.items()}
        for c in d["comparisons"]:
            c.pop("sd_arch", None), c.pop("sd_against", None)
        return d
