"""The loop: take a task, deduplicate it, train its runs, store it (Optuna's ask-and-tell, driven by
normsearch; compare ``optuna/study/_optimize.py``). One loop for every kind of study: the tasks
come from a :class:`~._tasks.TaskSource`, the architecture search's (:mod:`._sampled`) or a stage's
fixed list (``normsearch.stages``).

- what is known to be needed is queued first (the baselines; a stage's tasks), and a trial asked for
  with nothing queued is a proposal of the sampler (the search alone);
- a task already evaluated (same key) is never trained again: a repeated one reuses the stored
  result, and one that another worker is training is waited for (or its runs helped with);
- a trial whose worker died is reaped and retried (:mod:`._liveness`); Ctrl-C marks the interrupted
  trial so that the next run redoes it;
- a storage that goes away mid-run is waited for: every read and write is retried with backoff
  (:func:`normsearch.storage.retry`);
- every finished run is written to ``results/<name>/runs/`` before it is sent to storage (:mod:`._disk`);
- the unit of parallel work on one machine is a run: a worker with no task of its own to train
  helps train the runs of one that another worker on this host is training (:mod:`._claims`).
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from .. import storage as _storage
from ..errors import NormsearchError, Terminated
from ..grid import RunSpec, next_points, parse_tag, variant_tag
from ..grid import apply as apply_variant
from ..grid import plan as grid_plan
from ..records import (A_ARCH, A_BASELINE, A_FAILED, A_LABEL, A_LR_EXTENDED, A_PLACEMENT, A_PROPOSAL, A_WORKER,
                       ArchRecord, RunResult, run_key)
from ..scoring import score_runs
from ..spec import Placement
from ..storage import retry
from . import _optuna
from ._census import census
from ._claims import Registered, clear_stale, cores, live_workers, thread_share, try_claim
from ._disk import add_finished, keep_best_checkpoint, read_run, run_path, write_json
from ._liveness import Heartbeat, alive_here, enqueue_retry, reap_dead_trials, worker_id
from ._open import StudyHandle
from ._tasks import Task, TaskSource

log = logging.getLogger("normsearch")

A_SHARED = "runs_shared"  # a trial attribute: its worker lets others on its host train its runs


class StudyInterrupted(Exception):
    """Ctrl-C: the running trial was marked for a rerun; finished trials are kept."""


def set_attrs(study, tid: int, attrs: dict[str, Any]) -> None:
    for k, v in attrs.items():
        retry(lambda k=k, v=v: _optuna.set_attr(study, tid, k, v), f"store {k}")


class Search:
    """One worker's share of one study: its tasks from ``source`` (default: the architecture search)."""

    def __init__(self, handle: StudyHandle, display=None, verbose: bool = False, tokens=None,
                 source: TaskSource | None = None):
        from ._sampled import Sampled

        self.handle, self.recipe, self.study = handle, handle.recipe, handle.study
        self.display, self.verbose = display, verbose
        self.tokens = tokens
        self.source = source if source is not None else Sampled()
        self.worker = worker_id()
        self._warned = False  # the oversubscription warning, once per worker
        self._started = time.monotonic()

    # -- the loop ----------------------------------------------------------------------------------

    def run(self):
        from .. import train  # noqa: F401  torch and Lightning before any trial is marked running: a SIGTERM
        # that comes during an import waits for it (normsearch.cli_support), which must not hold a trial

        with Registered():
            self._run()

    def _run(self):
        src, s = self.source, self.recipe.search
        src.prepare(self)
        errors = 0
        repeats = 0  # proposals in a row that repeated an evaluated architecture
        while True:
            reap_dead_trials(self.study, s.grace, s.heartbeat)
            c = census(self.study, key=src.key_attr)
            self.show(c)
            need = src.need(self, c)
            if need <= 0 and not c.running and not c.waiting:
                if src.more(self, c):
                    continue
                return
            if not c.waiting and (need <= len(c.running) or not src.proposes() or src.hold(self, c)):
                if src.refill(self, c):  # a task whose trial failed is queued again
                    continue
                self.wait_a_moment(c)  # others are on it: help them, or wait in case they die
                continue
            if repeats > 50 * max(1, need):
                log.warning("the sampler keeps proposing architectures that were already evaluated; "
                            "the space may hold fewer than search.trials distinct architectures")
                return
            trial = retry(self.study.ask, "ask for a trial")
            outcome, errors = self.attempt(trial, errors)
            if outcome is not None:
                repeats = repeats + 1 if outcome == "reused" else 0

    def wait_a_moment(self, c) -> None:
        """Train one run another worker on this host has left to helpers, or sleep briefly."""
        if not self.train_a_shared_run(c):
            time.sleep(min(0.5 if self.shares_runs() else 2.0, self.recipe.search.heartbeat))

    def show(self, c) -> None:
        if self.display is not None:
            done, total, info = self.source.progress(self, c)
            runs = self.source.runs(self, c)
            self.display.study(done, total, info, **({} if runs is None else {"runs_done": runs[0],
                                                                               "runs_total": runs[1]}))

    def attempt(self, trial, errors: int) -> tuple[str | None, int]:
        """:meth:`evaluate` one trial. Ctrl-C (or SIGTERM) and a NormsearchError mark it for a rerun and
        stop the worker; any other error marks it failed and is counted, the third in a row raised.
        Returns (the outcome, or None after an error; the errors in a row)."""
        try:
            return self.evaluate(trial), 0
        except KeyboardInterrupt as e:
            self.fail(trial, "interrupted (SIGTERM)" if isinstance(e, Terminated) else "interrupted (Ctrl-C)",
                      retry_it=True)
            raise StudyInterrupted() from None
        except NormsearchError:
            self.fail(trial, "stopped by an error", retry_it=True)
            raise
        except Exception as e:
            self.fail(trial, f"error: {type(e).__name__}: {_storage.describe_error(e)}", retry_it=False)
            log.error("trial %d failed: %s: %s", trial.number, type(e).__name__, e)
            if errors + 1 >= 3:
                raise
            return None, errors + 1

    def fail(self, trial, why: str, retry_it: bool):
        """Mark a trial failed (and queue its point again when ``retry_it``)."""
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

    def release(self, trial, why: str) -> str:
        """A trial with nothing to do: marked failed as ``surplus: why``."""
        from optuna.trial import TrialState

        set_attrs(self.study, _optuna.trial_id(trial), {A_FAILED: f"surplus: {why}"})
        retry(lambda: self.study.tell(trial, state=TrialState.FAIL), "release a surplus trial")
        return "surplus"

    def evaluate(self, trial) -> str:
        """Take the trial's task, deduplicate, train, store. Returns 'trained', 'reused' or 'surplus'."""
        from optuna.trial import TrialState

        s, L, tid = self.recipe.search, self.recipe.model.n_layers, _optuna.trial_id(trial)
        task = self.source.task(self, trial)
        if task is None:
            return self.release(trial, "no task")
        record = ArchRecord(arch_id=task.arch_id, label=task.label, baseline=task.baseline,
                            placement=task.placement.to_dict(), sites=task.placement.resolve(L).describe(),
                            trial_number=trial.number, proposal=task.attrs.get(A_PROPOSAL))
        set_attrs(self.study, tid, {**record.identity_attrs(), A_WORKER: self.worker, **task.attrs})

        # A task is trained once: reuse a finished one; while an earlier trial trains it, help train
        # its runs, or wait for them.
        key_attr = self.source.key_attr
        while True:
            c = census(self.study, exclude_number=trial.number, key=key_attr)
            if task.key in c.done:
                return self._reuse(trial, c.done[task.key])
            earlier = [t for t in c.running if t.user_attrs.get(key_attr) == task.key and t.number < trial.number]
            if not earlier:
                break
            with Heartbeat(self.study, tid, s.heartbeat):
                self.wait_a_moment(c)
            reap_dead_trials(self.study, s.grace, s.heartbeat)
        if self.source.surplus(self, trial, task, c):
            return self.release(trial, "the requested architectures are done")

        with Heartbeat(self.study, tid, s.heartbeat):
            state, runs, score = self.train(trial, task.placement, task.arch_id, task.label, task.train, task.baseline)
        record.state = state.name
        record.values = None if state == TrialState.PRUNED else self.source.values(self, score)
        record.score = score.to_dict() if score else None
        record.params = dict(trial.params)
        record.distributions = {k: _dist_json(d) for k, d in trial.distributions.items()}
        record.runs = [run_key(r.seed, r.lr, variant_tag(r.variant)) for r in runs]
        write_json(self.source.record_path(self, trial, task), record.to_json())  # on disk before storage
        attrs = record.result_attrs()
        try:
            set_attrs(self.study, tid, attrs)
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
            # unless the task is done by now
            log.warning("trial %d was taken for dead while it ran; storing its result as a new trial", trial.number)
            if task.key not in census(self.study, key=key_attr).done:
                add_finished(self.study, record, {**now.user_attrs, **attrs})
        return "trained"

    def _reuse(self, trial, done) -> str:
        from optuna.trial import TrialState

        prior = ArchRecord.from_trial(done)
        prior.reused_from = done.number
        set_attrs(self.study, _optuna.trial_id(trial), prior.result_attrs())
        state = done.state if done.state == TrialState.PRUNED else TrialState.COMPLETE
        retry(lambda: self.study.tell(trial, None if state == TrialState.PRUNED else done.values, state=state),
              "store a reused result")
        return "reused"

    # -- training ----------------------------------------------------------------------------------

    def shares_runs(self) -> bool:
        """Whether runs are shared between the workers of this host: not under a pruner, which must
        see every architecture's runs in order."""
        return self.recipe.search.pruner == "none"

    def train_config(self, **changes):
        """The recipe's training settings (with ``changes``), with this worker's share of the cores
        when ``train.threads`` is not set (a warning when it is set and oversubscribes them)."""
        t = replace(self.recipe.train, **changes) if changes else self.recipe.train
        workers = live_workers()
        if t.threads is None:
            return replace(t, threads=thread_share(workers))
        if t.threads * workers > cores() and t.threads > max(1, cores() // workers) and not self._warned:
            self._warned = True
            log.warning("%d normsearch workers on this host with train.threads %d each oversubscribe its %d cores; "
                        "start one `normsearch run --jobs %d` instead, or set --train.threads %d",
                        workers, t.threads, cores(), workers, max(1, cores() // workers))
        return t

    def _train_one(self, placement, t, run: RunSpec, label: str, path: Path, on_eval=None) -> RunResult:
        """Train one run (its claim held by the caller) and write it to disk unless pruned."""
        from ..train import train_run

        model, t = apply_variant(self.recipe.model, t, run.tag)
        result = train_run(placement, model, self.recipe.data, t, seed=run.seed, lr=run.lr,
                           tokens=self._tokens(), progress=self.display, on_eval=on_eval, verbose=self.verbose,
                           checkpoint=path.with_suffix(".safetensors"), label=label,
                           log_dir=self.handle.folder / "logs", log_group=self.recipe.name,
                           test_bytes=self.source.test_bytes())
        result.worker = self.worker
        result.variant = parse_tag(run.tag)
        if not result.pruned:
            write_json(path, result.to_dict())
        return result

    def _await_run(self, placement, t, run: RunSpec, label: str, path: Path) -> RunResult:
        """A run another worker on this host has claimed: its result once on disk, or trained here
        when that worker died (its claim goes stale) or gave the run up."""
        while True:
            if path.is_file():
                return read_run(path)
            claim = try_claim(path, self.worker)
            if claim is not None:
                with claim:
                    return self._train_one(placement, t, run, label, path)
            time.sleep(0.2)

    def train(self, trial, placement: Placement, arch: str, label: str, t, baseline: str | None = None):
        """Every run of the architecture over the tuned grid (:func:`normsearch.grid.plan`) under
        training settings ``t``; runs already on disk are not redone, runs that a helper on this host is
        training are waited for. The result is the same as if this worker had trained every run itself,
        in order. Then the sweep is refined around the chosen cell (:func:`normsearch.grid.next_points`:
        a point past an end that holds it, up to ``t.lr_extend`` per variant, and midpoints towards
        neighbours farther than ``t.lr_resolution``), the added cells recorded on the trial."""
        from optuna.trial import TrialState

        tid = _optuna.trial_id(trial)
        share = self.shares_runs()
        if share:
            set_attrs(self.study, tid, {A_SHARED: True})
        results: dict[int, RunResult] = {}
        deferred: list[int] = []
        state = TrialState.COMPLETE
        plan = grid_plan(t, baseline)  # grows as the sweep is refined
        multi = len(self.handle.study.directions) > 1

        def on_eval_at(i):
            def on_eval(step, value):
                if multi or not math.isfinite(value):
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
            set_attrs(self.study, tid, {run_key(*plan[i]): result.compact()})
            results[i] = result
            return pruned

        def path_of(i) -> Path:
            seed, lr, tag = plan[i]
            return run_path(self.handle.runs_dir, arch, seed, lr, tag=tag)

        def run(i, may_defer: bool) -> bool | None:
            """Train (or read, or wait for) run i; None when deferred to a helper."""
            path = path_of(i)
            claim = None if path.is_file() else try_claim(path, self.worker)
            if claim is not None:
                with claim:
                    return finish(i, self._train_one(placement, t, plan[i], label, path, on_eval_at(i)), True)
            if path.is_file():
                clear_stale(path)
                return finish(i, read_run(path), False)
            if may_defer:  # a helper trains it: take the next one meanwhile
                deferred.append(i)
                return None
            return finish(i, self._await_run(placement, t, plan[i], label, path), False)

        def run_all(start: int) -> bool:
            """Runs start.. of the plan; True when one was pruned."""
            deferred.clear()
            for i in range(start, len(plan)):
                if run(i, share):
                    return True
            for i in list(deferred):
                if finish(i, self._await_run(placement, t, plan[i], label, path_of(i)), False):
                    return True
            return False

        if run_all(0):
            state = TrialState.PRUNED
        added: list = []
        while state == TrialState.COMPLETE:
            cells = refinement([results[i] for i in sorted(results)], t)
            if not cells:
                break
            added.extend([lr, tag] if tag else lr for lr, tag in cells)
            set_attrs(self.study, tid, {A_LR_EXTENDED: added})
            start = len(plan)
            plan.extend(RunSpec(seed, lr, tag) for lr, tag in cells for seed in t.seeds)
            if run_all(start):
                state = TrialState.PRUNED
        runs = [results[i] for i in sorted(results)]
        score = score_runs(runs, self.recipe.search.objective) if state == TrialState.COMPLETE else None
        if score is not None and score.seeds_at_best:
            seed = min(score.seeds_at_best, key=score.seeds_at_best.__getitem__)
            keep_best_checkpoint(self.handle, arch, seed, score.best_lr, score.seeds_at_best[seed], score.variant)
        return state, runs, score

    def train_a_shared_run(self, c) -> bool:
        """Train one unclaimed run of a task that another live worker on this host is training (the
        newest runs first: its owner trains from the oldest). False when there is none."""
        if not self.shares_runs():
            return False
        L = self.recipe.model.n_layers
        for tr in sorted(c.running, key=lambda tr: tr.number):
            ua = tr.user_attrs
            if (not ua.get(A_SHARED) or ua.get(A_WORKER) == self.worker or alive_here(ua.get(A_WORKER)) is not True
                    or ua.get(self.source.key_attr) in c.done or not ua.get(A_PLACEMENT)):
                continue
            placement = Placement.from_dict(ua[A_PLACEMENT])
            arch = ua[A_ARCH]
            if placement.arch_id(L) != arch:
                continue
            t = self.source.train_of(self, tr)
            if t is None:
                continue
            for spec in reversed(grid_plan(t, ua.get(A_BASELINE))):
                path = run_path(self.handle.runs_dir, arch, spec.seed, spec.lr, tag=spec.tag)
                claim = None if path.is_file() else try_claim(path, self.worker)
                if claim is None:
                    continue
                with claim:
                    self._train_one(placement, t, spec, ua.get(A_LABEL) or arch, path)
                return True
        return False

    def _tokens(self):
        if self.tokens is None:
            from ..data import load_tokens

            self.tokens = load_tokens(self.recipe.data)
        return self.tokens


def refinement(runs: list[RunResult], t) -> list[tuple[float, str]]:
    """The cells (learning rate, variant tag) the sweep adds next around the chosen cell, by the one
    rule (:func:`normsearch.grid.next_points`); empty when it is bracketed or may not grow."""
    from ..scoring import arch_sweep

    if not runs or len(t.lr) < 2 or (not t.lr_extend and t.lr_resolution is None):
        return []
    return next_points(arch_sweep(runs), t.lr, t.lr_resolution, t.lr_extend)


def _dist_json(d) -> str:
    from optuna.distributions import distribution_to_json

    return distribution_to_json(d)


def run_study(recipe, *, storage: str | None = None, display=None, verbose: bool = False,
              seed_offset: int = 0) -> StudyHandle:
    """Run (or resume, or join as one more worker) the recipe's study until its baselines and
    ``search.trials`` searched architectures are evaluated. Returns the study's handle."""
    from ..checks import ensure_runnable
    from ..recipe import Recipe, load_recipe
    from ._open import open_study

    if not isinstance(recipe, Recipe):
        recipe = load_recipe(recipe)
    ensure_runnable(recipe, storage=storage)  # before the study exists: a bad recipe locks nothing
    handle = open_study(recipe, storage, seed_offset=seed_offset)
    Search(handle, display, verbose).run()
    return handle


__all__ = ["Search", "StudyInterrupted", "Task", "TaskSource", "refinement", "run_study", "set_attrs"]
