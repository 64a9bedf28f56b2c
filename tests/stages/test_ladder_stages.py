"""``normsearch ladder`` (issue 17): the top placements and the baselines retrained at three or more
sizes as stages of the same study; resumable after ``kill -9``, deduplicated by (architecture, rung);
rungs that would not be comparable, or are badly typed, are refused; a rung added later trains
alone; --report-only reports what is stored and refuses settings that differ; the sweep with its
extension at every rung, the transfer under muP that skips it; ladder.md reports each rung and the
agreement; a ladder stored in the first form (the committed repro study) still reports the same
numbers."""

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
from normsearch.stages import A_STAGE, find_stage

from tiny import write_tiny_recipe

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()
RUNGS = "[{n_layers: 1}, {n_layers: 2}, {n_layers: 3}]"


def _skip_plots(mp, ladder: bool = True):
    """Drawing a report's plots (matplotlib, ~0.6 s a figure, 8 per rung report) is most of a tiny
    ladder's time. The kill -9 test checks that the ladder's plot is written (the rung reports' plots
    are the report's tests' business); the other tests test the ladder's logic without any."""
    from normsearch.report import _plots

    mp.setattr(_plots, "all_figures", lambda *a, **k: {})
    if ladder:
        mp.setattr("normsearch.report._ladder_plots.ladder_plot", lambda *a, **k: None)
        mp.setattr("normsearch.report._ladder_plots.failures_plot", lambda *a, **k: None)


@pytest.fixture
def no_plots(monkeypatch):
    _skip_plots(monkeypatch)


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ladder")
    recipe = write_tiny_recipe(folder, "lad", steps=10, trials=1)
    with pytest.MonkeyPatch.context() as mp:
        _skip_plots(mp)
        result = runner.invoke(app, ["run", str(recipe)])
    assert result.exit_code == 0, result.output
    return folder / "results" / "lad"


@pytest.fixture
def laddered(searched, no_plots):
    """The study with its 3-rung ladder (the kill -9 test's; trained here when it ran alone)."""
    if find_stage(open_results(searched), "ladder-2") is None:
        result = runner.invoke(app, ["ladder", str(searched), "--rungs", RUNGS, "--top", "1", "--seeds", "1",
                                     "--jobs", "1"])
        assert result.exit_code == 0, result.output
    return searched


def _baselines_study(folder: Path, name: str, model: str, lr: str, steps: int = 10) -> Path:
    """A search of one baseline (no space, no trials), one seed: the cheapest study a ladder can stand
    on. 10 steps stall (the loss stays above the unigram's): a failure, which leaves no chosen cell to
    extend a sweep from or to transfer; 100 steps of a one-layer model succeed, under a second a run."""
    recipe = folder / f"{name}.yaml"
    recipe.write_text(f"""
name: {name}
model: {model}
data: {{eval_windows: 4}}
train: {{steps: {steps}, batch_size: 8, warmup: {steps // 20}, eval_every: {steps // 2}, lr: {lr}, seeds: [0],
        threads: 1}}
search: {{trials: 0, baselines: [pre_ln], heartbeat: 1, grace: 5, jobs: 1}}
results_dir: {folder / "results"}
""")
    result = runner.invoke(app, ["run", str(recipe)])
    assert result.exit_code == 0, result.output
    return folder / "results" / name


def _lrs_trained(folder: Path) -> dict[str, dict[str, list[float]]]:
    """rung -> architecture -> the learning rates of its runs, from the run files."""
    out: dict[str, dict[str, list[float]]] = {}
    for q in folder.glob("ladder-*/runs/*/seed*.json"):
        run = json.loads(q.read_text())
        out.setdefault(q.parts[-4], {}).setdefault(q.parts[-2], []).append(float(run["lr"]))
    return {k: {a: sorted(v) for a, v in d.items()} for k, d in out.items()}


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
    with pytest.MonkeyPatch.context() as mp:  # resumed here: the killed process's trials are reaped
        _skip_plots(mp, ladder=False)  # the ladder's own plot is drawn and checked; the rung reports' are not
        result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
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
    # once more: every (architecture, rung) is done, nothing is trained (the plots were checked above)
    with pytest.MonkeyPatch.context() as mp:
        _skip_plots(mp)
        result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    assert _runs(searched) == after
    # other settings for the same rungs are refused, naming the ones they were started with
    result = runner.invoke(app, ["ladder", str(searched), "--rungs", RUNGS, "--top", "1", "--seeds", "2"])
    assert result.exit_code == 2 and "seeds 1" in result.output
    # each rung stores the shared settings and its own overrides, not the whole list (so a rung can be added)
    stored = find_stage(handle, "ladder-1").user_attrs[A_STAGE]["settings"]
    assert stored["rung"] == {"n_layers": 2} and "rungs" not in stored and stored["baselines"] == ["pre_ln", "post_ln"]


@pytest.mark.parametrize("rungs, message", [
    ("[{n_layers: 1}, {vocab_size: 512}, {n_layers: 3}]", "vocabulary"),
    ("[{n_layers: 1}, {context_length: 64}, {n_layers: 3}]", "context"),
    ("[{n_layers: 1}, {n_layers: 2}]", "three or more"),
    ("[{n_layers: 3}, {n_layers: 2}, {n_layers: 4}]", "not larger"),
    ("[{n_layers: 1}, {dropout: 0.1}, {n_layers: 3}]", "unknown setting"),
    # typed as a recipe's model section is
    ("[{n_layers: x}, {n_layers: 2}, {n_layers: 3}]", "ladder.rungs[0].n_layers must be an integer, not 'x'"),
    ("[{n_layers: 1}, {d_model: 64.0}, {n_layers: 3}]", "ladder.rungs[1].d_model must be an integer, not 64.0"),
    ("[{n_layers: 1}, {n_layers: 2}, {ffn_hidden: big}]", "ladder.rungs[2].ffn_hidden must be an integer or null"),
    ("[{n_layers: true}, {n_layers: 2}, {n_layers: 3}]", "ladder.rungs[0].n_layers must be an integer, not True"),
    ("[{n_layers: 0}, {n_layers: 2}, {n_layers: 3}]", "ladder.rungs[0] {n_layers: 0}: model.n_layers must be >= 1"),
    ("[{d_model: 32}, {d_model: 64, mup_base_width: 32}, {d_model: 128}]", "mup_base_width differs between rungs"),
    ("n_layers: 2", "--rungs must be a list of model overrides"),
    ("[{n_layers: 1}, 2, {n_layers: 3}]", "ladder.rungs[1] must be a mapping"),
])
def test_rungs_that_are_not_comparable_or_badly_typed_are_refused_in_one_line(searched, rungs, message):
    result = runner.invoke(app, ["ladder", str(searched), "--rungs", rungs])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1 and result.output.startswith("error: ")


def test_a_ladder_section_without_rungs_loads_and_the_rungs_must_be_a_list(tmp_path):
    """The rungs may be left to the command line; a single mapping is not taken for a list of one."""
    from normsearch.recipe import ladder_config

    recipe = write_tiny_recipe(tmp_path)
    recipe.write_text(recipe.read_text() + "ladder: {top: 1, seeds: 3}\n")
    r = load_recipe(recipe)
    assert r.ladder.rungs == [] and r.ladder.seeds == 3
    with pytest.raises(NormsearchError, match="ladder.rungs must be a list"):
        ladder_config({"rungs": {"n_layers": 2}})
    with pytest.raises(NormsearchError, match="give the rungs"):
        plan_rungs(r, r.ladder)


@pytest.mark.parametrize("args, message", [
    (["--seeds", "9"], "trained with seeds 1, not 9; leave --seeds out"),
    (["--top", "5"], "trained with top 1, not 5"),
    (["--tokens-per-param", "5"], "trained with tokens_per_param null, not 5"),
    (["--baselines", "pre_ln"], "trained with baselines [pre_ln, post_ln], not [pre_ln]"),
    (["--rungs", "[{n_layers: 3}, {n_layers: 5}, {n_layers: 7}]"], "was trained as {n_layers: 1}"),
    (["--lr", "transfer"], "ladder.lr transfer: under standard parametrisation"),
])
def test_report_only_refuses_settings_that_differ_from_the_stored_ones(laddered, args, message):
    result = runner.invoke(app, ["ladder", str(laddered), "--report-only", *args])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output


def test_report_only_alone_reports_the_stored_ladder_and_out_keeps_the_rung_reports_with_it(laddered, tmp_path,
                                                                                             no_plots):
    kept = {p: p.stat().st_mtime for p in laddered.glob("ladder-*/report.md")}
    result = runner.invoke(app, ["ladder", str(laddered), "--report-only", "--out", str(tmp_path / "x")])
    assert result.exit_code == 0, result.output
    text = (tmp_path / "x" / "ladder.md").read_text()
    assert "top 1 found placement(s)" in text and "seeds 2000 to 2000" in text
    assert (tmp_path / "x" / "ladder-0" / "report.md").is_file() and "(ladder-0/report.md)" in text
    # the found placements in the order they were chosen (stored with the first rung), not rung 0's ranking order
    from normsearch.stages.ladder import first_rung_entries, found_labels

    stored = find_stage(open_results(laddered), "ladder-0").user_attrs[A_STAGE]["entries"]
    order = [e["label"] for e in stored if not e.get("baseline")]
    assert found_labels(first_rung_entries(open_results(laddered))) == order and f"top 1 found placement(s) ({', '.join(order)};" in text
    # a rung's report names the seeds its runs were trained on, not the search's (it said 0 for seed 2000)
    rung = (tmp_path / "x" / "ladder-0" / "report.md").read_text()
    assert "Seeds: 2000." in rung and "Seeds: 0." not in rung
    assert {p: p.stat().st_mtime for p in laddered.glob("ladder-*/report.md")} == kept  # not rewritten
    result = runner.invoke(app, ["ladder", str(laddered.parent / "nothing-here"), "--report-only"])
    assert result.exit_code == 2 and "Traceback" not in result.output


@pytest.mark.slow
def test_measure_throughput_times_each_rung_at_its_own_size_and_its_ranking_reads_it(laddered, tmp_path, no_plots):
    """--measure-throughput with --report-only: every rung's architectures timed at that rung's model into the
    rung's folder (not the study's), and each rung's ranking reads its tokens/s from there (the ratios need a
    ranked baseline, which this ladder's stalled runs leave none of: the tests of normsearch._throughput divide).
    """
    result = runner.invoke(app, ["ladder", str(laddered), "--report-only", "--measure-throughput",
                                 "--out", str(tmp_path / "y")])
    assert result.exit_code == 0, result.output
    assert not (laddered / "throughput.json").exists()
    for i in range(3):
        stored = json.loads((laddered / f"ladder-{i}" / "throughput.json").read_text())
        assert stored["meta"]["key"]["n_layers"] == i + 1 and stored["meta"]["study"] == f"lad/ladder-{i}"
        rows = json.loads((tmp_path / "y" / f"ladder-{i}" / "ranking.json").read_text())["rows"]
        measured = {k: v["tokens_per_s"] for k, v in stored["archs"].items()}
        assert {r["arch_id"]: r["measured_tokens_per_s"] for r in rows} == measured  # what the ratios divide


def test_the_sweep_at_every_rung_is_extended_and_a_rung_added_later_trains_alone(tmp_path, no_plots, monkeypatch):
    """Two learning rates and --lr-extend 1: with two points the best is at an end, so every rung adds
    one point beyond it; the report lists each architecture's learning rates (the extension
    included) and says the sweep was extended by the ladder's setting (the search's is 0). Then a
    fourth rung after the stored three trains alone, and a rung changed in the middle is refused."""
    study = _baselines_study(tmp_path, "sw", "{n_layers: 1, d_model: 16, n_heads: 2, context_length: 16}",
                             "[1.0e-2, 3.0e-2]", steps=100)  # runs that succeed: a stalled run has no cell to extend
    three = "[{n_layers: 1}, {n_layers: 2}, {n_layers: 3}]"
    args = ["--top", "0", "--seeds", "1", "--lr-extend", "1", "--jobs", "1"]
    result = runner.invoke(app, ["ladder", str(study), "--rungs", three, *args])
    assert result.exit_code == 0, result.output
    lrs = _lrs_trained(study)
    assert sorted(lrs) == ["ladder-0", "ladder-1", "ladder-2"]
    for rung in lrs.values():
        (trained,) = rung.values()
        assert len(trained) == 3 and set(trained) > {1e-2, 3e-2}, trained  # the sweep and one point past an end
    text = (study / "ladder" / "ladder.md").read_text()
    assert "extended by up to 1 point(s)" in text and "failed, all lrs" in text and "(sum of runs)" in text
    (first,) = lrs["ladder-0"].values()
    assert ", ".join(f"{x:g}" for x in first) in text.replace("**", "")
    before = _runs(study)
    import normsearch.stages.ladder as ladder  # a new rung trains the stored rungs' architectures, not today's top

    monkeypatch.setattr(ladder, "entries", lambda *a, **k: pytest.fail("the search was ranked again for a new rung"))
    result = runner.invoke(app, ["ladder", str(study), "--rungs", three[:-1] + ", {n_layers: 4}]", *args])
    assert result.exit_code == 0, result.output
    archs = {k: [e["label"] for e in find_stage(open_results(study), k).user_attrs[A_STAGE]["entries"]]
             for k in ("ladder-0", "ladder-3")}
    assert archs["ladder-3"] == archs["ladder-0"]
    after = _runs(study)
    assert all(after[q] == m for q, m in before.items()), "a rung already trained was trained again"
    assert {q.parts[-4] for q in after if q not in before} == {"ladder-3"}
    assert "at 4 sizes" in (study / "ladder" / "ladder.md").read_text()
    stored = find_stage(open_results(study), "ladder-3").user_attrs[A_STAGE]["settings"]
    assert stored["rung"] == {"n_layers": 4} and stored["lr_extend"] == 1 and stored["lr"] == "sweep"
    result = runner.invoke(app, ["ladder", str(study), "--rungs", "[{n_layers: 1}, {n_layers: 3}, {n_layers: 5}]",
                                 *args])
    assert result.exit_code == 2 and "rung 1 of the ladder of study 'sw' was trained as {n_layers: 2}" in result.output


def test_under_mup_a_width_ladder_transfers_the_learning_rate_and_skips_the_sweep(tmp_path, no_plots):
    study = _baselines_study(tmp_path, "mu", "{n_layers: 1, d_model: 16, n_heads: 2, context_length: 16, "
                             "parametrization: mup, mup_base_width: 16}", "[1.0e-2, 3.0e-2]", steps=100)
    chosen = json.loads((study / "ranking.json").read_text())["rows"][0]["best_lr"]
    assert chosen in (1e-2, 3e-2)  # the search's runs succeeded and chose one
    result = runner.invoke(app, ["ladder", str(study), "--report-only"])
    assert result.exit_code == 2 and "has no ladder yet" in result.output
    result = runner.invoke(app, ["ladder", str(study), "--rungs", "[{d_model: 16}, {d_model: 32}, {d_model: 64}]",
                                 "--top", "0", "--seeds", "1", "--jobs", "1"])
    assert result.exit_code == 0, result.output
    lrs = _lrs_trained(study)
    assert sorted(lrs) == ["ladder-0", "ladder-1", "ladder-2"]
    assert all(v == [chosen] for rung in lrs.values() for v in rung.values()), lrs  # one lr: the search's
    assert "transferred, not swept" in (study / "ladder" / "ladder.md").read_text()
    assert "vocabulary 256, mup parametrisation (base width 16). **Data**" in (study / "report.md").read_text()
    stored = find_stage(open_results(study), "ladder-0").user_attrs[A_STAGE]["settings"]
    assert stored["lr"] == "transfer"
    # other rungs than the stored ones are refused (a new ladder along depth would be refused transfer itself:
    # test_the_learning_rate_transfers_under_mup_along_width_only_and_is_swept_otherwise)
    result = runner.invoke(app, ["ladder", str(study), "--rungs", "[{n_layers: 1}, {n_layers: 2}, {n_layers: 3}]",
                                 "--lr", "transfer", "--report-only"])
    assert result.exit_code == 2 and "was trained as" in result.output, result.output


def test_a_ladder_stored_in_the_first_form_reports_the_same_numbers(tmp_path, no_plots):
    """tests/fixtures/ladder_v1 (results/repro/repro-search at a916cf8): ladder-0..2 stored with the whole
    rung list in each rung's settings.
    `--report-only` alone reads them, and the per-rung means, intervals, orders and tau/rho are those of
    the committed ladder.json (the tau/rho intervals are not: they are now drawn from each mean's own
    interval, docs/statistics.md). Its three rungs are now too few for a power law (issue 26: five, so
    that a lack-of-fit test has 2 df), so there is no fit and --target 1e7 (23x the largest rung) is not
    extrapolated; the report adds what each rung was, the decision accuracy and the promotion gate."""
    import gzip
    import shutil

    src = ROOT / "tests" / "fixtures" / "ladder_v1"
    dst = tmp_path / "repro-search"
    dst.mkdir()
    shutil.copy(src / "recipe.yaml", dst / "recipe.yaml")
    with gzip.open(src / "study.db.gz") as f, open(dst / "study.db", "wb") as out:
        shutil.copyfileobj(f, out)
    result = runner.invoke(app, ["ladder", str(dst), "--report-only", "--target", "1e7", "--out", str(tmp_path / "x")])
    assert result.exit_code == 0, result.output
    now = json.loads((tmp_path / "x" / "ladder.json").read_text())
    was = json.loads((src / "ladder.json").read_text())
    assert now["orders"] == was["orders"]
    for arch, points in was["points"].items():
        for p, q in zip(points, now["points"][arch]):
            assert (q["rank"], q["n_runs"], q["n_failed"]) == (p["rank"], p["n_runs"], p["n_failed"])
            assert [q["mean"], q["ci_low"], q["ci_high"]] == pytest.approx([p["mean"], p["ci_low"], p["ci_high"]])
    assert set(now["fits"]) == set(was["fits"])
    for f in now["fits"].values():
        assert f["status"] == "no fit" and "need 5" in f["reason"]
    assert [(g["tau"], g["rho"]) for g in now["agreements"]] == [(g["tau"], g["rho"]) for g in was["agreements"]]
    assert was["extrapolation"]["projections"] and not now["extrapolation"]["projections"]
    assert now["extrapolation"]["refused"].startswith("not extrapolated: beyond 4x the largest rung")
    assert now["rung_names"] == was["rungs"]  # the names the first ladder.json gave as rungs
    assert [r["n_params"] for r in now["rung_info"]] == [131392, 229952, 427072]
    assert all(r["tokens_per_param"] > 0 for r in now["rung_info"])
    assert [g["decision_accuracy"]["n_pairs"] for g in now["agreements"][:2]] == [15, 15]
    assert {(g["found"], g["baseline"]) for g in now["promotion"]} == {
        (f, b) for f in ("t29", "t35") for b in ("pre_ln", "hybridnorm", "olmo2", "peri_ln")}
    assert all(isinstance(g["promoted"], bool) and g["reason"] for g in now["promotion"])
    assert sum(p["n_failed_all"] for ps in now["points"].values() for p in ps) == 9  # of 108, at lrs not chosen
    text = (tmp_path / "x" / "ladder.md").read_text()
    assert "top 2 found placement(s)" in text and "extended by up to 1 point(s)" in text
    assert "| 5 | olmo2 (baseline) | 2.8633" in text  # at 8 layers its best lr is the extension's: flagged
    olmo2 = next(line for line in text.splitlines() if line.startswith("| 5 | olmo2 (baseline) | 2.8633"))
    assert "0.003, 0.01, **0.03333**" in olmo2 and "edge: not bracketed" in olmo2
    result = runner.invoke(app, ["ladder", str(dst), "--report-only", "--seeds", "3"])
    assert result.exit_code == 2 and "trained with seeds 2, not 3" in result.output


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


def test_the_learning_rate_transfers_under_mup_along_width_only_and_is_swept_otherwise(tmp_path):
    from normsearch.stages.ladder import lr_mode

    cfg = LadderConfig(rungs=[{"d_model": 64}, {"d_model": 128}, {"d_model": 256}])
    std = load_recipe(write_tiny_recipe(tmp_path))
    assert lr_mode(std, cfg) == "sweep"
    mup = load_recipe(write_tiny_recipe(tmp_path), ["--model.parametrization", "mup", "--model.mup_base_width", "32"])
    assert lr_mode(mup, cfg) == "transfer"
    assert lr_mode(mup, LadderConfig(rungs=cfg.rungs, lr="sweep")) == "sweep"
    depth = [{"n_layers": 1}, {"n_layers": 2}, {"n_layers": 3}]
    heads = [{"d_model": 64, "n_heads": 2}, {"d_model": 128, "n_heads": 4}, {"d_model": 256, "n_heads": 8}]
    base = [{"d_model": 64, "mup_base_width": 64}, {"d_model": 128, "mup_base_width": 64},
            {"d_model": 256, "mup_base_width": 64}]
    ffn = [{"d_model": 64, "ffn_hidden": 256}, {"d_model": 128, "ffn_hidden": 256}, {"d_model": 256, "ffn_hidden": 256}]
    # the search's own model counts: every rung at one other depth (or head count) is not a width ladder
    same_depth = [{"d_model": 64, "n_layers": 3}, {"d_model": 128, "n_layers": 3}, {"d_model": 256, "n_layers": 3}]
    for rungs, why in ((depth, "these rungs change n_layers"), (heads, "these rungs change n_heads"),
                       (same_depth, "these rungs change n_layers from the search's 2"),
                       (base, "mup_base_width 64 is not the search's 32"), (ffn, "the FFN does not grow")):
        assert lr_mode(mup, LadderConfig(rungs=rungs)) == "sweep"  # auto sweeps where muP does not transfer
        with pytest.raises(NormsearchError, match=why):
            lr_mode(mup, LadderConfig(rungs=rungs, lr="transfer"))
        # a ladder stored as trained under an earlier rule keeps its mode (resumed and reported as it was)
        assert lr_mode(mup, LadderConfig(rungs=rungs, lr="transfer"), stored="transfer") == "transfer"
    with pytest.raises(NormsearchError, match="under standard parametrisation the best learning rate moves"):
        lr_mode(std, LadderConfig(rungs=cfg.rungs, lr="transfer"))


def test_an_empty_baseline_list_means_no_baselines_for_the_entries_and_the_workers(searched):
    """`baselines: []` (or --baselines '') is no baseline, not "the search's": the entries hold the
    found placements alone, and the workers get the job typed, with an empty list (not None)."""
    import json

    from normsearch.jobs import Job
    from normsearch.stages.ladder import entries

    parent = open_results(searched)
    cfg = LadderConfig(rungs=[{"n_layers": 1}, {"n_layers": 2}, {"n_layers": 3}], top=1, baselines=[])
    found = entries(parent, cfg, "sweep")
    assert len(found) == 1 and found[0].baseline is None
    job = Job("ladder", parent.recipe, parent.storage_url, parent.folder, parent.study.study_name, ladder=cfg)
    back = Job.from_json(json.loads(json.dumps(job.with_threads(1).to_json())), storage=parent.storage_url)
    assert back.ladder == cfg and back.ladder.baselines == []
    assert back.recipe.train.threads == 1 and back.folder == parent.folder and back.kind == "ladder"


def test_the_ladder_takes_its_top_from_the_confirmation_when_the_search_has_one(monkeypatch):
    from types import SimpleNamespace

    import normsearch.stages.confirm as confirm
    import normsearch.stages.ladder as ladder

    rows = [SimpleNamespace(arch_id=a, is_baseline=b) for a, b in (("A", False), ("P", True), ("B", False), ("C", False))]
    top = lambda k: [(r.arch_id, by) for r, by in ladder.top_found(None, rows, k)]
    monkeypatch.setattr(confirm, "confirmed_order", lambda parent: [])
    assert top(2) == [("A", "search"), ("B", "search")]  # no (finished) confirmation: the search's order
    monkeypatch.setattr(confirm, "confirmed_order", lambda parent: ["C", "A"])
    assert top(2) == [("C", "confirmation"), ("A", "confirmation")]  # the confirmed verdicts' order
    assert top(3) == [("C", "confirmation"), ("A", "confirmation"), ("B", "search")]  # then the search's


def test_the_gpu_preset_plans_21m_to_354m_parameters_at_20_tokens_per_parameter(tmp_path):
    """The GPU ladder (issue 26): five rungs from about 20M to 350M parameters, 16x or more, at 20
    tokens per parameter, on the BPE .bin files the GPU machine has, stored apart from the study's own
    ladder (stages ladder-gpu-<i>); without the data's folder, one line says how to give it."""
    from normsearch.stages.ladder import PRESETS, kind_of
    from normsearch.sections import ladder_config

    parent = load_recipe(write_tiny_recipe(tmp_path, "g"))
    cfg = ladder_config({**PRESETS["gpu"], "recipe": {**PRESETS["gpu"]["recipe"], "data.path": str(tmp_path)}})
    rungs = plan_rungs(parent, cfg)
    sizes = [r.n_params for r in rungs]
    assert len(rungs) == 5 and 19e6 < sizes[0] < 25e6 and 340e6 < sizes[-1] < 360e6 and sizes[-1] / sizes[0] >= 16
    assert all(abs(r.tokens / r.n_params - 20) < 0.1 for r in rungs)
    r = rungs[-1].recipe
    assert (r.data.corpus, r.model.vocab_size, r.model.context_length, r.train.precision) == ("bin", 50304, 1024,
                                                                                             "bf16-mixed")
    assert r.name.endswith("ladder-gpu-4") and kind_of(4, "gpu") == "ladder-gpu-4"
    assert parent.model.d_model == 32  # the search's own recipe is untouched
    result = runner.invoke(app, ["ladder", str(tmp_path / "g.yaml"), "--preset", "gpu"])
    assert result.exit_code == 2 and "--recipe '{data.path: DIR}'" in result.output, result.output


@pytest.mark.slow
def test_a_named_ladder_is_trained_and_stored_apart_from_the_studys_ladder(laddered, tmp_path):
    from normsearch.stages.ladder import stored_rungs

    before = _runs(laddered)
    result = runner.invoke(app, ["ladder", str(laddered), "--name", "wide", "--rungs",
                                 "[{d_model: 16}, {d_model: 32}, {d_model: 48}]", "--top", "1", "--seeds", "1",
                                 "--recipe", "{train.steps: 12}", "--jobs", "1", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    handle = open_results(laddered)
    assert sorted(stored_rungs(handle, "wide")) == [0, 1, 2] and sorted(stored_rungs(handle)) == [0, 1, 2]
    assert stored_rungs(handle, "wide")[0].shared["recipe"] == {"train.steps": 12}
    new = {q: m for q, m in _runs(laddered).items() if q not in before}
    assert {q.parts[-4] for q in new} == {"ladder-wide-0", "ladder-wide-1", "ladder-wide-2"}
    assert all(before[q] == m for q, m in _runs(laddered).items() if q in before)  # the study's ladder untouched
    assert {json.loads(q.read_text())["steps"] for q in new} == {12}
    assert (tmp_path / "ladder.json").is_file()
