"""The search: studies that resume, deduplicate architectures, share work between processes, and
reject broken recipes with one line."""

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from normsearch.cli import app
from normsearch.recipe import load_recipe
from normsearch.records import A_ARCH, A_BASELINE, A_REUSED
from normsearch.search import census, open_results, run_study

from tiny import write_tiny_recipe

ROOT = Path(__file__).resolve().parents[2]

def tiny_recipe(tmp_path, name="tiny", steps=10, trials=3, sampler="tpe"):
    return write_tiny_recipe(tmp_path, name, steps, trials, sampler)


def trained_per_arch(study):
    """arch_id -> number of trials that trained it (not reused)."""
    out = {}
    for t in study.get_trials(deepcopy=False):
        if t.state.name in ("COMPLETE", "PRUNED") and t.user_attrs.get(A_REUSED) is None:
            out[t.user_attrs[A_ARCH]] = out.get(t.user_attrs[A_ARCH], 0) + 1
    return out


def test_a_study_runs_baselines_first_and_counts_distinct_architectures(tmp_path):
    handle = run_study(load_recipe(tiny_recipe(tmp_path, trials=3)))
    trials = handle.study.get_trials()
    assert [t.user_attrs.get(A_BASELINE) for t in trials[:2]] == ["pre_ln", "post_ln"]
    per_arch = trained_per_arch(handle.study)
    assert all(n == 1 for n in per_arch.values())  # nothing trained twice
    c = census(handle.study)
    assert c.searched_done == 3 and c.baselines_done == {"pre_ln", "post_ln"}
    # pre_ln is a point of this space: enqueued with its parameters, so the sampler learns from it
    assert trials[0].params == {"site.attn_in": "norm", "site.attn_out": "none", "site.ffn_in": "norm",
                                "site.final": "norm"}
    # step-wise reports (not per epoch): evaluations every 5 steps, run 2 offset by the budget
    searched = next(t for t in trials if not t.user_attrs.get(A_BASELINE) and t.user_attrs.get(A_REUSED) is None)
    assert sorted(searched.intermediate_values) == [5, 10, 15, 20]
    # the resolved recipe is saved with the study and beside it
    assert handle.study.user_attrs["recipe"]["train"]["steps"] == 10
    assert (handle.folder / "recipe.yaml").is_file()
    # each finished run is on disk, the best seed's weights are kept
    arch = trials[0].user_attrs[A_ARCH]
    assert (handle.folder / "runs" / arch / "seed0_lr0.003.json").is_file()
    # 10 steps leave every run at the unigram loss: stalled, a failure, so no cell is chosen and no weights
    # are kept (tests/test_grid.py checks the kept weights of a study whose runs learn)
    assert trials[0].user_attrs["score"]["best_lr"] is None and trials[0].values == [float("inf")]
    assert not (handle.folder / "checkpoints" / f"{arch}.safetensors").is_file()
    # running again: the count is a total, nothing more is trained
    n = len(trials)
    run_study(load_recipe(tiny_recipe(tmp_path, trials=3)))
    assert len(handle.study.get_trials()) == n
    # asking for more extends the same study
    run_study(load_recipe(tiny_recipe(tmp_path, trials=4)))
    assert census(handle.study).searched_done == 4


def test_exhaustive_grid_and_reuse_of_repeated_proposals(tmp_path):
    """The space holds 4 networks (final fixed); random proposals repeat, repeats are reused."""
    handle = run_study(load_recipe(tiny_recipe(tmp_path, name="grid", trials=6, sampler="random")))
    per_arch = trained_per_arch(handle.study)
    assert all(n == 1 for n in per_arch.values())
    reused = [t for t in handle.study.get_trials() if t.user_attrs.get(A_REUSED) is not None]
    assert reused, "random proposals in a space of 8 should repeat"
    for t in reused:
        source = handle.study.trials[t.user_attrs[A_REUSED]]
        assert t.values == source.values and t.user_attrs[A_ARCH] == source.user_attrs[A_ARCH]


def test_recipe_change_is_refused(tmp_path):
    run_study(load_recipe(tiny_recipe(tmp_path, name="same", trials=0)))
    with pytest.raises(Exception, match=r"run with another recipe \(train.steps: 10 in the study, 11 now\)"):
        run_study(load_recipe(tiny_recipe(tmp_path, name="same", trials=0, steps=11)))


def _cli(*args, cwd=None, env_extra=None):
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env_extra or {})}
    # Ctrl-C reaches the child as a user's would, whatever this process's disposition of SIGINT
    return subprocess.Popen([sys.executable, "-m", "normsearch", *map(str, args)], cwd=cwd or ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _wait_for(cond, timeout=120, what="condition"):
    start = time.time()
    while time.time() - start < timeout:
        if cond():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _running_with_a_finished_run(db: Path) -> bool:
    if not db.is_file():
        return False
    try:
        with sqlite3.connect(db, timeout=1) as con:
            rows = con.execute(
                "select count(*) from trials t join trial_user_attributes a on a.trial_id = t.trial_id "
                "where t.state = 'RUNNING' and a.key like 'run:%'").fetchone()
    except sqlite3.OperationalError:
        return False
    return rows[0] > 0


def _signal_halfway(recipe, db: Path, sig):
    """Start `normsearch run`, send ``sig`` once a trial has finished a run but not all of them;
    returns the process and its stderr. The callers' runs are long enough (150 steps) that the signal
    lands inside the study even when this process is slow to send it on a loaded machine (with 40 steps
    the whole study could end between the check and the signal)."""
    proc = _cli("run", recipe)
    try:
        _wait_for(lambda: _running_with_a_finished_run(db), what="a trial halfway")
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc, err


def test_resume_after_kill_9_mid_trial(tmp_path):
    """kill -9 while a trial is between its runs: the next run notices the dead worker, retries the
    trial, does not redo the finished run, and trains no architecture twice."""
    recipe = tiny_recipe(tmp_path, name="killed", steps=150, trials=1)
    _signal_halfway(recipe, tmp_path / "results" / "killed" / "study.db", signal.SIGKILL)
    again = _cli("run", recipe)
    out, err = again.communicate(timeout=300)
    assert again.returncode == 0, err
    study = open_results(tmp_path / "results" / "killed").study
    failed = [t for t in study.get_trials() if t.state.name == "FAIL"]
    assert len(failed) == 1 and "dead worker: its process is gone" in failed[0].user_attrs["failure"]
    retried = [t for t in study.get_trials() if t.system_attrs.get("failed_trial") == failed[0].number]
    assert len(retried) == 1 and retried[0].state.name == "COMPLETE"
    assert all(n == 1 for n in trained_per_arch(study).values())
    c = census(study)
    assert c.searched_done == 1 and len(c.baselines_done) == 2
    assert "pre_ln" in out  # ends with the ranked table


@pytest.mark.parametrize("storage", ["sqlite", "journal"])
def test_two_workers_share_one_study(tmp_path, storage):
    recipe = tiny_recipe(tmp_path, name=f"two-{storage}", trials=3)
    url = f"sqlite:///{tmp_path / 'shared.db'}" if storage == "sqlite" else f"journal:{tmp_path / 'shared.journal'}"
    workers = [_cli("run", recipe, "--storage", url) for _ in range(2)]
    outs = [w.communicate(timeout=300) for w in workers]
    for w, (_, err) in zip(workers, outs):
        assert w.returncode == 0, err
    handle = open_results(tmp_path / "results" / f"two-{storage}", storage=url)
    per_arch = trained_per_arch(handle.study)
    assert all(n == 1 for n in per_arch.values()), per_arch
    c = census(handle.study)
    assert c.searched_done == 3 and len(c.baselines_done) == 2
    assert not [t for t in handle.study.get_trials() if t.state.name == "FAIL" and "surplus" not in
                t.user_attrs.get("failure", "")]
    workers_seen = {t.user_attrs.get("worker") for t in handle.study.get_trials() if t.user_attrs.get("worker")}
    assert len(workers_seen) == 2


def test_results_on_disk_that_storage_lacks_are_sent(tmp_path):
    handle = run_study(load_recipe(tiny_recipe(tmp_path, name="sync", trials=0)))
    archs = sorted(trained_per_arch(handle.study))
    # a fresh storage that lost everything: the finished architectures come back from runs/
    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    again = run_study(load_recipe(tiny_recipe(tmp_path, name="sync", trials=0)), storage=url)
    assert sorted(trained_per_arch(again.study)) == archs
    assert all(t.user_attrs.get("runs") for t in again.study.get_trials())


# -- recipes: validation and one-line errors -------------------------------------------------------

runner = CliRunner()


RECIPES = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "recipes").rglob("*.yaml"))
# 40 steps of 8 sequences at lr 1e-2: enough for a run to end below the unigram loss (a successful run), so
# that every recipe's confirmation has chosen cells to train at
TINY_OVERRIDES = ["--model.n_layers", "2", "--model.d_model", "32", "--model.n_heads", "2",
                  "--model.context_length", "32", "--train.steps", "40", "--train.batch_size", "8",
                  "--train.warmup", "2", "--train.eval_every", "20", "--train.seeds", "[0]", "--train.lr", "[1.0e-2]",
                  "--search.startup_trials", "1", "--search.control", "0", "--data.eval_windows", "4",
                  "--search.jobs", "1"]


@pytest.mark.parametrize("recipe", RECIPES)
def test_validate_every_shipped_recipe(recipe):
    r = runner.invoke(app, ["validate", recipe])
    assert r.exit_code == 0, r.output
    assert "is valid" in r.output and ("points" in r.output or "space: none" in r.output) and "baselines" in r.output


@pytest.mark.parametrize("recipe", RECIPES)
def test_every_shipped_recipe_runs_at_a_tiny_size(recipe, tmp_path, monkeypatch):
    """Each recipe end to end, shrunk: its baselines (and one searched placement) train, the report is
    written and the ranked table printed. The report's plots are tests/report's business: drawing a
    dozen figures per recipe (about 8 s each time) is left out here."""
    from normsearch.report import _plots

    monkeypatch.setattr(_plots, "all_figures", lambda *a, **k: {})
    loaded = load_recipe(recipe)
    searched = ["--search.trials", "1"] if loaded.space is not None else []
    confirmed = ["--confirm.seeds", "2", "--confirm.test_bytes", "5000"] if loaded.confirm is not None else []
    r = runner.invoke(app, ["run", recipe, "--results_dir", str(tmp_path), *TINY_OVERRIDES, *searched, *confirmed])
    assert r.exit_code == 0, r.output
    handle = open_results(next(tmp_path.iterdir()))
    c = census(handle.study)
    assert c.baselines_done == set(handle.recipe.search.baselines)
    assert c.searched_done == (1 if handle.recipe.space is not None else 0)
    assert (handle.folder / "report.md").is_file() and "rank" in r.output
    if handle.recipe.confirm is not None:  # the confirmation stage ran after the search, and leads the report
        from normsearch.stages import confirm_handle

        assert confirm_handle(handle) is not None
        assert "## Confirmed verdicts" in (handle.folder / "report.md").read_text()


BAD = [
    ("model: {n_layers: 2}\nspace: sites.yaml\nsearch: {trials: 1}\nextra: 1\n", "unknown section 'extra'"),
    ("model: {n_layer: 2}\nspace: sites.yaml\n", "unknown key 'n_layer' (did you mean 'n_layers'?)"),
    ("model: {d_model: 30, n_heads: 4}\nspace: sites.yaml\n", "divisible by model.n_heads"),
    ("train: {lr: fast}\nspace: sites.yaml\n", "train.lr must be a list of a number"),
    ("train: {seeds: []}\nspace: sites.yaml\n", "at least one seed"),
    ("train: {warmup: 500, steps: 100}\nspace: sites.yaml\n", "warmup must be between"),
    ("space: nosuch.yaml\n", "space file 'nosuch.yaml' not found"),
    ("space: {kind: rmsnorm, sites: {atn_in: [none, norm]}}\n", "unknown site 'atn_in'"),
    ("space: {kind: batchnorm, sites: {attn_in: [none, norm]}}\n", "unknown norm kind 'batchnorm'"),
    ("space: {sites: {attn_in: [none, sometimes]}}\n", "unknown choice 'sometimes'"),
    ("space: sites.yaml\nsearch: {baselines: [peri]}\n", "unknown baseline 'peri'"),
    ("space: sites.yaml\nsearch: {sampler: bayes}\n", "search.sampler must be tpe | gp | random | grid | nsga2"),
    ("space: sites.yaml\ndata: {corpus: text}\n", "needs data.path"),
    ("space: {sites: {attn_in: [none, norm]}, depth: {ranges: [[0, 0.5], [0.6, 1]]}}\n", "without gaps"),
    ("model: [1, 2]\nspace: sites.yaml\n", "model: expected a mapping"),
    ("report: {plots: maybe}\nspace: sites.yaml\n", "report.plots must be true/false"),
    ("model: {n_layers: 2\n", "not valid YAML"),
]


@pytest.mark.parametrize("text, message", BAD)
def test_bad_recipes_get_one_line_and_exit_code_2(tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    r = runner.invoke(app, ["validate", str(path)])
    assert r.exit_code == 2, r.output
    assert r.output.startswith("error: ") and r.output.count("\n") == 1, r.output
    assert message in r.output


def test_errors_point_at_the_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\nspace: sites.yaml\ntrain:\n  steps: 10\n  batch: 4\n")
    r = runner.invoke(app, ["validate", str(path)])
    assert r.exit_code == 2 and "bad.yaml:5: train: unknown key 'batch'" in r.output


def test_status_and_missing_study(tmp_path):
    run_study(load_recipe(tiny_recipe(tmp_path, name="st", trials=1)))
    r = runner.invoke(app, ["status", str(tmp_path / "results" / "st")])
    assert r.exit_code == 0, r.output
    assert "1/1 searched" in r.output and "2/2 baselines" in r.output and "workers:" in r.output
    r = runner.invoke(app, ["status", "--storage", f"sqlite:///{tmp_path / 'results' / 'st' / 'study.db'}",
                            "--study-name", "nope"])
    assert r.exit_code == 2 and "no study named 'nope'" in r.output and "studies there: st" in r.output
    r = runner.invoke(app, ["status", str(tmp_path / "nothing")])
    assert r.exit_code == 2 and "no such results folder" in r.output
    r = runner.invoke(app, ["run", str(tiny_recipe(tmp_path, name="st", trials=1)), "--storage", "postgresql://u:pw@127.0.0.1:1/db"])
    assert r.exit_code == 2 and "cannot open storage postgresql://u:***@127.0.0.1:1/db" in r.output


def test_ctrl_c_marks_the_trial_for_a_rerun(tmp_path):
    recipe = tiny_recipe(tmp_path, name="intr", steps=150, trials=1)
    proc, err = _signal_halfway(recipe, tmp_path / "results" / "intr" / "study.db", signal.SIGINT)
    assert proc.returncode == 130, err
    assert "interrupted: finished trials are kept; run the same command to resume" in err
    assert "Traceback" not in err
    study = open_results(tmp_path / "results" / "intr").study
    failed = [t for t in study.get_trials() if t.state.name == "FAIL"]
    assert len(failed) == 1 and failed[0].user_attrs["failure"] == "interrupted (Ctrl-C)"
    retries = [t for t in study.get_trials() if t.state.name == "WAITING" and "failed_trial" in t.system_attrs]
    assert len(retries) == 1 and retries[0].system_attrs["failed_trial"] == failed[0].number
    assert retries[0].user_attrs.get("baseline") == failed[0].user_attrs.get("baseline")
    run_study(load_recipe(recipe))  # the resume reruns it
    assert all(n == 1 for n in trained_per_arch(study).values())
    assert census(study).searched_done == 1


@pytest.mark.parametrize("changes", [
    {"search.sampler": "gp"},
    {"search.sampler": "grid"},
    {"search.pruner": "median"},
    {"search.pruner": "hyperband"},
    {"search.sampler": "nsga2", "search.second_objective": "params"},
    {"search.objective": "robust", "search.second_objective": "throughput"},
])
def test_samplers_pruners_and_objectives(tmp_path, changes):
    handle = run_study(load_recipe(tiny_recipe(tmp_path, name="opt", trials=2), changes))
    c = census(handle.study)
    assert c.searched_done == 2 and len(c.baselines_done) == 2
    n_values = 2 if "search.second_objective" in changes else 1
    for t in handle.study.get_trials():
        if t.state.name == "COMPLETE":
            assert len(t.values) == n_values
        if t.state.name == "PRUNED":  # stopped at a reported training step, its runs kept
            assert t.intermediate_values and t.user_attrs.get("runs")


def test_every_sampler_and_pruner_a_recipe_can_name_is_registered():
    import typing

    from normsearch.recipe import SearchConfig
    from normsearch.search import PRUNERS, SAMPLERS

    hints = typing.get_type_hints(SearchConfig)
    assert set(typing.get_args(hints["sampler"])) == set(SAMPLERS)
    assert set(typing.get_args(hints["pruner"])) == set(PRUNERS)
