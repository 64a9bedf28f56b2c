"""normsearch.report._plots: every figure has a title, labelled axes, a legend and the right data."""

import subprocess
import sys

import pytest
from report_synth import MEAN, PNGS, SCORE
from test_ranking import L, build_study

from normsearch.ranking import rank
from normsearch.report import _plots as plots
from normsearch.report import site_effects, site_importance


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


def test_plot_rows_are_the_top_found_placements_and_every_baseline():
    ranking = rank(build_study())
    rows = plots.plot_rows(ranking, top=2)
    assert [r.label for r in rows if not r.is_baseline] == ["t3", "t5"]
    assert {r.label for r in rows if r.is_baseline} == {"pre_ln", "peri_ln", "hybridnorm"}
    assert plots.searched(ranking)
    ranking.study = "synth/confirm"  # a stage: no sampler to judge
    assert not plots.searched(ranking)
