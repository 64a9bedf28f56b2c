"""The loop: ask for an architecture, deduplicate it, train its runs, store it (Optuna's
ask-and-tell, driven by normsearch; compare ``optuna/study/_optimize.py``).

- the baselines go first (enqueued, flagged ``baseline``), as ordinary points of the space where
  the space can express them;
- ``search.trials`` counts distinct searched architectures in total, across restarts and workers;
- an architecture already evaluated (same ``arch_id``) is never trained again: a repeated proposal
  reuses the stored result, and a proposal of an architecture another worker is training waits
  for it;
- a trial whose worker died is reaped and retried (:mod:`._liveness`); Ctrl-C marks the interrupted
  trial so that the next run redoes it;
- a storage that goes away mid-run is waited for: every read and write is retried with backoff
  (:func:`normsearch.storage.retry`);
- every finished run is written to ``results/<name>/runs/`` before it is sent to storage (:mod:`._disk`);
- the unit of parallel work on one machine is a run: a worker with no architecture of its own to
  train helps train the runs of one that another worker on this host is training (:mod:`._claims`).
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from .. import storage as _storage
from ..baselines import baseline as get_baseline
from ..errors import NormsearchError, Terminated
from ..recipe import Recipe
from ..records import (A_ARCH, A_BASELINE, A_FAILED, A_LABEL, A_LR_EXTENDED, A_PLACEMENT, A_WORKER, ArchRecord,
                       RunResult, run_key)
from ..scoring import Score, score_runs
from ..spec import Placement
from ..storage import retry
from . import _optuna
from ._census import Census, census
from ._claims import Registered, clear_stale, cores, live_workers, thread_share, try_claim
from ._disk import add_finished, keep_best_checkpoint, read_run, run_path, sync_local_results, write_json
from ._liveness import Heartbeat, alive_here, enqueue_retry, reap_dead_trials, worker_id
from ._open import StudyHandle, directions, open_study

log = logging.getLogger("normsearch")

A_SHARED = "runs_shared"  # a trial attribute: its worker lets others on its host train its runs


class StudyInterrupted(Exception):
    """Ctrl-C: the running trial was marked for a rerun; finished trials are kept."""


def _set_attrs(study, tid: int, attrs: dict[str, Any]) -> None:
    for k, v in attrs.items():
        retry(lambda k=k, v=v: _optuna.set_attr(study, tid, k, v), f"store {k}")


class Search:
    """One worker's search of one study."""

    def __init__(self, handle: StudyHandle, display=None, verbose: bool = False, tokens=None):
        self.handle, self.recipe, self.study = handle, handle.recipe, handle.study
        self.display, self.verbose = display, verbose
        self.tokens = tokens
        self.multi = len(directions(self.recipe)) > 1
        self.worker = worker_id()
        self._warned = False  # the oversubscription warning, once per worker

    # -- bookkeeping -----------------------------------------------------------------------------

    def target(self) -> int:
        return len(self.recipe.search.baselines) + self.recipe.search.trials

    def enqueue_baselines(self):
        existing = {t.user_attrs.get(A_BASELINE) for t in retry(lambda: self.study.get_trials(deepcopy=False), "read")
                    if t.state.name != "FAIL"}
        L, space = self.recipe.model.n_layers, self.recipe.space
        for name in self.recipe.search.baselines:
            if name in existing:
                continue
            p = get_baseline(name, self.recipe.search.norm_kind)
            params = space.params_of(p, L) if space is not None else None
            attrs = {A_BASELINE: name, A_LABEL: name}
            retry(lambda params=params, attrs=attrs: self.study.enqueue_trial(params or {}, user_attrs=attrs),
                  "enqueue a baseline")

    def need(self, c: Census) -> int:
        baselines_left = len([b for b in self.recipe.search.baselines if b not in c.baselines_done])
        return baselines_left + max(0, self.recipe.search.trials - c.searched_done)

    def show(self, c: Census):
        if self.display is not None:
            done = len([b for b in self.recipe.search.baselines if b in c.baselines_done]) + min(
                c.searched_done, self.recipe.search.trials)
            self.display.study(done, self.target(), c.status_line())

    # -- the loop ----------------------------------------------------------------------------------

    def run(self):
        with Registered():
            self._run()

    def _run(self):
        s = self.recipe.search
        sync_local_results(self.handle)
        self.enqueue_baselines()
        errors = 0
        proposals_without_news = 0
        while True:
            reap_dead_trials(self.study, s.grace, s.heartbeat)
            c = census(self.study)
            self.show(c)
            need = self.need(c)
            if need <= 0 and not c.running and not c.waiting:
                return
            if not c.waiting and need <= len(c.running):
                if not self.help(c):  # others are on it: help them, or wait in case they die
                    time.sleep(min(0.5 if self.shares_runs() else 2.0, s.heartbeat))
                continue
            if proposals_without_news > 50 * max(1, need):
                log.warning("the sampler keeps proposing architectures that were already evaluated; "
                            "the space may hold fewer than search.trials distinct architectures")
                return
            trial = retry(self.study.ask, "ask for a trial")
            outcome, errors = self.attempt(trial, errors)
            if outcome is not None:
                proposals_without_news = proposals_without_news + 1 if outcome == "reused" else 0

    def attempt(self, trial, errors: int) -> tuple[str | None, int]:
        """:meth:`evaluate` one trial. Ctrl-C (or SIGTERM) and a NormsearchError mark it for a rerun and
        stop the worker; any other error marks it failed and is counted, the third in a row raised.
        Returns (the outcome, or None after an error; the errors in a row)."""
        try:
            return self.evaluate(trial), 0
        except KeyboardInterrupt as e:
            self._fail(trial, "interrupted (SIGTERM)" if isinstance(e, Terminated) else "interrupted (Ctrl-C)",
                       retry_it=True)
            raise StudyInterrupted() from None
        except NormsearchError:
            self._fail(trial, "stopped by an error", retry_it=True)
            raise
        except Exception as e:
            self._fail(trial, f"error: {type(e).__name__}: {e}", retry_it=False)
            log.error("trial %d failed: %s: %s", trial.number, type(e).__name__, e)
            if errors + 1 >= 3:
                raise
            return None, errors + 1

    def _fail(self, trial, why: str, retry_it: bool):
        from optuna.trial import TrialState

        short = min(10.0, _storage.default_patience())
        tid = _optuna.trial_id(trial)
        try:  # briefly: when the storage is what failed, the trial is reaped as dead later
            retry(lambda: _optuna.set_attr(self.study, tid, A_FAILED, why), "mark the trial failed", patience=short)
            retry(lambda: self.study.tell(trial, state=TrialState.FAIL), "mark the trial failed", patience=short)
            if retry_it:
                enqueue_retry(self.study, retry(lambda: _optuna.get_trial(self.study, tid), "read", patience=short))
        except Exception as e:  # the trial was already finished by someone else, or the storage is gone
            log.debug("could not mark trial %d failed: %s", trial.number, e)

    def _placement(self, trial) -> tuple[Placement, str | None]:
        """The trial's architecture: its baseline, or the space's point."""
        name = trial.user_attrs.get(A_BASELINE)
        L, space = self.recipe.model.n_layers, self.recipe.space
        if not name:
            if space is None:
                raise NormsearchError("the recipe has no `space` but search.trials > 0; add a space or set trials: 0")
            return self._suggest(trial), None
        placement = get_baseline(name, self.recipe.search.norm_kind)
        fixed = retry(lambda: _optuna.system_attrs(self.study, _optuna.trial_id(trial)), "read").get("fixed_params")
        if space is not None and fixed and self._suggest(trial).arch_id(L) != placement.arch_id(L):
            raise NormsearchError(f"baseline {name} is not the point of the space it was enqueued as")
        return placement, name

    def evaluate(self, trial) -> str:
        """Propose, deduplicate, train, store. Returns 'trained', 'reused' or 'surplus'."""
        from optuna.trial import TrialState

        s, L, tid = self.recipe.search, self.recipe.model.n_layers, _optuna.trial_id(trial)
        placement, name = self._placement(trial)
        record = ArchRecord(arch_id=placement.arch_id(L), label=name or f"t{trial.number}", baseline=name,
                            placement=placement.to_dict(), sites=placement.resolve(L).describe(),
                            trial_number=trial.number)
        arch = record.arch_id
        _set_attrs(self.study, tid, {**record.identity_attrs(), A_WORKER: self.worker})

        # An architecture is trained once: reuse a finished one, wait for one in training.
        while True:
            c = census(self.study, exclude_number=trial.number)
            if arch in c.done:
                return self._reuse(trial, c.done[arch])
            earlier = [t for t in c.running if t.user_attrs.get(A_ARCH) == arch and t.number < trial.number]
            if not earlier:
                break
            with Heartbeat(self.study, tid, s.heartbeat):
                if not self.help(c):
                    time.sleep(min(2.0, s.heartbeat))
            reap_dead_trials(self.study, s.grace, s.heartbeat)
        if not name:  # a new searched architecture: is it one too many (a race between workers)?
            lower = [t for t in c.running if t.number < trial.number]
            in_flight = {t.user_attrs.get(A_ARCH) or f"?{t.number}" for t in lower if not t.user_attrs.get(A_BASELINE)}
            if c.searched_done + len(in_flight - set(c.done) - c.baseline_archs) >= s.trials:
                _set_attrs(self.study, tid, {A_FAILED: "surplus: the requested architectures are done"})
                retry(lambda: self.study.tell(trial, state=TrialState.FAIL), "release a surplus trial")
                return "surplus"

        with Heartbeat(self.study, tid, s.heartbeat):
            state, runs, score = self.train(trial, placement, arch, record.label, self._train_config())
        record.state = state.name
        record.values = None if state == TrialState.PRUNED else self._values(score)
        record.score = score.to_dict() if score else None
        record.params = dict(trial.params)
        record.distributions = {k: _dist_json(d) for k, d in trial.distributions.items()}
        record.runs = [run_key(r.seed, r.lr) for r in runs]
        write_json(self.handle.runs_dir / arch / "arch.json", record.to_json())  # on disk before storage
        attrs = record.result_attrs()
        try:
            _set_attrs(self.study, tid, attrs)
            retry(lambda: self.study.tell(trial, record.values, state=state), "store the result")
        except NormsearchError:  # the storage stayed away: the result waits on disk for the next run
            raise
        except Exception:
            now = retry(lambda: _optuna.get_trial(self.study, tid), "read the trial")
            if now.state == state:  # a retried write whose first attempt had gone through
                return "trained"
            if now.state != TrialState.FAIL:
                raise
            # another worker took this trial for dead while it ran: store the result as a new trial,
            # unless the architecture is done by now
            log.warning("trial %d was taken for dead while it ran; storing its result as a new trial", trial.number)
            if arch not in census(self.study).done:
                add_finished(self.study, record, {**now.user_attrs, **attrs})
        return "trained"

    def _suggest(self, trial) -> Placement:
        """The space's point for this trial. A storage error while its parameters are written is
        retried; before each retry the trial's parameters are read back, so that a parameter whose
        write did go through is kept (Optuna would sample it again)."""
        attempts = [0]

        def once():
            if attempts[0]:
                _optuna.reload_params(self.study, trial)
            attempts[0] += 1
            return self.recipe.space.suggest(trial)

        return retry(once, "store the trial's parameters")

    def _values(self, score: Score) -> list[float]:
        second = self.recipe.search.second_objective
        if second == "params":
            return [score.value, float(score.n_params)]
        if second == "throughput":
            return [score.value, score.tokens_per_s]
        return [score.value]

    def _reuse(self, trial, done) -> str:
        from optuna.trial import TrialState

        prior = ArchRecord.from_trial(done)
        prior.reused_from = done.number
        _set_attrs(self.study, _optuna.trial_id(trial), prior.result_attrs())
        state = done.state if done.state == TrialState.PRUNED else TrialState.COMPLETE
        retry(lambda: self.study.tell(trial, None if state == TrialState.PRUNED else done.values, state=state),
              "store a reused result")
        return "reused"

    def shares_runs(self) -> bool:
        """Whether runs are shared between the workers of this host: not under a pruner, which must
        see every architecture's runs in order."""
        return self.recipe.search.pruner == "none"

    def _train_config(self):
        """The recipe's training settings, with this worker's share of the cores when
        ``train.threads`` is not set (a warning when it is set and oversubscribes them)."""
        t = self.recipe.train
        workers = live_workers()
        if t.threads is None:
            return replace(t, threads=thread_share(workers))
        if t.threads * workers > cores() and t.threads > max(1, cores() // workers) and not self._warned:
            self._warned = True
            log.warning("%d normsearch workers on this host with train.threads %d each oversubscribe its %d cores; "
                        "start one `normsearch run --jobs %d` instead, or set --train.threads %d",
                        workers, t.threads, cores(), workers, max(1, cores() // workers))
        return t

    def _test_bytes(self) -> int | None:
        """Score runs on a test split of this many bytes (a confirmation stage), or None (validation)."""
        return None

    def _runs_of(self, trial) -> list[tuple[int, float]]:
        """The (seed, lr) runs another worker's trial trains (what :meth:`help` may take)."""
        return self.recipe.train.runs

    def _train_one(self, placement, t, seed: int, lr: float, label: str, path: Path, on_eval=None) -> RunResult:
        """Train one run (its claim held by the caller) and write it to disk unless pruned."""
        from ..train import train_run

        result = train_run(placement, self.recipe.model, self.recipe.data, t, seed=seed, lr=lr,
                           tokens=self._tokens(), progress=self.display, on_eval=on_eval, verbose=self.verbose,
                           checkpoint=path.with_suffix(".safetensors"), label=label,
                           log_dir=self.handle.folder / "logs", log_group=self.recipe.name,
                           test_bytes=self._test_bytes())
        result.worker = self.worker
        if not result.pruned:
            write_json(path, result.to_dict())
        return result

    def _await_run(self, placement, t, seed: int, lr: float, label: str, path: Path) -> RunResult:
        """A run another worker on this host has claimed: its result once on disk, or trained here
        when that worker died (its claim goes stale) or gave the run up."""
        while True:
            if path.is_file():
                return read_run(path)
            claim = try_claim(path, self.worker)
            if claim is not None:
                with claim:
                    return self._train_one(placement, t, seed, lr, label, path)
            time.sleep(0.2)

    def train(self, trial, placement: Placement, arch: str, label: str, t):
        """Every (seed, lr) run of the architecture under training settings ``t``; runs already on disk
        are not redone, runs that a helper on this host is training are waited for. The result is the
        same as if this worker had trained every run itself, in order. Then the extending sweep:
        while the best learning rate is at an end of the sweep, one more point beyond it (up to
        ``train.lr_extend`` points), recorded on the trial."""
        from optuna.trial import TrialState

        tid = _optuna.trial_id(trial)
        share = self.shares_runs()
        if share:
            _set_attrs(self.study, tid, {A_SHARED: True})
        results: dict[int, RunResult] = {}
        deferred: list[int] = []
        state = TrialState.COMPLETE
        plan = list(t.runs)  # grows with the extending sweep

        def on_eval_at(i):
            def on_eval(step, value):
                if self.multi or not math.isfinite(value):
                    return False
                retry(lambda: trial.report(value, i * t.steps + step), "report an evaluation")
                return retry(trial.should_prune, "ask the pruner")
            return on_eval

        def finish(i, result, live: bool) -> bool:
            """Record run i; replay its evaluations to the pruner unless they were reported live."""
            pruned = result.pruned
            if not live:
                for point in result.curve[1:]:
                    if on_eval_at(i)(point["step"], point["val_bpb"]):
                        pruned = True
                        break
            seed, lr = plan[i]
            _set_attrs(self.study, tid, {run_key(seed, lr): result.compact()})
            results[i] = result
            return pruned

        def run(i, may_defer: bool) -> bool | None:
            """Train (or read, or wait for) run i; None when deferred to a helper."""
            seed, lr = plan[i]
            path = run_path(self.handle.runs_dir, arch, seed, lr)
            claim = None if path.is_file() else try_claim(path, self.worker)
            if claim is not None:
                with claim:
                    return finish(i, self._train_one(placement, t, seed, lr, label, path, on_eval_at(i)), True)
            if path.is_file():
                clear_stale(path)
                return finish(i, read_run(path), False)
            if may_defer:  # a helper trains it: take the next one meanwhile
                deferred.append(i)
                return None
            return finish(i, self._await_run(placement, t, seed, lr, label, path), False)

        for i in range(len(plan)):
            if run(i, share):
                state = TrialState.PRUNED
                break
        for i in deferred:
            seed, lr = plan[i]
            finish(i, self._await_run(placement, t, seed, lr, label, run_path(self.handle.runs_dir, arch, seed, lr)),
                   False)
        extended: list[float] = []
        while state == TrialState.COMPLETE and len(extended) < t.lr_extend:
            lr = extension([results[i] for i in sorted(results)], t, self.recipe.search.objective)
            if lr is None:
                break
            extended.append(lr)
            _set_attrs(self.study, tid, {A_LR_EXTENDED: extended})
            for seed in t.seeds:
                plan.append((seed, lr))
                if run(len(plan) - 1, False):
                    state = TrialState.PRUNED
                    break
        runs = [results[i] for i in sorted(results)]
        score = score_runs(runs, self.recipe.search.objective) if state == TrialState.COMPLETE else None
        if score is not None:
            seed = min(score.seeds_at_best, key=score.seeds_at_best.__getitem__)
            keep_best_checkpoint(self.handle, arch, seed, score.best_lr, score.seeds_at_best[seed])
        return state, runs, score

    def help(self, c: Census) -> bool:
        """Train one unclaimed run of an architecture that another live worker on this host is
        training (the newest runs first: its owner trains from the oldest). False when there is none."""
        if not self.shares_runs():
            return False
        L = self.recipe.model.n_layers
        for tr in sorted(c.running, key=lambda tr: tr.number):
            ua = tr.user_attrs
            if (not ua.get(A_SHARED) or ua.get(A_WORKER) == self.worker or alive_here(ua.get(A_WORKER)) is not True
                    or ua.get(A_ARCH) in c.done or not ua.get(A_PLACEMENT)):
                continue
            placement = Placement.from_dict(ua[A_PLACEMENT])
            arch = ua[A_ARCH]
            if placement.arch_id(L) != arch:
                continue
            for seed, lr in reversed(self._runs_of(tr)):
                path = run_path(self.handle.runs_dir, arch, seed, lr)
                claim = None if path.is_file() else try_claim(path, self.worker)
                if claim is None:
                    continue
                with claim:
                    self._train_one(placement, self._train_config(), seed, lr, ua.get(A_LABEL) or arch, path)
                return True
        return False

    def _tokens(self):
        if self.tokens is None:
            from ..data import load_tokens

            self.tokens = load_tokens(self.recipe.data)
        return self.tokens


def extension(runs: list[RunResult], t, objective: str = "mean") -> float | None:
    """The next point of the extending sweep: one step of the sweep's ratio beyond its end when the
    best learning rate so far is at that end; None when it is inside (or the sweep has one point)."""
    ratio = t.lr_ratio
    if ratio is None or not runs:
        return None
    lrs = sorted({float(r.lr) for r in runs})
    best = score_runs(runs, objective).best_lr
    if best == lrs[-1]:
        return float(f"{lrs[-1] * ratio:.4g}")
    if best == lrs[0]:
        return float(f"{lrs[0] / ratio:.4g}")
    return None


def _dist_json(d) -> str:
    from optuna.distributions import distribution_to_json

    return distribution_to_json(d)


def run_study(recipe: Recipe | str | Path, *, storage: str | None = None, display=None, verbose: bool = False,
              seed_offset: int = 0) -> StudyHandle:
    """Run (or resume, or join as one more worker) the recipe's study until its baselines and
    ``search.trials`` searched architectures are evaluated. Returns the study's handle."""
    from ..recipe import load_recipe

    from ..checks import ensure_runnable

    if not isinstance(recipe, Recipe):
        recipe = load_recipe(recipe)
    ensure_runnable(recipe, storage=storage)  # before the study exists: a bad recipe locks nothing
    handle = open_study(recipe, storage, seed_offset=seed_offset)
    Search(handle, display, verbose).run()
    return handle
