"""normsearch.grid: the tuned grid (learning rate x init x warmup), its refinement around the chosen
cell, the bracket and the vertex; and a study trained over a grid, whose chosen cell is the same for
the sampler, the refinement, the ranking and the confirmation."""

import json
import math

import pytest
from typer.testing import CliRunner

from normsearch.cli import app
from normsearch.errors import NormsearchError
from normsearch.grid import (RunSpec, bracket, describe, next_points, parse_tag, plan, variant_tag, variants,
                             vertex)
from normsearch.recipe import load_recipe
from normsearch.sections import TrainConfig
from normsearch.stats.outcomes import Run, sweep
from tests.tiny import write_tiny_recipe

runner = CliRunner()


def arch(points, variant=""):
    """An ArchLr from {lr: [loss or None (diverged), ...]}."""
    runs = [Run("a", seed, lr, loss, diverged=loss is None, variant=variant)
            for lr, losses in points.items() for seed, loss in enumerate(losses)]
    return sweep(runs)["a"]


def test_tags_name_the_variant_and_read_back():
    v = {"warmup": 60, "init": "small"}
    assert variant_tag(v) == "init-small_warmup-60" and parse_tag("init-small_warmup-60") == v
    assert variant_tag({}) == "" and parse_tag("") == {}
    assert describe(v) == "init small, warmup 60"


def test_the_plan_covers_the_grid_and_paper_is_the_baselines_own():
    t = TrainConfig(lr=[1e-3, 1e-2], seeds=[0, 1], grid={"init": ["gpt", "small", "paper"]})
    found = plan(t)  # a found placement has no paper init
    assert len(found) == 2 * 2 * 2 and found[0] == RunSpec(0, 1e-3, "init-gpt")
    assert {s.tag for s in found} == {"init-gpt", "init-small"}
    from normsearch.baselines import BASELINES

    for name, b in BASELINES.items():
        inits = [v["init"] for v in variants(t, name)]
        paper = getattr(b, "init", None)
        assert inits[:2] == ["gpt", "small"] and (paper in inits or paper is None)
        assert len(inits) == len(set(inits))  # a paper init equal to gpt or small is not trained twice
    assert plan(TrainConfig(lr=[1e-3], seeds=[0])) == [RunSpec(0, 1e-3, "")]  # no grid: the old runs


@pytest.mark.parametrize("grid, match", [
    ({"init": ["gtp"]}, "unknown init 'gtp'"),
    ({"lr": [1e-3]}, "train.grid: unknown setting 'lr'"),
    ({"warmup": [500]}, "not a number of steps"),
    ({"init": "small"}, "must be a list"),
])
def test_a_bad_grid_is_one_clear_error(grid, match):
    with pytest.raises(NormsearchError, match=match):
        TrainConfig(steps=100, grid=grid)


def test_the_resolution_needs_a_sweep_and_a_sane_value():
    with pytest.raises(NormsearchError, match="resolution"):
        TrainConfig(lr=[1e-3], lr_resolution=0.25)
    with pytest.raises(NormsearchError, match="resolution"):
        TrainConfig(lr=[1e-3, 1e-2], lr_resolution=5)


def test_the_sweep_extends_past_an_end_then_refines_to_the_resolution():
    lr0 = [1e-3, 3.162e-3, 1e-2]
    a = arch({1e-3: [3.0, 3.1], 3.162e-3: [2.8, 2.9], 1e-2: [2.5, 2.6]})  # best at the top end
    assert next_points(a, lr0, None, 1) == [(0.03162, "")]
    assert next_points(a, lr0, None, 0) == []
    # with a quarter decade: the midpoint below, and the point past the end
    assert next_points(a, lr0, 0.25, 1) == [(0.005623, ""), (0.03162, "")]
    a = arch({1e-3: [3.0], 3.162e-3: [2.5], 1e-2: [2.8]})  # inside: midpoints on both sides
    assert next_points(a, lr0, 0.25, 1) == [(0.001778, ""), (0.005623, "")]
    a = arch({1e-3: [3.0], 1.778e-3: [2.7], 3.162e-3: [2.5], 5.623e-3: [2.6], 1e-2: [2.8]})
    assert next_points(a, lr0, 0.25, 1) == []  # bracketed at a quarter decade
    b = bracket(a, 0.25)
    assert b.bracketed and b.below == 1.778e-3 and b.above == 5.623e-3 and b.step == pytest.approx(0.25, abs=1e-3)


def test_the_loss_optimal_cell_is_bracketed_too():
    # the chosen (failure-free) cell is 3.16e-3; the loss-optimal one, 1e-2 (one seed of two diverged), is at the end
    lr0 = [1e-3, 3.162e-3, 1e-2]
    a = arch({1e-3: [3.0, 3.1], 3.162e-3: [2.8, 2.9], 1e-2: [2.2, None]})
    assert a.best.lr == 3.162e-3 and a.loss_optimal.lr == 1e-2 and a.failure_free.lr == 3.162e-3
    assert (0.03162, "") in next_points(a, lr0, None, 1)


def test_a_neighbour_with_no_successful_run_does_not_bracket():
    a = arch({1e-3: [3.0], 1.778e-3: [2.5], 3.162e-3: [None]})
    assert not bracket(a, 0.25).bracketed


def test_the_vertex_of_a_convex_fit_lies_between_the_points():
    xs = [1e-3, 1.778e-3, 3.162e-3, 5.623e-3, 1e-2]
    a = arch({lr: [2.5 + (math.log10(lr) - math.log10(2.5e-3)) ** 2] for lr in xs})
    assert vertex(a) == pytest.approx(2.5e-3, rel=1e-3)
    assert vertex(arch({1e-3: [3.0], 1e-2: [2.8]})) is None  # two points
    assert vertex(arch({1e-3: [3.0], 3.162e-3: [2.9], 1e-2: [2.7]})) is None  # no minimum inside


def test_the_rule_chooses_across_variants():
    runs = [Run("a", s, 1e-3, 3.0 + s / 10, variant="init-gpt") for s in range(2)]
    runs += [Run("a", s, 1e-3, 2.8 + s / 10, variant="init-small") for s in range(2)]
    runs += [Run("a", 0, 3e-3, 2.0, variant="init-small"), Run("a", 1, 3e-3, None, diverged=True, variant="init-small")]
    a = sweep(runs)["a"]
    assert (a.best_lr, a.best_variant) == (1e-3, "init-small")  # failure-free first, then the lowest mean
    assert (a.loss_optimal.lr, a.loss_optimal.variant) == (3e-3, "init-small")
    assert [c.lr for c in a.variant_cells()] == [1e-3, 3e-3]


def test_the_recipe_reads_a_grid_and_a_resolution(tmp_path):
    r = load_recipe(write_tiny_recipe(tmp_path), ["--train.lr", "{low: 1.0e-3, high: 1.0e-2, points: 3, resolution: 0.25}",
                                                 "--train.grid", "{init: [gpt, small]}"])
    assert r.train.lr_resolution == 0.25 and r.train.grid == {"init": ["gpt", "small"]}
    assert len(r.train.runs) == 2 * 3 * 2


@pytest.mark.slow
def test_a_study_over_a_grid_chooses_one_cell_for_sampler_ranking_and_confirmation(tmp_path):
    """Pre-LN and one searched placement over init x lr with refinement, then confirmed: the cell the
    sampler's score chose is the ranking's and the confirmation trains there."""
    recipe = write_tiny_recipe(tmp_path, "grid", steps=30, trials=1)
    result = runner.invoke(app, ["run", str(recipe), "--search.baselines", "[pre_ln]", "--train.seeds", "[0]",
                                 "--train.lr", "{low: 1.0e-3, high: 1.0e-2, points: 2, extend: 1, resolution: 0.5}",
                                 "--train.grid", "{init: [gpt, small]}", "--confirm.top", "1", "--confirm.seeds", "2",
                                 "--confirm.test_bytes", "2000"])
    assert result.exit_code == 0, result.output
    from normsearch.ranking import rank
    from normsearch.search import open_results
    from normsearch.stages import confirm_handle

    handle = open_results(tmp_path / "results" / "grid")
    ranking = rank(handle, against=[])
    stored = {t.user_attrs["label"] if "label" in t.user_attrs else t.user_attrs.get("baseline"): t
              for t in handle.study.get_trials()}
    assert ranking.row("pre_ln").best_lr is not None
    for row in ranking.ranked:
        if row.best_lr is None:  # every run failed: no cell chosen, none confirmed
            assert row.init is None and row.lr_bracketed is None and ranking.row(row.label).loss_optimal is None
            continue
        trial = next(t for t in handle.study.get_trials() if t.user_attrs.get("arch_id") == row.arch_id)
        score = trial.user_attrs["score"]
        assert score["best_lr"] == row.best_lr and score["variant"] == row.variant  # sampler = ranking
        assert row.init in ("gpt", "small") and row.lr_bracketed is not None
        tags = {p.variant for p in row.lr_points}
        assert tags == {"init-gpt", "init-small"}
        # the chosen variant's sweep is refined to half a decade around the chosen lr
        lrs = sorted(p.lr for p in row.lr_points if p.variant == variant_tag(row.variant))
        i = lrs.index(row.best_lr)
        assert all(abs(math.log10(lrs[j] / lrs[i])) <= 0.5 + 0.005 for j in (i - 1, i + 1) if 0 <= j < len(lrs))
    assert stored
    confirm = confirm_handle(handle)
    for row in rank(confirm, against=[]).ranked:
        parent = ranking.row(row.label)
        assert row.best_lr == parent.best_lr and row.variant == parent.variant  # trained at the chosen cell
    pre = ranking.row("pre_ln")  # the best seed's weights at the chosen cell are kept
    kept = json.loads((tmp_path / "results" / "grid" / "checkpoints" / f"{pre.arch_id}.json").read_text())
    assert kept["lr"] == pre.best_lr and kept["variant"] == pre.variant
    assert (tmp_path / "results" / "grid" / "checkpoints" / f"{pre.arch_id}.safetensors").is_file()
    runs = list((tmp_path / "results" / "grid" / "runs").glob("*/seed*_init-*.json"))
    assert runs and all(json.loads(p.read_text())["variant"]["init"] in ("gpt", "small") for p in runs)


def test_a_run_in_a_variant_trains_with_its_init_and_warmup():
    from normsearch.config import ModelConfig
    from normsearch.grid import apply

    model, t = apply(ModelConfig(), TrainConfig(steps=100, warmup=10), "init-small_warmup-60")
    assert model.init == "small" and t.warmup == 60
    model, t = apply(ModelConfig(), TrainConfig(steps=100, warmup=10), "")
    assert model.init == ModelConfig().init and t.warmup == 10  # no variant: the recipe's own
