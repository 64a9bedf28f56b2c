"""The ladder's tested fits, its decisions and its record (issue 26), on synthetic ladders: the
lack-of-fit F test is the classic one, rejects about 5% of true power laws and every curve that
steepens with size, and a fit that fails it (or cannot be tested) is never extrapolated; no target
beyond 4x the largest rung gets a number; the decision accuracy from the smallest rung is the share
of pairs kept in order, with an interval that widens with the noise; each rung's parameters, tokens
per parameter and precision are recorded (mixed precisions said so); the failures by learning rate
reach the table and the plot. Fixed numpy seeds throughout."""

import numpy as np
import pytest
from scipy import stats as sps

from normsearch.report._ladder_gate import stability_lines
from normsearch.report._ladder_plots import failures_plot
from normsearch.report._ladder_verdicts import fit_lines, ladder_lines
from normsearch.stats import Run, RungArch, analyse_ladder, rung_from_runs
from normsearch.stats.ladder import MAX_FACTOR, Rung, decision_share, kendall_tau_b
from normsearch.stats.powerlaw import fit_power_law, lack_of_fit, profile_fit
from normsearch.stats.rung import RungInfo

SIZES5 = [2.5e4, 1e5, 4e5, 1.6e6, 6.4e6]


def law(n):
    return 2.0 + 1.5 * (n / 1e5) ** -0.3


def steepening(n):
    """Falls faster and faster in log N: no E + A N^-alpha with E >= 0 follows it (the committed repro
    ladder's step-limited rungs look like this)."""
    return 3.0 - 0.08 * np.log10(n / 2.5e4) ** 2


def rungs_of(curves, sizes=SIZES5, n_seeds=3, sigma=0.01, seed=0):
    rng = np.random.default_rng(seed)
    return [Rung(f"r{k}", {a: RungArch(losses={s: float(f(n) + rng.normal(0, sigma)) for s in range(n_seeds)})
                           for a, f in curves.items()}, n) for k, n in enumerate(sizes)]


def test_the_lack_of_fit_test_is_the_classic_one():
    """F = (sum n_r (mean_r - fit_r)^2 / (R - 3)) / (sum (y - mean_r)^2 / sum (n_r - 1)), on those df."""
    seeds = [[3.0, 3.1], [2.5, 2.52, 2.49], [2.3, 2.28], [2.2, 2.25], [2.1, 2.15]]
    means = [float(np.mean(v)) for v in seeds]
    fitted = [3.02, 2.52, 2.31, 2.2, 2.14]
    t = lack_of_fit(means, fitted, seeds)
    ss_lof = sum(len(v) * (m - f) ** 2 for v, m, f in zip(seeds, means, fitted))
    ss_pe = sum(((np.array(v) - np.mean(v)) ** 2).sum() for v in seeds)
    assert (t.df_lof, t.df_pe) == (2, 6)
    assert t.F == pytest.approx((ss_lof / 2) / (ss_pe / 6))
    assert t.p_value == pytest.approx(sps.f.sf(t.F, 2, 6)) and t.passed == (t.p_value >= 0.05)
    untested = lack_of_fit(means, fitted, [[v[0]] for v in seeds])
    assert untested.passed is None and "no replicate seeds" in untested.reason


def test_true_power_laws_fail_about_five_percent_of_the_time():
    """1000 ladders of a true power law (5 rungs, 3 seeds): the test's rejection rate is near its 5% level
    (the bounded fit is non-linear, so the F distribution is an approximation)."""
    rng = np.random.default_rng(11)
    x = np.array(SIZES5) / SIZES5[0]
    y = np.array([law(n) for n in SIZES5])[None, :, None] + rng.normal(0, 0.01, (1000, 5, 3))
    means = y.mean(2)
    e, b, a, _ = profile_fit(x, means, np.full(5, 3.0))
    fitted = e[:, None] + b[:, None] * x[None, :] ** -a[:, None]
    rejected = [not lack_of_fit(m, f, list(s)).passed for m, f, s in zip(means, fitted, y)]
    assert 0.02 < np.mean(rejected) < 0.09


def test_a_curve_that_steepens_fails_and_is_not_extrapolated():
    st = analyse_ladder(rungs_of({"bent": steepening, "law": law}), target=2e7, n_draws=300)
    bent, good = st.fits["bent"], st.fits["law"]
    assert bent.ok and bent.verdict == "fails" and bent.lack_of_fit.p_value < 1e-4 and not bent.extrapolable
    assert good.verdict == "passes" and good.extrapolable
    x = st.extrapolation
    assert x.order == ["law"] and x.left_out["bent"].startswith("its power law fails the lack-of-fit test (F = ")
    text = "\n".join(fit_lines(st))
    assert "**fails**: not extrapolated" in text and "| passes |" in text
    assert "`bent` is not extrapolated: its power law fails the lack-of-fit test" in text


def test_a_fit_without_replicate_seeds_is_untested_and_not_extrapolated():
    st = analyse_ladder(rungs_of({"a": law}, n_seeds=1), target=2e7, n_draws=100)
    f = st.fits["a"]
    assert f.ok and f.verdict == "untested" and f.lack_of_fit.df_pe == 0
    assert st.extrapolation.projections == [] and "untested" in st.extrapolation.left_out["a"]
    assert fit_power_law("a", SIZES5, [law(n) for n in SIZES5]).verdict == "untested"  # no seeds given


def test_the_fit_is_weighted_by_the_seeds():
    """A rung with many seeds pulls the curve harder than one with few: least squares over the seeds."""
    seeds = [[law(n) + (0.03 if k == 2 else 0.0)] * (1 if k == 2 else 8) for k, n in enumerate(SIZES5)]
    seeds = [[v + 1e-3 * j for j, v in enumerate(s)] for s in seeds]
    means = [float(np.mean(v)) for v in seeds]
    weighted = fit_power_law("a", SIZES5, means, seeds=seeds)
    flat = fit_power_law("a", SIZES5, means)
    miss = lambda f: abs(f.predict(SIZES5[2]) - means[2])  # noqa: E731
    assert miss(weighted) > miss(flat)  # the lone seed at r2 counts for less


@pytest.mark.parametrize("factor, refused", [(MAX_FACTOR, False), (MAX_FACTOR * 1.01, True), (10.0, True)])
def test_no_target_beyond_4x_the_largest_rung_gets_a_number(factor, refused):
    st = analyse_ladder(rungs_of({"a": law, "b": lambda n: law(n) + 0.1}), target=6.4e6 * factor, n_draws=200)
    x = st.extrapolation
    assert MAX_FACTOR == 4.0 and x.max_factor == 4.0 and x.largest == 6.4e6
    text = "\n".join(fit_lines(st))
    if refused:
        assert x.refused == "not extrapolated: beyond 4x the largest rung (6.4e+06)" and x.projections == []
        assert x.left_out == {"a": x.refused, "b": x.refused}
        assert "**Not extrapolated: beyond 4x the largest rung (6.4e+06)**" in text and "place at N*" not in text
    else:
        assert x.refused is None and x.order == ["a", "b"] and "place at N*" in text


def test_decision_accuracy_is_the_share_of_pairs_kept_in_order():
    """Five architectures 0.05 apart; at r2 the last two swap: 9 of 10 pairs keep the smallest rung's
    order. Without ties, tau = 2 x accuracy - 1."""
    curves = {f"a{i}": (lambda n, i=i: law(n) + 0.05 * i) for i in range(5)}
    rungs = rungs_of(curves, sizes=SIZES5[:3], sigma=0.002)
    r2 = rungs[2].archs
    r2["a3"].losses, r2["a4"].losses = r2["a4"].losses, r2["a3"].losses
    st = analyse_ladder(rungs, n_draws=500)
    to1, to2 = st.agreement("r0", "r1").decision_accuracy, st.agreement("r0", "r2").decision_accuracy
    assert (to1.value, to1.n_pairs) == (1.0, 10) and to1.low == 1.0
    assert (to2.value, to2.n_pairs) == (0.9, 10) and to2.low <= 0.9 <= to2.high
    assert st.agreement("r1", "r2").decision_accuracy is None  # only from the smallest rung
    assert st.agreement("r0", "r2").tau == pytest.approx(2 * 0.9 - 1)
    text = "\n".join(ladder_lines(st))
    assert "| 1.00 [1.00, 1.00] (10) |" in text and "| 0.90 [" in text


def test_decision_accuracy_matches_tau_on_random_orders_and_widens_with_noise():
    rng = np.random.default_rng(2)
    x, y = rng.normal(size=(200, 6)), rng.normal(size=(200, 6))
    assert decision_share(x, y) == pytest.approx((kendall_tau_b(x, y) + 1) / 2)
    curves = {f"a{i}": (lambda n, i=i: law(n) + 0.01 * i) for i in range(5)}
    quiet = analyse_ladder(rungs_of(curves, sizes=SIZES5[:3], sigma=0.001), n_draws=500)
    noisy = analyse_ladder(rungs_of(curves, sizes=SIZES5[:3], sigma=0.02), n_draws=500)
    q, n = (s.agreement("r0", "r2").decision_accuracy for s in (quiet, noisy))
    assert n.high - n.low > q.high - q.low and n.low < 0.8


def test_each_rung_records_its_size_tokens_and_precision():
    mixed = RungInfo.of("r1", 230_016, 207_872, 203, ["bf16-mixed", "32-true", "bf16-mixed", ""])
    assert mixed.mixed_precision and mixed.precision == "mixed: 32-true, bf16-mixed"
    assert mixed.precisions == ["32-true", "bf16-mixed"] and mixed.tokens_per_param == pytest.approx(207_872 / 230_016)
    assert RungInfo.of("r0", 100, None, None, []).precision is None
    rungs = rungs_of({"a": law}, sizes=SIZES5[:3])
    rungs[1].info = mixed
    d = analyse_ladder(rungs, n_draws=50).to_dict()
    assert d["rung_names"] == ["r0", "r1", "r2"] and [r["name"] for r in d["rungs"]] == ["r0", "r1", "r2"]
    assert [r["n_params"] for r in d["rung_info"]] == [25_000, 230_016, 400_000]
    assert d["rung_info"][1]["precision"] == "mixed: 32-true, bf16-mixed" and d["rung_info"][1]["mixed_precision"]
    assert d["rung_info"][0]["tokens_per_param"] is None  # not known from a bare rung


def test_the_failures_by_learning_rate_reach_the_table_and_the_plot():
    runs = []
    for a, bad_lr in (("p", 1e-2), ("q", None)):
        for lr in (1e-3, 3e-3, 1e-2):
            runs += [Run(a, s, lr, None if lr == bad_lr else 3.0 + abs(np.log10(lr / 3e-3)) * 0.1 + 0.01 * s,
                         diverged=lr == bad_lr) for s in range(2)]
    rungs = [rung_from_runs(f"r{k}", runs, 10.0 ** (5 + k)) for k in range(3)]
    st = analyse_ladder(rungs, n_draws=50)
    p = st.points["p"][0]
    assert [(x.lr, x.n_failed, x.n_runs, x.chosen) for x in p.by_lr] == [
        (1e-3, 0, 2, False), (3e-3, 0, 2, True), (1e-2, 2, 2, False)]
    lines = stability_lines(st)
    assert "| architecture | rung | 0.001 | 0.003 | 0.01 |" in lines
    assert "| p | r0 | 0/2 | **0/2** | 2/2 |" in lines
    fig = failures_plot(st, baselines=("q",))
    visible = [ax for ax in fig.axes if ax.get_visible()]
    assert len(visible) == 2 and visible[0].get_xscale() == "log" and visible[1].get_title() == "q (baseline)"
    ys = [list(line.get_ydata()) for line in visible[0].get_lines() if len(line.get_ydata()) == 3]
    assert [0.0, 0.0, 1.0] in ys
    bare = analyse_ladder(rungs_of({"a": law}, sizes=SIZES5[:2]), n_draws=20)  # no cells: nothing by lr
    assert stability_lines(bare) == [] and failures_plot(bare) is None
