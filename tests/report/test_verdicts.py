"""normsearch.report._verdicts: the verdicts in words, each built from the ranking's numbers."""

import optuna
import pytest
from test_ranking import build_study

from normsearch.ranking import rank
from normsearch.report import _plots as plots
from normsearch.report import comparison_sentence, score_definition, write_report
from normsearch.report._verdicts import at_sweep_edge, learning_rate_lines, summary_lines, verdict_line
from normsearch.stats.inference import Comparison


@pytest.fixture(scope="module")
def ranking():
    return rank(build_study())


def comp(verdict, diff=-0.031, **kw):
    base = dict(arch="t5", against="peri_ln", n=3, n_arch=3, n_against=3, method="welch", diff=diff, ci_low=-0.052,
                ci_high=-0.010, p_value=0.001, p_holm=0.004, p_improve=0.99, p_tost_holm=0.2, seeds_needed=None,
                margin=0.02, verdict=verdict)
    return Comparison(**{**base, **kw})


def test_one_seed_study_reports_no_comparison(tmp_path):
    ranking = write_report(build_study(seeds=(0,), lrs=(1e-3,)), tmp_path)
    md = (tmp_path / "report.md").read_text()
    assert "One successful seed per architecture: no intervals and no comparisons" in md
    assert "beats" not in md.split("## Against the baselines")[1].split("##")[0].replace("no found placement beats", "")
    assert ranking.row("t3").ci_low is None and ranking.row("t3").comparison("peri_ln").verdict == "undecided"
    assert "one learning rate only" in plots.loss_vs_lr(plots.plot_rows(ranking)).axes[0].get_title()


def test_comparison_sentences_say_the_verdict_and_its_numbers():
    assert comparison_sentence(comp("better")) == (
        "t5 beats peri_ln by 0.031 bits/byte (95% CI of the difference [-0.052, -0.010], Holm p = 0.004, "
        "P(better) 0.99).")
    worse = comparison_sentence(comp("worse", diff=0.05, ci_low=0.02, ci_high=0.08, p_improve=None))
    assert worse.startswith("t5 is worse than peri_ln by 0.050 bits/byte") and "P(better)" not in worse
    eq = comparison_sentence(comp("equivalent", diff=0.004, ci_low=-0.01, ci_high=0.018, p_tost_holm=0.012))
    assert eq.startswith("t5 is equivalent to peri_ln within ±0.02 bits/byte: difference +0.004")
    assert "both one-sided tests pass, Holm p = 0.012" in eq
    und = comparison_sentence(comp("undecided", diff=-0.01, ci_low=-0.03, ci_high=0.01, seeds_needed=12, se=0.01,
                                   margin_equivalent=0.027, diff_planned=-0.005))
    assert "undecided, difference -0.010" in und and "; equivalent within ±0.027 bits/byte at best;" in und
    assert und.endswith("about 12 more seeds per architecture would decide it (80% power if the true difference "
                        "were -0.005, the observed one shrunk toward 0).")
    never = comparison_sentence(comp("undecided", seeds_needed=None, se=0.01))
    assert never.endswith("more than 1000 more seeds per architecture would be needed to decide it.")
    one_run = comparison_sentence(comp("undecided", method="none", n_arch=1, se=None))
    assert one_run.startswith("t5 vs peri_ln: untested, difference -0.031 bits/byte (1 and 3 successful seeds")
    none = comparison_sentence(comp("undecided", diff=None, n_arch=1, n_against=0))
    assert none == "t5 vs peri_ln: not compared (1 and 0 successful seeds)."
    assert "bits/token" in comparison_sentence(comp("better"), unit="bits/token")


def test_verdict_lines_count_what_beats_a_baseline(ranking):
    assert verdict_line(ranking, "peri_ln").startswith("**1 of 4 found placement(s) beat `peri_ln`** under Holm: t3")
    ranked = rank(build_study(), against=["pre_ln"])
    better = [r.label for r in ranked.ranked if not r.is_baseline and r.comparison("pre_ln").verdict == "better"]
    line = verdict_line(ranked, "pre_ln")
    assert better and line.startswith(f"**{len(better)} of 4 found placement(s) beat `pre_ln`** under Holm: "
                                      f"{', '.join(better)}")
    assert verdict_line(ranking, "nothing_like_it") == "nothing has finished yet to compare with `nothing_like_it`."


def test_a_control_is_counted_apart_from_the_found_placements(ranking):
    """A control (a uniform draw trained beside the search) that beats a baseline was not found by the
    search: the fair study's report counted c1 among '5 of 13 found placement(s)'."""
    import copy

    relabelled = copy.deepcopy(ranking)
    relabelled.row("t3").label = "c0"  # the one placement that beats peri_ln, as if a control had drawn it
    line = verdict_line(relabelled, "peri_ln")
    assert line.startswith("**no found placement beats `peri_ln`** under Holm (3 compared)"), line
    assert line.endswith("of the 1 control(s) (uniform draws), 1 beat it: c0."), line
    assert "**1 of 4 found placement(s)" in verdict_line(ranking, "peri_ln")


def test_without_searched_placements_the_verdict_line_is_about_the_other_baselines():
    baselines_only = rank(build_study(only=("pre_ln", "peri_ln", "hybridnorm")))
    worse = [r.label for r in baselines_only.ranked if r.comparison("peri_ln") is not None
             and r.comparison("peri_ln").verdict == "worse"]
    undecided = [r.label for r in baselines_only.ranked if r.comparison("peri_ln") is not None
                 and r.comparison("peri_ln").verdict == "undecided"]
    assert worse and undecided  # the words follow the comparisons
    assert verdict_line(baselines_only, "peri_ln") == ("no searched placement; among the other baselines, under Holm: "
                                                       f"worse: {', '.join(worse)}; undecided: {', '.join(undecided)}.")


def test_the_summary_names_the_first_and_the_best_baseline(ranking):
    lines = summary_lines(ranking)
    assert lines[0] == "## In short"
    first = ranking.ranked[0]
    assert lines[2].startswith(f"- First in the ranking: **{first.label}** (found by the search")
    assert any(x.startswith("- Best baseline: **peri_ln**") for x in lines)
    assert any(x.startswith("- Against `peri_ln`: ") for x in lines)
    empty = optuna.create_study(storage=optuna.storages.InMemoryStorage())
    empty.set_user_attr("recipe", build_study().user_attrs["recipe"])
    assert summary_lines(rank(empty)) == []  # nothing ranked: nothing to sum up


def test_score_definition_names_the_split():
    assert score_definition().startswith("the validation loss in bits/byte")
    assert score_definition(test=True).startswith("the test loss in bits/byte")


def test_learning_rates_at_the_edge_of_the_sweep_are_flagged(ranking):
    hyb, t3 = ranking.row("hybridnorm"), ranking.row("t3")
    assert hyb.best_lr == 1e-3 and t3.best_lr == 3e-3
    assert at_sweep_edge(hyb) and at_sweep_edge(t3)  # two learning rates: either one is an end
    text = "\n".join(learning_rate_lines(ranking))
    assert "**At the edge of the sweep**" in text and "`t3` (0.003, the highest of 2 learning rates)" in text
    assert "`hybridnorm` (0.001, the lowest of 2 learning rates)" in text


@pytest.mark.parametrize("against", [["peri_ln"], ["missing_one"]])
def test_comparisons_section_for_present_and_missing_baselines(against):
    from normsearch.report._verdicts import comparisons_section

    text = "\n".join(comparisons_section(rank(build_study(), against=against)))
    if against == ["missing_one"]:
        assert "`missing_one` is not a finished architecture of this study: nothing is compared with it." in text
        assert "### Against" not in text
    else:
        assert "### Against `peri_ln`" in text and "| t3 | 3 |" in text


def test_a_confirmation_s_one_cell_per_architecture_is_not_read_as_a_sweep(ranking):
    """A confirmation trains each architecture at the one cell its search chose: its report said
    'Bracketed **no**' for every row, under a rule for choosing among cells it never had."""
    import copy

    one = copy.deepcopy(ranking)
    for r in one.ranked:
        r.lr_points = [p for p in r.lr_points if p.lr == r.best_lr][:1] or r.lr_points[:1]
    text = "\n".join(learning_rate_lines(one))
    assert text.startswith("## Failures at the chosen cells") and "Bracketed" not in text and "**no**" not in text
    t3 = one.row("t3")
    assert f"| t3 | {t3.best_lr:g} | {t3.n_failed}/{t3.n_failed + t3.n_seeds} [" in text
    assert "## Failures and learning rates" in "\n".join(learning_rate_lines(ranking))  # a sweep keeps its table


def test_the_stall_reference_names_what_it_learned():
    from normsearch.report._verdicts import unigram_words

    assert unigram_words("bytes") == "the training bytes' frequencies"
    assert unigram_words("bpe") == "the training BPE tokens' frequencies (scored per byte)"
    assert "learned only the training BPE tokens' frequencies" in score_definition(False, "bpe")
