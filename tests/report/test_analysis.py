"""normsearch.report._analysis: which sites matter (site effects, Optuna's importance), the diagnostics
summary, and the runs and curves the plots read, on the synthetic study of tests/test_ranking.py."""

import json
import math

import optuna
import pytest
from report_synth import MEAN, SCORE
from test_ranking import GROWTH, L, build_study

from normsearch.baselines import baseline
from normsearch.ranking import rank
from normsearch.records import RunResult
from normsearch.report import best_runs, diagnostics_summary, mean_curve, mean_diagnostic, site_effects, site_importance
from normsearch.report._analysis import presence


def test_site_effects_by_hand():
    effects = {e.site: e for e in site_effects(rank(build_study()))}
    with_ai = [SCORE[x] for x in ("pre_ln", "peri_ln", "t3", "t5")]
    without_ai = [SCORE[x] for x in ("hybridnorm", "t4", "t6")]
    ai = effects["attn_in"]
    assert (ai.n_with, ai.n_some, ai.n_without) == (4, 0, 3)
    assert ai.mean_with == pytest.approx(MEAN(with_ai)) and ai.mean_without == pytest.approx(MEAN(without_ai))
    assert ai.diff == pytest.approx(MEAN(with_ai) - MEAN(without_ai))
    assert effects["q"].n_with == 1 and effects["q"].mean_with == pytest.approx(2.02)  # only hybridnorm
    assert effects["final"].n_without == 0 and effects["final"].diff is None  # every architecture has it
    assert "embed" not in effects and "ffn_mid" not in effects  # never used
    # "with" means every layer; a norm in some layers only is its own group
    star = presence(baseline("hybridnorm_star").to_dict(), 2)
    assert star["attn_in"] == "some" and star["q"] == "all" and star["ffn_out"] == "none" and star["final"] == "all"


def test_importance_names_its_evaluator_and_degrades_gracefully():
    ranking = rank(build_study())
    imp = site_importance(ranking)
    assert imp.ok and imp.evaluator == "PedAnovaImportanceEvaluator" and imp.n_architectures == 6
    assert set(imp.importances) == {"site.attn_in", "site.attn_out", "site.ffn_in", "site.ffn_out"}
    assert sum(imp.importances.values()) == pytest.approx(1.0) and imp.constant == ["site.final"]
    assert imp.target_quantile == 0.5
    few = site_importance(rank(build_study(only=("pre_ln", "peri_ln", "t3", "t4"))))
    assert not few.ok and few.n_architectures == 4 and "4 ranked architecture(s)" in few.note

    class Broken(optuna.importance.PedAnovaImportanceEvaluator):
        def evaluate(self, *a, **k):
            raise RuntimeError("nope")

    broken = site_importance(ranking, evaluator=Broken())
    assert not broken.ok and broken.evaluator == "Broken" and "RuntimeError: nope" in broken.note
    custom = site_importance(ranking, evaluator=optuna.importance.PedAnovaImportanceEvaluator(target_quantile=0.3))
    assert custom.ok and custom.target_quantile is None


def test_importances_are_largest_first_and_a_space_without_choices_is_said():
    ranking = rank(build_study())
    values = list(site_importance(ranking).importances.values())
    assert values == sorted(values, reverse=True)
    for r in ranking.rows:  # every architecture made the same choices
        r.params = {k: "norm" for k in r.params}
    same = site_importance(ranking)
    assert not same.ok and same.note == "not computed: every architecture of the space made the same choices"
    assert set(same.constant) == set(ranking.param_choices)


def test_diagnostics_at_a_glance(tmp_path):
    from normsearch.report import write_report

    ranking = write_report(build_study(), tmp_path)
    rows = {d["label"]: d for d in diagnostics_summary(ranking)}
    g = GROWTH["t3"]  # the synthetic diagnostics: rms 1 + g i (1 + s/100), logit 3 (1 + g s/50) - i, ...
    t3 = rows["t3"]
    assert t3["resid_rms_last_init"] == pytest.approx(1 + g * L)
    assert t3["resid_rms_last_end"] == pytest.approx(1 + 2 * g * L)
    assert t3["resid_growth_end"] == pytest.approx((1 + 2 * g * L) / (1 + 2 * g))
    assert t3["max_logit_end"] == pytest.approx(3 * (1 + 2 * g)) == t3["max_logit_peak"]
    assert t3["grad_last_over_first_init"] == pytest.approx((0.5 + g) / (0.5 + g * L))
    assert list(rows) == [r.label for r in ranking.ranked]
    md = (tmp_path / "report.md").read_text()
    assert "## Diagnostics at a glance" in md and "| t3 |" in md.split("## Diagnostics at a glance")[1]
    assert json.loads((tmp_path / "ranking.json").read_text())["diagnostics"][0]["label"] == ranking.ranked[0].label


def _run(seed, lr, curve, diverged=False, diags=()):
    return RunResult(arch_id="a", label="x", placement={}, n_layers=2, seed=seed, lr=lr, value=curve[-1][1],
                     diverged=diverged, curve=[{"step": s, "val_bpb": v} for s, v in curve], diagnostics=list(diags))


def test_best_runs_mean_curve_and_mean_diagnostic():
    a = _run(0, 1e-3, [(0, 8.0), (10, 4.0), (20, 2.0)], diags=[{"resid_rms": [1.0, 2.0]}, {"resid_rms": [3.0, 5.0]}])
    b = _run(1, 1e-3, [(0, 8.0), (10, 6.0), (20, float("nan"))], diags=[{"resid_rms": [3.0, 4.0]}])
    c = _run(0, 3e-3, [(0, 8.0), (10, 9.0)], diverged=True)

    class Row:
        runs, best_lr, variant = [a, b, c], 1e-3, {}

    assert best_runs(Row) == [a, b]
    Row.best_lr = 3e-3
    assert best_runs(Row) == [c]  # every run there diverged: all of them
    Row.best_lr = None
    assert best_runs(Row) == [a, b]  # no chosen lr: every run that did not diverge
    steps, means = mean_curve([a, b])
    assert steps == [0, 10, 20] and means == pytest.approx([8.0, 5.0, 2.0])  # NaN left out of its step's mean
    assert mean_diagnostic([a, b], "resid_rms", "first") == pytest.approx([2.0, 3.0])
    assert mean_diagnostic([a, b], "resid_rms") == pytest.approx([3.0, 4.5])  # a's last, b's only
    assert mean_diagnostic([a, b], "max_logit") is None  # none recorded
    d = _run(2, 1e-3, [(0, 8.0)], diags=[{"resid_rms": [1.0, 2.0, 3.0]}])
    assert mean_diagnostic([a, d], "resid_rms") is None  # different depths do not average
    assert not math.isnan(sum(means))
