"""Samplers and pruners, as registries keyed by the recipe's ``search.sampler`` and ``search.pruner``."""

from __future__ import annotations

import warnings

from ..recipe import Recipe


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
