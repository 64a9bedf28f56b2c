"""``normsearch run --jobs N``: local workers that share a study by the run. Same results as one
worker, no run trained twice, resume after ``kill -9`` of the whole process group, stale claims
taken over, and hand-started workers that split the cores."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from normsearch.recipe import load_recipe
from normsearch.records import A_ARCH, A_REUSED
from normsearch.search import census, open_results
from normsearch.search import _claims
from normsearch.search import plan_workers

from tiny import write_tiny_recipe

ROOT = Path(__file__).resolve().parents[2]
ONE_ARCH = ["--search.baselines", "[pre_ln]", "--train.seeds", "[0,1,2]"]


def _cli(*args, **kw):
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "normsearch", *map(str, args)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def _runs(folder: Path) -> dict[str, dict]:
    return {f"{p.parent.name}/{p.stem}": json.loads(p.read_text()) for p in sorted(folder.glob("runs/*/seed*.json"))}


def _trained_per_arch(study):
    out = {}
    for t in study.get_trials(deepcopy=False):
        if t.state.name == "COMPLETE" and t.user_attrs.get(A_REUSED) is None:
            out[t.user_attrs[A_ARCH]] = out.get(t.user_attrs[A_ARCH], 0) + 1
    return out


def test_two_jobs_give_the_results_of_one_and_share_the_runs_of_one_architecture(tmp_path):
    """One architecture, three seeds: the second worker has no architecture of its own and trains
    runs of the first's; every number equals what one worker produces."""
    # runs long enough (60 steps) that the second worker is up before the first has trained all three
    recipe = write_tiny_recipe(tmp_path, "jobs", steps=60, trials=0)  # --jobs overrides its search.jobs: 1
    procs = {n: _cli("run", recipe, "--jobs", str(n), "--name", f"jobs{n}", *ONE_ARCH) for n in (1, 2)}
    for p in procs.values():
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        assert "pre_ln" in out  # the ranked table
    one, two = (_runs(tmp_path / "results" / f"jobs{n}") for n in (1, 2))
    assert sorted(one) == sorted(two) and len(one) == 3
    for key in one:
        for field in ("value", "curve", "train_loss", "n_params", "diverged"):
            assert one[key][field] == two[key][field], (key, field)
    assert len({r["worker"] for r in two.values()}) == 2, "the second worker did not help"
    studies = [open_results(tmp_path / "results" / f"jobs{n}").study for n in (1, 2)]
    assert [_trained_per_arch(s) for s in studies] == [{a: 1 for a in _trained_per_arch(studies[0])}] * 2
    assert studies[0].best_trial.values == studies[1].best_trial.values
    assert not list((tmp_path / "results" / "jobs2" / "runs").glob("*/*.claim"))


def test_kill_9_of_the_process_group_mid_study_then_resume(tmp_path):
    recipe = write_tiny_recipe(tmp_path, "killed", steps=40, trials=1)
    folder = tmp_path / "results" / "killed"
    proc = _cli("run", recipe, "--jobs", "2", start_new_session=True)
    try:
        start = time.time()
        while not list(folder.glob("runs/*/seed*.json")):
            assert proc.poll() is None and time.time() - start < 180, "no run finished"
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    killed_at = time.time()
    before = {k: v["wall_time"] for k, v in _runs(folder).items()}
    assert before
    again = _cli("run", recipe, "--jobs", "2")
    out, err = again.communicate(timeout=300)
    assert again.returncode == 0, err
    study = open_results(folder).study
    assert all(n == 1 for n in _trained_per_arch(study).values())
    c = census(study)
    assert c.searched_done == 1 and len(c.baselines_done) == 2
    failed = [t for t in study.get_trials() if t.state.name == "FAIL"]
    assert all("dead worker" in t.user_attrs["failure"] or "surplus" in t.user_attrs["failure"]
                          for t in failed)
    after = _runs(folder)
    for key, wall in before.items():  # the runs finished before the kill were not trained again
        assert after[key]["wall_time"] == wall
        assert os.path.getmtime(folder / "runs" / f"{key}.json") < killed_at
    assert len(after) == 3 * 2
    assert not list(folder.glob("runs/*/*.claim"))


# -- claims ----------------------------------------------------------------------------------------

HOLD = """
import sys, time
from pathlib import Path
from normsearch.search._claims import try_claim
c = try_claim(Path(sys.argv[1]), "other:1")
print("held" if c else "refused", flush=True)
time.sleep(60)
"""


def test_a_claim_is_exclusive_while_its_worker_lives_and_stale_once_it_dies(tmp_path):
    run = tmp_path / "arch" / "seed0_lr0.003.json"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(run)], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert holder.stdout.readline().strip() == "held"
        assert _claims.held_by_live_worker(run)
        assert _claims.try_claim(run, "me:2") is None
        holder.kill()  # kill -9: the claim file stays, its lock goes
        holder.wait()
        assert _claims.claim_path(run).is_file() and not _claims.held_by_live_worker(run)
        claim = _claims.try_claim(run, "me:2")
        assert claim is not None and _claims.claim_path(run).read_text() == "me:2"
        assert _claims.try_claim(run, "third:3") is None  # ours now
        claim.release()
        assert not _claims.claim_path(run).exists()
    finally:
        if holder.poll() is None:
            holder.kill()
    # a claim file left by a process that never locked it (an older version, a copy) is stale too
    _claims.claim_path(run).write_text("gone:999999")
    assert _claims.try_claim(run, "me:2") is not None
    # a finished run is not claimed
    run.write_text("{}")
    assert _claims.try_claim(run, "me:2") is None


def test_hand_started_workers_split_the_cores(tmp_path, monkeypatch):
    monkeypatch.setenv("NORMSEARCH_REGISTRY", str(tmp_path / "reg"))
    monkeypatch.setattr(_claims, "cores", lambda: 8)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with _claims.Registered():
            assert _claims.live_workers() == 1 and _claims.thread_share() == 8
            (tmp_path / "reg" / str(other.pid)).write_text("")
            assert _claims.live_workers() == 2 and _claims.thread_share() == 4
            other.kill()
            other.wait()
            assert _claims.live_workers() == 1  # the dead one's pid file is dropped
            assert not (tmp_path / "reg" / str(other.pid)).exists()
    finally:
        if other.poll() is None:
            other.kill()


@pytest.mark.parametrize("d_model, workers, threads", [(64, 2, 1), (1024, 1, 2)])
def test_auto_jobs_split_the_cores_by_model_size(tmp_path, monkeypatch, d_model, workers, threads):
    monkeypatch.setattr("normsearch.search._workers.cores", lambda: 2)
    r = load_recipe(ROOT / "recipes" / "quickstart.yaml", ["--model.d_model", str(d_model)])
    plan = plan_workers("auto", r, None, gpu=False)
    assert len(plan) == workers and plan[0].threads == threads
    assert [w.name for w in plan_workers(3, r, None, gpu=False)] == ["job0", "job1", "job2"]
    on_gpus = plan_workers("auto", r, [[0], [1]], gpu=True)
    assert [(w.name, w.env) for w in on_gpus] == [("gpu0", {"CUDA_VISIBLE_DEVICES": "0"}),
                                                  ("gpu1", {"CUDA_VISIBLE_DEVICES": "1"})]
