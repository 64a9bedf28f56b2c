"""normsearch.report._markdown: report.md, with every column, the comparisons in words and the notices
that change how it should be read."""

import json

import pytest
from report_synth import PNGS
from test_ranking import ARCHS, build_study

from normsearch.ranking import rank
from normsearch.report import comparison_sentence, report_markdown, site_effects, site_importance, write_report
from normsearch.report._markdown import _count, _duration, _param_text


def test_markdown_has_every_column_comparison_and_notice(report):
    ranking, out = report
    md = (out / "report.md").read_text()
    assert ("| rank | label | sites | score (bits/byte) [95% CI] | failed | P(best) | ranks | seeds | best lr | basin "
            "| params | tokens/s | tokens/s vs best baseline | effective speed-up | kernels | arch_id |") in md
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
    lo, hi = min(j.seed_sd.values()), max(j.seed_sd.values())
    assert f"each architecture's own seed-to-seed SD (from {lo:.4f} bits/byte for" in md and f"to {hi:.4f} for" in md
    assert f"no test of equal variances decides anything: **{j.variance_method}**" in md
    assert f"the {j.n_comparisons} comparisons with the baselines are one family" in md
    t4 = ranking.row("t4").comparison("hybridnorm")
    assert comparison_sentence(t4) in md and comparison_sentence(t4).startswith("t4 is worse than hybridnorm by 0.280")
    c = t3.comparison("peri_ln")
    assert c.verdict == "better" and f"| t3 | 3 | {c.diff:+.4f} |" in md and comparison_sentence(c) in md
    c = ranking.row("t5").comparison("peri_ln")
    assert c.verdict == "undecided" and f"| ±{c.margin_equivalent:.4f} | undecided | {c.seeds_needed} |" in md
    assert "**1 of 4 found placement(s) beat `peri_ln`** under Holm: t3" in md
    assert "## Failures and learning rates" in md and "0.003: 1.9600 (1/3 failed)" in md  # hybridnorm's 3e-3
    assert "## Did the search help?" in md
    # divergences and failures
    assert "hybridnorm: 1 of 6 runs diverged: seed 1 at lr 0.003 (step 60)." in md
    assert "trial 9 (t9): error: RuntimeError: boom" in md
    n_found = sum(not r.is_baseline for r in ranking.ranked)
    assert f"The curve plots show the {min(3, n_found)} best found placement(s) and every baseline." in md
    # every plot linked
    for p in PNGS:
        assert f"]({p}.png)" in md


def test_small_study_skips_importance_and_still_writes_the_rest(tmp_path):
    only = ("pre_ln", "peri_ln", "hybridnorm", "t3")
    write_report(build_study(only=only), tmp_path)
    md = (tmp_path / "report.md").read_text()
    assert "Evaluator: `PedAnovaImportanceEvaluator`: not computed: 3 ranked architecture(s) of the search space" in md
    assert "The curve plots show the 1 best found placement(s) and every baseline." in md  # t3 alone, not 3
    assert not (tmp_path / "importance.png").exists() and (tmp_path / "site_effects.png").is_file()
    assert "Not drawn (no data for them): Did the search help?, Site importance." in md  # one searched placement


def test_robust_objective_report(tmp_path):
    write_report(build_study(), tmp_path, objective="robust")
    md = (tmp_path / "report.md").read_text()
    assert "optimising the `robust` objective" in md and "averaged over the successful runs" in md
    assert json.loads((tmp_path / "ranking.json").read_text())["objective"] == "robust"
    assert ARCHS  # the synthetic study's table is shared with test_ranking


@pytest.mark.parametrize("seconds, text", [(5, "5.0 s"), (119.9, "119.9 s"), (120, "2.0 min"), (7199, "120.0 min"),
                                           (7200, "2.0 h"), (90000, "25.0 h")])
def test_durations_read_in_the_unit_that_suits_them(seconds, text):
    assert _duration(seconds) == text


@pytest.mark.parametrize("n, text", [(999, "999"), (1000, "1.0k"), (41_056, "41.1k"), (2_500_000, "2.5M"),
                                     (3e9, "3.0G")])
def test_counts_are_short(n, text):
    assert _count(n) == text


def test_search_parameters_in_words():
    assert _param_text("site.attn_in") == "attn_in"
    assert _param_text("site.q+k") == "q + k (tied)"
    assert _param_text("site.ffn_out@0-1") == "ffn_out, depth range 0-1"
    assert _param_text("gran.q") == "granularity of q" and _param_text("kind") == "norm kind"
    assert _param_text("other") == "other"


def test_markdown_of_a_ranking_without_plots_or_files():
    ranking = rank(build_study())
    imp = site_importance(ranking)
    md = report_markdown(ranking, site_effects(ranking), imp)
    assert md.startswith("# normsearch report: `synth`\n") and md.endswith("\n") and not md.endswith("\n\n")
    assert "No plot could be drawn (no finished runs)." in md
    assert "The same rows as data" not in md  # no files linked that were not written
    assert "still running" not in md  # a finished study
    # the sections in their order
    heads = [line for line in md.splitlines() if line.startswith("## ")]
    assert heads[:4] == ["## In short", "## What was measured", "## Ranking", "## How sure"]
    # a confirmation's lines come first, and the search's summary says whose it is
    conf = report_markdown(ranking, [], imp, confirmed=["## Confirmed verdicts (fresh seeds, test split)", ""])
    heads = [line for line in conf.splitlines() if line.startswith("## ")]
    assert heads[:2] == ["## Confirmed verdicts (fresh seeds, test split)",
                         "## In short, from the search (the seeds and validation windows that chose)"]


def test_the_training_line_says_same_budget_only_when_the_sweep_is_fixed():
    """A sweep that extends or refines itself around each architecture's best, or a tuned grid, does not
    give every architecture the same runs: the line names the rule and the runs it gave (the fair study's
    report said '9 runs' for 24 to 36). A stage trains each architecture in the variant its search chose:
    the line says so from the runs, not the grid the recipe carries."""
    from types import SimpleNamespace

    from normsearch.report._markdown import _training_line
    from normsearch.sections import TrainConfig

    def row(n_runs, inits):
        return SimpleNamespace(n_runs=n_runs, runs=[SimpleNamespace(variant={"init": i}) for i in inits])

    searched = [row(24, ["gpt", "small"]), row(27, ["gpt", "small", "megatron"]), row(36, ["gpt", "small"])]
    fixed = _training_line(TrainConfig(steps=200, lr=[1e-3, 3e-3], seeds=[0, 1, 2]), searched, 204800)
    assert "gets the same budget: 3 seed(s) x 2 learning rate(s) (0.001, 0.003) = 6 runs, each run 200 steps" in fixed
    assert "(204.8k tokens). Seeds: 0, 1, 2." in fixed
    train = TrainConfig(steps=200, lr=[1e-3, 3e-3], seeds=[0, 1, 2], lr_extend=2, lr_resolution=0.25,
                        grid={"init": ["gpt", "small", "paper"]})
    swept = _training_line(train, searched, None)
    assert "same budget" not in swept and "under the same rule: 3 seed(s) at each learning rate of the grid" in swept
    assert "in each variant of the tuned grid (init gpt, small, paper; a found placement has no paper init" in swept
    assert ("then, around its best cell and its lowest-loss cell only, extended by up to 2 point(s) past an end "
            "that holds the best and refined") in swept and "within 0.25 decades" in swept
    assert "that gave 24 to 36 runs per architecture (median 27)" in swept
    staged = _training_line(train, [row(15, ["small"] * 15), row(12, ["megatron"] * 12)], None)
    assert "in the one variant of the tuned grid its search chose for it" in staged and "each variant" not in staged
    assert "that gave 9 runs per architecture" in _training_line(
        TrainConfig(lr=[1e-3, 3e-3, 1e-2], seeds=[0, 1, 2], lr_extend=1), [row(9, [""] * 9)] * 2, None)


def test_a_diverged_run_names_its_variant_of_the_grid():
    """peri_ln's one divergence in the fair study was at init gpt, not at its chosen cell (init small, 0/3
    failed): without the variant the line read as a failure of the chosen cell."""
    from types import SimpleNamespace

    from normsearch.report._markdown import _problems

    run = lambda seed, variant, diverged: SimpleNamespace(seed=seed, lr=0.01, variant=variant, diverged=diverged,  # noqa: E731
                                                          diverged_step=19 if diverged else None)
    row = SimpleNamespace(label="peri_ln", n_diverged=1, n_runs=27,
                          runs=[run(1, {"init": "gpt"}, True), run(1, {"init": "small"}, False), run(2, {}, True)])
    lines = _problems(SimpleNamespace(rows=[row], running_trials=[], failures=[]))
    assert ("- peri_ln: 1 of 27 runs diverged: seed 1 at lr 0.01, init gpt (step 19), seed 2 at lr 0.01 (step 19)."
            in lines)
