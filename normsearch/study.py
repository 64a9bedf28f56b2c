"""The search: an Optuna study whose trials are architectures.

One trial = one placement evaluated over the recipe's seeds and learning-rate sweep, every run
trained exactly as the baselines are. The loop is Optuna's ask-and-tell, run by normsearch so that

- the baselines go first (enqueued, flagged ``baseline``), as ordinary points of the space where
  the space can express them;
- ``search.trials`` counts distinct searched architectures in total, across restarts and workers;
- an architecture already evaluated (same ``arch_id``) is never trained again: a repeated proposal
  reuses the stored result, and a proposal of an architecture another worker is training waits
  for it;
- a trial whose worker died (kill -9, power loss, lost machine) is detected, by its process being
  gone on this host or by a heartbeat that stopped for ``search.grace`` seconds, marked failed and
  retried; Ctrl-C marks the interrupted trial so that the next run redoes it;
- a storage that goes away mid-run (the database restarts) is waited for: every read and write of
  the study is retried with backoff (:func:`normsearch.storage.retry`), the heartbeat keeps
  trying, and a worker does not take another's trial for dead across such an outage;
- every finished run is written to ``results/<name>/runs/`` before it is sent to storage, and a
  run of ``normsearch run`` sends storage whatever it lacks.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import socket
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import _yaml
from .baselines import baseline as get_baseline
from .errors import NormsearchError
from .recipe import Recipe
from .scoring import Score, score_runs
from .spec import Placement
from . import storage as _storage
from .storage import mask, open_storage, retry

log = logging.getLogger("normsearch")

# user attributes of a trial
A_ARCH, A_BASELINE, A_LABEL, A_PLACEMENT, A_SITES = "arch_id", "baseline", "label", "placement", "sites"
A_WORKER, A_HEARTBEAT, A_SCORE, A_REUSED = "worker", "heartbeat", "score", "reused_from"
A_FAILED, A_RUNS = "failure", "runs"  # A_RUNS: the list of run keys; each run is its own attribute
RUN_PREFIX = "run:"
MAX_RETRIES = 3

FINGERPRINT_EXCLUDE = {"train": {"threads", "kernels", "device", "devices", "strategy"}, "data": {"cache_dir"}}


class StudyInterrupted(Exception):
    """Ctrl-C: the running trial was marked for a rerun; finished trials are kept."""


def worker_host() -> str:
    """This machine's name in worker ids: ``$NORMSEARCH_WORKER_HOST``, else the hostname. Set it where
    machines share a hostname but not their processes (containers cloned from one image, pods with
    host networking): a worker whose host name matches takes the process id for one on its own
    machine, and a pid it cannot see for a dead worker."""
    return os.environ.get("NORMSEARCH_WORKER_HOST") or socket.gethostname()


def worker_id() -> str:
    return f"{worker_host()}:{os.getpid()}"


def run_key(seed: int, lr: float) -> str:
    return f"{RUN_PREFIX}s{seed}:lr{lr:g}"


# --------------------------------------------------------------------------------------------------
# Opening a study


def _directions(recipe: Recipe) -> list[str]:
    second = recipe.search.second_objective
    return ["minimize"] + ({"params": ["minimize"], "throughput": ["maximize"]}.get(second, []))


def make_sampler(recipe: Recipe, seed: int):
    """The sampler, its settings pinned explicitly: Optuna 5 turned on multivariate TPE and the
    constant liar by default; we set both (and grouping for the conditional granularity choices)
    so that a study means the same under Optuna 4 and 5. TPE's prior and endpoint options are
    deprecated in Optuna 5 and left at their fixed behaviour."""
    import optuna

    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    return SAMPLERS[recipe.search.sampler](recipe.search, seed)


def _tpe(s, seed):
    from optuna.samplers import TPESampler

    return TPESampler(seed=seed, n_startup_trials=s.startup_trials, n_ei_candidates=24, multivariate=True,
                      group=True, constant_liar=True)


def _gp(s, seed):
    from optuna.samplers import GPSampler

    return GPSampler(seed=seed, n_startup_trials=s.startup_trials, deterministic_objective=False)


def _random(s, seed):
    from optuna.samplers import RandomSampler

    return RandomSampler(seed=seed)


def _nsga2(s, seed):
    from optuna.samplers import NSGAIISampler

    return NSGAIISampler(seed=seed, population_size=max(4, s.startup_trials))


#: search.sampler -> (SearchConfig, seed) -> an Optuna sampler
SAMPLERS = {"tpe": _tpe, "gp": _gp, "random": _random, "grid": lambda s, seed: _grid_sampler(seed), "nsga2": _nsga2}


def _grid_sampler(seed: int):
    """Optuna's brute-force sampler, made fit for this loop:

    - the trials without parameters (baselines outside the space, trials another worker has just
      asked for) are hidden from it: it takes a finished one for a point with no parameters and
      fails (``param_name mismatch``) on every later proposal;
    - it does not call ``study.stop()`` once the grid is covered: that only works inside
      ``study.optimize`` (here it raises from ``tell``, after the trial was stored); when to stop
      is the loop's business (``search.trials``)."""
    import optuna

    class WithParams:
        def __init__(self, study, current: int):
            self._study, self._current = study, current

        def __getattr__(self, name):
            return getattr(self._study, name)

        @property
        def _storage(self):
            return self

        @property
        def _study_id(self):
            return self._study._study_id

        def get_all_trials(self, study_id, deepcopy=False, states=None):
            trials = self._study._storage.get_all_trials(study_id, deepcopy=deepcopy, states=states)
            return [t for t in trials if t.params or t.number == self._current]

    class GridSampler(optuna.samplers.BruteForceSampler):
        def sample_independent(self, study, trial, param_name, param_distribution):
            return super().sample_independent(WithParams(study, trial.number), trial, param_name, param_distribution)

        def after_trial(self, study, trial, state, values) -> None:
            return None

    return GridSampler(seed=seed)


def make_pruner(recipe: Recipe):
    """Pruners see a value at every evaluation, at its training step (run i of the sweep is offset by
    i x train.steps), never per epoch."""
    return PRUNERS[recipe.search.pruner](recipe)


def _median(r: Recipe):
    from optuna.pruners import MedianPruner

    return MedianPruner(n_startup_trials=r.search.startup_trials, n_warmup_steps=r.train.eval_every)


def _halving(r: Recipe):
    from optuna.pruners import SuccessiveHalvingPruner

    return SuccessiveHalvingPruner(min_resource=r.train.eval_every)


def _hyperband(r: Recipe):
    from optuna.pruners import HyperbandPruner

    return HyperbandPruner(min_resource=r.train.eval_every, max_resource=r.train.steps * len(r.train.runs))


def _no_pruning(r: Recipe):
    from optuna.pruners import NopPruner

    return NopPruner()


#: search.pruner -> (Recipe) -> an Optuna pruner; its resource is the training step
PRUNERS = {"none": _no_pruning, "median": _median, "halving": _halving, "hyperband": _hyperband}


def fingerprint(raw: dict) -> dict:
    """The parts of a resolved recipe that change what a run measures: a study's trials are only
    comparable when these agree."""
    out = {}
    for section in ("model", "data", "train", "space"):
        value = raw.get(section)
        if isinstance(value, dict):
            value = {k: v for k, v in value.items() if k not in FINGERPRINT_EXCLUDE.get(section, set())}
        out[section] = value
    search = raw.get("search") or {}
    out["search"] = {k: search.get(k) for k in ("objective", "second_objective", "norm_kind")}
    return out


def _first_difference(a: Any, b: Any, path: str = "") -> str | None:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in list(a) + [k for k in b if k not in a]:
            d = _first_difference(a.get(k), b.get(k), f"{path}.{k}" if path else k)
            if d:
                return d
        return None
    return None if a == b else f"{path}: {a!r} in the study, {b!r} now"


@dataclass
class StudyHandle:
    """A study, its recipe and its results folder."""

    recipe: Recipe
    study: Any  # optuna.Study
    storage_url: str
    folder: Path

    @property
    def runs_dir(self) -> Path:
        return self.folder / "runs"

    @property
    def checkpoints_dir(self) -> Path:
        return self.folder / "checkpoints"


def open_study(recipe: Recipe, storage: str | None = None, create: bool = True, seed_offset: int = 0) -> StudyHandle:
    """Open (or create) the recipe's study and check that it was run with the same recipe."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    url = storage or recipe.storage_url
    folder = recipe.folder
    folder.mkdir(parents=True, exist_ok=True)
    store = open_storage(url)

    def create_or_load():
        existing = None
        try:
            existing = optuna.load_study(study_name=recipe.name, storage=store)
        except KeyError:
            if not create:
                raise NormsearchError(f"no study named {recipe.name!r} in {mask(url)}") from None
        n_existing = len(existing.get_trials(deepcopy=False)) if existing else 0
        return optuna.create_study(
            study_name=recipe.name, storage=store, directions=_directions(recipe), load_if_exists=True,
            sampler=make_sampler(recipe, recipe.search.seed + n_existing + seed_offset), pruner=make_pruner(recipe),
        )

    study = retry(create_or_load, "open the study")
    stored = study.user_attrs.get("recipe")
    now = recipe.raw
    if stored is None:
        retry(lambda: study.set_user_attr("recipe", now), "save the recipe")
    else:
        diff = _first_difference(fingerprint(stored), fingerprint(now))
        if diff:
            raise NormsearchError(
                f"study {recipe.name!r} was run with another recipe ({diff}); its trials would not be comparable: "
                f"keep the recipe or give this one a new name (--name NEW)"
            )
        if list(_directions(recipe)) != [d.name.lower() for d in study.directions]:
            raise NormsearchError(f"study {recipe.name!r} has other objectives; give this recipe a new name")
    (folder / "recipe.yaml").write_text(_yaml.dumps(now))
    return StudyHandle(recipe, study, url, folder)


# --------------------------------------------------------------------------------------------------
# Looking at the trials


@dataclass
class Census:
    """Where a study stands."""

    done: dict[str, Any] = field(default_factory=dict)  # arch_id -> first finished trial
    baselines_done: set[str] = field(default_factory=set)
    baseline_archs: set[str] = field(default_factory=set)
    running: list[Any] = field(default_factory=list)
    waiting: list[Any] = field(default_factory=list)
    failed: list[Any] = field(default_factory=list)

    @property
    def searched_done(self) -> int:
        return len(set(self.done) - self.baseline_archs)


def census(study, exclude_number: int | None = None) -> Census:
    from optuna.trial import TrialState

    c = Census()
    trials = retry(lambda: study.get_trials(deepcopy=False), "read the trials")
    for t in trials:
        if t.number == exclude_number:
            continue
        ua = t.user_attrs
        if ua.get(A_BASELINE) and ua.get(A_ARCH) and t.state != TrialState.FAIL:
            c.baseline_archs.add(ua[A_ARCH])
        if t.state in (TrialState.COMPLETE, TrialState.PRUNED) and ua.get(A_ARCH):
            c.done.setdefault(ua[A_ARCH], t)
            if ua.get(A_BASELINE):
                c.baselines_done.add(ua[A_BASELINE])
        elif t.state == TrialState.RUNNING:
            c.running.append(t)
        elif t.state == TrialState.WAITING:
            c.waiting.append(t)
        elif t.state == TrialState.FAIL:
            c.failed.append(t)
    return c


def trial_runs(trial) -> list[dict]:
    """The per-run records stored with a trial, in training order."""
    keys = trial.user_attrs.get(A_RUNS) or [k for k in trial.user_attrs if k.startswith(RUN_PREFIX)]
    return [trial.user_attrs[k] for k in keys if k in trial.user_attrs]


# --------------------------------------------------------------------------------------------------
# Dead trials


def _alive_here(worker: str | None) -> bool | None:
    """True/False when ``worker`` ran on this host (its process exists or not); None otherwise."""
    if not worker or ":" not in worker:
        return None
    host, _, pid = worker.rpartition(":")
    if host != worker_host() or not pid.isdigit():
        return None
    if int(pid) == os.getpid():
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# trial -> (the heartbeat last read, when this process first read that value; time.monotonic())
_watched: dict[tuple, tuple[float, float]] = {}


def _silent_for(study, t, beat: float, now: float) -> float:
    """How long this process has watched the trial's heartbeat stand still, not counting time
    before this process's own last storage trouble (a worker cannot beat while the database is
    down, so an outage is no evidence of death)."""
    key = (study.study_name, t._trial_id)
    seen = _watched.get(key)
    if seen is None or seen[0] != beat:
        _watched[key] = (beat, now)
        return 0.0
    return now - max(seen[1], _storage.last_trouble())


def reap_dead_trials(study, grace: float, heartbeat: float | None = None) -> list[int]:
    """Fail the running trials whose worker is gone and enqueue each for a retry. Returns their
    numbers. A worker on this host is gone when its process is; one elsewhere when its heartbeat is
    ``grace`` seconds old and has not moved while this process watched it for twice the heartbeat
    interval (``heartbeat``, default ``grace / 2``): the second condition makes the verdict immune
    to clocks that disagree between machines and to a database outage that held the heartbeat
    back."""
    from optuna.trial import TrialState

    confirm = 2 * heartbeat if heartbeat else grace / 2
    reaped = []
    running = census(study).running
    ids = {t._trial_id for t in running}
    for key in [k for k in _watched if k[0] == study.study_name and k[1] not in ids]:
        del _watched[key]  # finished since
    for t in running:
        ua = t.user_attrs
        alive = _alive_here(ua.get(A_WORKER))
        if alive is True:
            continue
        if alive is None:
            last = ua.get(A_HEARTBEAT) or (t.datetime_start.timestamp() if t.datetime_start else time.time())
            watched = _silent_for(study, t, last, time.monotonic())
            if time.time() - last < grace or watched < confirm:
                continue
            why = f"no heartbeat for {time.time() - last:.0f} s"
        else:
            why = "its process is gone"
        try:  # the reason first: a finished trial takes no more attributes
            retry(lambda t=t, why=why: study._storage.set_trial_user_attr(t._trial_id, A_FAILED, f"dead worker: {why}"),
                  "record a dead trial")
            ok = retry(lambda t=t: study._storage.set_trial_state_values(t._trial_id, state=TrialState.FAIL),
                       "mark a dead trial")
        except Exception as e:  # another worker got there first
            if type(e).__name__ == "UpdateFinishedTrialError":
                continue
            raise
        _watched.pop((study.study_name, t._trial_id), None)
        if ok:
            _enqueue_retry(study, t)
            reaped.append(t.number)
            log.warning("trial %d of %s was left running by a dead worker (%s); it will be retried",
                        t.number, ua.get(A_WORKER), why)
    return reaped


def _enqueue_retry(study, t) -> None:
    import optuna

    history = list(t.system_attrs.get("retry_history", [])) + [t.number]
    if len(history) > MAX_RETRIES:
        log.warning("trial %d failed %d times; not retrying it again", t.number, len(history))
        return
    keep = {k: v for k, v in t.user_attrs.items() if k in (A_BASELINE, A_LABEL)}
    retry(lambda: study.add_trial(optuna.trial.create_trial(
        state=optuna.trial.TrialState.WAITING, params=t.params, distributions=t.distributions,
        user_attrs=keep, system_attrs={"failed_trial": t.number, "retry_history": history},
    )), "enqueue a retry")


class Heartbeat:
    """Writes the time into a running trial every ``interval`` seconds, so other workers can tell a
    long trial from a dead one (it beats for as long as the trial runs, however long that is)."""

    def __init__(self, study, trial_id: int, interval: float):
        self.study, self.trial_id, self.interval = study, trial_id, interval
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._beat, daemon=True, name="normsearch-heartbeat")

    def _beat(self):
        wait = self.interval
        while not self.stopped.wait(wait):
            try:
                self.study._storage.set_trial_user_attr(self.trial_id, A_HEARTBEAT, time.time())
                wait = self.interval
            except Exception as e:  # a missed beat is not fatal; a finished trial ends the loop
                if type(e).__name__ == "UpdateFinishedTrialError":
                    return
                _storage.note_trouble()
                wait = min(self.interval, 1.0)  # the database is back soon: beat as soon as it is
                log.debug("heartbeat failed: %s", e)

    def __enter__(self):
        retry(lambda: self.study._storage.set_trial_user_attr(self.trial_id, A_HEARTBEAT, time.time()),
              "write the heartbeat")
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stopped.set()
        self.thread.join(timeout=5)


# --------------------------------------------------------------------------------------------------
# Evaluating one architecture


def _write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, default=float))
    os.replace(tmp, path)


def _set_attrs(study, trial_id: int, attrs: dict[str, Any]) -> None:
    for k, v in attrs.items():
        retry(lambda k=k, v=v: study._storage.set_trial_user_attr(trial_id, k, v), f"store {k}")


class _Search:
    def __init__(self, handle: StudyHandle, display=None, verbose: bool = False, tokens=None):
        self.h, self.r = handle, handle.recipe
        self.study = handle.study
        self.display, self.verbose = display, verbose
        self.tokens = tokens
        self.multi = len(_directions(self.r)) > 1
        self.worker = worker_id()

    # -- bookkeeping -----------------------------------------------------------------------------

    def target(self) -> int:
        return len(self.r.search.baselines) + self.r.search.trials

    def enqueue_baselines(self):
        existing = {t.user_attrs.get(A_BASELINE) for t in retry(lambda: self.study.get_trials(deepcopy=False), "read")
                    if t.state.name != "FAIL"}
        L = self.r.model.n_layers
        for name in self.r.search.baselines:
            if name in existing:
                continue
            p = get_baseline(name, self.r.search.norm_kind)
            params = self.r.space.params_of(p, L) if self.r.space is not None else None
            attrs = {A_BASELINE: name, A_LABEL: name}
            retry(lambda params=params, attrs=attrs: self.study.enqueue_trial(params or {}, user_attrs=attrs),
                  "enqueue a baseline")

    def need(self, c: Census) -> int:
        baselines_left = len([b for b in self.r.search.baselines if b not in c.baselines_done])
        return baselines_left + max(0, self.r.search.trials - c.searched_done)

    def status_line(self, c: Census) -> str:
        best = best_base = None
        for t in c.done.values():
            if t.state.name != "COMPLETE" or t.values is None:
                continue
            v = t.values[0]
            if t.user_attrs.get(A_BASELINE):
                if best_base is None or v < best_base[0]:
                    best_base = (v, t.user_attrs[A_BASELINE])
            if best is None or v < best[0]:
                best = (v, t.user_attrs.get(A_LABEL) or f"t{t.number}")
        parts = []
        if best:
            parts.append(f"best {best[0]:.4f} ({best[1]})")
        if best_base:
            parts.append(f"best baseline {best_base[0]:.4f} ({best_base[1]})")
        return "  ".join(parts)

    def show(self, c: Census):
        if self.display is not None:
            done = len([b for b in self.r.search.baselines if b in c.baselines_done]) + min(
                c.searched_done, self.r.search.trials)
            self.display.study(done, self.target(), self.status_line(c))

    # -- the loop ----------------------------------------------------------------------------------

    def run(self):
        sync_local_results(self.h)
        self.enqueue_baselines()
        errors = 0
        proposals_without_news = 0
        while True:
            reap_dead_trials(self.study, self.r.search.grace, self.r.search.heartbeat)
            c = census(self.study)
            self.show(c)
            need = self.need(c)
            if need <= 0 and not c.running and not c.waiting:
                return
            if not c.waiting and need <= len(c.running):
                time.sleep(min(2.0, self.r.search.heartbeat))  # others are on it; wait in case they die
                continue
            if proposals_without_news > 50 * max(1, need):
                log.warning("the sampler keeps proposing architectures that were already evaluated; "
                            "the space may hold fewer than search.trials distinct architectures")
                return
            trial = retry(self.study.ask, "ask for a trial")
            try:
                outcome = self.evaluate(trial)
                errors = 0
            except KeyboardInterrupt:
                self._fail(trial, "interrupted (Ctrl-C)", retry_it=True)
                raise StudyInterrupted() from None
            except NormsearchError:
                self._fail(trial, "stopped by an error", retry_it=True)
                raise
            except Exception as e:
                self._fail(trial, f"error: {type(e).__name__}: {e}", retry_it=False)
                errors += 1
                log.error("trial %d failed: %s: %s", trial.number, type(e).__name__, e)
                if errors >= 3:
                    raise
                continue
            proposals_without_news = proposals_without_news + 1 if outcome == "reused" else 0

    def _fail(self, trial, why: str, retry_it: bool):
        from optuna.trial import TrialState

        short = min(10.0, _storage.default_patience())
        try:  # briefly: when the storage is what failed, the trial is reaped as dead later
            retry(lambda: self.study._storage.set_trial_user_attr(trial._trial_id, A_FAILED, why),
                  "mark the trial failed", patience=short)
            retry(lambda: self.study.tell(trial, state=TrialState.FAIL), "mark the trial failed", patience=short)
            if retry_it:
                _enqueue_retry(self.study, retry(lambda: self.study._storage.get_trial(trial._trial_id), "read",
                                                 patience=short))
        except Exception as e:  # the trial was already finished by someone else, or the storage is gone
            log.debug("could not mark trial %d failed: %s", trial.number, e)

    def evaluate(self, trial) -> str:
        """Propose, deduplicate, train, store. Returns 'trained', 'reused' or 'surplus'."""
        from optuna.trial import TrialState

        ua = trial.user_attrs
        name = ua.get(A_BASELINE)
        L = self.r.model.n_layers
        if name:
            placement = get_baseline(name, self.r.search.norm_kind)
            system = retry(lambda: self.study._storage.get_trial_system_attrs(trial._trial_id), "read the trial")
            fixed = system.get("fixed_params")
            if self.r.space is not None and fixed:
                proposed = self._suggest(trial)
                if proposed.arch_id(L) != placement.arch_id(L):  # the space's point must be the baseline
                    raise NormsearchError(f"baseline {name} is not the point of the space it was enqueued as")
        else:
            if self.r.space is None:
                raise NormsearchError("the recipe has no `space` but search.trials > 0; add a space or set trials: 0")
            placement = self._suggest(trial)
        arch = placement.arch_id(L)
        label = name or f"t{trial.number}"
        _set_attrs(self.study, trial._trial_id, {
            A_ARCH: arch, A_LABEL: label, A_WORKER: self.worker,
            A_PLACEMENT: placement.to_dict(), A_SITES: placement.resolve(L).describe(),
        })

        # An architecture is trained once: reuse a finished one, wait for one in training.
        while True:
            c = census(self.study, exclude_number=trial.number)
            if arch in c.done:
                return self._reuse(trial, c.done[arch])
            earlier = [t for t in c.running if t.user_attrs.get(A_ARCH) == arch and t.number < trial.number]
            if not earlier:
                break
            with Heartbeat(self.study, trial._trial_id, self.r.search.heartbeat):
                time.sleep(min(2.0, self.r.search.heartbeat))
            reap_dead_trials(self.study, self.r.search.grace, self.r.search.heartbeat)
        if not name:  # a new searched architecture: is it one too many (a race between workers)?
            lower = [t for t in c.running if t.number < trial.number]
            in_flight = {t.user_attrs.get(A_ARCH) or f"?{t.number}" for t in lower if not t.user_attrs.get(A_BASELINE)}
            if c.searched_done + len(in_flight - set(c.done) - c.baseline_archs) >= self.r.search.trials:
                _set_attrs(self.study, trial._trial_id, {A_FAILED: "surplus: the requested architectures are done"})
                retry(lambda: self.study.tell(trial, state=TrialState.FAIL), "release a surplus trial")
                return "surplus"

        with Heartbeat(self.study, trial._trial_id, self.r.search.heartbeat):
            state, runs, score = self.train(trial, placement, arch, label)
        values = None if state == TrialState.PRUNED else self._values(score)
        record = {
            "arch_id": arch, "label": label, "baseline": name, "placement": placement.to_dict(),
            "sites": placement.resolve(L).describe(), "state": state.name, "values": values,
            "score": score.to_dict() if score else None, "params": trial.params,
            "distributions": {k: _dist_json(d) for k, d in trial.distributions.items()},
            "runs": [run_key(r["seed"], r["lr"]) for r in runs], "trial_number": trial.number,
        }
        _write_json(self.h.runs_dir / arch / "arch.json", record)  # on disk before it goes to storage
        attrs = {A_SCORE: record["score"], A_RUNS: record["runs"]}
        try:
            _set_attrs(self.study, trial._trial_id, attrs)
            retry(lambda: self.study.tell(trial, values, state=state), "store the result")
        except NormsearchError:  # the storage stayed away: the result waits on disk for the next run
            raise
        except Exception:
            now = retry(lambda: self.study._storage.get_trial(trial._trial_id), "read the trial")
            if now.state == state:  # a retried write whose first attempt had gone through
                return "trained"
            if now.state != TrialState.FAIL:
                raise
            # another worker took this trial for dead while it ran: store the result as a new trial,
            # unless the architecture is done by now
            log.warning("trial %d was taken for dead while it ran; storing its result as a new trial", trial.number)
            if arch not in census(self.study).done:
                _add_finished(self.study, record, {**now.user_attrs, **attrs})
        return "trained"

    def _suggest(self, trial) -> Placement:
        """The space's point for this trial. A storage error while its parameters are written is
        retried; before each retry the trial's parameters are read back, so that a parameter whose
        write did go through is kept (Optuna would sample it again)."""
        attempts = [0]

        def once():
            if attempts[0]:
                stored = self.study._storage.get_trial(trial._trial_id)
                cached = getattr(trial, "_cached_frozen_trial", None)
                if cached is not None:
                    cached.params = dict(stored.params)
                    cached.distributions = dict(stored.distributions)
            attempts[0] += 1
            return self.r.space.suggest(trial)

        return retry(once, "store the trial's parameters")

    def _values(self, score: Score) -> list[float]:
        second = self.r.search.second_objective
        if second == "params":
            return [score.value, float(score.n_params)]
        if second == "throughput":
            return [score.value, score.tokens_per_s]
        return [score.value]

    def _reuse(self, trial, done) -> str:
        from optuna.trial import TrialState

        attrs = {A_REUSED: done.number, A_SCORE: done.user_attrs.get(A_SCORE), A_RUNS: done.user_attrs.get(A_RUNS)}
        _set_attrs(self.study, trial._trial_id, attrs)
        state = done.state if done.state == TrialState.PRUNED else TrialState.COMPLETE
        retry(lambda: self.study.tell(trial, None if state == TrialState.PRUNED else done.values, state=state),
              "store a reused result")
        return "reused"

    def train(self, trial, placement: Placement, arch: str, label: str):
        """Every (seed, lr) run of the architecture; runs already on disk are not redone."""
        from optuna.trial import TrialState

        from .trial import run_trial

        t = self.r.train
        runs: list[dict] = []
        state = TrialState.COMPLETE
        folder = self.h.runs_dir / arch
        for i, (seed, lr) in enumerate(t.runs):
            path = folder / f"seed{seed}_lr{lr:g}.json"
            offset = i * t.steps
            pruned = False

            def on_eval(step, value, offset=offset):
                if self.multi or not math.isfinite(value):
                    return False
                retry(lambda: trial.report(value, offset + step), "report an evaluation")
                return retry(trial.should_prune, "ask the pruner")

            if path.is_file():
                result = json.loads(path.read_text())
                for point in result["curve"][1:]:
                    if on_eval(point["step"], point["val_bpb"]):
                        pruned = True
                        break
            else:
                res = run_trial(placement, self.r.model, self.r.data, t, seed=seed, lr=lr, tokens=self._tokens(),
                                progress=self.display, on_eval=on_eval, verbose=self.verbose,
                                checkpoint=folder / f"seed{seed}_lr{lr:g}.safetensors", label=label)
                result = res.to_dict()
                pruned = res.pruned
                if not pruned:
                    _write_json(path, result)
            key = run_key(seed, lr)
            _set_attrs(self.study, trial._trial_id, {key: _compact(result)})
            runs.append(result)
            if pruned:
                state = TrialState.PRUNED
                break
        score = score_runs(runs, self.r.search.objective) if state == TrialState.COMPLETE else None
        if score is not None:
            self._keep_best_checkpoint(arch, runs, score)
        return state, runs, score

    def _keep_best_checkpoint(self, arch: str, runs: list[dict], score: Score):
        """Keep the weights of the best seed at the best learning rate as checkpoints/<arch>.safetensors."""
        seed = min(score.seeds_at_best, key=score.seeds_at_best.__getitem__)
        src = self.h.runs_dir / arch / f"seed{seed}_lr{score.best_lr:g}.safetensors"
        if src.is_file():
            self.h.checkpoints_dir.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, self.h.checkpoints_dir / f"{arch}.safetensors")
            _write_json(self.h.checkpoints_dir / f"{arch}.json", {"arch_id": arch, "seed": seed, "lr": score.best_lr,
                                                                 "value": score.seeds_at_best[seed]})
        for f in (self.h.runs_dir / arch).glob("*.safetensors"):
            f.unlink()

    def _tokens(self):
        if self.tokens is None:
            from .data import load_tokens

            self.tokens = load_tokens(self.r.data)
        return self.tokens


def _compact(run: dict) -> dict:
    """A run as stored in the study: everything but the per-step training loss beyond 100 points."""
    out = dict(run)
    tl = out.get("train_loss") or []
    if len(tl) > 100:
        stride = math.ceil(len(tl) / 100)
        out["train_loss"] = tl[::stride] + ([tl[-1]] if (len(tl) - 1) % stride else [])
    return out


def _dist_json(d) -> str:
    from optuna.distributions import distribution_to_json

    return distribution_to_json(d)


def _add_finished(study, record: dict, user_attrs: dict) -> None:
    import optuna
    from optuna.distributions import json_to_distribution

    state = getattr(optuna.trial.TrialState, record["state"])
    attrs = {**user_attrs, A_ARCH: record["arch_id"], A_LABEL: record["label"], A_SCORE: record["score"],
             A_RUNS: record["runs"], A_PLACEMENT: record["placement"], A_SITES: record["sites"]}
    if record.get("baseline"):
        attrs[A_BASELINE] = record["baseline"]
    attrs.pop(A_HEARTBEAT, None)
    retry(lambda: study.add_trial(optuna.trial.create_trial(
        state=state, values=record["values"] if state.name == "COMPLETE" else None,
        params=record.get("params") or {},
        distributions={k: json_to_distribution(v) for k, v in (record.get("distributions") or {}).items()},
        user_attrs=attrs,
    )), "store a result from disk")


def sync_local_results(handle: StudyHandle) -> int:
    """Send storage the finished architectures that are on disk (``runs/*/arch.json``) but not in
    the study, e.g. because the database was down when they finished. Returns how many."""
    c = census(handle.study)
    grace = handle.recipe.search.grace
    # an architecture still in training elsewhere, or being stored right now by a live worker that
    # shares this folder, is not sent: its worker stores it (or it is reaped and retried)
    busy = {t.user_attrs.get(A_ARCH) for t in c.running
            if _alive_here(t.user_attrs.get(A_WORKER)) is True
            or (_alive_here(t.user_attrs.get(A_WORKER)) is None
                and time.time() - (t.user_attrs.get(A_HEARTBEAT) or 0) < grace)}
    sent = 0
    for path in sorted(handle.runs_dir.glob("*/arch.json")):
        record = json.loads(path.read_text())
        if record["arch_id"] in c.done or record["arch_id"] in busy or record["state"] != "COMPLETE":
            continue
        runs = {}
        for key in record["runs"]:
            seed, lr = key[len(RUN_PREFIX):].split(":")
            f = path.parent / f"seed{seed[1:]}_lr{lr[2:]}.json"
            if f.is_file():
                runs[key] = _compact(json.loads(f.read_text()))
        if len(runs) != len(record["runs"]):
            continue
        _add_finished(handle.study, record, runs)
        sent += 1
        log.warning("sent architecture %s (%s) from %s to storage", record["arch_id"], record["label"], path.parent)
    return sent


# --------------------------------------------------------------------------------------------------
# The public entry point


def run_study(recipe: Recipe | str | Path, *, storage: str | None = None, display=None, verbose: bool = False,
              seed_offset: int = 0) -> StudyHandle:
    """Run (or resume, or join as one more worker) the recipe's study until its baselines and
    ``search.trials`` searched architectures are evaluated. Returns the study's handle."""
    from .recipe import load_recipe

    if not isinstance(recipe, Recipe):
        recipe = load_recipe(recipe)
    if recipe.space is None and recipe.search.trials > 0:
        raise NormsearchError("the recipe has no `space` but search.trials > 0; add a space or set search.trials: 0")
    handle = open_study(recipe, storage, seed_offset=seed_offset)
    _Search(handle, display, verbose).run()
    return handle


def open_results(target: str | Path | None = None, storage: str | None = None,
                 study_name: str | None = None) -> StudyHandle:
    """An existing study: a results folder (``results/<name>``, which holds the recipe it was run
    with), a recipe file, or ``storage`` + ``study_name``. A missing study is a NormsearchError."""
    import optuna

    from .recipe import load_recipe, recipe_from_dict

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    folder = None
    if target is not None:
        path = Path(target)
        if path.is_dir():
            if not (path / "recipe.yaml").is_file():
                raise NormsearchError(f"{path} is not a normsearch results folder (no recipe.yaml in it)")
            folder = path
            recipe = recipe_from_dict(_yaml.load(path / "recipe.yaml"), source=str(path / "recipe.yaml"))
            if storage is None and recipe.storage is None:
                storage = f"sqlite:///{path / 'study.db'}"
                if not (path / "study.db").is_file():
                    raise NormsearchError(f"{path}: no study.db here; give --storage URL if the study lives elsewhere")
        elif path.suffix in (".yaml", ".yml"):
            recipe = load_recipe(path)
        else:
            raise NormsearchError(f"{target}: no such results folder or recipe file")
        url = storage or recipe.storage_url
        name = study_name or recipe.name
    else:
        if not (storage and study_name):
            raise NormsearchError("name a results folder, or give --storage URL and --study-name NAME")
        url, name, recipe = storage, study_name, None
    store = open_storage(url)
    try:
        study = retry(lambda: optuna.load_study(study_name=name, storage=store), "open the study")
    except KeyError:
        known = [s.study_name for s in optuna.get_all_study_summaries(store, include_best_trial=False)]
        raise NormsearchError(f"no study named {name!r} in {mask(url)}; studies there: {', '.join(known) or 'none'}") \
            from None
    if recipe is None:
        raw = study.user_attrs.get("recipe")
        if raw is None:
            raise NormsearchError(f"study {name!r} in {mask(url)} was not made by normsearch (no recipe stored)")
        recipe = recipe_from_dict(raw)
    return StudyHandle(recipe, study, url, folder or recipe.folder)


def status_text(handle: StudyHandle) -> str:
    """Trials by state, the running ones and their workers, the best so far against the baselines."""
    from collections import Counter

    study = handle.study
    trials = retry(lambda: study.get_trials(deepcopy=False), "read the trials")
    states = Counter(t.state.name for t in trials)
    c = census(study)
    r = handle.recipe
    s = _Search(handle)
    lines = [
        f"study {study.study_name!r} in {mask(handle.storage_url)}",
        f"  architectures: {len(c.done)} finished ({len(c.baselines_done)}/{len(r.search.baselines)} baselines, "
        f"{c.searched_done}/{r.search.trials} searched)",
        "  trials: " + ", ".join(f"{states.get(k, 0)} {k.lower()}" for k in ("COMPLETE", "PRUNED", "RUNNING", "FAIL",
                                                                          "WAITING")),
    ]
    reused = sum(1 for t in trials if t.user_attrs.get(A_REUSED) is not None)
    if reused:
        lines.append(f"  {reused} proposals repeated an evaluated architecture and reused its result")
    for t in c.running:
        ua = t.user_attrs
        beat = ua.get(A_HEARTBEAT)
        ago = f", heartbeat {time.time() - beat:.0f} s ago" if beat else ""
        done = len([k for k in ua if k.startswith(RUN_PREFIX)])
        lines.append(f"  running: trial {t.number} {ua.get(A_LABEL, '')} [{ua.get(A_ARCH, '?')}] "
                     f"on {ua.get(A_WORKER, '?')}, run {done + 1}/{len(r.train.runs)}{ago}")
    failed = Counter((t.user_attrs.get(A_FAILED) or "error").split(":")[0] for t in c.failed)
    if failed:
        lines.append("  failed: " + ", ".join(f"{n} {why}" for why, n in failed.items()))
    workers = Counter(t.user_attrs.get(A_WORKER) for t in trials if t.user_attrs.get(A_WORKER))
    if workers:
        lines.append("  workers: " + ", ".join(f"{w} ({n} trials)" for w, n in workers.most_common()))
    line = s.status_line(c)
    if line:
        lines.append("  " + line)
    return "\n".join(lines)
