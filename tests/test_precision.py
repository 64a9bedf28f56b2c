"""normsearch._precision: train.precision auto on a CPU, chosen by measurement, cached per shape and machine,
and a run under auto bit for bit the run at the precision it chose."""

import json
import math

import pytest
import torch

import normsearch._precision as P
import normsearch.train as T
from normsearch.config import ModelConfig
from normsearch.data import DataConfig
from normsearch.recipe import TrainConfig
from normsearch.train import train_run

TINY = ModelConfig(n_layers=2, d_model=32, n_heads=2, context_length=32)
DATA = DataConfig(eval_windows=8)


def tiny_train(**kw):
    return TrainConfig(**{"steps": 12, "batch_size": 4, "warmup": 2, "eval_every": 6, "threads": 1, **kw})


def test_decide_takes_bf16_only_past_the_margin():
    assert P.decide(1000.0, 1100.0).chosen == "bf16-mixed"  # 1.1x: at the margin
    assert P.decide(1000.0, 1099.0).chosen == "32-true"
    assert P.decide(1000.0, 500.0).ratio == 0.5 and "0.50x" in P.decide(1000.0, 500.0).reason
    assert P.decide(1000.0, None).chosen == "32-true"  # bf16 could not run here
    assert P.decide(1000.0, 1500.0, margin=2.0).chosen == "32-true"


@pytest.fixture
def counted(monkeypatch):
    """measure() replaced by one that counts its calls and answers 1000 fp32, 1500 bf16 tokens/s."""
    calls = []

    def fake(model, batch_size):
        calls.append((model.d_model, batch_size, torch.get_num_threads()))
        return 1000.0, 1500.0

    monkeypatch.setattr(P, "measure", fake)
    return calls


def test_measured_once_per_shape_and_machine_then_cached(tmp_path, counted):
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        first = P.choose(TINY, 4, tmp_path)
        again = P.choose(TINY, 4, tmp_path)
        assert counted == [(32, 4, 1)]
        assert first.chosen == again.chosen == "bf16-mixed" and first.ratio == again.ratio == 1.5
        assert not first.cached and again.cached
        P.choose(TINY, 8, tmp_path)  # another batch: another shape
        P.choose(ModelConfig(n_layers=2, d_model=64, n_heads=2, context_length=32), 4, tmp_path)
        torch.set_num_threads(2)
        P.choose(TINY, 4, tmp_path)  # the same shape at another thread count
        assert counted == [(32, 4, 1), (32, 8, 1), (64, 4, 1), (32, 4, 2)]
    finally:
        torch.set_num_threads(threads)
    files = sorted((tmp_path / "precision").glob("*.json"))
    assert len(files) == 4
    data = json.loads(files[0].read_text())
    assert data["fp32_tok_s"] == 1000.0 and data["bf16_tok_s"] == 1500.0
    assert {"cpu", "capability", "torch", "threads", "shape"} <= set(data["key"])
    assert data["key"]["cpu"] == P.cpu_name() and data["key"]["torch"] == torch.__version__


def test_the_cache_is_decided_again_under_todays_margin_and_survives_a_bad_file(tmp_path, counted, monkeypatch):
    assert P.choose(TINY, 4, tmp_path).chosen == "bf16-mixed"
    monkeypatch.setattr(P, "MARGIN", 2.0)
    again = P.choose(TINY, 4, tmp_path)
    assert again.cached and again.chosen == "32-true" and len(counted) == 1
    (path,) = (tmp_path / "precision").glob("*.json")
    path.write_text("{not json")
    assert not P.choose(TINY, 4, tmp_path).cached and len(counted) == 2  # measured again, and rewritten
    assert json.loads(path.read_text())["fp32_tok_s"] == 1000.0


def test_on_a_gpu_auto_is_bf16_without_measuring(counted):
    c = P.choose(TINY, 4, None, accelerator="gpu")
    assert c.chosen == "bf16-mixed" and c.fp32_tok_s is None and not counted


def test_the_measurement_leaves_the_random_state_alone():
    state = torch.get_rng_state()
    fp32, bf16 = P.measure(TINY, 4, rounds=1, round_s=0.01)
    assert fp32 > 0 and (bf16 is None or bf16 > 0)
    assert torch.equal(state, torch.get_rng_state())


@pytest.mark.parametrize("margin,chosen", [(0.0, "bf16-mixed"), (math.inf, "32-true")])
def test_a_run_under_auto_is_the_run_at_the_precision_it_chose(tmp_path, monkeypatch, margin, chosen):
    """The measurement runs in the run's process before it seeds anything (a fresh cache: it measures), and
    the losses are bit for bit those of the same run with the chosen precision named."""
    monkeypatch.setattr(P, "MARGIN", margin)
    monkeypatch.setattr(T, "_precision_cache", lambda data: tmp_path)
    auto = train_run("peri_ln", TINY, DATA, tiny_train(), seed=3, lr=3e-3)
    named = train_run("peri_ln", TINY, DATA, tiny_train(precision=chosen), seed=3, lr=3e-3)
    assert auto.precision == named.precision == chosen
    c = auto.precision_choice
    assert c["chosen"] == chosen and not c["cached"] and c["fp32_tok_s"] > 0 and named.precision_choice is None
    assert auto.train_loss == named.train_loss and auto.curve == named.curve
