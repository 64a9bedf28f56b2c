"""Samplers and pruners, as registries keyed by the recipe's ``search.sampler`` and ``search.pruner``."""

from __future__ import annotations

import warnings

from ..recipe import Recipe
from ..records import A_BASELINE, A_CONTROL, A_REUSED


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

    model = TPESampler(seed=seed, n_startup_trials=0, n_ei_candidates=24, multivariate=True, group=True,
                       constant_liar=True)
    return searched_startup(model, s.startup_trials, seed)


def _gp(s, seed):
    from optuna.samplers import GPSampler

    return searched_startup(GPSampler(seed=seed, n_startup_trials=0, deterministic_objective=False),
                            s.startup_trials, seed)


def searched_trials(trials) -> int:
    """Finished trials that the sampler proposed and that were trained: not the enqueued baselines
    (attr ``baseline``), not the control proposals (``control``), not the repeated proposals that
    reused a stored result (``reused_from``)."""
    return sum(1 for t in trials if t.state.name in ("COMPLETE", "PRUNED") and not t.user_attrs.get(A_BASELINE)
               and t.user_attrs.get(A_CONTROL) is None and t.user_attrs.get(A_REUSED) is None)


def startup_decision(startup: int, trials) -> bool:
    """Whether a proposal made with ``trials`` in the study is a random start-up one (TPE, GP): fewer
    than ``startup`` searched trials finished (:func:`searched_trials`), or no trial with a value."""
    done = searched_trials(trials)
    finished = done or any(t.state.is_finished() and t.values is not None for t in trials)
    return done < startup or not finished


def is_startup(recipe, trials) -> bool | None:
    """Whether the recipe's sampler, asked with ``trials`` in the study (under ``search.reproducible``:
    the trials the proposal sees), draws uniformly at random: TPE and GP before their start-up is done,
    the random sampler always; None for a sampler with no such phase (grid, NSGA-II)."""
    s = recipe.search
    if s.sampler in ("tpe", "gp"):
        return startup_decision(s.startup_trials, trials)
    return True if s.sampler == "random" else None


def searched_startup(model, startup: int, seed: int):
    """``model`` (TPE, GP), preceded by random proposals until ``startup`` searched trials are done.

    Optuna's own ``n_startup_trials`` counts every finished trial, so the enqueued baselines used
    it up (the quickstart, 4 baselines and ``startup_trials: 2``, had no random start-up) and so did
    repeated proposals. Whether a trial is a start-up one is decided once, when it begins; the
    model is never consulted for it."""
    import optuna

    class SearchedStartup(optuna.samplers.BaseSampler):
        def __init__(self):
            self.model, self.startup = model, startup
            self.random = optuna.samplers.RandomSampler(seed=seed)
            self._random_trials: dict[int, bool] = {}  # trial number -> sampled at random

        def is_startup(self, study, trial) -> bool:
            if trial.number not in self._random_trials:
                self._random_trials[trial.number] = startup_decision(self.startup, study.get_trials(deepcopy=False))
            return self._random_trials[trial.number]

        def infer_relative_search_space(self, study, trial):
            return {} if self.is_startup(study, trial) else self.model.infer_relative_search_space(study, trial)

        def sample_relative(self, study, trial, search_space):
            return self.model.sample_relative(study, trial, search_space) if search_space else {}

        def sample_independent(self, study, trial, param_name, param_distribution):
            chosen = self.random if self.is_startup(study, trial) else self.model
            return chosen.sample_independent(study, trial, param_name, param_distribution)

        def before_trial(self, study, trial):
            self.model.before_trial(study, trial)
            self.random.before_trial(study, trial)

        def after_trial(self, study, trial, state, values):
            self._random_trials.pop(trial.number, None)
            self.model.after_trial(study, trial, state, values)
            self.random.after_trial(study, trial, state, values)

        def reseed_rng(self):
            self.model.reseed_rng()
            self.random.reseed_rng()

    return SearchedStartup()


def _random(s, seed):
    from optuna.samplers import RandomSampler

    return RandomSampler(seed=seed)


def _nsga2(s, seed):
    from optuna.samplers import NSGAIISampler

    return NSGAIISampler(seed=seed, population_size=max(4, s.startup_trials))


def _grid(s, seed):
    """Optuna's brute-force sampler, made fit for this loop:

    - the trials without parameters (baselines outside the space, trials another worker has just
      asked for) are hidden from it: it takes a finished one for a point with no parameters and
      fails (``param_name mismatch``) on every later proposal;
    - it does not call ``study.stop()`` once the grid is covered: that only works inside
      ``study.optimize`` (here it raises from ``tell``, after the trial was stored); when to stop
      is the loop's business (``search.trials``)."""
    import optuna

    from ._optuna import ParamsOnlyView

    class GridSampler(optuna.samplers.BruteForceSampler):
        def sample_independent(self, study, trial, param_name, param_distribution):
            return super().sample_independent(ParamsOnlyView(study, trial.number), trial, param_name,
                                              param_distribution)

        def after_trial(self, study, trial, state, values) -> None:
            return None

    return GridSampler(seed=seed)


#: search.sampler -> (SearchConfig, seed) -> an Optuna sampler
SAMPLERS = {"tpe": _tpe, "gp": _gp, "random": _random, "grid": _grid, "nsga2": _nsga2}


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
