"""The one module that uses Optuna's private API, checked against the installed Optuna."""

import optuna
import pytest

from normsearch.search import _optuna


def test_installed_optuna_is_a_supported_version():
    assert _optuna.check_version(), f"Optuna {optuna.__version__}: check normsearch/search/_optuna.py against it"
    assert not _optuna.check_version("3.6.1") and _optuna.check_version("4.2.0") and _optuna.check_version("5.0.0")


@pytest.fixture
def study():
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.create_study(storage=optuna.storages.InMemoryStorage())


def test_attributes_state_and_reads_by_id(study):
    t = study.ask()
    tid = _optuna.trial_id(t)
    _optuna.set_attr(study, tid, "heartbeat", 1.5)
    assert _optuna.get_trial(study, tid).user_attrs["heartbeat"] == 1.5
    assert _optuna.system_attrs(study, tid) == {}
    assert _optuna.set_failed(study, tid)
    assert study.trials[0].state == optuna.trial.TrialState.FAIL
    with pytest.raises(Exception) as e:
        _optuna.set_attr(study, tid, "heartbeat", 2.0)
    assert _optuna.is_finished_error(e.value) and not _optuna.is_finished_error(ValueError())


def test_reload_params_sees_what_storage_has(study):
    t = study.ask()
    t.suggest_categorical("a", ["x", "y"])
    dist = optuna.distributions.CategoricalDistribution(["u", "v"])
    study._storage.set_trial_param(_optuna.trial_id(t), "b", 1, dist)  # written behind the trial's back
    _optuna.reload_params(study, t)
    assert t.suggest_categorical("b", ["u", "v"]) == "v"  # not sampled again


def test_params_only_view_hides_parameterless_trials(study):
    study.enqueue_trial({}, user_attrs={"baseline": "pre_ln"})
    base = study.ask()
    study.tell(base, 1.0)
    t = study.ask()
    t.suggest_categorical("a", ["x", "y"])
    view = _optuna.ParamsOnlyView(study, current=t.number)
    numbers = [x.number for x in view._storage.get_all_trials(view._study_id)]
    assert numbers == [t.number] and view.study_name == study.study_name
