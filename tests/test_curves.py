"""train.logger: every run's curves through Lightning's loggers, offline, named by architecture, seed
and learning rate, grouped by study."""

import csv

import pytest

from normsearch.config import ModelConfig
from normsearch.curves import run_name, scalars
from normsearch.data import DataConfig
from normsearch.errors import NormsearchError
from normsearch.recipe import TrainConfig
from normsearch.train import train_run

TINY = ModelConfig(n_layers=2, d_model=32, n_heads=2, context_length=32)


def train(logger):
    return TrainConfig(steps=6, batch_size=4, warmup=1, eval_every=3, lr=[3e-3], seeds=[0], threads=1, logger=logger)


def test_csv_curves_of_one_run(tmp_path, one_thread):
    r = train_run("pre_ln", TINY, DataConfig(eval_windows=4), train("csv"), seed=0, lr=3e-3, log_dir=tmp_path,
                  log_group="study")
    folder = tmp_path / "study" / run_name("pre_ln", r.arch_id, 0, 3e-3)
    rows = list(csv.DictReader(open(folder / "metrics.csv")))
    vals = [float(x["val_bpb"]) for x in rows if x.get("val_bpb")]
    assert vals == pytest.approx([p["val_bpb"] for p in r.curve])
    assert any(x.get("train_loss") for x in rows) and any(x.get("lr") for x in rows)
    assert any(x.get("resid_rms/max") for x in rows)


def test_tensorboard_curves_of_one_run(tmp_path, one_thread):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    r = train_run("peri_ln", TINY, DataConfig(eval_windows=4), train("tensorboard"), seed=1, lr=3e-3,
                  log_dir=tmp_path, log_group="study")
    folder = tmp_path / "study" / run_name("peri_ln", r.arch_id, 1, 3e-3)
    events = EventAccumulator(str(folder))
    events.Reload()
    val = [e.value for e in events.Scalars("val_bpb")]
    assert val == pytest.approx([p["val_bpb"] for p in r.curve], rel=1e-6)
    assert "train_loss" in events.Tags()["scalars"] and "lr" in events.Tags()["scalars"]


def test_no_logger_writes_nothing_and_a_missing_package_is_one_line(tmp_path, monkeypatch, one_thread):
    train_run("pre_ln", TINY, DataConfig(eval_windows=4), train("none"), seed=0, lr=3e-3, log_dir=tmp_path)
    assert list(tmp_path.iterdir()) == []
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    with pytest.raises(NormsearchError, match="train.logger wandb needs the wandb package"):
        train_run("pre_ln", TINY, DataConfig(eval_windows=4), train("wandb"), seed=0, lr=3e-3, log_dir=tmp_path)


def test_diagnostics_become_scalars_per_layer():
    s = scalars({"resid_rms": [1.0, 2.0], "max_logit": [3.0, float("nan")], "gains": {}})
    assert s == {"resid_rms/layer0": 1.0, "resid_rms/layer1": 2.0, "resid_rms/max": 2.0, "max_logit/layer0": 3.0,
                 "max_logit/max": 3.0}
