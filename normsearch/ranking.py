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
- intervals and comparisons use each architecture's own seed-to-seed variance (Welch), never a
  pooled one, and no test of equal variances switches anything;
- runs of different precisions are never pooled: when a study's runs mix them (``train.precision: auto``
  chose differently on different machines), only the precision most of its runs used is compared, the
  others counted as left out (:func:`normsearch._throughput.compared_precision`);
- every row's tokens/s and effective speed-up against the best baseline: what its norms cost
  (:mod:`normsearch._throughput`), from the study's ``throughput.json`` when it has one of its shape
  (:mod:`normsearch._cost_bench`), else from the runs' recordings;
- every comparison with a baseline is one family: ``better``/``worse`` under Holm, ``equivalent``
  only when two one-sided tests pass within ``report.margin``, else ``undecided`` with the seeds that
  would resolve it; P(best), rank intervals and P(a < b) come from per-architecture posterior draws.

The learning rate is chosen on the same seeds that score it, so the intervals are slightly
optimistic (the confirmation stage of issue 16 is what removes that).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from .errors import NormsearchError, closest
from .records import A_ARCH, A_FAILED, STAGE_SEP, ArchRecord, RunResult, run_keys, trial_runs
from ._rows import RANKED, LrPoint, Row  # RANKED: a ranked row's state (with the rows: _throughput reads it)
from .grid import variant_tag
from .scoring import score_runs

DEFAULT_AGAINST = ("peri_ln", "hybridnorm")
OTHER_PRECISION = "OTHER_PRECISION"  # a row whose every run trained at a precision the ranking does not compare


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
    variance_method: str = ""  # one fixed sentence (normsearch.stats.VARIANCE_METHOD)
    seed_sd: dict[str, float] = field(default_factory=dict)  # arch -> its own seed-to-seed SD (2+ runs)
    n_comparisons: int = 0
    unigram_bpb: float | None = None  # the stall reference; None when the data could not be read
    search: Any = None  # normsearch.stats.SearchValue of the searched trials, or None
    precision: str | None = None  # the one precision whose runs are compared (None: no runs)
    precisions: dict[str, int] = field(default_factory=dict)  # every precision -> its evaluated runs
    precision_excluded: int = 0  # runs left out for being of another precision
    throughput: dict = field(default_factory=dict)  # the meta of the throughput.json the ratios used ({}: the runs')


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
    study, recipe, folder = _as_study(study)
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

    from ._cost_bench import read_measurement, study_key
    from ._throughput import add_speedups, compared_precision

    rows = [_row(arch, ts, n_layers) for arch, ts in groups.items()]
    precision, precisions = compared_precision(rows)
    if len(precisions) > 1:  # never pooled: the majority's runs alone
        rows = [_row(arch, ts, n_layers, precision) for arch, ts in groups.items()]
    against = list(dict.fromkeys([*against, *required_against]))
    judgement = _judge(rows, against, recipe, margin, alpha)
    judgement.precision, judgement.precisions = precision, precisions
    judgement.precision_excluded = sum(r.n_other_precision for r in rows)
    measured = read_measurement(folder, study_key(recipe, precision), STAGE_SEP in study.study_name)
    add_speedups(rows, {k: m.tokens_per_s for k, m in measured[0].items()} if measured else None,
                 {k: m.rounds for k, m in measured[0].items()} if measured else None)
    judgement.throughput = measured[1] if measured and any(r.throughput_source == "measured" for r in rows) else {}
    if _raced(study):  # racing chose where to add seeds from the results: no verdict of it is confirmatory
        for r in rows:
            for c in r.comparisons:
                c.exploratory = True
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
        if t.state.name not in ("COMPLETE", "PRUNED") or rec.arch_id not in by_arch \
                or by_arch[rec.arch_id].state == OTHER_PRECISION:  # not compared: neither good nor bad
            continue
        r = by_arch[rec.arch_id]
        history.append(HistoryPoint(t.number, r.label, rec.arch_id, t.state.name,
                                    r.score_mean if t.state.name == "COMPLETE" and r.rank is not None else None,
                                    bool(rec.baseline), rec.reused_from is not None))
    judgement.search = _search_value(history, trials, recipe, study.study_name, judgement.alpha)
    labels = {r.label for r in rows if r.rank is not None}
    return Ranking(
        study=study.study_name, objective=objective, rows=rows, n_trials=counts, running=counts.get("RUNNING", 0),
        against=against, recipe=recipe, n_layers=n_layers,
        missing_against=[a for a in against if a not in labels], running_trials=running, failures=failures,
        history=history, param_choices=choices, cost=_cost(trials, recipe), judgement=judgement,
    )


def _raced(study) -> bool:
    """Whether ``study`` is a stage whose seeds racing added to (its verdicts depend on racing)."""
    ua = study.user_attrs
    return STAGE_SEP in study.study_name and any(k.startswith("racing_round_") and (v or {}).get("added")
                                                 for k, v in ua.items())


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


def _row(arch: str, ts: list[tuple[Any, ArchRecord]], n_layers: int, precision: str | None = None) -> Row:
    """The row's identity and runs; the statistics are filled in by :func:`_judge`. ``precision``: keep the
    runs of that precision alone (the others are counted in ``n_other_precision``)."""
    with_runs = [(t, rec, trial_runs(t)) for t, rec in ts]
    with_runs = [x for x in with_runs if x[2]]
    owners = [x for x in with_runs if x[0].state.name == "COMPLETE"] or with_runs
    merged: dict[tuple[int, float, str], RunResult] = {}  # one run per (seed, cell), the earliest trial's
    for _, _, runs_of in owners:
        for r in runs_of:
            merged.setdefault((int(r.seed), float(r.lr), variant_tag(r.variant or {})), r)
    every = list(merged.values())
    runs = every if precision is None else [r for r in every if (r.precision or "") == precision]
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
    if every and not runs:
        state = OTHER_PRECISION
    row = Row(
        rank=None, label=label, is_baseline=base is not None, arch_id=arch, sites=sites, placement=placement,
        state=state, score_mean=None, ci_low=None, ci_high=None, n_seeds=0,
        n_runs=len(runs), n_diverged=sum(bool(r.diverged) for r in runs), best_lr=None,
        lr_sensitivity=None, n_params=int(every[0].n_params or 0) if every else 0,
        tokens_per_s=sum(r.tokens_per_s for r in finished) / len(finished) if finished else 0.0,
        kernels=_join(r.kernels for r in runs), precision=_join(r.precision for r in every),
        triton_version=_join(r.triton_version for r in runs), device=_join(r.device for r in runs),
        n_norm_params=int(every[0].n_norm_params or 0) if every else 0, n_other_precision=len(every) - len(runs),
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
        r.lr_points = [LrPoint(c.lr, c.n_runs, c.n_diverged, c.n_stalled, c.mean, *c.failure_ci, variant=c.variant)
                       for c in s.lr.cells]
        r.per_lr = {c.lr: c.mean for c in s.lr.variant_cells() if c.mean is not None}
        _cells(r, s.lr, recipe)
        if s.basin is not None:
            r.lr_basin, r.lr_basin_low, r.lr_basin_high = s.basin.width, s.basin.low_lr, s.basin.high_lr
        r.comparisons = st.comparisons_of(a)
    judgement.variance_method = st.variance_method
    judgement.n_comparisons = len(st.comparisons)
    judgement.seed_sd = {a: sd for a, sd in (st.fit.sd.items() if st.fit else ()) if sd is not None}
    return judgement


def stat_runs(rows: list[Row], unigram: float | None = None) -> list:
    """The rows' evaluated runs as the statistics see them (:class:`normsearch.stats.Run`)."""
    from .scoring import stat_run

    return [stat_run(x, r.label, unigram) for r in rows for x in r.runs if x.curve]


def _cells(row: Row, a, recipe) -> None:
    """The chosen cell's init, variant, bracket and vertex, and the loss-optimal and failure-free cells."""
    from .grid import bracket, parse_tag, vertex

    if a.best is None:  # nothing succeeded: no chosen cell
        return
    row.variant = parse_tag(a.best_variant)
    row.init = row.variant.get("init", recipe.model.init if recipe is not None else None)
    resolution = recipe.train.lr_resolution if recipe is not None else None
    b = bracket(a, resolution)
    row.lr_bracketed = None if b is None else b.bracketed
    row.lr_vertex = vertex(a)
    for name, c in (("loss_optimal", a.loss_optimal), ("failure_free", a.failure_free)):
        setattr(row, name, None if c is None else {
            "lr": c.lr, "variant": parse_tag(c.variant), "mean": c.mean, "n_ok": c.n_ok, "n_failed": c.n_failed,
            "failure_rate": c.failure_rate})


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


def _search_value(history: list[HistoryPoint], trials, recipe, study_name: str, alpha: float):
    """Did the search help (:func:`normsearch.stats.search_value`): the sampler's proposals in proposal
    order and the control proposals (:func:`normsearch.search.searched_proposals`; repeats of an evaluated
    architecture count), each scored by its architecture's mean, a pruned one or one whose every run failed
    as worst (inf). None for a stage (it searched nothing) or with fewer than 2 proposals."""
    from .search import searched_proposals
    from .stats import search_value

    value = {h.number: math.inf if h.value is None else h.value for h in history}
    found = [p for p in searched_proposals(trials, recipe) if p.number in value] if STAGE_SEP not in study_name else []
    mine, controls = [p for p in found if p.kind != "control"], [p for p in found if p.kind == "control"]
    if len(found) < 2:
        return None
    sv = search_value([value[p.number] for p in mine], [p.kind for p in mine], [value[c.number] for c in controls],
                      orders=[p.order for p in mine], alpha=alpha,
                      control_at=[sum(q.number < c.number for q in mine) for c in controls])
    sv.startup_inferred = any(p.inferred for p in mine)
    return sv


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
    """(optuna study, typed recipe, results folder or None) from a handle, a study or a results folder."""
    from .search import StudyHandle, open_results, recipe_of

    if isinstance(study, StudyHandle):
        return study.study, study.recipe, study.folder
    if hasattr(study, "get_trials"):
        return study, recipe_of(study), None
    handle = open_results(study)
    return handle.study, handle.recipe, handle.folder
