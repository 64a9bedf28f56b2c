"""Every use of Optuna's private API, in one module.

The loop needs a few things Optuna's public API does not give: writing an attribute or a state to a
trial by id (the heartbeat thread and the reaper act on trials this process did not ask for), reading
a trial's system attributes, re-reading the parameters of the trial being asked (after a storage
error, so that a parameter whose write went through is not sampled again), and a view of the study
that hides parameter-less trials from the brute-force sampler. Each is one function here, so that an
Optuna upgrade touches one file; ``tests/search/test_optuna_adapter.py`` checks them against the
installed Optuna and :data:`SUPPORTED` names the versions they were written for.
"""

from __future__ import annotations

from typing import Any

SUPPORTED = (4, 5)  # Optuna major versions whose private API this module was checked against


def check_version(version: str | None = None) -> bool:
    """True when the installed Optuna (or ``version``) is a major version this adapter supports."""
    import optuna

    major = int((version or optuna.__version__).split(".")[0])
    return major in SUPPORTED


def trial_id(trial) -> int:
    """The storage's id of a trial (a ``Trial`` or a ``FrozenTrial``)."""
    return trial._trial_id


def set_attr(study, tid: int, key: str, value: Any) -> None:
    """Set a user attribute on any trial of the study, by id."""
    study._storage.set_trial_user_attr(tid, key, value)


def set_failed(study, tid: int) -> bool:
    """Mark a running trial FAIL by id; False when another process finished it first."""
    from optuna.trial import TrialState

    return study._storage.set_trial_state_values(tid, state=TrialState.FAIL)


def get_trial(study, tid: int):
    """A fresh ``FrozenTrial`` from storage."""
    return study._storage.get_trial(tid)


def system_attrs(study, tid: int) -> dict[str, Any]:
    return study._storage.get_trial_system_attrs(tid)


def is_finished_error(e: BaseException) -> bool:
    """The error Optuna raises on a write to a trial that is already finished."""
    import optuna

    return isinstance(e, optuna.exceptions.UpdateFinishedTrialError)


def reload_params(study, trial) -> None:
    """Make the asked ``trial`` see the parameters stored so far (its cached copy may lack one whose
    write went through before the connection failed; Optuna would sample it again)."""
    stored = get_trial(study, trial_id(trial))
    cached = getattr(trial, "_cached_frozen_trial", None)
    if cached is not None:
        cached.params = dict(stored.params)
        cached.distributions = dict(stored.distributions)


class ParamsOnlyView:
    """A study as the brute-force sampler should see it: trials without parameters (baselines outside
    the space, trials another worker has only just asked for) hidden, but for the trial being
    sampled. Optuna's sampler reads ``study._storage.get_all_trials``; this proxies both."""

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
