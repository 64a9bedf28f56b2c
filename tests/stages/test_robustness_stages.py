"""``normsearch robustness`` (issue 26): the top placements and the baselines retrained under named
variants of the recipe, each a stage of the study; resumable after ``kill -9``, nothing trained twice;
the variants' overrides and shared settings stored and checked on resume; bad variants refused in
one line; the report's per-variant gaps, sign counts, random-effects mean and length trend."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from normsearch.cli import app
from normsearch.search import open_results
from normsearch.stages import A_STAGE, find_stage
from normsearch.stages.robustness import VARIANTS, overrides_of, variant_recipe
from normsearch.sections import RobustnessConfig

from tiny import LEARNING, killed_then_resumed, learned_study, skip_plots, write_tiny_recipe

runner = CliRunner()


_skip_plots = skip_plots


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    return learned_study(tmp_path_factory.mktemp("robust"), "rob")


def _runs(folder: Path) -> dict[Path, float]:
    return {p: p.stat().st_mtime for p in folder.glob("robust-*/runs/*/seed*.json")}




def test_variants_are_recipes_checked_as_recipes(tmp_path):
    """Each built-in variant gives a valid recipe for the search's, changing what it says and only that;
    the length variants scale warmup and evaluation with the steps; a bad override names the variant."""
    from normsearch.errors import NormsearchError
    from normsearch.recipe import load_recipe

    parent = load_recipe(write_tiny_recipe(tmp_path, "rob", trials=1, **LEARNING))
    cfg = RobustnessConfig()
    for name in VARIANTS:
        r = variant_recipe(parent, name, overrides_of(parent, cfg, name), cfg)
        assert r.space is None and r.name.endswith(f"robust-{name}")
    ctx = variant_recipe(parent, "context-4x", overrides_of(parent, cfg, "context-4x"), cfg)
    assert ctx.model.context_length == 4 * parent.model.context_length
    assert ctx.train.batch_size * ctx.model.context_length == parent.train.batch_size * parent.model.context_length
    long = variant_recipe(parent, "steps-16x", overrides_of(parent, cfg, "steps-16x"), cfg)
    assert (long.train.steps, long.train.warmup) == (16 * parent.train.steps, 16 * parent.train.warmup)
    assert variant_recipe(parent, "bpe", overrides_of(parent, cfg, "bpe"), cfg).model.vocab_size == 1024
    assert variant_recipe(parent, "shakespeare", overrides_of(parent, cfg, "shakespeare"), cfg).data.corpus == "shakespeare"
    with pytest.raises(NormsearchError, match="robustness variant odd: train.warmup must be between"):
        variant_recipe(parent, "odd", {"train.warmup": 10**6}, cfg)


@pytest.mark.slow  # the study it refuses variants of is trained first
@pytest.mark.parametrize("args, message", [
    (["--variants", "swiglu,nosuch"], "unknown variant 'nosuch'"),
    (["--define", "[1, 2]"], "--define must be a mapping"),
    (["--define", "{wd: {weight_decay: 0.3}}", "--variants", "wd"], "robustness.define.wd: a variant is a mapping"),
    (["--first-seed", "0"], "robustness seeds [0] were search seeds"),
])
def test_bad_variants_get_one_line_and_exit_code_2(searched, args, message):
    result = runner.invoke(app, ["robustness", str(searched), "--top", "1", "--seeds", "1", *args])
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: ") and message in result.output, result.output


@pytest.mark.slow
def test_variants_resume_after_kill_9_train_nothing_twice_and_report(searched, tmp_path):
    args = ["robustness", searched, "--variants", "no-warmup,steps-4x", "--top", "1", "--seeds", "2",
            "--baselines", "pre_ln", "--jobs", "1"]
    after = killed_then_resumed(args, lambda: _runs(searched))
    assert len(after) == 3 * 2 * 2  # 3 variants (base first) x (1 found + 1 baseline) x 2 seeds x 1 lr
    steps = {q.parts[-4]: json.loads(q.read_text())["steps"] for q in after}
    assert steps["robust-base"] == LEARNING["steps"] and steps["robust-steps-4x"] == 4 * LEARNING["steps"]
    assert {json.loads(q.read_text())["seed"] for q in after} == {3000, 3001}
    handle = open_results(searched)
    stored = find_stage(handle, "robust-no-warmup").user_attrs[A_STAGE]["settings"]
    assert stored["overrides"] == {"train.warmup": 0} and stored["baselines"] == ["pre_ln"]
    data = json.loads((searched / "robustness" / "robustness.json").read_text())
    assert [v["name"] for v in data["variants"]] == ["base", "no-warmup", "steps-4x"]
    (c,) = data["contrasts"]
    assert c["against"] == "pre_ln" and len(c["gaps"]) == 3
    assert c["n_estimated"] + c["n_failed"] == 2  # base and no-warmup; steps-4x is the length series
    text = (searched / "robustness" / "robustness.md").read_text()
    for heading in ("## Gaps by variant", "## Across the recipe variants"):
        assert heading in text
    # once more: nothing is trained; other shared settings are refused naming the stored ones
    with pytest.MonkeyPatch.context() as mp:
        _skip_plots(mp)
        result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == 0 and _runs(searched) == after, result.output
    result = runner.invoke(app, ["robustness", str(searched), "--seeds", "3"])
    assert result.exit_code == 2 and "seeds 2" in result.output, result.output
    # a report of what is stored, from the stored settings alone
    with pytest.MonkeyPatch.context() as mp:
        _skip_plots(mp)
        result = runner.invoke(app, ["robustness", str(searched), "--report-only", "--out", str(tmp_path / "r")])
    assert result.exit_code == 0, result.output
    again = json.loads((tmp_path / "r" / "robustness.json").read_text())
    assert [v["name"] for v in again["variants"]] == ["base", "no-warmup", "steps-4x"]
    assert again["contrasts"] == data["contrasts"]
    assert (tmp_path / "r" / "robust-steps-4x" / "report.md").is_file()
    # each variant's report names the seeds its runs were trained on, not the search's
    assert "Seeds: 3000, 3001." in (tmp_path / "r" / "robust-steps-4x" / "report.md").read_text()


@pytest.mark.slow
def test_measure_throughput_times_each_variant_at_its_own_shape_into_its_own_folder(searched, tmp_path):
    """--measure-throughput measures every trained variant at the variant's model (the swiglu variant's
    feed-forward, not the study's) into the variant's folder, and the cost table reads it; the study's own
    throughput.json is left alone, and `report --measure-throughput` on a stage is refused in one line."""
    args = ["robustness", str(searched), "--variants", "swiglu", "--top", "1", "--seeds", "2", "--baselines",
            "pre_ln", "--jobs", "1", "--measure-throughput", "--out", str(tmp_path / "r")]
    with pytest.MonkeyPatch.context() as mp:
        _skip_plots(mp)
        result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert not (searched / "throughput.json").exists()
    stored = json.loads((searched / "robust-swiglu" / "throughput.json").read_text())
    assert stored["meta"]["key"]["ffn"] == "swiglu" and stored["meta"]["study"].endswith("/robust-swiglu")
    assert len(stored["archs"]) == 2 and all(a["tokens_per_s"] > 0 for a in stored["archs"].values())
    base = json.loads((searched / "robust-base" / "throughput.json").read_text())
    assert base["meta"]["key"]["ffn"] == "gelu"
    data = json.loads((tmp_path / "r" / "robustness.json").read_text())
    rows = {(v["name"], r["label"]): r for v in data["variants"] for r in v["rows"]}
    assert {r["throughput_source"] for (name, _), r in rows.items() if name == "swiglu"} == {"measured"}
    result = runner.invoke(app, ["report", str(searched), "--study-name", "rob/robust-swiglu", "--measure-throughput",
                                 "--out", str(tmp_path / "x")])
    assert result.exit_code == 2 and "is a stage of study 'rob'" in result.output, result.output
