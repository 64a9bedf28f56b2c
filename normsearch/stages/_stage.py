"""Stages after the search: fixed lists of architectures trained again under other conditions.

A stage is an Optuna study of its own in the search's storage, named ``<study>/<stage>`` (a name no
recipe can take), whose results live in ``results/<study>/<stage>/``: the confirmation
(``confirm``: fresh seeds, each architecture at the learning rate the search chose for it, scored on
the test split) and the rungs of a ladder (``ladder-<rung>``). A separate study keeps the sampler's
history clean (a confirmation run is not a proposal) while sharing everything else with the
search: workers on many machines, heartbeats and reaping, the run-level claims between local
workers, results on disk before storage, resume after ``kill -9``.

A stage's trial is a **task**: one architecture, a list of seeds and learning rates. Its key
(architecture, seeds, learning rates) deduplicates it as the search deduplicates architectures;
the runs of every task of one architecture are pooled by the ranking. The list of architectures is
fixed when the stage is created (stored with it), so that every worker and every resume works
through the same list. Racing (``search.racing``) adds tasks of one seed each, round by round.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from ..errors import NormsearchError
from ..recipe import Recipe
from ..records import A_BASELINE, A_FAILED, A_LRS, A_SEEDS, A_TASK, A_WORKER, STAGE_SEP, ArchRecord, run_key
from ..spec import Placement
from ..storage import open_storage, retry
from . import _optuna
from ._disk import write_json
from ._liveness import Heartbeat, reap_dead_trials
from ._loop import Search, _set_attrs
from ._open import StudyHandle


A_STAGE = "stage"  # a stage study's attribute: kind, settings and its entries
A_ROUND = "racing_round_"  # + n: one round of racing (what it saw and what it added)
A_RACE_END = "racing_end"  # why racing stopped


@dataclass
class Entry:
    """One architecture a stage trains: what the search knew of it."""

    label: str
    arch_id: str
    placement: dict
    lr: list[float]
    baseline: str | None = None
    search_rank: int | None = None
    search_mean: float | None = None
    search_ci: tuple[float | None, float | None] = (None, None)
    search_seeds: int = 0
    chosen_by: str | None = None  # a found placement: the ranking that put it in the top K ("confirmation", "search")


@dataclass(frozen=True)
class Task:
    label: str
    arch_id: str
    placement: dict
    baseline: str | None
    seeds: tuple[int, ...]
    lrs: tuple[float, ...]

    @property
    def key(self) -> str:
        return f"{self.arch_id}|{','.join(map(str, self.seeds))}|{','.join(map(repr, self.lrs))}"


@dataclass
class Stage:
    """A stage's definition: its kind, the settings it was created with (a resume must give the same),
    its entries and the recipe its runs are trained under."""

    kind: str
    settings: dict
    entries: list[Entry]
    recipe: Recipe
    seeds: list[int]
    test_bytes: int | None = None
    racing: Any = None  # RacingConfig or None
    decide: Any = None  # racing's rule: (handle, stage, racing) -> the next round (normsearch.stages.racing)
    lr_extend: int = 0  # the extending sweep within each task (a ladder's rung)
    rounds: list[dict] = field(default_factory=list)

    def tasks(self) -> list[Task]:
        out = [Task(e.label, e.arch_id, e.placement, e.baseline, tuple(self.seeds), tuple(e.lr))
               for e in self.entries]
        by_label = {e.label: e for e in self.entries}
        for rnd in self.rounds:
            for label, seed in rnd.get("added", []):
                e = by_label[label]
                out.append(Task(e.label, e.arch_id, e.placement, e.baseline, (int(seed),), tuple(e.lr)))
        return out


def stage_study_name(parent: str, kind: str) -> str:
    return f"{parent}{STAGE_SEP}{kind}"


def stage_recipe(parent: Recipe, kind: str, **changes) -> Recipe:
    """The parent's recipe for a stage: no space, no search of its own; ``changes`` replace sections."""
    search = replace(parent.search, trials=0, baselines=[], racing=None)
    return replace(parent, name=stage_study_name(parent.name, kind), space=None, search=search, **changes)


def find_stage(parent: StudyHandle, kind: str):
    """The stage study ``kind`` of a search, or None when it was never started."""
    import optuna

    store = open_storage(parent.storage_url, create=False)
    name = stage_study_name(parent.recipe.name, kind)
    try:
        return retry(lambda: optuna.load_study(study_name=name, storage=store), "open the stage")
    except KeyError:
        return None


def stage_names(parent: StudyHandle) -> list[str]:
    """The kinds of stage a search has (``confirm``, ``ladder-...``)."""
    import optuna

    store = open_storage(parent.storage_url, create=False)
    prefix = parent.recipe.name + STAGE_SEP
    summaries = retry(lambda: optuna.get_all_study_summaries(store, include_best_trial=False), "list the studies")
    return [s.study_name[len(prefix):] for s in summaries if s.study_name.startswith(prefix)]


def search_finished(parent: StudyHandle) -> None:
    """A NormsearchError unless the search has every architecture it asks for, none running: a stage
    takes its architectures (and their learning rates) from the finished search."""
    from ._census import census

    c = census(parent.study)
    need = Search(parent).need(c)
    if need > 0 or c.running:
        raise NormsearchError(
            f"the search of study {parent.recipe.name!r} is not finished ({need} architectures to go, "
            f"{len(c.running)} running): a stage takes its top placements from the finished search; run "
            f"`normsearch run` on it first")


def _settings_text(settings: dict) -> str:
    return " ".join(f"{k} {v}" for k, v in settings.items())


def _check_settings(parent: StudyHandle, kind: str, stored: dict, settings: dict) -> None:
    was = stored.get("settings") or {}
    if any(k in was and was[k] != v for k, v in settings.items()):
        raise NormsearchError(f"the {kind} stage of study {parent.recipe.name!r} was started with "
                              f"{_settings_text(was)}; run it again with those settings to resume it (it was "
                              f"given {_settings_text({k: v for k, v in settings.items() if k in was})})")


def open_stage(parent: StudyHandle, kind: str, settings: dict, make: "Any",
               wait_for_definition: float = 30.0) -> tuple[StudyHandle, Stage]:
    """Create or resume stage ``kind`` of a finished search. ``make()`` returns the Stage (entries,
    recipe, seeds). A new stage is created only once the search is finished and ``make()`` has
    succeeded, so a refused stage leaves nothing behind. A stage that exists is resumed with its
    stored entries, and only if ``settings`` are the ones it was created with (a setting a stage
    stored before that setting existed is not compared).

    Creating the stage's study is the lock between workers that open a new stage at once: the one
    whose creation succeeds stores the definition; the others wait for it (``wait_for_definition``
    seconds) and resume it as stored, or are refused if their settings differ. A stage whose creator
    died before storing its definition is defined by the next worker."""
    import optuna

    existing = find_stage(parent, kind)
    stored = retry(lambda: existing.user_attrs.get(A_STAGE), "read the stage") if existing is not None else None
    if stored is None:
        search_finished(parent)
    else:
        _check_settings(parent, kind, stored, settings)
    stage = make()
    store = open_storage(parent.storage_url)
    name = stage_study_name(parent.recipe.name, kind)
    # a stage's study never prunes (its tasks are trained whole) and samples nothing: loaded without
    # these, Optuna would give it its default MedianPruner
    load = lambda: optuna.load_study(study_name=name, storage=store, sampler=optuna.samplers.RandomSampler(seed=0),
                                     pruner=optuna.pruners.NopPruner())
    if existing is not None:
        study = retry(load, "open the stage")
    else:
        try:
            study = retry(lambda: optuna.create_study(study_name=name, storage=store, direction="minimize",
                                                      load_if_exists=False,
                                                      sampler=optuna.samplers.RandomSampler(seed=0),
                                                      pruner=optuna.pruners.NopPruner()), "create the stage")
        except optuna.exceptions.DuplicatedStudyError:  # another worker created it first: its definition holds
            study = retry(load, "open the stage")
            deadline = time.time() + wait_for_definition
            while stored is None and time.time() < deadline:
                stored = retry(lambda: study.user_attrs.get(A_STAGE), "read the stage")
                if stored is None:
                    time.sleep(0.5)
            if stored is not None:
                _check_settings(parent, kind, stored, settings)
    if stored is None:
        retry(lambda: study.set_user_attr(A_STAGE, {"kind": kind, "settings": settings, "seeds": stage.seeds,
                                                     "entries": [asdict(e) for e in stage.entries]}), "save the stage")
    else:
        stage.entries = [Entry(**{**e, "search_ci": tuple(e.get("search_ci") or (None, None))})
                         for e in stored["entries"]]
        stage.seeds = list(stored["seeds"])
    stage.rounds = _rounds(study)
    handle = StudyHandle(stage.recipe, study, parent.storage_url, parent.folder / kind)
    return handle, stage


def _rounds(study) -> list[dict]:
    ua = retry(lambda: dict(study.user_attrs), "read the stage")
    rounds = sorted((int(k[len(A_ROUND):]), v) for k, v in ua.items() if k.startswith(A_ROUND))
    return [v for _, v in rounds]


class StageSearch(Search):
    """One worker's share of a stage: every task trained once, then racing rounds."""

    def __init__(self, handle: StudyHandle, stage: Stage, display=None, verbose: bool = False, tokens=None):
        super().__init__(handle, display, verbose, tokens)
        self.stage = stage

    def _test_bytes(self) -> int | None:
        return self.stage.test_bytes

    def _runs_of(self, trial) -> list[tuple[int, float]]:
        ua = trial.user_attrs
        return [(int(s), float(lr)) for lr in ua.get(A_LRS) or [] for s in ua.get(A_SEEDS) or []]

    def tasks(self) -> dict[str, Task]:
        return {t.key: t for t in self.stage.tasks()}

    def enqueue_baselines(self):
        trials = retry(lambda: self.study.get_trials(deepcopy=False), "read")
        present = {t.user_attrs.get(A_TASK) for t in trials if t.state.name != "FAIL"}
        for key in self.tasks():
            if key not in present:
                attrs = {A_TASK: key}
                retry(lambda attrs=attrs: self.study.enqueue_trial({}, user_attrs=attrs), "enqueue a task")

    def _queued(self, keys: list[str]) -> bool:
        """Whether the tasks ``keys`` have a trial that is neither failed nor finished (one just asked
        for, say): then they are not queued again."""
        trials = retry(lambda: self.study.get_trials(deepcopy=False), "read")
        return all(any(t.user_attrs.get(A_TASK) == k and t.state.name not in ("FAIL", "COMPLETE", "PRUNED")
                       for t in trials) for k in keys)

    def _states(self):
        trials = retry(lambda: self.study.get_trials(deepcopy=False), "read the trials")
        done, running, waiting = {}, {}, set()
        for t in trials:
            key = t.user_attrs.get(A_TASK)
            if t.state.name in ("COMPLETE", "PRUNED") and key:
                done.setdefault(key, t)
            elif t.state.name == "RUNNING" and key:
                running.setdefault(key, t)
            elif t.state.name == "WAITING":
                waiting.add(key)
        return trials, done, running, waiting

    def _run(self):
        from ._census import census

        s = self.recipe.search
        self.enqueue_baselines()
        errors = 0
        while True:
            reap_dead_trials(self.study, s.grace, s.heartbeat)
            self.stage.rounds = _rounds(self.study)
            tasks = self.tasks()
            trials, done, running, waiting = self._states()
            if self.display is not None:
                self.display.study(len(set(tasks) & set(done)), len(tasks), self.stage.kind)
            missing = [k for k in tasks if k not in done]
            if not missing and not running:
                if self.race(done):
                    self.enqueue_baselines()
                    continue
                return
            if not waiting:
                unclaimed = [k for k in missing if k not in running]
                if unclaimed and not self._queued(unclaimed):  # a task whose trial failed: queue it again
                    self.enqueue_baselines()
                    continue
                if not self.help(census(self.study, trials=trials)):
                    time.sleep(min(0.5 if self.shares_runs() else 2.0, s.heartbeat))
                continue
            trial = retry(self.study.ask, "ask for a task")
            _, errors = self.attempt(trial, errors)

    def evaluate(self, trial) -> str:
        from optuna.trial import TrialState

        s, L, tid = self.recipe.search, self.recipe.model.n_layers, _optuna.trial_id(trial)
        tasks = self.tasks()
        key = trial.user_attrs.get(A_TASK)
        if key not in tasks:  # a trial asked for without a task (after a failure): nothing to do
            _set_attrs(self.study, tid, {A_FAILED: "surplus: no task"})
            retry(lambda: self.study.tell(trial, state=TrialState.FAIL), "release a surplus trial")
            return "surplus"
        task = tasks[key]
        placement = Placement.from_dict(task.placement)
        record = ArchRecord(arch_id=task.arch_id, label=task.label, baseline=task.baseline,
                            placement=task.placement, sites=placement.resolve(L).describe(),
                            trial_number=trial.number)
        attrs = {**record.identity_attrs(), A_WORKER: self.worker, A_SEEDS: list(task.seeds), A_LRS: list(task.lrs)}
        if task.baseline:
            attrs[A_BASELINE] = task.baseline
        _set_attrs(self.study, tid, attrs)
        # A task is trained once: reuse a finished one; while an earlier trial trains it (workers that
        # open a stage at once both queue its tasks), help train its runs, or wait for them.
        from ._census import census

        while True:
            trials, done, _, _ = self._states()
            if key in done:
                return self._reuse(trial, done[key])
            earlier = [t for t in trials if t.state.name == "RUNNING" and t.user_attrs.get(A_TASK) == key
                       and t.number < trial.number]
            if not earlier:
                break
            with Heartbeat(self.study, tid, s.heartbeat):
                if not self.help(census(self.study, exclude_number=trial.number, trials=trials)):
                    time.sleep(min(2.0, s.heartbeat))
            reap_dead_trials(self.study, s.grace, s.heartbeat)
        t = replace(self._train_config(), seeds=list(task.seeds), lr=list(task.lrs),
                    lr_extend=self.stage.lr_extend if len(task.lrs) > 1 else 0)
        with Heartbeat(self.study, tid, s.heartbeat):
            state, runs, score = self.train(trial, placement, task.arch_id, task.label, t)
        record.state = state.name
        record.values = None if state == TrialState.PRUNED else [score.value]
        record.score = score.to_dict() if score else None
        record.runs = [run_key(r.seed, r.lr) for r in runs]
        write_json(self.handle.runs_dir / task.arch_id / f"task-{trial.number}.json", record.to_json())
        _set_attrs(self.study, tid, record.result_attrs())
        retry(lambda: self.study.tell(trial, record.values, state=state), "store the result")
        return "trained"

    # -- racing ------------------------------------------------------------------------------------

    def race(self, done: dict) -> bool:
        """One round of racing, when the stage races and has not stopped: seeds for the contenders.
        True when there are tasks to train (this round's, or one another worker decided meanwhile).

        Workers that finish the last task of a round at once may both decide the next round: the
        stage's rounds are read again before deciding and before storing, and a round (or the end)
        that another worker stored first is adopted. A window remains between that last read and the
        write, in which both may store the round; both decided from the same finished runs with the
        same seeded ranking, so they store the same decision."""
        racing = self.stage.racing
        if racing is None or self.stage.decide is None or self._race_ended():
            return False
        self.stage.rounds = _rounds(self.study)
        if any(key not in done for key in self.tasks()):  # another worker added a round since this one looked
            return True
        n = len(self.stage.rounds)
        decision = self.stage.decide(self.handle, self.stage, racing)
        if self._race_ended():
            return False
        if len(_rounds(self.study)) > n:  # another worker stored round n first: train that one
            self.stage.rounds = _rounds(self.study)
            return True
        if decision.get("stop"):
            retry(lambda: self.study.set_user_attr(A_RACE_END, decision), "store the end of racing")
            return False
        retry(lambda: self.study.set_user_attr(f"{A_ROUND}{n}", decision), "store a round of racing")
        self.stage.rounds = _rounds(self.study)
        return True

    def _race_ended(self) -> bool:
        return bool(retry(lambda: self.study.user_attrs.get(A_RACE_END), "read the stage"))


def stage_status(parent: StudyHandle) -> list[str]:
    """``normsearch status`` lines for the stages of a search: tasks done, running, racing."""
    import optuna

    lines = []
    try:
        kinds = stage_names(parent)
    except NormsearchError:
        return lines
    store = open_storage(parent.storage_url, create=False)
    for kind in sorted(kinds):
        study = optuna.load_study(study_name=stage_study_name(parent.recipe.name, kind), storage=store)
        trials = study.get_trials(deepcopy=False)
        info = study.user_attrs.get(A_STAGE) or {}
        keys = {t.user_attrs.get(A_TASK) for t in trials if t.user_attrs.get(A_TASK)}
        done = {t.user_attrs.get(A_TASK) for t in trials if t.state.name in ("COMPLETE", "PRUNED")}
        running = sum(t.state.name == "RUNNING" for t in trials)
        extra = sum(len(v.get("added", [])) for k, v in study.user_attrs.items() if k.startswith(A_ROUND))
        end = (study.user_attrs.get(A_RACE_END) or {}).get("stop")
        race = f"; racing added {extra} runs" + (f", stopped: {end}" if end else "") if extra or end else ""
        lines.append(f"  stage {kind}: {len(info.get('entries', []))} architectures, {len(done & keys)}/{len(keys)} "
                     f"tasks done, {running} running{race}")
    return lines

