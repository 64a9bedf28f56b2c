"""The report: report.md, ranking.csv, ranking.json and the plots of a synthetic study whose right
answers are known (the study of tests/test_ranking.py)."""

import csv
import json
import subprocess
import sys

import optuna
import pytest
from rich.console import Console
from test_ranking import ARCHS, L, build_study, final

from normsearch.report import _plots as plots
from normsearch.baselines import baseline
from normsearch.ranking import rank
from normsearch.report import (
    CSV,
    SiteEffect,
    ranking_json,
    ranking_table,
    site_effects,
    site_importance,
    write_report,
)
from normsearch.spec import Placement
from normsearch.report._analysis import presence
from normsearch.errors import NormsearchError
from normsearch.report import comparison_sentence
from normsearch.search import StudyHandle, recipe_of

PNGS = ("loss_curves", "residual_rms", "grad_norm", "attention_logits", "loss_vs_lr", "search_value", "importance",
        "site_effects", "history")
MEAN = lambda xs: sum(xs) / len(xs)
SCORE = {"pre_ln": MEAN(final("pre_ln", 3e-3)), "peri_ln": MEAN(final("peri_ln", 3e-3)), "hybridnorm": 2.02,
         "t3": MEAN(final("t3", 3e-3)), "t4": 2.30, "t5": MEAN(final("t5", 3e-3)), "t6": 3.00}


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("report") / "results" / "synth"  # created by write_report
    ranking = write_report(build_study(running=True), out)
    return ranking, out


def test_every_file_is_written(report):
    ranking, out = report
    for name in ("report.md", "ranking.csv", "ranking.json", *[f"{p}.png" for p in PNGS]):
        assert (out / name).is_file(), name
    for p in PNGS:
        assert (out / f"{p}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [r.label for r in ranking.ranked][:3] == ["t3", "t5", "peri_ln"]


def test_markdown_has_every_column_comparison_and_notice(report):
    ranking, out = report
    md = (out / "report.md").read_text()
    assert ("| rank | label | sites | score (bits/byte) [95% CI] | failed | P(best) | ranks | seeds | best lr | basin "
            "| params | tokens/s | kernels | arch_id |") in md
    assert "**The study is still running** (1 trial(s) running" in md and "trial 11 (t11" in md
    assert "A demonstration, not a scientific result" in md
    assert "**Cost**: 44 training runs, 7.3 min of training in total" in md
    assert "triton (Triton 3.2.0)" in md and "norm kernels torch" in md and "precision 32-true" in md
    assert "PedAnovaImportanceEvaluator" in md
    # one table line per architecture, pipes in the sites escaped
    t3 = ranking.row("t3")
    line = next(x for x in md.splitlines() if f"`{t3.arch_id}`" in x and x.startswith("| 1 |"))
    assert r"`ai ao fi \| fin  [rmsnorm]`" in line and f"{t3.score_mean:.4f} [{t3.ci_low:.4f}, {t3.ci_high:.4f}]" in line
    for r in ranking.rows:
        assert f"`{r.arch_id}`" in md
    assert "| - | t8 |" in md and "pruned" in md
    assert "**peri_ln** (baseline)" in md
    # verdicts in words, with the numbers of the ranking: the family, the noise model, each comparison
    j = ranking.judgement
    assert f"residual SD of {j.sigma:.4f} bits/byte with {j.df} degrees of freedom" in md
    assert f"the {j.n_comparisons} comparisons with the baselines are one family" in md
    t4 = ranking.row("t4").comparison("hybridnorm")
    assert comparison_sentence(t4) in md and comparison_sentence(t4).startswith("t4 is worse than hybridnorm by 0.280")
    c = t3.comparison("peri_ln")
    assert c.verdict == "undecided" and f"| t3 | 3 | {c.diff:+.4f} |" in md and f"| undecided | {c.seeds_needed} |" in md
    assert "**no found placement beats `peri_ln`** under Holm (4 compared)" in md
    assert "## Failures and learning rates" in md and "0.003: 1.9600 (1/3 failed)" in md  # hybridnorm's 3e-3
    assert "## Did the search help?" in md
    # divergences and failures
    assert "hybridnorm: 1 of 6 runs diverged: seed 1 at lr 0.003 (step 60)." in md
    assert "trial 9 (t9): error: RuntimeError: boom" in md
    # every plot linked
    for p in PNGS:
        assert f"]({p}.png)" in md


def test_csv_has_the_rows_and_columns(report):
    ranking, out = report
    with open(out / "ranking.csv") as f:
        rows = list(csv.DictReader(f))
    header = list(rows[0])
    assert header[:len(CSV)] == [c.key for c in CSV]
    for a in ("peri_ln", "hybridnorm"):
        for c in ("n", "diff", "ci_low", "ci_high", "p_value", "p_holm", "q_bh", "p_improve", "seeds_needed",
                  "verdict"):
            assert f"vs_{a}_{c}" in header
    assert [r["label"] for r in rows] == [r.label for r in ranking.rows]
    by = {r["label"]: r for r in rows}
    for label, score in SCORE.items():
        assert float(by[label]["score_mean"]) == pytest.approx(score)
    t3 = ranking.row("t3")
    assert float(by["t3"]["ci_low"]) == pytest.approx(t3.ci_low) and by["t3"]["rank"] == "1"
    assert by["t3"]["vs_peri_ln_verdict"] == "undecided" and by["t4"]["vs_peri_ln_verdict"] == "worse"
    assert float(by["t3"]["vs_peri_ln_p_value"]) == pytest.approx(t3.comparison("peri_ln").p_value)
    assert float(by["t3"]["vs_peri_ln_p_holm"]) == pytest.approx(t3.comparison("peri_ln").p_holm)
    assert float(by["t3"]["p_best"]) == pytest.approx(t3.p_best) and by["t3"]["n_failed"] == "0"
    assert by["peri_ln"]["vs_peri_ln_verdict"] == "" and by["t8"]["rank"] == "" and by["t8"]["state"] == "PRUNED"
    assert by["hybridnorm"]["n_diverged"] == "1" and by["hybridnorm"]["best_lr"] == "0.001"
    assert by["t5"]["kernels"] == "triton" and by["t5"]["triton_version"] == "3.2.0"
    assert by["t3"]["trials"] == "3 7" and by["hybridnorm"]["is_baseline"] == "True"
    assert Placement.from_dict(json.loads(by["t3"]["placement"])).arch_id(L) == t3.arch_id


def test_json_rows_carry_the_required_fields(report):
    ranking, out = report

    def no_nan(x):
        raise AssertionError(f"non-standard JSON constant {x}")

    data = json.loads((out / "ranking.json").read_text(), parse_constant=no_nan)
    assert data["study"] == "synth" and data["objective"] == "mean" and data["finished"] is False
    assert data["running"][0]["number"] == 11 and data["failures"][0]["number"] == 9
    required = {"rank", "label", "is_baseline", "arch_id", "placement", "score_mean", "ci_low", "ci_high", "n_runs",
                "n_diverged", "best_lr", "comparisons", "sites", "lr_sensitivity", "n_params", "tokens_per_s",
                "kernels", "triton_version", "n_failed", "failure_rate", "failure_ci_low", "failure_ci_high", "p_best",
                "rank_low", "rank_high"}
    for row in data["rows"]:
        assert required <= set(row)
    by = {r["label"]: r for r in data["rows"]}
    assert by["t3"]["rank"] == 1 and by["t3"]["score_mean"] == pytest.approx(SCORE["t3"])
    c = by["t3"]["comparisons"][0]
    assert c["against"] == "peri_ln" and c["verdict"] == "undecided" and c["seeds_needed"] >= 4
    assert {"p_holm", "q_bh", "p_improve", "seeds_needed", "verdict"} <= set(c)
    assert data["judgement"]["variance_method"] == ranking.judgement.variance_method
    assert data["judgement"]["search"]["verdict"] in ("ahead", "behind", "even")
    assert by["hybridnorm"]["placement"] == baseline("hybridnorm").to_dict()
    assert set(data["plots"]) == set(PNGS)
    assert data["importance"]["evaluator"] == "PedAnovaImportanceEvaluator"
    assert {e["site"] for e in data["site_effects"]} >= {"attn_in", "ffn_out", "final"}
    assert data["cost"]["runs"] == 44


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


def test_figures_have_titles_labels_legends_and_the_right_data(tmp_path):
    ranking = rank(build_study())
    imp = site_importance(ranking)
    figs = plots.all_figures(ranking, site_effects(ranking), imp.importances, imp.evaluator, top=3)
    assert set(figs) == set(PNGS)
    for name, fig in figs.items():
        for ax in fig.axes:
            assert ax.get_title(), name
            assert ax.get_xlabel() and ax.get_ylabel(), name
            assert ax.get_legend() is not None and ax.get_legend().get_texts(), name
    legend = lambda ax: [t.get_text() for t in ax.get_legend().get_texts()]
    curves = figs["loss_curves"].axes[0]
    assert legend(curves) == ["t3", "t5", "t4", "peri_ln (baseline)", "hybridnorm (baseline)", "pre_ln (baseline)"]
    t3_line = curves.lines[0]
    assert list(t3_line.get_xdata()) == [50, 100] and t3_line.get_ydata()[-1] == pytest.approx(SCORE["t3"])
    assert curves.lines[3].get_linestyle() == "--"  # baselines dashed
    rms0, rms = figs["residual_rms"].axes
    assert "initialisation" in rms0.get_title() and "end of training" in rms.get_title()
    assert len(rms.lines[0].get_ydata()) == L + 1 and rms.get_yscale() == "log"
    assert list(rms.lines[0].get_ydata()) == pytest.approx([1.0 + 0.1 * i * 2 for i in range(L + 1)])  # t3, step 100
    assert list(rms0.lines[0].get_ydata()) == pytest.approx([1.0 + 0.1 * i for i in range(L + 1)])  # t3, step 0
    logits = figs["attention_logits"].axes[0]
    assert list(logits.lines[0].get_xdata()) == [0, 50, 100]  # t3: max over layers is layer 0's
    assert list(logits.lines[0].get_ydata()) == pytest.approx([3.0 * (1 + 0.1 * s / 50) for s in (0, 50, 100)])
    g0, g1 = figs["grad_norm"].axes
    assert "initialisation" in g0.get_title() and "end of training" in g1.get_title()
    assert list(g0.lines[0].get_ydata()) == pytest.approx([0.5 + 0.1 * (L - i) for i in range(L)])
    lr, fail = figs["loss_vs_lr"].axes
    assert lr.get_xscale() == "log" and fail.get_xscale() == "log"
    hyb = next(line for line in lr.lines if line.get_label() == "hybridnorm (baseline)")
    assert list(hyb.get_ydata()) == pytest.approx([2.02, MEAN([1.95, 1.97])])  # successful runs only
    hyb = next(line for line in fail.lines if line.get_label() == "hybridnorm (baseline)")
    assert list(hyb.get_ydata()) == pytest.approx([0.0, 1 / 3])
    sv = figs["search_value"].axes[0]
    assert list(sv.lines[0].get_ydata())[-1] == pytest.approx(SCORE["t3"])
    bars = figs["importance"].axes[0]
    assert legend(bars) == ["PedAnovaImportanceEvaluator"] and len(bars.patches) == 4
    hist = figs["history"].axes[0]
    assert "best baseline (peri_ln)" in legend(hist) and "best searched so far" in legend(hist)
    best = next(line for line in hist.lines if line.get_label() == "best searched so far")
    assert min(best.get_ydata()) == pytest.approx(SCORE["t3"])
    path = plots.save(figs["history"], tmp_path / "h.png")
    assert path.read_bytes()[:4] == b"\x89PNG"


def test_plots_and_report_do_not_import_matplotlib_until_drawing():
    code = ("import sys, normsearch.report, normsearch.report._plots, normsearch.ranking; "
            "assert 'matplotlib' not in sys.modules and 'scipy' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_one_seed_study_reports_no_comparison(tmp_path):
    ranking = write_report(build_study(seeds=(0,), lrs=(1e-3,)), tmp_path)
    md = (tmp_path / "report.md").read_text()
    assert "One successful seed per architecture: no intervals and no comparisons" in md
    assert "beats" not in md.split("## Against the baselines")[1].split("##")[0].replace("no found placement beats", "")
    assert ranking.row("t3").ci_low is None and ranking.row("t3").comparison("peri_ln").verdict == "undecided"
    assert "one learning rate only" in plots.loss_vs_lr(plots.plot_rows(ranking)).axes[0].get_title()


def test_small_study_skips_importance_and_still_writes_the_rest(tmp_path):
    only = ("pre_ln", "peri_ln", "hybridnorm", "t3")
    write_report(build_study(only=only), tmp_path)
    md = (tmp_path / "report.md").read_text()
    assert "Evaluator: `PedAnovaImportanceEvaluator`: not computed: 3 ranked architecture(s) of the search space" in md
    assert not (tmp_path / "importance.png").exists() and (tmp_path / "site_effects.png").is_file()
    assert "Not drawn (no data for them): Did the search help?, Site importance." in md  # one searched placement


def test_empty_and_failed_only_studies_do_not_crash(tmp_path):
    study = optuna.create_study(storage=optuna.storages.InMemoryStorage(), study_name="empty")
    with pytest.raises(NormsearchError, match="not made by normsearch"):
        write_report(study, tmp_path / "not-ours")
    assert not (tmp_path / "not-ours").exists()
    study.set_user_attr("recipe", build_study().user_attrs["recipe"])
    ranking = write_report(study, tmp_path / "empty")
    assert ranking.rows == [] and "nothing to rank" in (tmp_path / "empty" / "report.md").read_text()
    json.loads((tmp_path / "empty" / "ranking.json").read_text())
    study.add_trial(optuna.trial.create_trial(state=optuna.trial.TrialState.FAIL,
                                              user_attrs={"label": "pre_ln", "failure": "dead worker: gone"}))
    write_report(study, tmp_path / "failed")
    assert "dead worker: gone" in (tmp_path / "failed" / "report.md").read_text()


def test_handle_and_terminal_table(tmp_path):
    study = build_study(running=True)
    handle = StudyHandle(recipe_of(study), study, "memory", tmp_path)
    ranking = write_report(handle, tmp_path, against=["pre_ln"])
    assert ranking.against == ["pre_ln"] and ranking.row("t3").comparison("pre_ln").verdict == "better"
    console = Console(record=True, width=250)
    console.print(ranking_table(ranking))
    text = console.export_text()
    assert "not finished (1 running, 0 waiting)" in text and "triton (Triton 3.2.0)" in text and "pruned" in text
    assert "ai ao fi | fin  [rmsnorm]" in text  # not eaten as rich markup
    assert ranking_json(ranking)["rows"][0]["label"] == "t3"
    assert isinstance(site_effects(ranking)[0], SiteEffect)


def test_robust_objective_report(tmp_path):
    write_report(build_study(), tmp_path, objective="robust")
    md = (tmp_path / "report.md").read_text()
    assert "optimising the `robust` objective" in md and "averaged over the successful runs" in md
    assert json.loads((tmp_path / "ranking.json").read_text())["objective"] == "robust"
    assert ARCHS  # the synthetic study's table is shared with test_ranking


def test_diagnostics_at_a_glance(tmp_path):
    from test_ranking import GROWTH

    from normsearch.report import diagnostics_summary

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
