"""Ranking: which placement won, by how much, and how sure we are.

One row per architecture (trials that proposed the same network are one row), baselines included
and marked. The statistics are :mod:`normsearch.stats`' (rules and thresholds in
``docs/statistics.md``); in short:

- every run is an outcome: ``diverged``, ``stalled`` (it ended near the unigram loss: what a model
  that learned only the training bytes' frequencies scores on the validation windows; or it never
  improved on its loss at initialisation) or ``ok``; a failure never enters a mean,
  an interval or a test: it is counted, with a Wilson interval, per architecture and learning rate;
- an architecture's learning rate is the one where it failed least, then had the lowest mean loss
  over its successful runs; the ranking is a hurdle: by failure rate at that learning rate, then by
  that mean loss;
- intervals and comparisons use the pooled variance of the two-way model loss ~ architecture + seed
  when a test of equal variances does not reject, per-architecture estimates otherwise;
- every comparison with a baseline is one family: ``better``/``worse`` under Holm, ``equivalent``
  only when two one-sided tests pass within ``report.margin``, else ``undecided`` with the seeds that
  would resolve it; P(best), rank intervals and P(a < b) come from the pooled model's posterior.

The learning rate is chosen on the same seeds that score it, so the intervals are slightly
optimistic (the confirmation stage of issue 16 is what removes that).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from .errors import NormsearchError, closest
from .records import A_ARCH, A_FAILED, STAGE_SEP, ArchRecord, RunResult, run_keys, trial_runs
from .scoring import score_runs

DEFAULT_AGAINST = ("peri_ln", "hybridnorm")
RANKED = "COMPLETE"


@dataclass
class LrPoint:
    """One learning rate of an architecture's sweep: failures, and the mean over successful runs."""

    lr: float
    n_runs: int
    n_diverged: int
    n_stalled: int
    mean: float | None  # over the successful runs; None when all failed
    failure_ci_low: float
    failure_ci_high: float

    @property
    def n_failed(self) -> int:
        return self.n_diverged + self.n_stalled


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
    ci_method: str = ""  # pooled | per-arch | none
    p_best: float | None = None
    rank_low: int | None = None  # 95% rank interval
    rank_high: int | None = None
    lr_basin: float | None = None  # width in log10(lr) within tolerance of its own best (None: < 3 points)
    lr_basin_low: float | None = None
    lr_basin_high: float | None = None
    lr_points: list[LrPoint] = field(default_factory=list)
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
class Judgement:
    """How the verdicts were reached, for the report to say."""

    alpha: float = 0.05
    margin: float = 0.02
    variance_method: str = ""  # pooled | per-architecture (...)
    sigma: float | None = None  # residual SD of loss ~ arch + seed
    df: int | None = None
    variance_test: str = ""  # Brown-Forsythe (median) or Levene (mean)
    variance_p: float | None = None
    n_comparisons: int = 0
    unigram_bpb: float | None = None  # the stall reference; None when the data could not be read
    search: Any = None  # normsearch.stats.SearchValue of the searched trials, or None


@dataclass
class Ranking:
    study: str
    objective: str  # what the sampler optimised (the ranking itself is the hurdle order)
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
    judgement: Judgement = field(default_factory=Judgement)

    @property
    def finished(self) -> bool:
        return self.running == 0 and self.n_trials.get("WAITING", 0) == 0

    @property
    def ranked(self) -> list[Row]:
        return [r for r in self.rows if r.rank is not None]

    def row(self, label: str) -> Row | None:
        return next((r for r in self.rows if r.label == label), None)


def format_p(p: float | None) -> str:
    """'p = 0.036', 'p < 0.001', or 'no p-value'."""
    return "no p-value" if p is None else "p < 0.001" if p < 0.001 else f"p = {p:.3f}"


# --------------------------------------------------------------------------------------------------
# The ranking


def rank(study, against: tuple[str, ...] | list[str] = DEFAULT_AGAINST, objective: str | None = None,
         margin: float | None = None, alpha: float | None = None, *,
         required_against: tuple[str, ...] | list[str] = ()) -> Ranking:
    """Rank the finished architectures of a study made by normsearch.

    ``study``: a :class:`normsearch.search.StudyHandle`, an ``optuna.Study``, or a results folder
    (opened with its recipe's storage). ``against``: labels to compare every row with (normally
    baselines; any finished row's label works; others go to ``missing_against``). ``required_against``:
    more, that the user named: one no trial has is an error (:func:`check_against`). ``margin``/``alpha``:
    the recipe's ``report`` section unless given. ``objective``: what the sampler optimised (default: the study's)."""
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
    check_against(required_against, study.study_name, list(records.values()))
    for t in trials:
        if t.state.name in ("COMPLETE", "PRUNED") and records[t.number].arch_id:
            groups.setdefault(records[t.number].arch_id, []).append((t, records[t.number]))

    choices: dict[str, list] = {}
    for t in trials:
        for name, dist in t.distributions.items():
            if hasattr(dist, "choices"):
                choices.setdefault(name, list(dist.choices))

    rows = [_row(arch, ts, n_layers) for arch, ts in groups.items()]
    against = list(dict.fromkeys([*against, *required_against]))
    judgement = _judge(rows, against, recipe, margin, alpha)
    order = {r.label: i for i, r in enumerate(sorted((r for r in rows if r.rank is not None), key=lambda r: r.rank))}
    rows.sort(key=lambda r: (r.rank is None, order.get(r.label, 0), r.label))

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
                                    r.score_mean if t.state.name == "COMPLETE" and r.rank is not None else None,
                                    bool(rec.baseline), rec.reused_from is not None))
    judgement.search = None if STAGE_SEP in study.study_name else _search_value(history)  # a stage searched nothing
    labels = {r.label for r in rows if r.rank is not None}
    return Ranking(
        study=study.study_name, objective=objective, rows=rows, n_trials=counts, running=counts.get("RUNNING", 0),
        against=against, recipe=recipe, n_layers=n_layers,
        missing_against=[a for a in against if a not in labels], running_trials=running, failures=failures,
        history=history, param_choices=choices, cost=_cost(trials, recipe), judgement=judgement,
    )


def check_against(names, study_name: str, records: list[ArchRecord]) -> None:
    """A :class:`NormsearchError` for the first of ``names`` that no trial of the study has as its label,
    naming the closest labels (difflib), or else the study's baselines and other architectures."""
    labels = list(dict.fromkeys(r.label for r in records))
    for name in (n for n in names if n not in labels):
        archs = [r for r in records if r.arch_id and r.reused_from is None]  # one label per architecture
        bases, others = ([r.label for r in archs if bool(r.baseline) == b] for b in (True, False))
        hint = (f"did you mean {closest(name, labels)}?" if closest(name, labels) else
                f"its baselines: {', '.join(bases) or 'none'}; its other architectures: "
                f"{', '.join(others[:12]) or 'none'}{', ...' if len(others) > 12 else ''}")
        raise NormsearchError(f"--against {name!r}: study {study_name!r} has no architecture of that name ({hint})")


def _row(arch: str, ts: list[tuple[Any, ArchRecord]], n_layers: int) -> Row:
    """The row's identity and runs; the statistics are filled in by :func:`_judge`."""
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
    evaluated = [r for r in runs if r.curve]
    state = first.state.name if evaluated else ("INCOMPLETE" if first.state.name == "COMPLETE" else first.state.name)
    row = Row(
        rank=None, label=label, is_baseline=base is not None, arch_id=arch, sites=sites, placement=placement,
        state=state, score_mean=None, ci_low=None, ci_high=None, n_seeds=0,
        n_runs=len(runs), n_diverged=sum(bool(r.diverged) for r in runs), best_lr=None,
        lr_sensitivity=None, n_params=int(runs[0].n_params or 0) if runs else 0,
        tokens_per_s=sum(r.tokens_per_s for r in finished) / len(finished) if finished else 0.0,
        kernels=_join(r.kernels for r in runs), precision=_join(r.precision for r in runs),
        triton_version=_join(r.triton_version for r in runs), device=_join(r.device for r in runs),
        n_norm_params=int(runs[0].n_norm_params or 0) if runs else 0,
        wall_time=sum(float(r.wall_time or 0.0) for r in runs),
        trials=[t.number for t, _ in ts], params=params, runs=runs,
    )
    if state == RANKED:
        s = score_runs(evaluated)
        row.lr_sensitivity = s.sensitivity if len(s.per_lr) > 1 else None
    return row


def _judge(rows: list[Row], against: list[str], recipe, margin: float | None, alpha: float | None) -> Judgement:
    """Outcomes, the hurdle order, intervals, comparisons, P(best) and basins: fill the rows in."""
    from .stats import analyse

    ranked = [r for r in rows if r.state == RANKED]
    margin = recipe.report.margin if margin is None else margin
    alpha = recipe.report.alpha if alpha is None else alpha
    unigram = _unigram(recipe, [run for r in ranked for run in r.runs])
    runs = stat_runs(ranked, unigram)
    judgement = Judgement(alpha=alpha, margin=margin, unigram_bpb=unigram)
    if not runs:
        return judgement
    labels = {r.label for r in ranked}
    st = analyse(runs, against=[a for a in against if a in labels], margin=margin, alpha=alpha)
    by_label = {r.label: r for r in ranked}
    for a, s in st.archs.items():
        r = by_label[a]
        best = s.lr.best
        r.rank, r.best_lr = s.rank, s.best_lr
        r.score_mean, r.ci_low, r.ci_high = s.interval.mean, s.interval.ci_low, s.interval.ci_high
        r.ci_method, r.n_seeds = s.interval.method, s.interval.n
        r.n_failed, r.failure_rate = s.n_failed, s.failure_rate
        r.n_stalled = best.n_stalled if best else sum(c.n_stalled for c in s.lr.cells)
        r.failure_ci_low, r.failure_ci_high = s.failure_ci_low, s.failure_ci_high
        r.fails_at_best_lr = s.fails_at_best_lr
        r.p_best, r.rank_low, r.rank_high = s.p_best, s.rank_low, s.rank_high
        r.seeds = dict(sorted(best.losses.items())) if best else {}
        r.lr_points = [LrPoint(c.lr, c.n_runs, c.n_diverged, c.n_stalled, c.mean, *c.failure_ci) for c in s.lr.cells]
        r.per_lr = {c.lr: c.mean for c in s.lr.cells if c.mean is not None}
        if s.basin is not None:
            r.lr_basin, r.lr_basin_low, r.lr_basin_high = s.basin.width, s.basin.low_lr, s.basin.high_lr
        r.comparisons = st.comparisons_of(a)
    fit = st.fit
    judgement.variance_method = st.variance_method
    judgement.n_comparisons = len(st.comparisons)
    if fit is not None:
        judgement.sigma, judgement.df, judgement.variance_p = fit.sigma, fit.df, fit.levene_p
        judgement.variance_test = "Brown-Forsythe" if fit.levene_center == "median" else "Levene"
    return judgement


def stat_runs(rows: list[Row], unigram: float | None = None) -> list:
    """The rows' evaluated runs as the statistics see them (:class:`normsearch.stats.Run`)."""
    from .stats import Run

    return [Run(arch=r.label, seed=int(x.seed), lr=float(x.lr), loss=x.value, diverged=bool(x.diverged),
                init_loss=x.init_loss if x.curve else None,
                unigram_loss=unigram if unigram is not None else x.unigram_bpb)
            for r in rows for x in r.runs if x.curve]


def _unigram(recipe, runs: list[RunResult]) -> float | None:
    """The loss of a model that learned only the training bytes' frequencies, on the validation
    windows every run is scored on: from the study's data when it can be read here, else as the runs
    recorded it."""
    if not runs:
        return None
    recorded = next((r.unigram_bpb for r in runs if r.unigram_bpb is not None), None)
    if any(r.metric == "test_bpb" for r in runs):  # scored on the test split: the reference each run recorded there
        return recorded
    try:
        from .data import load_tokens

        return load_tokens(recipe.data).unigram_bpb(recipe.model.context_length, recipe.data.eval_windows)
    except Exception:  # the data moved or cannot be built here: the value the runs recorded, if any
        return recorded


def _search_value(history: list[HistoryPoint]):
    """The sampler's best-so-far against random order over the same evaluated placements (those with a
    score: pruned trials and architectures whose every run failed are left out of both)."""
    from .stats import search_value

    found = [h.value for h in history if not h.is_baseline and not h.reused and h.value is not None
             and math.isfinite(h.value)]
    if len(found) < 2:
        return None
    return search_value(found)


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
