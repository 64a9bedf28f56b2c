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
from ..records import A_BASELINE, A_LRS, A_SEEDS, A_TASK, STAGE_SEP, run_keys
from ..search import Search, StudyHandle, TaskSource, census
from ..search import Task as SearchTask
from ..grid import parse_tag, variant_tag
from ..spec import Placement
from ..storage import open_storage, retry


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
    variant: dict = field(default_factory=dict)  # the chosen cell's variant of the tuned grid (init, warmup)


@dataclass(frozen=True)
class Task:
    label: str
    arch_id: str
    placement: dict
    baseline: str | None
    seeds: tuple[int, ...]
    lrs: tuple[float, ...]
    tag: str = ""  # the variant of the tuned grid its runs train in (normsearch.grid.variant_tag)

    @property
    def key(self) -> str:
        key = f"{self.arch_id}|{','.join(map(str, self.seeds))}|{','.join(map(repr, self.lrs))}"
        return key + (f"|{self.tag}" if self.tag else "")


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
    design: dict | None = None  # the confirmation's: its primary contrasts and the power its seeds give

    def tasks(self) -> list[Task]:
        out = [Task(e.label, e.arch_id, e.placement, e.baseline, tuple(self.seeds), tuple(e.lr), variant_tag(e.variant))
               for e in self.entries]
        by_label = {e.label: e for e in self.entries}
        for rnd in self.rounds:
            for label, seed in rnd.get("added", []):
                e = by_label[label]
                out.append(Task(e.label, e.arch_id, e.placement, e.baseline, (int(seed),), tuple(e.lr),
                                variant_tag(e.variant)))
        return out


def stage_study_name(parent: str, kind: str) -> str:
    return f"{parent}{STAGE_SEP}{kind}"


def stage_recipe(parent: Recipe, kind: str, **changes) -> Recipe:
    """The parent's recipe for a stage: no space, no search of its own; ``changes`` replace sections."""
    search = replace(parent.search, trials=0, baselines=[], racing=None)
    return replace(parent, name=stage_study_name(parent.name, kind), space=None, search=search, **changes)


def with_seeds(recipe: Recipe, seeds) -> Recipe:
    """``recipe`` naming the seeds a stage trains (its tasks carry them; the recipe is what its report
    and export read: a rung's report said the search's seeds 0, 1, 2 for runs on 2000 to 2002)."""
    return replace(recipe, train=replace(recipe.train, seeds=list(seeds)))


def resolution(search: float | None, given: float | None) -> float:
    """A stage's sweep refinement in decades, 0 for none: ``given``, or when it is None the search's
    ``train.lr_resolution`` (a stage stored before the setting existed was trained with that)."""
    return float(given) if given is not None else float(search or 0)


def with_sweep(train, lr_extend: int | None, lr_resolution: float | None):
    """``train`` (a TrainConfig) with a stage's sweep: its ``lr_extend`` unless given, its refinement as
    :func:`resolution` says (None: none)."""
    return replace(train, lr_extend=train.lr_extend if lr_extend is None else lr_extend,
                   lr_resolution=resolution(train.lr_resolution, lr_resolution) or None)


def shared_settings(recipe: Recipe, settings: dict, keys) -> dict:
    """The settings a stage's parts share (``keys``), in one form to compare with the stored ones: a
    baseline list or a sweep extension left to the search (None) resolved to the search's, and the
    refinement by :func:`resolution`, as the runs had them."""
    out = {k: settings.get(k) for k in keys}
    out["baselines"] = list(recipe.search.baselines if out["baselines"] is None else out["baselines"])
    if out["lr_extend"] is None:
        out["lr_extend"] = recipe.train.lr_extend
    out["lr_resolution"] = resolution(recipe.train.lr_resolution, out["lr_resolution"])
    return out


def recipe_with(parent: Recipe, overrides: dict, what: str) -> Recipe:
    """The search's recipe with ``overrides`` (``section.key -> value``, as ``--section.key value``), checked
    as a recipe is, its space and stage sections dropped; a bad override is one line led by ``what``."""
    from ..recipe import _apply_overrides, recipe_from_dict

    raw = {**parent.raw, "space": None, "confirm": None, "ladder": None}
    try:
        return recipe_from_dict(_apply_overrides(raw, overrides))
    except NormsearchError as e:
        raise NormsearchError(f"{what}: {e}") from None


def train_stages(opened, display=None, verbose: bool = False) -> list:
    """Train every stage of ``opened`` ([(key, handle, stage)], e.g. a ladder's rungs) to the end, in order.
    Returns [(key, handle)]."""
    out = []
    for key, handle, stage in opened:
        run_stage(handle, stage, display, verbose)
        out.append((key, handle))
    return out


def has_finished_trial(handle: StudyHandle) -> bool:
    """Whether any trial of the stage ``handle`` finished (it has runs to rank or to measure); False for a
    stage still to train."""
    from optuna.trial import TrialState

    return bool(handle.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))


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
    from ..search import Sampled

    c = census(parent.study)
    need = Sampled().need(Search(parent), c)
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
        info = {"kind": kind, "settings": settings, "seeds": stage.seeds, "entries": [asdict(e) for e in stage.entries]}
        if stage.design is not None:
            info["design"] = stage.design
        retry(lambda: study.set_user_attr(A_STAGE, info), "save the stage")
    else:
        stage.entries = [Entry(**{**e, "search_ci": tuple(e.get("search_ci") or (None, None))})
                         for e in stored["entries"]]
        stage.seeds = list(stored["seeds"])
        stage.design = stored.get("design")
    stage.rounds = stored_rounds(study)
    handle = StudyHandle(with_seeds(stage.recipe, stage.seeds), study, parent.storage_url, parent.folder / kind)
    return handle, stage


def stored_rounds(study) -> list[dict]:
    ua = retry(lambda: dict(study.user_attrs), "read the stage")
    rounds = sorted((int(k[len(A_ROUND):]), v) for k, v in ua.items() if k.startswith(A_ROUND))
    return [v for _, v in rounds]


class StageTasks(TaskSource):
    """A stage's fixed list of tasks as the loop's source: every task trained once, then racing
    rounds."""

    key_attr = A_TASK

    def __init__(self, stage: Stage):
        self.stage = stage

    def tasks(self) -> dict[str, Task]:
        return {t.key: t for t in self.stage.tasks()}

    def prepare(self, search) -> None:
        self._enqueue(search, retry(lambda: search.study.get_trials(deepcopy=False), "read"))

    def _enqueue(self, search, trials) -> bool:
        """Queue every task with no trial that is waiting, running or finished. True when one was."""
        live = {t.user_attrs.get(A_TASK) for t in trials if t.state.name != "FAIL"}
        queued = False
        for key in self.tasks():
            if key not in live:
                attrs = {A_TASK: key}
                retry(lambda attrs=attrs: search.study.enqueue_trial({}, user_attrs=attrs), "enqueue a task")
                queued = True
        return queued

    def refill(self, search, c) -> bool:
        return self._enqueue(search, c.trials)

    def need(self, search, c) -> int:
        self.stage.rounds = stored_rounds(search.study)  # another worker may have added a round
        return len([k for k in self.tasks() if k not in c.done])

    def progress(self, search, c) -> tuple[int, int, str]:
        tasks = self.tasks()
        return len(set(tasks) & set(c.done)), len(tasks), self.stage.kind

    def runs(self, search, c) -> tuple[int, int]:
        size = {k: len(t.seeds) * len(t.lrs) for k, t in self.tasks().items()}
        live = sum(len(run_keys(t.user_attrs)) for t in c.running
                   if t.user_attrs.get(A_TASK) in size and t.user_attrs.get(A_TASK) not in c.done)
        return sum(n for k, n in size.items() if k in c.done) + live, sum(size.values())

    def task(self, search, trial) -> SearchTask | None:
        task = self.tasks().get(trial.user_attrs.get(A_TASK))
        if task is None:  # a trial asked for without a task (after a failure): nothing to do
            return None
        t = self._train(search, task)
        attrs = {A_SEEDS: list(task.seeds), A_LRS: list(task.lrs)}
        if task.baseline:
            attrs[A_BASELINE] = task.baseline
        return SearchTask(task.key, task.arch_id, task.label, Placement.from_dict(task.placement), task.baseline, t,
                          attrs)

    def record_path(self, search, trial, task: SearchTask):
        return search.handle.runs_dir / task.arch_id / f"task-{trial.number}.json"

    def test_bytes(self) -> int | None:
        return self.stage.test_bytes

    def _train(self, search, task: Task):
        """The training settings of a task: its seeds and learning rates, in its one variant (a grid of one
        value per setting), the sweep refined only where the stage sweeps (a ladder's rung)."""
        grid = {k: [v] for k, v in parse_tag(task.tag).items()}
        return search.train_config(seeds=list(task.seeds), lr=list(task.lrs), grid=grid,
                                   lr_extend=self.stage.lr_extend if len(task.lrs) > 1 else 0,
                                   lr_resolution=search.recipe.train.lr_resolution if len(task.lrs) > 1 else None)

    def train_of(self, search, trial):
        task = self.tasks().get(trial.user_attrs.get(A_TASK))
        return None if task is None else self._train(search, task)

    # -- racing ------------------------------------------------------------------------------------

    def more(self, search, c) -> bool:
        """One round of racing, when the stage races and has not stopped: seeds for the contenders.
        True when there are tasks to train (this round's, or one another worker decided meanwhile).

        Workers that finish the last task of a round at once may both decide the next round: the
        stage's rounds are read again before deciding and before storing, and a round (or the end)
        that another worker stored first is adopted. A window remains between that last read and the
        write, in which both may store the round; both decided from the same finished runs with the
        same seeded ranking, so they store the same decision."""
        study, racing = search.study, self.stage.racing
        if racing is None or self.stage.decide is None or self._race_ended(study):
            return False
        self.stage.rounds = stored_rounds(study)
        if any(key not in c.done for key in self.tasks()):  # another worker added a round since this one looked
            return self._enqueue(search, c.trials) or True
        n = len(self.stage.rounds)
        decision = self.stage.decide(search.handle, self.stage, racing)
        if self._race_ended(study):
            return False
        if len(stored_rounds(study)) > n:  # another worker stored round n first: train that one
            self.stage.rounds = stored_rounds(study)
        elif decision.get("stop"):
            retry(lambda: study.set_user_attr(A_RACE_END, decision), "store the end of racing")
            return False
        else:
            retry(lambda: study.set_user_attr(f"{A_ROUND}{n}", decision), "store a round of racing")
            self.stage.rounds = stored_rounds(study)
        self._enqueue(search, retry(lambda: study.get_trials(deepcopy=False), "read"))
        return True

    @staticmethod
    def _race_ended(study) -> bool:
        return bool(retry(lambda: study.user_attrs.get(A_RACE_END), "read the stage"))


def run_stage(handle: StudyHandle, stage: Stage, display=None, verbose: bool = False, tokens=None) -> StudyHandle:
    """Train a stage to the end (its racing rounds included) as one worker of it."""
    Search(handle, display, verbose, tokens, source=StageTasks(stage)).run()
    return handle


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

