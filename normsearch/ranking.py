"""Ranking: which placement won, by how much, and how sure we are.

One row per architecture (trials that proposed the same network are one row), baselines included
and marked. The score is the study's objective (see :mod:`normsearch.scoring`):

- ``mean``: per seed, the final validation bits per byte at the architecture's best learning rate;
  the score is their mean.
- ``robust``: per seed, the mean over the learning-rate sweep of ``min(loss, loss at init)``; the
  score is the mean over the sweep of the seed-averaged losses (the same number when every seed ran
  at every learning rate).

The 95% confidence interval is Student's t over those per-seed values. Comparisons with a baseline
are paired by seed: the mean of (this - baseline) over the seeds both have, its 95% t-interval, and
the p-value of a two-sided paired t-test (``scipy.stats.ttest_rel``). With fewer than two common
seeds there is no interval and no comparison: one seed measures noise, not a difference. The
p-values are not corrected for multiple comparisons.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from .records import A_ARCH, A_FAILED, ArchRecord, RunResult, run_keys, trial_runs
from .scoring import score_runs

DEFAULT_AGAINST = ("peri_ln", "hybridnorm")
ALPHA = 0.05
RANKED = "COMPLETE"


@dataclass
class Comparison:
    against: str
    n: int  # seeds in common
    diff: float | None  # mean of (this - baseline) over common seeds; negative is better
    ci_low: float | None  # 95% t-interval of that mean
    ci_high: float | None
    p_value: float | None  # two-sided paired t-test
    verdict: str  # better | worse | within noise | not compared (why)

    @property
    def compared(self) -> bool:
        return self.diff is not None

    def sentence(self, label: str, unit: str = "bits/byte") -> str:
        """The comparison in words, e.g. ``t5 is 0.031 bits/byte better than peri_ln (95% CI
        [0.010, 0.052], p = 0.004, paired t-test on 3 seeds)``."""
        if not self.compared:
            return f"{label} vs {self.against}: {self.verdict}."
        stats = f"{format_p(self.p_value)}, paired t-test on {self.n} seeds"
        if self.verdict in ("better", "worse"):
            # the size of the gain (better) or loss (worse) as a positive number, with its interval
            sign = -1.0 if self.verdict == "better" else 1.0
            lo, hi = sorted((sign * self.ci_low, sign * self.ci_high))
            return (f"{label} is {sign * self.diff:.3f} {unit} {self.verdict} than {self.against} "
                    f"(95% CI [{lo:.3f}, {hi:.3f}], {stats}).")
        return (f"{label} vs {self.against}: within noise, difference {self.diff:+.3f} {unit} "
                f"(95% CI [{self.ci_low:+.3f}, {self.ci_high:+.3f}], {stats}): the two cannot be told apart "
                f"from seed-to-seed noise.")


@dataclass
class Row:
    rank: int | None
    label: str
    is_baseline: bool
    arch_id: str
    sites: str
    placement: dict
    state: str  # COMPLETE (ranked), PRUNED, or INCOMPLETE (finished without a usable score)
    score_mean: float | None  # the study's objective
    ci_low: float | None
    ci_high: float | None
    n_seeds: int
    n_runs: int
    n_diverged: int
    best_lr: float | None
    lr_sensitivity: float | None  # None with a single learning rate: there is no sweep to measure
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
    seeds: dict[int, float] = field(default_factory=dict)  # seed -> loss at the best lr
    seed_scores: dict[int, float] = field(default_factory=dict)  # seed -> that seed's objective (CI, tests)
    per_lr: dict[float, float] = field(default_factory=dict)  # lr -> L(lr), seed mean of capped losses
    comparisons: list[Comparison] = field(default_factory=list)
    runs: list[RunResult] = field(default_factory=list, repr=False)  # the runs (plots); not serialised

    def comparison(self, against: str) -> Comparison | None:
        return next((c for c in self.comparisons if c.against == against), None)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("runs")
        d["seeds"] = {str(k): v for k, v in self.seeds.items()}
        d["seed_scores"] = {str(k): v for k, v in self.seed_scores.items()}
        d["per_lr"] = {repr(k): v for k, v in self.per_lr.items()}
        return d


@dataclass
class Cost:
    """What a study cost: every stored run (reused results counted once)."""

    runs: int = 0
    wall_time_s: float = 0.0  # the sum of the runs' wall-clock times
    steps: int = 0
    tokens: int | None = None
    tokens_per_run: int | None = None
    tokens_per_s: float | None = None  # mean over runs that did not diverge


@dataclass
class TrialNote:
    """A trial that is not a ranked row: still running (``runs_done`` of ``runs_total``) or failed."""

    number: int
    label: str
    arch_id: str | None
    runs_done: int = 0
    runs_total: int | None = None
    failure: str | None = None


@dataclass
class HistoryPoint:
    """One finished trial in the order the search made it (the history plot)."""

    number: int
    label: str
    arch_id: str
    state: str
    value: float | None
    is_baseline: bool
    reused: bool


@dataclass
class Ranking:
    study: str
    objective: str
    rows: list[Row]
    n_trials: dict[str, int]  # by state
    running: int
    against: list[str]
    recipe: Any = None  # the study's Recipe
    n_layers: int | None = None
    missing_against: list[str] = field(default_factory=list)  # asked for, but not a finished architecture
    running_trials: list[TrialNote] = field(default_factory=list)
    failures: list[TrialNote] = field(default_factory=list)
    history: list[HistoryPoint] = field(default_factory=list)  # per finished trial, in trial order
    param_choices: dict[str, list] = field(default_factory=dict)  # search-space parameter -> its choices
    cost: Cost = field(default_factory=Cost)

    @property
    def finished(self) -> bool:
        return self.running == 0 and self.n_trials.get("WAITING", 0) == 0

    @property
    def ranked(self) -> list[Row]:
        return [r for r in self.rows if r.rank is not None]

    def row(self, label: str) -> Row | None:
        return next((r for r in self.rows if r.label == label), None)


# --------------------------------------------------------------------------------------------------
# Statistics


def t_interval(values: list[float], level: float = 0.95) -> tuple[float, float | None, float | None]:
    """Mean and Student-t confidence interval; (mean, None, None) for fewer than two values."""
    from scipy import stats

    n = len(values)
    if n == 0:
        raise ValueError("no values")
    mean = math.fsum(values) / n
    if n < 2:
        return mean, None, None
    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1))
    half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * sd / math.sqrt(n)
    return mean, mean - half, mean + half


def compare(row: Row, base: Row) -> Comparison:
    """Paired by seed: this architecture's per-seed objective against the baseline's."""
    from scipy import stats

    a, b = row.seed_scores or row.seeds, base.seed_scores or base.seeds
    common = sorted(set(a) & set(b))
    if len(common) < 2:
        why = "one seed" if len(common) == 1 else "no seeds in common"
        return Comparison(base.label, len(common), None, None, None, None, f"not compared ({why})")
    d = [a[s] - b[s] for s in common]
    mean, lo, hi = t_interval(d)
    if max(d) - min(d) <= 1e-12 * max(1.0, abs(mean)):
        # no spread: the t statistic is 0/0 (equal) or infinite (a constant difference)
        p = 1.0 if abs(mean) <= 1e-12 else 0.0
    else:
        p = float(stats.ttest_rel([a[s] for s in common], [b[s] for s in common]).pvalue)
    if p < ALPHA and mean < 0:
        verdict = "better"
    elif p < ALPHA and mean > 0:
        verdict = "worse"
    else:
        verdict = "within noise"
    return Comparison(base.label, len(common), mean, lo, hi, p, verdict)


def format_p(p: float | None) -> str:
    """'p = 0.036', 'p < 0.001', or 'no p-value'."""
    if p is None:
        return "no p-value"
    if p < 0.001:
        return "p < 0.001"
    return f"p = {p:.3f}"


# --------------------------------------------------------------------------------------------------
# The ranking


def rank(study, against: tuple[str, ...] | list[str] = DEFAULT_AGAINST, objective: str | None = None) -> Ranking:
    """Rank the finished architectures of a study made by normsearch.

    ``study``: a :class:`normsearch.search.StudyHandle`, an ``optuna.Study``, or a results folder
    (opened with its recipe's storage). ``against``: labels to compare every row with, paired by
    seed (normally baselines; any finished row's label works). ``objective``: ``mean`` or
    ``robust`` (default: the study's)."""
    study, recipe = _as_study(study)
    objective = objective or recipe.search.objective
    if objective not in ("mean", "robust"):
        raise ValueError(f"objective must be mean or robust, not {objective!r}")
    n_layers = recipe.model.n_layers
    trials = sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)
    counts: dict[str, int] = {}
    for t in trials:
        counts[t.state.name] = counts.get(t.state.name, 0) + 1

    groups: dict[str, list[tuple[Any, ArchRecord]]] = {}
    records = {t.number: ArchRecord.from_trial(t) for t in trials}
    for t in trials:
        if t.state.name in ("COMPLETE", "PRUNED") and records[t.number].arch_id:
            groups.setdefault(records[t.number].arch_id, []).append((t, records[t.number]))

    choices: dict[str, list] = {}
    for t in trials:
        for name, dist in t.distributions.items():
            if hasattr(dist, "choices"):
                choices.setdefault(name, list(dist.choices))

    rows = [_row(arch, ts, objective, n_layers) for arch, ts in groups.items()]
    inf = math.inf
    rows.sort(key=lambda r: (r.state != RANKED, r.score_mean if r.score_mean is not None else inf, r.label))
    for i, r in enumerate(x for x in rows if x.state == RANKED):
        r.rank = i + 1

    against = list(dict.fromkeys(against))
    bases = {r.label: r for r in rows if r.state == RANKED}  # baselines, or any finished label asked for
    for r in rows:
        if r.state != RANKED:
            continue
        for a in against:
            if a in bases and bases[a] is not r:
                r.comparisons.append(compare(r, bases[a]))

    runs_total = len(recipe.train.runs)
    running = [TrialNote(t.number, records[t.number].label, records[t.number].arch_id or None,
                         runs_done=len(run_keys(t.user_attrs)), runs_total=runs_total or None)
               for t in trials if t.state.name == "RUNNING"]
    failures = [TrialNote(t.number, records[t.number].label, records[t.number].arch_id or None,
                          failure=t.user_attrs.get(A_FAILED) or "error")
                for t in trials if t.state.name == "FAIL"]
    by_arch = {r.arch_id: r for r in rows}
    history = []
    for t in trials:
        rec = records[t.number]
        if t.state.name not in ("COMPLETE", "PRUNED") or rec.arch_id not in by_arch:
            continue
        r = by_arch[rec.arch_id]
        history.append(HistoryPoint(t.number, r.label, rec.arch_id, t.state.name,
                                    r.score_mean if t.state.name == "COMPLETE" and r.state == RANKED else None,
                                    bool(rec.baseline), rec.reused_from is not None))

    return Ranking(
        study=study.study_name, objective=objective, rows=rows, n_trials=counts, running=counts.get("RUNNING", 0),
        against=against, recipe=recipe, n_layers=n_layers,
        missing_against=[a for a in against if a not in bases], running_trials=running, failures=failures,
        history=history, param_choices=choices, cost=_cost(trials, recipe),
    )


def _row(arch: str, ts: list[tuple[Any, ArchRecord]], objective: str, n_layers: int) -> Row:
    with_runs = [(t, rec, trial_runs(t)) for t, rec in ts]
    with_runs = [x for x in with_runs if x[2]]
    owners = [x for x in with_runs if x[0].state.name == "COMPLETE"] or with_runs
    merged: dict[tuple[int, float], RunResult] = {}  # one run per (seed, lr), the earliest trial's
    for _, _, runs_of in owners:
        for r in runs_of:
            merged.setdefault((int(r.seed), float(r.lr)), r)
    runs = list(merged.values())
    first = owners[0][0] if owners else ts[0][0]
    recs = [rec for _, rec in ts]
    base = next((rec.baseline for rec in recs if rec.baseline), None)
    label = base or recs[0].label
    placement = next((rec.placement for rec in recs if rec.placement), {})
    sites = next((rec.sites for rec in recs if rec.sites), "")
    if not sites and placement:
        from .spec import Placement

        sites = Placement.from_dict(placement).resolve(int(n_layers)).describe()
    params = next((dict(rec.params) for rec in recs if rec.params), {})
    finished = [r for r in runs if r.finished]
    if not runs:
        state = "INCOMPLETE" if first.state.name == "COMPLETE" else first.state.name
    else:
        state = first.state.name
    row = Row(
        rank=None, label=label, is_baseline=base is not None, arch_id=arch, sites=sites, placement=placement,
        state=state, score_mean=None, ci_low=None, ci_high=None, n_seeds=len({int(r.seed) for r in runs}),
        n_runs=len(runs), n_diverged=sum(bool(r.diverged) for r in runs), best_lr=None,
        lr_sensitivity=None, n_params=int(runs[0].n_params or 0) if runs else 0,
        tokens_per_s=sum(r.tokens_per_s for r in finished) / len(finished) if finished else 0.0,
        kernels=_join(r.kernels for r in runs), precision=_join(r.precision for r in runs),
        triton_version=_join(r.triton_version for r in runs), device=_join(r.device for r in runs),
        n_norm_params=int(runs[0].n_norm_params or 0) if runs else 0,
        wall_time=sum(float(r.wall_time or 0.0) for r in runs),
        trials=[t.number for t, _ in ts], params=params, runs=runs,
    )
    if state != RANKED:
        return row
    s = score_runs(runs, objective)
    by_seed = _robust_by_seed(runs) if objective == "robust" else s.seeds_at_best
    if not math.isfinite(s.value) or not all(math.isfinite(v) for v in by_seed.values()):
        row.state = "INCOMPLETE"  # runs without any evaluation: nothing to rank
        return row
    _, lo, hi = t_interval(list(by_seed.values()))
    row.score_mean, row.ci_low, row.ci_high = s.value, lo, hi
    row.n_seeds, row.best_lr = len(by_seed), s.best_lr
    row.lr_sensitivity = s.sensitivity if len(s.per_lr) > 1 else None
    row.seeds, row.seed_scores, row.per_lr = s.seeds_at_best, by_seed, s.per_lr
    return row


def _robust_by_seed(runs: list[RunResult]) -> dict[int, float]:
    """Per seed, the mean over the sweep of min(loss, loss at init): the robust score seed by seed."""
    by_seed: dict[int, list[float]] = {}
    for r in runs:
        by_seed.setdefault(int(r.seed), []).append(r.loss)
    return {s: sum(v) / len(v) for s, v in sorted(by_seed.items())}


def _cost(trials, recipe) -> Cost:
    """What the study cost: every stored run (of finished, pruned and running trials; reused results
    counted once)."""
    tokens_per_step = recipe.train.batch_size * recipe.model.context_length
    seen: set = set()
    runs = 0
    wall = steps = 0.0
    tps = []
    for t in trials:
        for k in run_keys(t.user_attrs):
            if not isinstance(t.user_attrs[k], dict):
                continue
            r = RunResult.from_dict(t.user_attrs[k])
            key = (r.arch_id or t.user_attrs.get(A_ARCH), k)
            if key in seen:  # a retried trial reloads its finished runs from disk: count them once
                continue
            seen.add(key)
            runs += 1
            wall += float(r.wall_time or 0.0)
            steps += int(r.steps or 0)
            if r.finished:
                tps.append(float(r.tokens_per_s))
    return Cost(runs=runs, wall_time_s=wall, steps=int(steps),
                tokens=int(steps * tokens_per_step) if tokens_per_step else None,
                tokens_per_run=recipe.train.steps * tokens_per_step if tokens_per_step else None,
                tokens_per_s=sum(tps) / len(tps) if tps else None)


def _join(values) -> str:
    return ",".join(sorted({str(v) for v in values if v}))


def _as_study(study):
    """(optuna study, typed recipe) from a handle, a study or a results folder."""
    from .search import StudyHandle, open_results, recipe_of

    if isinstance(study, StudyHandle):
        return study.study, study.recipe
    if hasattr(study, "get_trials"):
        return study, recipe_of(study)
    handle = open_results(study)
    return handle.study, handle.recipe
