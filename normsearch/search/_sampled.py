"""The architecture search as a task source: the baselines first (queued, flagged ``baseline``, as
ordinary points of the space where the space can express them), then the sampler's proposals until
``search.trials`` distinct searched architectures are evaluated, in total across restarts and
workers, with ``search.control`` uniform draws queued among them (:mod:`._controls`). Under
``search.reproducible`` (the default) proposal k is made by :mod:`._propose`'s rule, so the proposals
do not depend on the workers' timing."""

from __future__ import annotations

import logging
from collections import Counter

from ..baselines import baseline as get_baseline
from ..errors import NormsearchError
from ..records import A_ARCH, A_BASELINE, A_CONTROL, A_LABEL, A_PROPOSAL, A_STARTUP, control_label, run_keys
from ..storage import retry
from . import _optuna
from ._controls import controls_left, due_control, queue_control, unseen
from ._liveness import Heartbeat, reap_dead_trials
from ._propose import SURPLUS, Slots, propose
from ._samplers import is_startup
from ._tasks import Task, TaskSource

log = logging.getLogger("normsearch")

MAX_BASELINE_FAILURES = 3


class Sampled(TaskSource):
    """The baselines, then the sampler's proposals."""

    def prepare(self, search) -> None:
        from ._disk import sync_local_results

        sync_local_results(search.handle)
        self.enqueue_baselines(search)

    def enqueue_baselines(self, search) -> None:
        """Queue the baselines that have no trial yet (before local workers start, by their parent:
        workers that start together would each queue them)."""
        self._enqueue_baselines(search, None)

    @staticmethod
    def _baselines_due(search, trials, again: bool) -> list[str]:
        """The baselines to queue: those with no trial yet and, when ``again``, those whose trials all
        failed, fewer than MAX_BASELINE_FAILURES times."""
        out = []
        for name in search.recipe.search.baselines:
            mine = [t for t in trials if t.user_attrs.get(A_BASELINE) == name]
            if not any(t.state.name != "FAIL" for t in mine) and (
                    not mine or (again and len(mine) < MAX_BASELINE_FAILURES)):
                out.append(name)
        return out

    def _enqueue_baselines(self, search, c) -> bool:
        """Queue each baseline that has no trial yet (or, with ``c``, whose trials all failed, fewer than
        MAX_BASELINE_FAILURES times). True when one was queued."""
        trials = c.trials if c is not None else retry(lambda: search.study.get_trials(deepcopy=False), "read")
        recipe = search.recipe
        L, space = recipe.model.n_layers, recipe.space
        queued = False
        for name in self._baselines_due(search, trials, c is not None):
            p = get_baseline(name, recipe.search.norm_kind)
            params = space.params_of(p, L) if space is not None else None
            attrs = {A_BASELINE: name, A_LABEL: name}
            retry(lambda params=params, attrs=attrs: search.study.enqueue_trial(params or {}, user_attrs=attrs),
                  "enqueue a baseline")
            queued = True
        return queued

    def refill(self, search, c) -> bool:
        queued = self._enqueue_baselines(search, c)
        j = self._due_control(search, c)
        if j is not None:
            queue_control(search, j)
        return queued or j is not None

    def _due_control(self, search, c) -> int | None:
        return due_control(search.recipe, c.trials, c.searched_done >= search.recipe.search.trials)

    def need(self, search, c) -> int:
        s = search.recipe.search
        live = {t.user_attrs.get(A_BASELINE) for t in c.trials if t.state.name != "FAIL"}
        failures = Counter(t.user_attrs.get(A_BASELINE) for t in c.failed)
        baselines_left = len([b for b in s.baselines if b not in c.baselines_done  # given up after as many failures
                              and (b in live or failures[b] < MAX_BASELINE_FAILURES)])
        return baselines_left + max(0, s.trials - c.searched_done) + controls_left(search.recipe, c.trials)

    def progress(self, search, c) -> tuple[int, int, str]:
        s = search.recipe.search
        controls = s.control if search.recipe.space is not None else 0
        done = (len([b for b in s.baselines if b in c.baselines_done]) + min(c.searched_done, s.trials)
                + controls - controls_left(search.recipe, c.trials))
        return done, len(s.baselines) + s.trials + controls, c.status_line()

    def runs(self, search, c) -> tuple[int, int]:
        """Runs done of the runs the search plans (the extending sweep's are not foreseen)."""
        per = len(search.recipe.train.runs)
        done, total, _ = self.progress(search, c)
        live = sum(len(run_keys(t.user_attrs)) for t in c.running)
        return min(per * done + live, per * total), per * total

    def proposes(self) -> bool:
        return True

    def _rule(self, search) -> bool:
        s = search.recipe.search
        return bool(s.reproducible) and search.recipe.space is not None and s.trials > 0

    def hold(self, search, c) -> bool:
        """A control proposal is due (it is queued first: :meth:`refill`); or, under the rule, the next
        proposal's slots are not all decided yet (so at most ``search.in_flight`` proposals train at once).
        A baseline whose trial failed is queued again first too."""
        if self._due_control(search, c) is not None or self._baselines_due(search, c.trials, True):
            return True
        if not self._rule(search):
            return False
        s = search.recipe.search
        slots = Slots.read(c.trials)
        k = slots.next_k
        return slots.visible(k, list(s.baselines), s.in_flight) is None

    def task(self, search, trial) -> Task | None:
        recipe = search.recipe
        L, space = recipe.model.n_layers, recipe.space
        name = trial.user_attrs.get(A_BASELINE)
        t = search.train_config()
        if name:
            placement = get_baseline(name, recipe.search.norm_kind)
            fixed = retry(lambda: _optuna.system_attrs(search.study, _optuna.trial_id(trial)), "read").get(
                "fixed_params")
            if space is not None and fixed and suggest(search, trial).arch_id(L) != placement.arch_id(L):
                raise NormsearchError(f"baseline {name} is not the point of the space it was enqueued as")
            return Task(placement.arch_id(L), placement.arch_id(L), name, placement, name, t)
        if space is None:
            raise NormsearchError("the recipe has no `space` but search.trials > 0; add a space or set trials: 0")
        j = trial.user_attrs.get(A_CONTROL)
        if j is not None:  # a control proposal: its parameters were fixed when it was queued
            placement = suggest(search, trial)
            arch = placement.arch_id(L)
            return Task(arch, arch, control_label(int(j)), placement, None, t, {A_CONTROL: int(j)})
        attrs, label = {}, f"t{trial.number}"
        if self._rule(search):
            k, one_too_many, startup = self._plan(search, trial)
            if one_too_many:
                return None
            if k is not None:  # labelled by its proposal number, which does not depend on timing
                attrs[A_PROPOSAL], label = k, f"t{len(recipe.search.baselines) + k}"
                if startup is not None:
                    attrs[A_STARTUP] = startup
        else:
            startup = _startup_of(search, trial)
            if startup is not None:
                attrs[A_STARTUP] = startup
        placement = suggest(search, trial)
        arch = placement.arch_id(L)
        return Task(arch, arch, label, placement, None, t, attrs)

    def _plan(self, search, trial) -> tuple[int | None, bool, bool | None]:
        """Proposal k's parameters, by the rule (:mod:`._propose`), once the slots it sees are decided
        (meanwhile this worker helps or waits); planned for the study's replay sampler. Returns
        (k, whether proposal k is one too many, whether it is a random start-up one); k None for a
        trial that is not a proposal (one queued by hand), which the study's sampler fills."""
        s = search.recipe.search
        tid = _optuna.trial_id(trial)
        while True:
            trials = retry(lambda: search.study.get_trials(deepcopy=False), "read the trials")
            slots = Slots.read(trials)
            k = slots.number_of.get(trial.number)
            if k is None:  # not a proposal (a trial queued by hand): the study's own sampler
                return None, False, None
            visible = slots.visible(k, list(s.baselines), s.in_flight)
            archs = slots.archs_before(k)
            if visible is not None and archs is not None:
                break
            from ._census import census

            with Heartbeat(search.study, tid, s.heartbeat):
                search.wait_a_moment(census(search.study, exclude_number=trial.number, trials=trials))
            reap_dead_trials(search.study, s.grace, s.heartbeat)
        retry(lambda: _optuna.set_attr(search.study, tid, A_PROPOSAL, k), "store the proposal number")
        visible = unseen(visible, trials)  # as without controls: the sampler does not see them
        baseline_archs = {t.user_attrs.get(A_ARCH) for ts in slots.baselines.values() for t in ts}
        if SURPLUS in archs or len(set(archs) - baseline_archs) >= s.trials:
            return k, True, None
        if not trial.params:  # a retry keeps the parameters it was first given
            search.study.sampler.planned[trial.number] = propose(search.recipe, k, visible,
                                                                 [d.name.lower() for d in search.study.directions])
        return k, False, is_startup(search.recipe, visible)

    def surplus(self, search, trial, task: Task, c) -> bool:
        """A new searched architecture beyond search.trials (a race between workers)."""
        if task.baseline or A_PROPOSAL in task.attrs or A_CONTROL in task.attrs:  # _plan decided it; controls: on top
            return False
        s = search.recipe.search
        lower = [t for t in c.running if t.number < trial.number]
        in_flight = {t.user_attrs.get(A_ARCH) or f"?{t.number}" for t in lower
                     if not t.user_attrs.get(A_BASELINE) and t.user_attrs.get(A_CONTROL) is None}
        return c.searched_done + len(in_flight - set(c.done) - c.baseline_archs) >= s.trials

    def values(self, search, score) -> list[float]:
        second = search.recipe.search.second_objective
        if second == "params":
            return [score.value, float(score.n_params)]
        if second == "throughput":
            return [score.value, score.tokens_per_s]
        return [score.value]


def _startup_of(search, trial) -> bool | None:
    """Without the rule: whether the study's sampler drew this trial at random (its start-up), as it
    decided when the trial began."""
    sampler = search.study.sampler
    if hasattr(sampler, "is_startup"):
        return bool(sampler.is_startup(search.study, trial))
    return is_startup(search.recipe, [])


def suggest(search, trial):
    """The space's point for this trial. A storage error while its parameters are written is
    retried; before each retry the trial's parameters are read back, so that a parameter whose
    write did go through is kept (Optuna would sample it again)."""
    attempts = [0]

    def once():
        if attempts[0]:
            _optuna.reload_params(search.study, trial)
        attempts[0] += 1
        return search.recipe.space.suggest(trial)

    return retry(once, "store the trial's parameters")


__all__ = ["Sampled", "suggest"]
