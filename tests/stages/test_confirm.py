"""The protocol (issue 16): a test split apart from the validation windows, the extending lr sweep,
``normsearch confirm`` as a stage of the same study (fresh seeds, each architecture at the lr the
search chose, scored on the test split; resumable after ``kill -9``), racing, and the report that
leads with the confirmed verdicts."""

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from typer.testing import CliRunner

from normsearch.cli import app
from normsearch.data import Tokens
from normsearch.errors import NormsearchError
from normsearch.recipe import RacingConfig, load_recipe, recipe_from_dict
from normsearch.records import RunResult
from normsearch.search import open_results
from normsearch.search._loop import refinement
from normsearch.search._open import fingerprint, stored_fingerprint
from normsearch.stages import A_STAGE, Entry, Stage, confirm_handle
from normsearch.stages.racing import racing_round

from tiny import LEARNING, write_tiny_recipe

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()
CONFIRM = "confirm: {top: 1, seeds: 2, test_bytes: 8000}\n"


# -- the test split ---------------------------------------------------------------------------------


def _tokens(n_val: int) -> Tokens:
    rng = np.random.default_rng(0)
    return Tokens(train=rng.integers(0, 50, 5000).astype(np.uint16), val=rng.integers(0, 50, n_val).astype(np.uint16),
                  vocab_size=50, bytes_per_token=1.0, key="k")


def _starts(windows: np.ndarray, split: np.ndarray) -> list[int]:
    """Where each window starts in ``split`` (windows are random tokens, so the match is unique)."""
    view = np.lib.stride_tricks.sliding_window_view(split.astype(np.int64), windows.shape[1])
    return [int(np.flatnonzero((view == w).all(axis=1))[0]) for w in windows]


def test_the_test_split_touches_no_validation_window_and_holds_the_bytes_asked_for():
    tok = _tokens(20_000)
    ctx, n_val = 16, 8
    test = tok.test_windows(ctx, 2_000, n_val)
    assert test.shape[1] == ctx + 1 and test.shape[0] * ctx >= 2_000
    val_starts = _starts(tok.val_windows(ctx, n_val), tok.val)
    test_starts = sorted(_starts(test, tok.val))
    w = ctx + 1
    for s in test_starts:
        assert all(s + w <= v or v + w <= s for v in val_starts), "a test window shares tokens with a validation one"
    assert all(b - a >= w for a, b in zip(test_starts, test_starts[1:])), "test windows overlap each other"
    assert test_starts[-1] - test_starts[0] > len(tok.val) // 2  # spread over the split, not bunched at its start


def test_a_test_split_larger_than_the_held_out_text_is_refused():
    with pytest.raises(NormsearchError, match="too small|fewer than"):
        _tokens(3_000).test_windows(16, 10_000, 8)


# -- the extending sweep ----------------------------------------------------------------------------


def test_a_learning_rate_range_reads_as_log_spaced_points_with_an_extension_cap(tmp_path):
    recipe = write_tiny_recipe(tmp_path)
    r = load_recipe(recipe, ["--train.lr", "{low: 1.0e-3, high: 4.0e-3, points: 3, extend: 2}"])
    assert r.train.lr == [1e-3, 2e-3, 4e-3] and r.train.lr_extend == 2 and r.train.lr_ratio == pytest.approx(2.0)
    assert recipe_from_dict(r.raw).train == r.train  # as saved with the study, read back the same
    for bad in ("{low: 1.0e-3, high: 4.0e-3, steps: 3}", "{low: 4.0e-3, high: 1.0e-3}", "{low: 0, high: 1}"):
        with pytest.raises(NormsearchError, match="train.lr"):
            load_recipe(recipe, ["--train.lr", bad])
    with pytest.raises(NormsearchError, match="lr_extend needs a sweep"):
        load_recipe(recipe, ["--train.lr_extend", "1"])


def _run(lr, loss, seed=0):
    return RunResult(arch_id="a", label="a", placement={}, n_layers=2, seed=seed, lr=lr, value=loss,
                     curve=[{"step": 0, "val_bpb": 9.0}, {"step": 10, "val_bpb": loss}])


def test_the_sweep_extends_past_the_end_that_holds_the_best_and_not_from_inside():
    t = SimpleNamespace(lr=[1e-3, 2e-3], lr_extend=1, lr_resolution=None)
    assert refinement([_run(1e-3, 3.0), _run(2e-3, 2.5)], t) == [(4e-3, "")]
    assert refinement([_run(1e-3, 2.0), _run(2e-3, 2.5)], t) == [(5e-4, "")]
    assert refinement([_run(1e-3, 3.0), _run(2e-3, 2.5), _run(4e-3, 2.7)], t) == []
    assert refinement([_run(1e-3, 3.0)], SimpleNamespace(lr=[1e-3], lr_extend=1, lr_resolution=None)) == []


def test_a_study_records_the_points_its_sweep_added(tmp_path):
    recipe = write_tiny_recipe(tmp_path, "ext", trials=0, **LEARNING)  # a stalled run has no cell to extend from
    result = runner.invoke(app, ["run", str(recipe), "--search.baselines", "[pre_ln]", "--train.seeds", "[0]",
                                 "--train.lr", "{low: 1.0e-2, high: 2.0e-2, points: 2, extend: 1}"])
    assert result.exit_code == 0, result.output
    (trial,) = open_results(tmp_path / "results" / "ext").study.get_trials()
    added = trial.user_attrs["lr_extended"]
    assert len(added) == 1 and added[0] in (5e-3, 4e-2)  # two points: the best is always at an end
    assert sorted(json.loads(p.read_text())["lr"] for p in (tmp_path / "results" / "ext" / "runs").glob("*/seed*.json")) \
        == sorted([1e-2, 2e-2, added[0]])


def test_a_study_saved_before_a_setting_existed_compares_as_its_default(tmp_path):
    r = load_recipe(write_tiny_recipe(tmp_path))
    old = json.loads(json.dumps(r.raw))
    del old["train"]["lr_extend"], old["search"]["racing"]
    assert stored_fingerprint(old) == fingerprint(r.raw)


# -- the confirmation stage -------------------------------------------------------------------------


def _cli(*args):
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "normsearch", *map(str, args)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    """A finished tiny search (two baselines, one found placement) over two learning rates, not yet
    confirmed."""
    folder = tmp_path_factory.mktemp("confirm")
    recipe = write_tiny_recipe(folder, "conf", trials=1, **LEARNING)  # runs that learn: cells to confirm at
    result = runner.invoke(app, ["run", str(recipe), "--train.lr", "[1.0e-3, 1.0e-2]"])
    assert result.exit_code == 0, result.output
    return folder / "results" / "conf"


def test_confirm_refuses_an_unfinished_search_and_a_study_that_is_not_there(searched, tmp_path):
    from normsearch.stages import find_stage

    handle = open_results(searched)
    # refused before anything is made: no empty stage is left that would skip the checks next time
    result = runner.invoke(app, ["confirm", str(searched), "--baselines", "hybridnorm"])
    assert result.exit_code == 2 and "were not evaluated by the search" in result.output, result.output
    result = runner.invoke(app, ["confirm", str(searched), "--racing", "-3"])
    assert result.exit_code == 2 and "--racing must be >= 0" in result.output, result.output
    assert find_stage(handle, "confirm") is None
    trial = handle.study.ask()  # a trial in progress
    try:
        result = runner.invoke(app, ["confirm", str(searched)])
        assert result.exit_code == 2 and "not finished" in result.output, result.output
        assert find_stage(handle, "confirm") is None
    finally:
        handle.study.tell(trial, state=__import__("optuna").trial.TrialState.FAIL)
    result = runner.invoke(app, ["confirm", str(tmp_path / "nothing")])
    assert result.exit_code == 2 and "Traceback" not in result.output


def test_confirm_retrains_the_top_and_the_baselines_on_fresh_seeds_and_resumes_after_kill_9(searched):
    search = open_results(searched)
    from normsearch.ranking import rank

    # the lr the search chose (tiny runs may all stall: then the sweep's point that failed least, its only one)
    chosen = {r.label: r.best_lr if r.best_lr is not None else min(r.lr_points, key=lambda q: (q.n_failed, q.mean or 9e9)).lr
              for r in rank(search, against=[]).ranked}
    assert len(search.recipe.train.lr) == 2  # a choice to make: the lr each trains at is the search's choice
    args = ["confirm", searched, "--top", "1", "--seeds", "2", "--jobs", "1"]
    p = _cli(*args)
    runs = searched / "confirm" / "runs"
    deadline = time.time() + 240
    while time.time() < deadline and len(list(runs.glob("*/seed*.json"))) < 2:
        time.sleep(0.2)
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    before = {q: q.stat().st_mtime for q in runs.glob("*/seed*.json")}
    assert before, "no confirmation run finished before the kill"
    p = _cli(*args)
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, err
    assert all(q.stat().st_mtime == m for q, m in before.items()), "a finished run was trained again"
    stage = confirm_handle(open_results(searched))
    info = stage.study.user_attrs[A_STAGE]
    labels = [e["label"] for e in info["entries"]]
    # the top found placement with a chosen cell (one whose every run stalled has none), and the baselines
    ranked = rank(search, against=[]).ranked
    top = [r.label for r in ranked if not r.is_baseline and r.best_lr is not None][:1]
    assert labels == top + ["pre_ln", "post_ln"] or set(labels) == {"pre_ln", "post_ln", *top}
    assert info["seeds"] == [1000, 1001]
    results = [json.loads(q.read_text()) for q in runs.glob("*/seed*.json")]
    assert len(results) == len(labels) * 2
    for r in results:
        assert r["metric"] == "test_bpb" and r["test_windows"] * 32 >= 8000 and r["test_se"] > 0
        assert r["seed"] in (1000, 1001)
        assert r["val_bpb"] is None or r["val_bpb"] != r["value"]
    by_arch = {e["arch_id"]: e for e in info["entries"]}
    for r in results:
        assert r["lr"] == chosen[by_arch[r["arch_id"]]["label"]]  # the lr the search chose, not a new sweep
    report = (searched / "report.md").read_text()
    assert report.index("## Confirmed verdicts") < report.index("## In short, from the search")
    assert (searched / "confirm" / "report.md").is_file()
    data = json.loads((searched / "ranking.json").read_text())
    assert {r["label"] for r in data["confirmed"]["rows"]} == set(labels)
    # the search's trials are untouched by the stage: the sampler never sees a confirmation run
    assert len(open_results(searched).study.get_trials()) == len(search.study.get_trials())
    status = runner.invoke(app, ["status", str(searched)])
    n = len(labels)
    assert status.exit_code == 0 and f"stage confirm: {n} architectures, {n}/{n} tasks done" in status.output, \
        status.output
    # a finished confirmation orders the found placements (for a ladder); one with a task running does not
    from normsearch.stages.confirm import confirmed_order

    found = [e["arch_id"] for e in info["entries"] if not e["baseline"]]
    assert confirmed_order(open_results(searched)) == found
    running = stage.study.ask()
    assert confirmed_order(open_results(searched)) == []
    stage.study.tell(running, state=__import__("optuna").trial.TrialState.FAIL)
    # resuming with other settings is refused, with the settings it was started with: racing's too
    result = runner.invoke(app, ["confirm", str(searched), "--top", "2", "--jobs", "1"])
    assert result.exit_code == 2 and "top 1" in result.output
    result = runner.invoke(app, ["confirm", str(searched), "--top", "1", "--seeds", "2", "--racing", "4", "--jobs", "1"])
    assert result.exit_code == 2 and "racing_budget 0" in result.output, result.output
    # a stage retrains a fixed list: its report judges no sampler and reads no space
    stage_report = (searched / "confirm" / "report.md").read_text()
    assert "## Did the search help?" not in stage_report and "Which sites matter" not in stage_report
    assert not {"search_value.png", "history.png", "importance.png"} & {p.name for p in (searched / "confirm").iterdir()}


# -- racing -----------------------------------------------------------------------------------------


def _row(label, rank, low, high, p_best, n=3):
    return SimpleNamespace(label=label, rank=rank, rank_low=low, rank_high=high, p_best=p_best, n_seeds=n)


def _stage(rounds=()):
    entries = [Entry(label=x, arch_id=x, placement={}, lr=[1e-3]) for x in ("a", "b", "c")]
    return Stage("confirm", {}, entries, recipe=None, seeds=[1000, 1001, 1002], rounds=list(rounds))


def test_racing_adds_a_seed_to_the_contenders_only_and_stops_for_its_three_reasons(monkeypatch):
    import normsearch.ranking as ranking

    def ranked(*rows):
        monkeypatch.setattr(ranking, "rank", lambda *a, **k: SimpleNamespace(ranked=list(rows)))

    race = RacingConfig(budget=3, p_best=0.9)
    ranked(_row("a", 1, 1, 2, 0.6), _row("b", 2, 1, 3, 0.35), _row("c", 3, 3, 3, 0.05))
    d = racing_round(None, _stage(), race)
    assert d["contenders"] == ["a", "b"] and d["added"] == [["a", 1003], ["b", 1003]] and "stop" not in d
    d = racing_round(None, _stage([d]), race)  # one run of the budget left: no round of the leader alone
    assert "budget spent (2 of 3" in d["stop"] and d["reason"] == "budget" and "added" not in d
    assert "budget spent (3 of 3" in racing_round(None, _stage([{"added": [1, 2, 3]}]), race)["stop"]
    d = racing_round(None, _stage(), RacingConfig(budget=2, p_best=0.9))  # two left: the leader and a challenger
    assert d["added"] == [["a", 1003], ["b", 1003]]
    ranked(_row("a", 1, 1, 1, 0.8), _row("b", 2, 2, 3, 0.15), _row("c", 3, 2, 3, 0.05))
    d = racing_round(None, _stage(), race)
    assert "separated" in d["stop"] and d["reason"] == "separated"
    ranked(_row("a", 1, 1, 2, 0.93), _row("b", 2, 1, 3, 0.07))
    d = racing_round(None, _stage(), race)
    assert "P(best)" in d["stop"] and d["reason"] == "p_best"


def test_a_quickstart_shaped_study_races_its_confirmation_end_to_end(tmp_path):
    """search, confirmation and racing in one `normsearch run`, as the quickstart does: racing adds
    rounds of at least two runs inside the stage, stores why it stopped, and the report says what racing
    cost and that its seed counts depend on the data."""
    recipe = write_tiny_recipe(tmp_path, "race", steps=30, trials=1)
    # the proposals are a function of the seed (search.reproducible): with seed 4 the found placement's rank
    # interval overlaps a baseline's on 2 seeds, so racing has contenders to add seeds to
    text = recipe.read_text().replace("startup_trials: 2,",
                                      "startup_trials: 2, seed: 4, racing: {budget: 4, p_best: 0.99},")
    recipe.write_text(text + CONFIRM)
    result = runner.invoke(app, ["run", str(recipe), "--train.lr", "[1.0e-2]"])
    assert result.exit_code == 0, result.output
    folder = tmp_path / "results" / "race"
    stage = confirm_handle(open_results(folder))
    attrs = stage.study.user_attrs
    rounds = [v for k, v in sorted(attrs.items()) if k.startswith("racing_round_")]
    added = [a for r in rounds for a in r["added"]]
    assert attrs["racing_end"]["stop"] and len(added) <= 4 and all(len(r["added"]) >= 2 for r in rounds)
    runs = [json.loads(p.read_text()) for p in (folder / "confirm" / "runs").glob("*/seed*.json")]
    assert len(runs) == 3 * 2 + len(added)
    assert {(label, seed) for label, seed in added} <= {(r["label"], r["seed"]) for r in runs}
    assert added, "racing added no round (the three rank intervals of these 2-seed runs overlap)"
    report = (folder / "report.md").read_text()
    assert f"**Racing** added {len(added)} run(s) over {len(rounds)} round(s)" in report
    assert "the intervals and p-values are not adjusted for that" in report
    status = runner.invoke(app, ["status", str(folder)])
    assert f"racing added {len(added)} runs" in status.output, status.output


def _ranking(*rows):
    return SimpleNamespace(ranked=[r for r in rows if r.rank is not None], rows=list(rows))


def _r(label, arch, rank, baseline=False, seeds=None):
    return SimpleNamespace(label=label, arch_id=arch, rank=rank, is_baseline=baseline, p_best=0.5,
                           seeds=seeds or {})


def test_the_headline_says_when_the_searchs_first_was_not_confirmed_or_the_search_has_moved_on():
    from normsearch.report._confirmed import _first_lines

    info = {"settings": {"top": 1}, "entries": [{"arch_id": "A", "baseline": None}, {"arch_id": "P", "baseline": "pre_ln"}]}
    confirmed = _ranking(_r("t1", "A", 1), _r("pre_ln", "P", 2, True))
    same = _ranking(_r("t1", "A", 1), _r("pre_ln", "P", 2, True))
    assert _first_lines(same, confirmed, info) == ["- The search's first, **t1**, is also first on fresh seeds and the test "
                                                   "split."]
    # a baseline first in the search that the confirmation left out: not "not first", "not confirmed"
    lines = _first_lines(_ranking(_r("peri_ln", "Q", 1, True), _r("t1", "A", 2)), confirmed, info)
    assert lines == ["- The search's first, **peri_ln**, was not confirmed (it is not among the architectures this "
                     "confirmation trained)."]
    # the search grew after the confirmation: its top 1 is another placement now
    moved = _ranking(_r("t9", "B", 1), _r("t1", "A", 2), _r("pre_ln", "P", 3, True))
    lines = _first_lines(moved, confirmed, info)
    assert any("The search has changed since this confirmation was made" in x and "are now t9" in x and "trained t1" in x
               for x in lines)
    # the same top K in another order is the same confirmation
    info2 = {"settings": {"top": 2}, "entries": [{"arch_id": "A", "baseline": None}, {"arch_id": "B", "baseline": None}]}
    swapped = _ranking(_r("t9", "B", 1), _r("t1", "A", 2))
    assert not any("has changed" in x for x in _first_lines(swapped, _ranking(_r("t1", "A", 1), _r("t9", "B", 2)), info2))


def test_a_racing_round_another_worker_stored_first_is_adopted_not_overwritten(tmp_path):
    import optuna

    from types import SimpleNamespace

    from normsearch.search import census
    from normsearch.stages import A_ROUND, StageTasks

    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 's.db'}")
    stage = _stage()
    stage.racing = RacingConfig(budget=6, p_best=0.9)
    theirs = {"added": [["a", 1003], ["c", 1003]]}

    def decide(handle, st, racing):  # while this worker ranks, another stores round 0
        study.set_user_attr(f"{A_ROUND}0", theirs)
        return {"added": [["a", 1003], ["b", 1003]]}

    stage.decide = decide
    source = StageTasks(stage)
    worker = SimpleNamespace(study=study, handle=None)
    c = census(study, key="task")
    c.done = {t.key: None for t in stage.tasks()}
    assert source.more(worker, c) is True
    assert study.user_attrs[f"{A_ROUND}0"] == theirs and source.stage.rounds == [theirs]
    # round 0's tasks are not trained yet: a worker that looks now trains them instead of deciding round 1
    stage.decide = lambda *a: pytest.fail("decided a round while the last one was untrained")
    assert source.more(worker, c) is True


def test_run_resumes_after_kill_9_in_the_confirmation_it_started_after_the_search(tmp_path):
    """`normsearch run` on a recipe with confirm and racing, as the quickstart: killed (-9, its whole
    process group) once the confirmation has finished a run, then run again, it trains no finished run
    again and ends with the confirmed report."""
    recipe = write_tiny_recipe(tmp_path, "killrun", trials=1, **LEARNING)
    text = recipe.read_text().replace("startup_trials: 2,", "startup_trials: 2, racing: {budget: 2, p_best: 0.99},")
    recipe.write_text(text + CONFIRM)
    folder = tmp_path / "results" / "killrun"
    p = _cli("run", recipe, "--train.lr", "[1.0e-2]")
    deadline = time.time() + 240
    while time.time() < deadline and not list((folder / "confirm" / "runs").glob("*/seed*.json")):
        time.sleep(0.2)
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    search = {q: q.stat().st_mtime for q in (folder / "runs").glob("*/seed*.json")}
    confirmed = {q: q.stat().st_mtime for q in (folder / "confirm" / "runs").glob("*/seed*.json")}
    assert len(search) == 3 * 2 and confirmed, "killed before the confirmation had a run"
    p = _cli("run", recipe, "--train.lr", "[1.0e-2]")
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, err
    assert all(q.stat().st_mtime == m for q, m in {**search, **confirmed}.items()), "a finished run was trained again"
    runs = list((folder / "confirm" / "runs").glob("*/seed*.json"))
    attrs = confirm_handle(open_results(folder)).study.user_attrs
    extra = sum(len(v["added"]) for k, v in attrs.items() if k.startswith("racing_round_"))
    entries = attrs[A_STAGE]["entries"]  # the baselines, and the found placement if one of its runs succeeded
    assert {e["label"] for e in entries} >= {"pre_ln", "post_ln"}
    assert len(runs) == len(entries) * 2 + extra and attrs["racing_end"]["stop"]
    assert "## Confirmed verdicts" in (folder / "report.md").read_text()


def test_two_workers_opening_a_new_stage_at_once_agree_on_one_definition(searched):
    """The stage's study is created by one of them: the other adopts its stored definition, or is refused
    when its settings differ (the last writer no longer wins)."""
    import optuna

    from normsearch.stages import open_stage, stage_study_name

    parent = open_results(searched)
    name = stage_study_name(parent.recipe.name, "race-test")

    def stage(entries):
        return Stage("race-test", {"top": 1}, entries, recipe=parent.recipe, seeds=[7])

    theirs = [Entry(label="theirs", arch_id="T", placement={}, lr=[1e-3])]

    def make_while_another_creates(settings):
        def make():  # meanwhile another worker creates the stage and stores its definition
            other = optuna.create_study(study_name=name, storage=parent.storage_url)
            other.set_user_attr(A_STAGE, {"kind": "race-test", "settings": settings, "seeds": [7],
                                          "entries": [vars(e) for e in theirs]})
            return stage([Entry(label="mine", arch_id="M", placement={}, lr=[1e-3])])
        return make

    handle, st = open_stage(parent, "race-test", {"top": 1}, make_while_another_creates({"top": 1}))
    assert [e.label for e in st.entries] == ["theirs"]
    # whoever created it, a stage's study never prunes a task (Optuna's default pruner is the median one)
    assert isinstance(handle.study.pruner, optuna.pruners.NopPruner)
    again, _ = open_stage(parent, "race-test", {"top": 1}, lambda: stage([]))
    assert isinstance(again.study.pruner, optuna.pruners.NopPruner)
    optuna.delete_study(study_name=name, storage=parent.storage_url)
    with pytest.raises(NormsearchError, match="was started with top 2"):
        open_stage(parent, "race-test", {"top": 1}, make_while_another_creates({"top": 2}))
    optuna.delete_study(study_name=name, storage=parent.storage_url)


def test_a_task_queued_twice_by_two_workers_is_trained_by_both_once(tmp_path):
    """Two workers that open a stage at once both queue its tasks. The one that asks for the second
    copy of a task another worker is training helps train that task's runs (it used to sleep until
    the first finished, leaving a core idle for the whole confirmation), and no run is trained twice."""
    from normsearch.recipe import ConfirmConfig
    from normsearch.stages import StageTasks
    from normsearch.stages.confirm import open_confirm

    recipe = write_tiny_recipe(tmp_path, "twice", steps=60, trials=0, batch_size=8, lr="1.0e-2")
    result = runner.invoke(app, ["run", str(recipe), "--search.baselines", "[pre_ln, post_ln]"])
    assert result.exit_code == 0, result.output
    folder = tmp_path / "results" / "twice"
    cfg = replace(ConfirmConfig(), top=0, seeds=4)
    handle, stage = open_confirm(open_results(folder), cfg)
    for key in StageTasks(stage).tasks():  # what two workers that open the stage at once may do
        for _ in range(2):
            handle.study.enqueue_trial({}, user_attrs={"task": key})
    p = _cli("confirm", folder, "--top", "0", "--seeds", "4", "--jobs", "2")
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, err
    runs = [json.loads(q.read_text()) for q in (folder / "confirm" / "runs").glob("*/seed*.json")]
    assert sorted((r["label"], r["seed"]) for r in runs) == sorted(
        (b, s) for b in ("pre_ln", "post_ln") for s in range(1000, 1004))  # each run once
    workers = {label: {r["worker"] for r in runs if r["label"] == label} for label in ("pre_ln", "post_ln")}
    assert any(len(w) == 2 for w in workers.values()), f"no task was shared between the two workers: {workers}"
    trained = [t for t in confirm_handle(open_results(folder)).study.get_trials()
               if t.state.name == "COMPLETE" and t.user_attrs.get("reused_from") is None]
    assert len(trained) == 2  # one trained trial a task; the second copies reuse it


# -- the confirmatory design: primary contrasts and seeds from a power analysis ---------------------


def _ranked_row(label, rank, baseline=False, lr=1e-3):
    return SimpleNamespace(label=label, rank=rank, is_baseline=baseline, best_lr=lr)


def test_primary_contrasts_resolve_their_words_and_refuse_bad_names():
    from normsearch.stages.confirm import primary_pairs

    rows = [_ranked_row("t3", 1), _ranked_row("pre_ln", 2, True), _ranked_row("t1", 3), _ranked_row("peri_ln", 4, True),
            _ranked_row("t9", 5, lr=None)]
    assert primary_pairs(["first vs best_baseline"], rows, ["pre_ln", "peri_ln"]) == [("t3", "pre_ln")]
    assert primary_pairs(["first vs best_baseline"], rows, ["peri_ln"]) == [("t3", "peri_ln")]
    assert primary_pairs(["t1 vs peri_ln", "first vs pre_ln"], rows, ["peri_ln"]) == [("t1", "peri_ln"), ("t3", "pre_ln")]
    with pytest.raises(NormsearchError, match="'t4' is not an architecture the search ranked"):
        primary_pairs(["t4 vs pre_ln"], rows, ["pre_ln"])
    with pytest.raises(NormsearchError, match="'t9' is not"):  # every run failed: no chosen cell
        primary_pairs(["t9 vs pre_ln"], rows, ["pre_ln"])
    with pytest.raises(NormsearchError, match="with itself"):
        primary_pairs(["pre_ln vs best_baseline"], rows, ["pre_ln"])
    with pytest.raises(NormsearchError, match="no best baseline"):
        primary_pairs(["first vs best_baseline"], rows, [])


@pytest.mark.parametrize("bad, match", [
    ({"seeds": 1}, "confirm.seeds must be >= 2"),
    ({"seeds": "many"}, "confirm.seeds"),
    ({"primary": ["t3 against pre_ln"]}, "is not a contrast"),
    ({"power": 1.2}, "confirm.power"),
    ({"seeds": "auto", "min_seeds": 12, "max_seeds": 6}, "min_seeds <= max_seeds"),
])
def test_a_bad_confirm_section_is_one_clear_line(bad, match):
    from normsearch.config import from_mapping
    from normsearch.recipe import ConfirmConfig

    with pytest.raises(NormsearchError, match=match):
        from_mapping(ConfirmConfig, bad, "confirm")


@pytest.mark.slow
def test_seeds_auto_designs_the_confirmation_and_the_report_leads_with_its_primary_contrast(tmp_path):
    """A tiny study whose runs learn; the confirmation takes as many seeds as the primary contrast needs
    (between min and max), stores its design, and report.md and ranking.json give the primary verdict,
    designed power and no exploratory flag (no racing)."""
    recipe = write_tiny_recipe(tmp_path, "auto", steps=40, trials=0)
    r = runner.invoke(app, ["run", str(recipe), "--train.batch_size", "8", "--train.lr", "[1.0e-2]",
                            "--train.seeds", "[0, 1, 2]", "--search.baselines", "[pre_ln, post_ln]",
                            "--confirm.seeds", "auto", "--confirm.min_seeds", "3", "--confirm.max_seeds", "4",
                            "--confirm.top", "0", "--confirm.test_bytes", "2000",
                            "--confirm.primary", "[post_ln vs pre_ln]"])
    assert r.exit_code == 0, r.output
    folder = tmp_path / "results" / "auto"
    handle = confirm_handle(open_results(folder))
    info = handle.study.user_attrs[A_STAGE]
    design = info["design"]
    assert design["auto"] and 3 <= design["seeds"] <= 4 and len(info["seeds"]) == design["seeds"]
    (plan,) = design["contrasts"]
    assert design["primary"] == [["post_ln", "pre_ln"]] and plan["contrast"] == ["post_ln", "pre_ln"]
    assert abs(plan["effect"]) <= abs(plan["search_diff"])  # shrunk toward 0
    assert design["alpha_each"] == pytest.approx(0.05)  # one primary contrast
    assert all(0 <= c["power"] <= 1 for c in design["contrasts"])
    assert design["capped"] == any(c["power"] < design["target_power"] for c in design["contrasts"])
    data = json.loads((folder / "ranking.json").read_text())
    (p,) = data["confirmed"]["primary"]
    assert (p["arch"], p["against"]) == ("post_ln", "pre_ln") and p["exploratory"] is False
    assert data["confirmed"]["power"] == 0.8 and data["confirmed"]["design"]["seeds"] == design["seeds"]
    assert all(c["exploratory"] is False for row in data["confirmed"]["rows"] for c in row["comparisons"])
    assert "**Primary contrast** (declared before the runs; alpha 0.05" in (folder / "report.md").read_text()
