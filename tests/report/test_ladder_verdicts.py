"""normsearch.report._ladder_verdicts and _ladder_plots: the ladder's section of a report in words,
and its plot, on small synthetic ladders (the statistics themselves are tests/stats/test_ladder.py's)."""

import numpy as np
import pytest

from normsearch.report._ladder_plots import ladder_plot
from normsearch.report._ladder_verdicts import _cell, caveat_lines, ladder_lines, reversal_sentence
from normsearch.stats import RungArch, analyse_ladder
from normsearch.stats.ladder import Rung, RungDiff, RungPoint


def ladder(means, sizes=(1e5, 4e5, 1.6e6), n_seeds=4, sigma=0.002, failed=()):
    """means: arch -> the true loss at each rung; ``failed``: (arch, rung index) where every run failed."""
    rng = np.random.default_rng(0)
    rungs = []
    for k, n in enumerate(sizes):
        archs = {a: RungArch(n_diverged=n_seeds) if (a, k) in failed else
                 RungArch(losses={s: float(m[k] + rng.normal(0, sigma)) for s in range(n_seeds)}) for a, m in means.items()}
        rungs.append(Rung(f"r{k}", archs, n))
    return rungs


@pytest.fixture(scope="module")
def crossed():
    """a is clearly ahead at r0 and clearly behind at r2: a reversal significant at both rungs."""
    return analyse_ladder(ladder({"a": [3.0, 2.6, 2.2], "b": [3.1, 2.6, 2.1], "c": [3.5, 3.2, 2.9]}), n_draws=200)


def test_a_significant_reversal_is_said_to_be_one(crossed):
    rev = next(r for r in crossed.reversals if {r.a, r.b} == {"a", "b"} and {r.rung_a, r.rung_b} == {"r0", "r2"})
    assert rev.verdict == "both significant"
    text = reversal_sentence(crossed, rev, labels={"a": "found-1"})
    assert text.startswith("**`found-1` and `b` reverse from r0 to r2**") or \
        text.startswith("**`b` and `found-1` reverse from r0 to r2**")
    assert "both differences are significant" in text and "Holm p" in text and "bits/byte" in text
    assert "by mean loss" not in text or "untested" not in text


def test_reversal_sentences_by_verdict(crossed):
    rev = crossed.reversals[0]
    sig = RungDiff("r0", "loss", "welch", -0.1, -0.12, -0.08, 0.0001, 0.0003, True)
    noise = RungDiff("r2", "loss", "welch", 0.004, -0.01, 0.02, 0.4, 0.8, False)
    rev.rung_a, rev.rung_b, rev.at_a, rev.at_b = "r0", "r2", sig, noise
    rev.verdict = "one significant"
    one = reversal_sentence(crossed, rev)
    assert "change places from r0 to r2, but only the difference at r0 is significant" in one
    assert "The reversal is not established." in one and one.count("Welch t-test") == 2 and "pooled" not in one
    rev.verdict, rev.at_a = "within noise", RungDiff("r0", "loss", "none", None, None, None, None)
    within = reversal_sentence(crossed, rev)
    assert "reverse within noise from r0 to r2" in within and "untested (too few successful runs)" in within
    assert within.endswith("neither difference is significant.")


def test_cells_say_place_mean_and_failures():
    p = RungPoint("r0", 1e5, 2, 4, 1, 0.25, (0.05, 0.7), 2.5, 2.4, 2.6, n_ok=3, n_runs_all=8, n_failed_all=3,
                  at_edge=True)
    assert _cell(p) == "2. 2.5000 [2.4000, 2.6000] (failed 1/4 at its lr, 3/8 over all lrs; lr at an edge)"
    dead = RungPoint("r0", 1e5, 3, 4, 4, 1.0, (0.5, 1.0), None, None, None, n_runs_all=8, n_failed_all=8)
    assert _cell(dead) == "3. every run failed (8/8)"


def test_caveats_name_the_failed_rungs_and_nothing_when_all_is_well(crossed):
    assert caveat_lines(crossed) == []
    st = analyse_ladder(ladder({"a": [3.0, 2.6, 2.2], "b": [3.1, 2.7, 2.3], "c": [3.5, 3.2, 2.9]}, n_seeds=2,
                               failed={("c", 1)}), n_draws=100)
    lines = caveat_lines(st, labels={"c": "t|7"})
    assert lines[0].startswith(r"- **Every run of `t\|7` failed at r1.**")  # the label's pipe escaped
    assert any(x.startswith("- **Fewer than 3 successful seeds** behind every mean (2 each)") for x in lines)


def test_ladder_lines_have_every_section(crossed):
    text = "\n".join(ladder_lines(crossed))
    for head in ("## Across model sizes", "### Does the order hold?", "### Reversals", "### Promotion gate",
                 "### Power laws"):
        assert head in text
    assert "| label | r0 | r1 | r2 |" in text
    assert "**No power law is fitted**" in text and "at most 3" in text  # three rungs: no fit, and why
    assert "No gate: the ladder names no found placement and baseline" in text  # no baselines named


def test_the_gate_in_words_names_every_pair_and_its_reasons():
    st = analyse_ladder(ladder({"a": [3.0, 2.6, 2.2], "b": [3.1, 2.6, 2.1], "c": [3.5, 3.2, 2.9]}), n_draws=200,
                        baselines=["c"])
    text = "\n".join(ladder_lines(st, labels={"a": "t|1"}))
    assert "| t\\|1 | c | **promoted** |" in text and "| b | c | **promoted** |" in text
    assert "- **`t\\|1` over `c`: promoted**: better at every rung" in text
    st = analyse_ladder(ladder({"a": [3.0, 2.6, 2.2], "c": [3.1, 2.62, 2.21]}), n_draws=200, baselines=["c"])
    (g,) = st.promotion
    assert not g.promoted and "- `a` over `c`: not promoted: the gain shrinks with size" in "\n".join(ladder_lines(st))


def test_the_ladder_plot_needs_sizes(crossed):
    fig = ladder_plot(crossed, labels={"a": "found-1"}, baselines=("b",))
    ax, af = fig.axes
    assert ax.get_xscale() == "log" and "found-1" in [t.get_text() for t in ax.get_legend().get_texts()]
    no_sizes = analyse_ladder([Rung(r.name, r.archs, None) for r in ladder({"a": [3, 2.5, 2], "b": [3.1, 2.6, 2.1]})],
                              n_draws=50)
    assert ladder_plot(no_sizes) is None
