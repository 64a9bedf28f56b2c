"""Several devices: a trial on two processes (DDP over gloo on the CPU), and one worker per device
with ``normsearch run --devices``. The plumbing is what is tested here; GPUs are not needed."""

import pytest
from typer.testing import CliRunner

from tiny import write_tiny_recipe
from normsearch.cli import app
from normsearch.config import ModelConfig
from normsearch.data import DataConfig
from normsearch.errors import NormsearchError
from normsearch.recipe import TrainConfig
from normsearch.records import A_REUSED
from normsearch.search import census, open_results
from normsearch.train import train_run

TINY = ModelConfig(n_layers=2, d_model=32, n_heads=2, context_length=32)
runner = CliRunner()


def test_a_trial_on_two_processes_returns_rank_zeros_result(tmp_path):
    train = TrainConfig(steps=10, batch_size=4, warmup=2, eval_every=5, devices=2, strategy="ddp", threads=1)
    ckpt = tmp_path / "w.safetensors"
    r = train_run("peri_ln", TINY, DataConfig(eval_windows=8), train, seed=0, lr=3e-3, checkpoint=ckpt)
    assert r.steps == 10 and not r.diverged and r.value is not None
    assert [c["step"] for c in r.curve] == [0, 5, 10]
    assert ckpt.is_file()  # rank 0 wrote the weights
    single = train_run("peri_ln", TINY, DataConfig(eval_windows=8),
                       TrainConfig(steps=10, batch_size=4, warmup=2, eval_every=5, threads=1), seed=0, lr=3e-3)
    assert r.curve[0]["val_bpb"] == pytest.approx(single.curve[0]["val_bpb"])  # same initialisation
    assert r.curve[-1]["val_bpb"] != single.curve[-1]["val_bpb"]  # twice the data per step


def test_fsdp_on_cpu_is_a_clear_error():
    train = TrainConfig(steps=2, batch_size=2, warmup=0, devices=2, strategy="fsdp")
    with pytest.raises(NormsearchError, match="fsdp needs CUDA GPUs"):
        train_run("pre_ln", TINY, DataConfig(eval_windows=2), train, seed=0, lr=1e-3)


def test_a_study_whose_trials_span_two_processes(tmp_path):
    recipe = write_tiny_recipe(tmp_path, name="ddp", trials=1, steps=6)
    # one baseline and one searched placement: two architectures, each trained by two spawned ranks
    r = runner.invoke(app, ["run", str(recipe), "--train.devices", "2", "--train.strategy", "ddp", "--train.seeds", "[0]",
                            "--train.eval_every", "3", "--train.warmup", "1", "--search.baselines", "[pre_ln]"])
    assert r.exit_code == 0, r.output
    handle = open_results(tmp_path / "results" / "ddp")
    c = census(handle.study)
    assert c.searched_done == 1 and c.baselines_done == {"pre_ln"}
    trials = handle.study.get_trials()
    assert all(t.state.name == "COMPLETE" for t in trials)
    trained = [t.user_attrs["arch_id"] for t in trials if t.user_attrs.get(A_REUSED) is None]
    assert len(trained) == len(set(trained)) == 2  # rank 0 alone reported each architecture, once


def test_one_worker_per_device(tmp_path):
    recipe = write_tiny_recipe(tmp_path, name="devs", trials=2)
    r = runner.invoke(app, ["run", str(recipe), "--devices", "0,1"])
    assert r.exit_code == 0, r.output
    assert "2 workers run on the CPU" in r.output and "rank" in r.output
    study = open_results(tmp_path / "results" / "devs").study
    c = census(study)
    assert c.searched_done == 2 and len(c.baselines_done) == 2
    trained = [t.user_attrs["arch_id"] for t in study.get_trials()
               if t.state.name == "COMPLETE" and t.user_attrs.get(A_REUSED) is None]
    assert len(trained) == len(set(trained)) == 4
    # the two workers trained (a trial released without a task, e.g. a surplus proposal, names no worker)
    assert len({t.user_attrs["worker"] for t in study.get_trials() if t.state.name == "COMPLETE"}) == 2


@pytest.mark.parametrize("devices, message", [("0,x", "give GPU ids separated by commas"),
                                              ("0,1,2", "do not split into workers of train.devices=2")])
def test_bad_devices(tmp_path, devices, message):
    recipe = write_tiny_recipe(tmp_path, name="bad", trials=0)
    r = runner.invoke(app, ["run", str(recipe), "--devices", devices, "--train.devices", "2"])
    assert r.exit_code == 2 and message in r.output, r.output
