"""``normsearch ladder`` (issue 17): the top placements and the baselines retrained at three or more
sizes as stages of the same study; resumable after ``kill -9``, deduplicated by (architecture, rung);
rungs that would not be comparable are refused; ladder.md reports each rung and the agreement."""

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from normsearch.cli import app
from normsearch.errors import NormsearchError
from normsearch.recipe import LadderConfig, load_recipe
from normsearch.search import open_results
from normsearch.stages.ladder import plan_rungs
from normsearch.search._stages import A_STAGE, find_stage

from tiny import write_tiny_recipe

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()
RUNGS = "[{n_layers: 1}, {n_layers: 2}, {n_layers: 3}]"


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ladder")
    recipe = write_tiny_recipe(folder, "lad", steps=10, trials=1)
    result = runner.invoke(app, ["run", str(recipe)])
    assert result.exit_code == 0, result.output
    return folder / "results" / "lad"


def _cli(*args):
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "normsearch", *map(str, args)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def _runs(folder: Path) -> dict[Path, float]:
    return {p: p.stat().st_mtime for p in folder.glob("ladder-*/runs/*/seed*.json")}


def test_a_ladder_runs_every_rung_resumes_after_kill_9_and_trains_nothing_twice(searched):
    args = ["ladder", searched, "--rungs", RUNGS, "--top", "1", "--seeds", "1", "--jobs", "1"]
    p = _cli(*args)
    deadline = time.time() + 240
    while time.time() < deadline and len(_runs(searched)) < 4:
        time.sleep(0.2)
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    before = _runs(searched)
    assert before, "no ladder run finished before the kill"
    p = _cli(*args)
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, err
    after = _runs(searched)
    assert all(after[q] == m for q, m in before.items()), "a finished run was trained again"
    assert len(after) == 3 * 3  # 3 rungs x (1 found + 2 baselines) x 1 seed x 1 lr
    for q in after:
        assert json.loads(q.read_text())["seed"] == 2000  # fresh seeds, not the search's
    layers = {json.loads(q.read_text())["n_layers"] for q in after}
    assert layers == {1, 2, 3}
    handle = open_results(searched)
    for i in range(3):
        stage = find_stage(handle, f"ladder-{i}")
        assert {e["label"] for e in stage.user_attrs[A_STAGE]["entries"]} >= {"pre_ln", "post_ln"}
    text = (searched / "ladder" / "ladder.md").read_text()
    for heading in ("## What was trained", "## Each rung", "### Does the order hold?", "### Reversals",
                    "### Power laws"):
        assert heading in text
    assert (searched / "ladder" / "ladder.png").is_file() and (searched / "ladder-2" / "report.md").is_file()
    assert json.loads((searched / "ladder" / "ladder.json").read_text())["rungs"]
    # once more: every (architecture, rung) is done, nothing is trained
    result = runner.invoke(app, ["ladder", str(searched), "--rungs", RUNGS, "--top", "1", "--seeds", "1",
                                 "--jobs", "1"])
    assert result.exit_code == 0, result.output
    assert _runs(searched) == after
    # other settings for the same rungs are refused, naming the ones they were started with
    result = runner.invoke(app, ["ladder", str(searched), "--rungs", RUNGS, "--top", "1", "--seeds", "2"])
    assert result.exit_code == 2 and "seeds 1" in result.output


@pytest.mark.parametrize("rungs, message", [
    ("[{n_layers: 1}, {vocab_size: 512}, {n_layers: 3}]", "vocabulary"),
    ("[{n_layers: 1}, {context_length: 64}, {n_layers: 3}]", "context"),
    ("[{n_layers: 1}, {n_layers: 2}]", "three or more"),
    ("[{n_layers: 3}, {n_layers: 2}, {n_layers: 4}]", "not larger"),
    ("[{n_layers: 1}, {dropout: 0.1}, {n_layers: 3}]", "unknown setting"),
])
def test_rungs_that_are_not_comparable_are_refused_in_one_line(searched, rungs, message):
    result = runner.invoke(app, ["ladder", str(searched), "--rungs", rungs])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output


def test_tokens_grow_with_parameters_by_the_stated_ratio_up_to_the_cap(tmp_path):
    r = load_recipe(write_tiny_recipe(tmp_path))
    cfg = LadderConfig(rungs=[{"d_model": 16, "n_heads": 2}, {"d_model": 32}, {"d_model": 64}], tokens_per_param=2.0,
                       max_steps=400)
    rungs = plan_rungs(r, cfg)
    per_step = r.train.batch_size * r.model.context_length
    for rung in rungs:
        want = min(400, math.ceil(2.0 * rung.n_params / per_step))
        assert rung.steps == want and rung.recipe.train.steps == want
    assert rungs[0].n_params < rungs[1].n_params < rungs[2].n_params
    assert rungs[-1].steps == 400  # capped
    with pytest.raises(NormsearchError, match="three or more"):
        LadderConfig(rungs=[{"d_model": 16}])


def test_the_learning_rate_transfers_under_mup_and_is_swept_otherwise(tmp_path):
    from normsearch.stages.ladder import lr_mode

    cfg = LadderConfig(rungs=[{"d_model": 64}, {"d_model": 128}, {"d_model": 256}])
    assert lr_mode(load_recipe(write_tiny_recipe(tmp_path)), cfg) == "sweep"
    mup = load_recipe(write_tiny_recipe(tmp_path), ["--model.parametrization", "mup", "--model.mup_base_width", "32"])
    assert lr_mode(mup, cfg) == "transfer"
    assert lr_mode(mup, LadderConfig(rungs=cfg.rungs, lr="sweep")) == "sweep"
