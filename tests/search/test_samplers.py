"""The sampler's random start-up counts searched trials only, and a space smaller than search.trials
ends cleanly (issue 16, "The sampler, honestly")."""

from types import SimpleNamespace

import optuna
import pytest
from typer.testing import CliRunner

from normsearch.cli import app
from normsearch.recipe import SearchConfig, load_recipe
from normsearch.records import A_ARCH, A_BASELINE, A_REUSED
from normsearch.search import census, run_study
from normsearch.search._samplers import make_sampler

from tiny import write_tiny_recipe

CHOICES = {f"p{i}": ("none", "norm") for i in range(4)}


class Spy:
    """Counts the calls that reach the model (TPE, GP) behind the start-up wrapper."""

    def __init__(self, model):
        self.calls = 0
        for name in ("infer_relative_search_space", "sample_relative", "sample_independent"):
            setattr(model, name, self._counted(getattr(model, name)))

    def _counted(self, fn):
        def wrapper(*args, **kwargs):
            self.calls += 1
            return fn(*args, **kwargs)
        return wrapper


def _ask(study, value, attrs=None):
    trial = study.ask()
    params = {k: trial.suggest_categorical(k, list(v)) for k, v in CHOICES.items()}
    for k, v in (attrs or {}).items():
        trial.set_user_attr(k, v)
    study.tell(trial, value)
    return params


@pytest.mark.parametrize("sampler", ["tpe", "gp"])
def test_start_up_is_random_for_startup_trials_searched_trials_after_the_baselines(sampler):
    recipe = SimpleNamespace(search=SearchConfig(sampler=sampler, startup_trials=2))
    s = make_sampler(recipe, seed=0)
    spy = Spy(s.model)
    study = optuna.create_study(sampler=s)
    for i in range(4):  # four baselines, enqueued as normsearch does
        study.enqueue_trial({k: ("norm" if (i >> j) & 1 else "none") for j, k in enumerate(CHOICES)},
                            user_attrs={A_BASELINE: f"b{i}"})
        _ask(study, 3.0 - 0.1 * i)
    spy.calls = 0  # (the baselines' fixed parameters may or may not be offered to it)
    _ask(study, 2.5)  # searched trial 1: random
    assert spy.calls == 0
    _ask(study, 2.5, {A_REUSED: 4})  # a repeated proposal, reused: does not count
    assert spy.calls == 0
    _ask(study, 2.4)  # searched trial 2: random
    assert spy.calls == 0
    _ask(study, 2.3)  # the start-up is over: the model proposes
    assert spy.calls > 0


def test_a_bare_optuna_start_up_would_have_counted_the_baselines():
    """What the wrapper fixes: Optuna's n_startup_trials counts the enqueued baselines."""
    tpe = optuna.samplers.TPESampler(seed=0, n_startup_trials=2)
    spy = Spy(tpe)
    study = optuna.create_study(sampler=tpe)
    for i in range(4):
        study.enqueue_trial({k: "none" for k in CHOICES}, user_attrs={A_BASELINE: f"b{i}"})
        _ask(study, 3.0)
    spy.calls = 0
    _ask(study, 2.5)
    assert spy.calls > 0  # no random start-up at all


def test_no_finished_trial_means_random_even_without_start_up():
    recipe = SimpleNamespace(search=SearchConfig(sampler="gp", startup_trials=0))
    s = make_sampler(recipe, seed=0)
    spy = Spy(s.model)
    study = optuna.create_study(sampler=s)
    _ask(study, 1.0)
    assert spy.calls == 0
    _ask(study, 1.0)
    assert spy.calls > 0


def test_a_space_searched_to_its_last_network_trains_each_once_and_status_counts_the_repeats(tmp_path):
    """attn_in, attn_out, ffn_in on or off, final fixed: 8 networks, pre_ln is one of them (post_ln is
    not), so 7 are left to search; random proposals repeat long before the last one is found."""
    path = write_tiny_recipe(tmp_path, "small", steps=5, trials=7, sampler="random")
    handle = run_study(load_recipe(path, {"train.seeds": [0]}))
    trials = handle.study.get_trials()
    c = census(handle.study)
    assert c.searched_done == 7 and c.baselines_done == {"pre_ln", "post_ln"}
    trained = [t.user_attrs[A_ARCH] for t in trials
               if t.state.name == "COMPLETE" and t.user_attrs.get(A_REUSED) is None]
    assert len(trained) == len(set(trained)) == 9  # every network once: 7 searched + 2 baselines
    repeats = [t for t in trials if t.user_attrs.get(A_REUSED) is not None]
    assert repeats, "random proposals in a space of 8 repeat"
    assert not [t for t in trials if t.state.name == "FAIL"]  # a repeat takes no slot: nothing was surplus
    r = CliRunner().invoke(app, ["status", str(tmp_path / "results" / "small")])
    assert r.exit_code == 0, r.output
    assert "7/7 searched" in r.output
    n = len(repeats)
    assert f"{n} proposal{'s' if n > 1 else ''} repeated an evaluated architecture and reused its result" in r.output
    # a rerun has nothing left to do
    run_study(load_recipe(path, {"train.seeds": [0]}))
    assert len(handle.study.get_trials()) == len(trials)


def test_more_trials_than_the_space_holds_is_refused_before_anything_runs(tmp_path):
    path = write_tiny_recipe(tmp_path, "big", steps=5, trials=8)
    r = CliRunner().invoke(app, ["run", str(path)])
    assert r.exit_code == 2
    assert ("error: the space holds 8 distinct architectures at 2 layers (1 of them baselines), fewer than the 9 "
            "that search.trials 8 needs; lower search.trials to 7") in r.output
    assert not (tmp_path / "results" / "big" / "study.db").exists()
