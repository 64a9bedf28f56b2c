"""Did the search help (issue 25 item 6): the trend over proposal order and the sampler's proposals
against uniform draws, measured so that a sampler that learns is seen to help, and front-loading
(the earlier measure) shown to miss it."""

import itertools
import math
from types import SimpleNamespace

import numpy as np
import pytest

from normsearch.stats import front_loading, hodges_lehmann, search_value, shift_test, trend
from normsearch.stats.search_value import u_null_cdf

INF = math.inf


def improving(n=30, seed=0, drop=0.012, noise=0.05):
    """A sampler that learns: scores fall with proposal number, plus noise."""
    rng = np.random.default_rng(seed)
    return list(3.3 - drop * np.arange(n) + rng.normal(0, noise, n))


def test_a_sampler_that_improves_has_a_significant_trend_that_front_loading_misses():
    scores = improving()
    t = trend(scores)
    assert t.verdict == "improving" and t.rho < -0.5 and t.p < 0.001 and t.tau < 0 and t.tau_p < 0.001
    # the earlier measure: the best came late, so the search is "behind" random order of its own proposals
    f = front_loading(scores)
    assert f.verdict == "behind" and f.n_behind > f.n_ahead
    assert f.p_random_by_then > 0.5  # random order would have found the best as early: nothing to see there
    # against uniform draws: its last 20 (model-based) proposals against 8 controls from its start
    controls = list(3.3 + np.random.default_rng(1).normal(0, 0.05, 8))
    sv = search_value(scores, ["startup"] * 10 + ["model"] * 20, controls)
    assert sv.headline is sv.vs_control and sv.vs_control.verdict == "lower" and sv.vs_control.p < 0.001
    assert sv.vs_startup.verdict == "lower" and sv.vs_control.median_diff < 0
    c = sv.vs_control
    assert c.shift_low <= c.shift <= c.shift_high < 0 and (c.n, c.n_against) == (20, 8)


def test_no_trend_gives_p_well_above_alpha():
    scores = [3.2 + 0.01 * abs(k - 14.5) for k in range(30)]  # high, low, high again: no monotone trend
    t = trend(scores)
    assert t.verdict == "no trend" and abs(t.rho) < 1e-9 and t.p > 0.9 and t.tau_p > 0.9
    same = scores[::3]  # uniform draws from the same scores
    s = shift_test(scores[10:], same, "control")
    assert s.verdict == "no evidence" and s.p > 0.2


def test_the_tests_hold_their_level_on_histories_without_a_trend():
    """Scores drawn at random in random order: the trend and the one-sided test reject about 5% of the
    time at alpha 0.05, not more."""
    rng = np.random.default_rng(0)
    n = 300
    trends = sum(trend(rng.normal(3.2, 0.05, 20)).p < 0.05 for _ in range(n))
    shifts = sum(shift_test(rng.normal(3.2, 0.05, 12), rng.normal(3.2, 0.05, 6), "control").p < 0.05 for _ in range(n))
    assert trends / n < 0.09 and shifts / n < 0.09


def test_failures_rank_worst_and_tie():
    t = trend([3.0, 3.1, INF, 3.2, INF, INF, float("nan"), INF])  # failures later: worse later
    assert t.n_failed == 5 and t.rho > 0 and t.verdict == "worsening" and t.exact
    s = shift_test([2.9, 3.0, INF], [3.1, INF, INF], "control")
    assert (s.n_failed, s.n_failed_against) == (1, 2) and s.median_against == INF
    assert s.u == pytest.approx(0 + 0 + 0 + 0 + 0 + 0 + 1 + 0.5 + 0.5)  # inf vs inf: a tie, half each
    assert shift_test([INF, INF], [INF, INF], "control").verdict == "no evidence"  # all tied: nothing to test
    assert trend([INF, INF, INF]) is None and trend([3.0, 2.0]) is None  # too few, or nothing varies


def test_the_trends_small_sample_p_is_exact():
    """Up to 8 proposals the two-sided p counts the permutations as extreme as the one seen."""
    t = trend([5.0, 4.0, 3.0, 2.0, 1.0])
    assert t.rho == pytest.approx(-1.0) and t.p == pytest.approx(2 / 120) and t.exact
    assert trend([1.0, 3.0, 2.0]).p == pytest.approx(1.0)  # rho 0.5: 4 of 6 orders are as extreme (|rho| >= 0.5)
    assert not trend(improving(9)).exact


def test_u_null_distribution_against_enumeration():
    for m, n in [(1, 4), (2, 3), (3, 3), (4, 2), (3, 5)]:
        counts = np.zeros(m * n + 1)
        for xs in itertools.combinations(range(m + n), m):
            counts[sum(1 for x in xs for y in range(m + n) if y not in xs and x > y)] += 1
        assert np.allclose(u_null_cdf(m, n), np.cumsum(counts) / counts.sum())


def test_hodges_lehmann_is_the_median_pairwise_difference_and_its_interval_covers():
    x, y = [3.0, 3.2, 3.4], [3.1, 3.5]
    shift, low, high = hodges_lehmann(x, y)
    assert shift == pytest.approx(np.median([a - b for a in x for b in y])) and low is None  # 6 pairs: no interval
    rng = np.random.default_rng(7)
    covered = 0
    for _ in range(300):
        _, low, high = hodges_lehmann(rng.normal(0.3, 1, 10), rng.normal(0, 1, 12))
        covered += low <= 0.3 <= high
    assert 0.92 <= covered / 300 <= 0.99  # a 95% interval
    _, low, high = hodges_lehmann(rng.normal(0, 1, 60), rng.normal(0, 1, 60))  # past the exact limit: normal
    assert low < 0 < high


def test_search_value_without_controls_leads_with_the_start_up_proposals_and_serialises():
    sv = search_value([3.2, 3.3, 3.1, 3.0, 2.9, INF], ["startup"] * 3 + ["model"] * 3)
    assert sv.vs_control is None and sv.headline is sv.vs_startup and sv.n_controls == 0
    d = sv.to_dict()
    assert d["scores"][-1] == INF and d["trend"]["n"] == 6 and d["vs_startup"]["against"] == "startup"
    assert isinstance(d["front_loading"]["best_so_far"], list)
    with pytest.raises(ValueError):
        search_value([3.0], ["model", "model"])


def test_the_report_says_what_the_numbers_support():
    from normsearch.report._verdicts import search_lines

    def lines(sv):
        return "\n".join(search_lines(SimpleNamespace(judgement=SimpleNamespace(search=sv))))

    scores = improving()
    controls = list(3.3 + np.random.default_rng(1).normal(0, 0.05, 8))
    md = lines(search_value(scores, ["startup"] * 10 + ["model"] * 20, controls))
    assert "## Did the search help?" in md and "**The sampler's proposals scored lower as the search went on**" in md
    assert "**The sampler's model-based proposals scored lower than the control proposals" in md
    assert "one-sided Mann-Whitney p < 0.001" in md and "Hodges-Lehmann shift -0." in md
    assert "Front-loading, which is not a measure of help" in md
    flat = list(3.2 + np.random.default_rng(3).normal(0, 0.05, 12))
    md = lines(search_value(flat, ["startup"] * 4 + ["model"] * 8))
    assert "**No evidence of a trend** either way" in md and "No control proposals (`search.control: 0`)" in md
    assert "**No evidence either way** that the sampler's model-based proposals scored lower than its own" in md


def test_the_plot_states_the_trend_and_the_test():
    from normsearch.report import _plots

    scores = improving(12) + [INF]
    sv = search_value(scores, ["startup"] * 4 + ["model"] * 9, [3.3, 3.25, INF], control_at=[3, 6, 9])
    ax = _plots.search_value(sv).axes[0]
    title = ax.get_title()
    assert "Spearman ρ -" in title and "model-based vs controls: one-sided Mann-Whitney p" in title
    labels = ax.get_legend_handles_labels()[1]
    assert {"control proposal (uniform draw)", "model-based proposal", "start-up proposal (uniform draw)",
            "failed or pruned (ranked worst)"} <= set(labels)
    assert _plots.search_value(None) is None
