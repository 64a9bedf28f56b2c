"""normsearch.stats.ladder on synthetic ladders whose truth is set here: a preserved order agrees
(tau = 1, narrow interval), the interval widens with the seeds' noise, a planted reversal is named
(between any two rungs) and one inside the noise is labelled so, a planted power law is recovered
from five or more rungs, crossing curves (or crossing draws) are warned of, fewer than five rungs give
no fit and say why, architectures that failed every run rank last, are named at every such rung and
do not make the orders agree, and failures at every learning rate are kept beside the chosen one's.
The lack-of-fit test, the extrapolation limit and the decision accuracy are
tests/stats/test_ladder_fits.py's; the promotion gate tests/stats/test_ladder_gate.py's. Fixed numpy
seeds throughout."""

import json
import math

import numpy as np
import pytest
from scipy import stats as sps

from normsearch.report._ladder_plots import ladder_plot
from normsearch.report._ladder_verdicts import ladder_lines
from normsearch.stats import Run, RungArch, analyse, analyse_ladder, rung_from_runs
from normsearch.stats.ladder import Rung, kendall_tau_b, spearman_rho
from normsearch.stats.powerlaw import fit_power_law, profile_fit

SIZES = [1e5, 4e5, 1.6e6, 6.4e6]
SIZES5 = [2.5e4, 1e5, 4e5, 1.6e6, 6.4e6]  # five rungs: the fewest a power law is fitted over


def law(E, B, alpha, n0=1e5):
    return lambda n: E + B * (n / n0) ** -alpha


def ladder(truth, sizes=SIZES, n_seeds=5, sigma=0.005, seed=0, failed=None):
    """Rungs r0, r1, ... where arch a at size N has loss truth[a](N) + noise; ``failed``: {(arch, rung
    index): n_diverged} for architectures that failed every run there."""
    rng = np.random.default_rng(seed)
    rungs = []
    for k, n in enumerate(sizes):
        archs = {}
        for a, f in truth.items():
            if (a, k) in (failed or {}):
                archs[a] = RungArch(n_diverged=failed[a, k])
            else:
                archs[a] = RungArch(losses={s: float(f(n) + rng.normal(0, sigma)) for s in range(n_seeds)})
        rungs.append(Rung(f"r{k}", archs, n))
    return rungs


def test_tau_b_and_rho_match_scipy_with_ties():
    rng = np.random.default_rng(3)
    x, y = rng.integers(0, 4, (50, 7)).astype(float), rng.integers(0, 4, (50, 7)).astype(float)
    tau, rho = kendall_tau_b(x, y), spearman_rho(x, y)
    for i in range(50):
        want_tau = sps.kendalltau(x[i], y[i]).statistic
        want_rho = sps.spearmanr(x[i], y[i]).statistic
        assert (math.isnan(want_tau) and math.isnan(tau[i])) or tau[i] == pytest.approx(want_tau)
        assert (math.isnan(want_rho) and math.isnan(rho[i])) or rho[i] == pytest.approx(want_rho)


def test_a_preserved_order_gives_tau_one_with_a_narrow_interval():
    truth = {f"a{i}": law(2.0 + 0.05 * i, 1.5, 0.3) for i in range(5)}
    st = analyse_ladder(ladder(truth), n_draws=500)
    assert len(st.agreements) == 6 and sum(g.adjacent for g in st.agreements) == 3
    for g in st.agreements:
        assert g.tau == 1.0 and g.rho == 1.0
        assert g.tau_ci[0] >= 0.8 and g.rho_ci[0] >= 0.9
    assert st.reversals == []
    assert all(st.orders[r] == [f"a{i}" for i in range(5)] for r in st.rungs)
    assert "No pair of architectures changes order" in "\n".join(ladder_lines(st))


def test_the_interval_widens_as_seed_noise_grows():
    """Two seeds per architecture and rung: a mean resampled from two seeds takes three values, so a
    seed bootstrap gave tau intervals far narrower than the per-rung intervals (a lower bound of
    +0.73 here at sigma 0.01). Drawn from each mean's own t-interval, the interval widens with the
    noise, and at noise half the gaps it reaches well below 0.5."""
    truth = {f"a{i}": law(2.0 + 0.02 * i, 1.5, 0.3) for i in range(6)}
    lows = []
    for sigma in (0.002, 0.01, 0.04):
        st = analyse_ladder(ladder(truth, sizes=SIZES[:3], n_seeds=2, sigma=sigma, seed=3), n_draws=1000)
        lows.append(st.agreements[0].tau_ci[0])
        assert st.agreements[0].tau_ci[1] == 1.0 or sigma > 0.01
    assert lows[0] > lows[1] > lows[2], lows
    assert lows[1] < 0.5 and lows[2] < 0.0, lows
    assert len(st.few_seeds) == 18 and "**Fewer than 3 successful seeds** behind every mean (2 each)" in \
        "\n".join(ladder_lines(st))


def test_a_noisy_order_has_a_wide_interval():
    """The same ladder, with noise as large as the gaps: the interval must widen well below 1."""
    truth = {f"a{i}": law(2.0 + 0.005 * i, 1.5, 0.3) for i in range(5)}
    st = analyse_ladder(ladder(truth, sigma=0.02, n_seeds=3), n_draws=500)
    assert all(g.tau_ci[0] < 0.5 for g in st.agreements)


def test_a_planted_reversal_is_named_and_a_small_one_is_within_noise():
    truth = {"steady": law(2.0, 1.5, 0.3), "late": law(1.7, 2.5, 0.5),  # worse small, better large
             "p": law(2.5, 1.5, 0.3), "q": law(2.5, 1.5, 0.3)}  # identical: any swap is noise
    st = analyse_ladder(ladder(truth, sigma=0.01, n_seeds=4, seed=1), n_draws=500)
    late = [r for r in st.reversals if {r.a, r.b} == {"steady", "late"}]
    assert late, st.reversals
    assert {r.kind for r in late} >= {"first-last"}
    first_last = next(r for r in late if r.kind == "first-last")
    assert (first_last.a, first_last.b) == ("steady", "late")  # steady ahead at r0, behind at r3
    assert first_last.verdict == "both significant"
    assert first_last.at_a.by == "loss" and first_last.at_a.method == "welch"
    assert first_last.at_a.diff < 0 < first_last.at_b.diff
    noise = [r for r in st.reversals if {r.a, r.b} == {"p", "q"}]
    assert noise and all(r.verdict == "within noise" for r in noise)
    text = "\n".join(ladder_lines(st))
    assert "**`steady` and `late` reverse from r0 to r3**" in text
    assert "reverse within noise" in text and "beats" not in text


def test_a_planted_power_law_is_recovered_from_six_rungs():
    truth = {"a": law(2.0, 1.5, 0.3)}
    st = analyse_ladder(ladder(truth, sizes=list(np.geomspace(1e5, 6.4e6, 6)), n_seeds=6, sigma=0.003, seed=2),
                        n_draws=500)
    f = st.fits["a"]
    assert f.ok and not f.exact and len(f.sizes) == 6 and f.df_resid == 3 and f.n_seeds == [6] * 6
    assert f.verdict == "passes" and f.lack_of_fit.df_pe == 30
    assert f.E == pytest.approx(2.0, abs=0.05)
    assert f.alpha == pytest.approx(0.3, abs=0.03)
    assert f.A == pytest.approx(1.5 * 1e5 ** 0.3, rel=0.2)
    assert f.E_ci[0] <= 2.0 <= f.E_ci[1] and f.alpha_ci[0] <= 0.3 <= f.alpha_ci[1]
    assert f.E_ci[1] - f.E_ci[0] < 0.2


def test_a_reversal_between_rungs_that_are_neither_adjacent_nor_first_and_last_is_named():
    """Four rungs: a ahead of b at r0, r1 and r3, behind at r2. The reversal r0 -> r2 (and r1 -> r2,
    r2 -> r3) is named; only adjacent and first-last pairs would have missed r0 -> r2."""
    truth = {"a": law(2.0, 1.5, 0.3), "b": law(2.1, 1.5, 0.3)}
    rungs = ladder(truth, n_seeds=4, sigma=0.002, seed=6)
    r2 = rungs[2].archs
    r2["a"].losses, r2["b"].losses = r2["b"].losses, r2["a"].losses
    st = analyse_ladder(rungs, n_draws=200)
    found = {(r.rung_a, r.rung_b, r.kind) for r in st.reversals}
    assert ("r0", "r2", "other") in found and ("r1", "r2", "adjacent") in found and ("r2", "r3", "adjacent") in found
    assert not any(r.rung_a == "r0" and r.rung_b == "r3" for r in st.reversals)  # the same order at both ends
    assert "from r0 to r2" in "\n".join(ladder_lines(st))


def test_the_profile_solver_agrees_with_curve_fit():
    x = np.array([1.0, 4.0, 16.0, 64.0, 256.0])
    y = 2.0 + 1.5 * x ** -0.3 + np.array([0.004, -0.003, 0.002, -0.004, 0.001])
    e, b, a, sse = (float(v[0]) for v in profile_fit(x, y[None, :]))
    f = fit_power_law("a", x * 1e5, y)
    assert (e, b, a) == pytest.approx((f.E, f.B, f.alpha), rel=0.02)
    assert sse == pytest.approx(f.rmse ** 2 * 5, abs=1e-6)


@pytest.mark.parametrize("n_rungs", [3, 4])
def test_fewer_than_five_rungs_give_no_fit_and_say_why(n_rungs):
    """Three or four rungs leave fewer than 2 residual degrees of freedom for 3 parameters: no fit (it
    used to be fitted, exactly determined at three), and the report says why."""
    truth = {"a": law(2.0, 1.5, 0.3)}
    st = analyse_ladder(ladder(truth, sizes=SIZES[:n_rungs], n_seeds=3), target=2e6, n_draws=200)
    f = st.fits["a"]
    assert not f.ok and f.verdict == "no fit" and f.reason.startswith(f"{n_rungs} rung(s) with a successful run")
    assert "need 5" in f.reason and "2 residual degrees of freedom" in f.reason
    text = "\n".join(ladder_lines(st))
    assert "**No power law is fitted**" in text and f"at most {n_rungs}" in text
    assert st.extrapolation.projections == [] and st.extrapolation.left_out["a"].startswith("no fit:")
    assert "nothing is extrapolated" in text


def test_too_few_rungs_or_a_rising_loss_give_no_fit_and_say_why():
    f = fit_power_law("a", [1e5, 1e6], [3.0, 2.5])
    assert not f.ok and "need 5" in f.reason
    f = fit_power_law("a", [1e5, 1e6, 1e7, 1e8, 1e9], [2.5, 2.7, 2.9, 3.0, 3.1])
    assert not f.ok and "does not fall" in f.reason


def test_crossing_curves_give_the_warning():
    truth = {"fast": law(1.5, 2.0, 0.25), "slow": law(2.0, 1.0, 0.5)}  # slow is better up to ~1.4e7, then fast
    rungs = ladder(truth, sizes=SIZES5, n_seeds=5, sigma=0.002, seed=4)
    st = analyse_ladder(rungs, target=2.5e7, n_draws=500)
    x = st.extrapolation
    assert st.fits["fast"].verdict == st.fits["slow"].verdict == "passes"
    assert st.orders["r4"][0] == "slow" and x.order[0] == "fast"
    assert len(x.crossings) == 1
    c = x.crossings[0]
    assert {c.a, c.b} == {"fast", "slow"} and 6.4e6 < c.at < 2.5e7 and c.p_cross > 0.9
    text = "\n".join(ladder_lines(st))
    assert "**Warning**: the fitted curves of `fast` and `slow` cross" in text
    near = analyse_ladder(rungs, target=8e6, n_draws=200).extrapolation
    assert near.crossings == [] and near.order[0] == "slow"


def test_curves_whose_draws_cross_often_give_the_warning_though_the_fits_do_not_cross():
    """Parallel laws 0.02 apart: with little noise no warning; with more, the fitted curves still do
    not cross before N*, but more than 10% of the draws' curves do, and that is warned of. (Each mean is
    drawn from its own t with n - 1 df, heavy-tailed at 3 seeds: "little noise" is a seed SD of 0.003.)"""
    truth = {"a": law(2.0, 1.5, 0.3), "b": law(2.02, 1.5, 0.3)}
    quiet = analyse_ladder(ladder(truth, sizes=SIZES5, n_seeds=3, sigma=0.003, seed=4), target=2.5e7, n_draws=500)
    assert quiet.extrapolation.crossings == [] and quiet.extrapolation.order == ["a", "b"]
    noisy = analyse_ladder(ladder(truth, sizes=SIZES5, n_seeds=3, sigma=0.01, seed=4), target=2.5e7, n_draws=500)
    assert noisy.extrapolation.order == ["a", "b"]
    (c,) = noisy.extrapolation.crossings
    assert c.at is None and c.p_cross > 0.1 and {c.a, c.b} == {"a", "b"}
    text = "\n".join(ladder_lines(noisy))
    assert f"do not cross before N*, but the curves of {c.p_cross:.1%} of the draws do" in text


def test_extrapolation_gives_intervals_and_p_best():
    truth = {"a": law(2.0, 1.5, 0.3), "b": law(2.2, 1.5, 0.3)}
    x = analyse_ladder(ladder(truth, sizes=SIZES5), target=2.5e7, n_draws=500).extrapolation
    assert x.order == ["a", "b"] and x.p_order > 0.95 and x.refused is None
    pa = x.projections[0]
    assert pa.ci[0] <= pa.loss <= pa.ci[1] and pa.p_best > 0.95
    assert pa.loss == pytest.approx(law(2.0, 1.5, 0.3)(2.5e7), abs=0.02)


def test_each_fit_is_carried_at_most_4x_beyond_its_own_sizes():
    """Eight rungs; `short` trained at the first five only (a ladder in progress): its fit passes its check,
    but a target 4x beyond the ladder's top is 128x beyond its own largest size, so it is left out with the
    reason, while `a`, fitted over all eight, is carried; a target far below every rung is refused per fit."""
    sizes = [2.5e4 * 2 ** k for k in range(8)]
    truth = {"a": law(2.0, 1.5, 0.3), "short": law(2.1, 1.5, 0.3)}
    rungs = ladder(truth, sizes=sizes)
    for r in rungs[5:]:
        del r.archs["short"]
    st = analyse_ladder(rungs, target=4 * sizes[-1], n_draws=300)
    assert st.fits["short"].ok and st.fits["a"].ok
    x = st.extrapolation
    assert x.order == ["a"] and "its own largest fitted size (4e+05)" in x.left_out["short"]
    low = analyse_ladder(rungs, target=sizes[0] / 8, n_draws=300).extrapolation
    assert low.order == [] and all("below its own smallest fitted size" in why for why in low.left_out.values())


def test_architectures_that_failed_every_run_rank_last():
    truth = {"a": law(2.0, 1.5, 0.3), "b": law(2.1, 1.5, 0.3), "c": law(2.2, 1.5, 0.3), "d": law(1.0, 1.5, 0.3)}
    # d has the lowest loss wherever it trains, but fails every run at r2 and r3; c also fails at r3
    st = analyse_ladder(ladder(truth, failed={("d", 2): 3, ("d", 3): 5, ("c", 3): 2}), target=2e7, n_draws=300)
    assert st.orders["r0"][0] == "d" and st.orders["r2"][-1] == "d"
    assert set(st.orders["r3"][-2:]) == {"c", "d"}
    last = {p.rung: p for p in st.points["d"]}
    assert last["r3"].rank == 3 and {p.rung: p for p in st.points["c"]}["r3"].rank == 3  # they share last place
    g = st.agreement("r2", "r3")  # d failed every run at both: left out; c only at r3: its fall to last counts
    assert g.archs == ["a", "b", "c"] and g.left_out == ["d"] and g.tau == 1.0  # c was last of the three at r2 too
    g = st.agreement("r1", "r2")  # d, first at r1, failed every run at r2: a reversal that lowers agreement
    assert "d" in g.archs and g.left_out == [] and g.tau < 0.5
    assert st.agreement("r0", "r1").left_out == [] and len(st.agreement("r0", "r1").archs) == 4
    rev = next(r for r in st.reversals if (r.a, r.b, r.kind) == ("d", "a", "adjacent"))
    assert rev.at_b.by == "failures" and rev.at_b.method == "fisher" and rev.at_b.diff == 1.0
    assert st.all_failed == {"d": ["r2", "r3"], "c": ["r3"]}
    assert st.fits["d"].reason.startswith("every run failed at r2, r3; 2 rung(s)")
    assert "every run failed at r2" in st.extrapolation.left_out["d"]
    assert "c" not in st.extrapolation.order and st.extrapolation.left_out["c"].startswith("no fit: every run failed")
    text = "\n".join(ladder_lines(st))
    assert "every run failed (5/5)" in text and "**Every run of `d` failed at r2, r3.**" in text


def test_architectures_that_failed_everywhere_do_not_make_the_orders_agree():
    """Three that trained, in reversed order at r1, beside three that failed every run at both: tied
    last at both, the failures would add 9 concordant pairs and a positive tau to a reversed order."""
    truth = {"x": law(2.0, 1.5, 0.3), "y": law(2.1, 1.5, 0.3), "z": law(2.2, 1.5, 0.3)}
    rungs = ladder(truth, sizes=SIZES[:3])
    for r in rungs:
        for f in ("f1", "f2", "f3"):
            r.archs[f] = RungArch(n_diverged=2)
    r1 = rungs[1].archs  # reverse x, y, z at r1
    r1["x"].losses, r1["z"].losses = r1["z"].losses, r1["x"].losses
    st = analyse_ladder(rungs, n_draws=300)
    g = st.agreement("r0", "r1")
    assert g.archs == ["x", "y", "z"] and g.left_out == ["f1", "f2", "f3"]
    assert g.tau == -1.0 and g.rho == -1.0 and g.tau_ci[1] < 0
    assert "| **r0 → r1** | 3 | f1, f2, f3 | -1.00" in "\n".join(ladder_lines(st))


def test_a_rung_where_every_run_failed_is_flagged_wherever_it_is():
    """A failure at a middle rung is flagged too, and one at the largest of three rungs is the reason
    for the missing fit (not only "2 rungs")."""
    truth = {"a": law(2.0, 1.5, 0.3), "b": law(2.1, 1.5, 0.3), "m": law(2.2, 1.5, 0.3)}
    sizes = list(np.geomspace(2.5e4, 6.4e6, 6))  # six rungs: m fitted over the five where it trained
    st = analyse_ladder(ladder(truth, sizes=sizes, failed={("m", 1): 3, ("b", 5): 2}), target=2e7, n_draws=200)
    assert st.all_failed == {"m": ["r1"], "b": ["r5"]}
    assert st.fits["m"].ok and any("every run failed at r1" in n for n in st.fits["m"].notes)
    assert st.fits["b"].ok and st.extrapolation.left_out["b"] == "every run failed at the largest rung (r5)"
    text = "\n".join(ladder_lines(st))
    assert "**Every run of `m` failed at r1.**" in text
    assert "`m` is extrapolated from the rungs where it trained; every run failed at r1" in text
    three = analyse_ladder(ladder(truth, sizes=SIZES[:3], failed={("b", 2): 2}), target=5e6, n_draws=200)
    assert three.fits["b"].reason.startswith("every run failed at r2")
    assert three.extrapolation.left_out["b"].startswith("no fit: every run failed at r2")


def test_a_rung_from_runs_orders_as_analyse():
    rng = np.random.default_rng(5)
    runs = []
    for a, mu in {"x": 3.0, "y": 2.9, "z": 2.8}.items():
        for lr in (1e-3, 3e-3):
            for s in range(3):
                diverged = a == "z" and s == 0 and lr == 1e-3
                runs.append(Run(a, s, lr, None if diverged else mu + lr * 10 + rng.normal(0, 0.01), diverged=diverged))
    runs += [Run("w", s, 1e-3, None, diverged=True) for s in range(3)]
    rung = rung_from_runs("r0", runs, {"x": 1e5, "y": 1.1e5, "z": 1e5, "w": 1e5})
    assert rung.order() == list(analyse(runs).archs)
    assert rung.size_of("y") == 1.1e5 and rung.archs["w"].failure_rate == 1.0
    z = rung.archs["z"]
    assert z.n_failed == 0 and z.n_runs == 3  # z scored at 3e-3, where nothing failed
    assert z.n_failed_all == 1 and z.n_runs_all == 6  # but one run failed at 1e-3, and it counts over the rung
    assert z.lr == 3e-3 and z.lrs == (1e-3, 3e-3) and z.at_edge  # the larger end of two: not bracketed
    assert rung.archs["w"].n_failed_all == 3 and not rung.archs["w"].at_edge


def test_failures_at_every_learning_rate_are_reported_beside_the_chosen_ones():
    runs = []
    for a in ("p", "q"):
        for lr in (1e-3, 3e-3, 1e-2):
            for s in range(2):
                bad = lr == 1e-2 and a == "p"  # p diverges at the largest lr, never at its chosen one
                runs.append(Run(a, s, lr, None if bad else 3.0 - (a == "q") * 0.1 + abs(math.log10(lr / 3e-3)) * 0.1
                                + 0.01 * s * (1 + (a == "q")), diverged=bad))
    rungs = [rung_from_runs(f"r{k}", runs, 10.0 ** (5 + k)) for k in range(3)]
    st = analyse_ladder(rungs, n_draws=100)
    p = st.points["p"][0]
    assert (p.n_failed, p.n_runs, p.n_failed_all, p.n_runs_all) == (0, 2, 2, 6)
    assert p.lr == 3e-3 and not p.at_edge and st.at_edge == []
    assert p.failure_rate == 0.0 and p.failure_rate_all == pytest.approx(1 / 3)
    assert "failed 0/2 at its lr, 2/6 over all lrs" in "\n".join(ladder_lines(st))
    fig = ladder_plot(st)
    ys = [list(line.get_ydata()) for line in fig.axes[1].get_lines() if len(line.get_ydata()) == 3]
    assert [pytest.approx(1 / 3)] * 3 in ys  # the failure panel plots every run of the rung, not only the chosen lr


def test_reproducible_and_json_ready(tmp_path):
    truth = {"a": law(2.0, 1.5, 0.3), "b": law(2.05, 1.4, 0.28)}
    rungs = ladder(truth, sizes=SIZES5, failed={("b", 0): 2})
    one, two = (analyse_ladder(rungs, target=2e7, n_draws=300, seed=7, baselines=["b"]) for _ in range(2))
    d = one.to_dict()
    assert json.loads(json.dumps(d)) == two.to_dict()
    assert d["fits"]["a"]["status"] == "fit" and "draws" not in d["fits"]["a"]
    assert set(d["fits"]["a"]["lack_of_fit"]) >= {"F", "df_lof", "df_pe", "p_value", "passed"}
    assert d["rung_names"] == ["r0", "r1", "r2", "r3", "r4"]  # the names, as old readers read them from rungs
    assert [r["name"] for r in d["rungs"]] == d["rung_names"]
    assert [r["n_params"] for r in d["rung_info"]] == [int(n) for n in SIZES5]
    (gate,) = d["promotion"]
    assert (gate["found"], gate["baseline"]) == ("a", "b") and isinstance(gate["promoted"], bool) and gate["reason"]
    assert "slope" in gate and "slope_ci" in gate
    assert set(d["agreements"][0]["decision_accuracy"]) == {"value", "low", "high", "n_pairs"}
    assert d["agreements"][-1]["decision_accuracy"] is None  # r3 -> r4: not from the smallest rung
    # b failed every run at r0 only: it stays in that pair, last at r0
    assert d["agreements"][0]["left_out"] == [] and d["agreements"][0]["tau"] is not None
    assert d["agreements"][-1]["tau"] is not None


def test_the_ladder_plot_draws(tmp_path):
    from normsearch.report._plots import save

    truth = {"a": law(2.0, 1.5, 0.3), "b": law(2.05, 1.4, 0.28)}
    st = analyse_ladder(ladder(truth, sizes=SIZES5, failed={("b", 4): 5}), target=2e7, n_draws=200)
    fig = ladder_plot(st, labels={"a": "found-1"}, baselines=("b",))
    ax, af = fig.axes
    assert ax.get_xscale() == "log" and "found-1" in [t.get_text() for t in ax.get_legend().get_texts()]
    assert len(ax.get_lines()) >= 3  # the fits, solid and dashed, and N*
    path = save(fig, tmp_path / "ladder.png")
    assert path.stat().st_size > 1000


def test_bad_arguments_are_refused():
    rungs = ladder({"a": law(2.0, 1.5, 0.3)}, sizes=SIZES[:2])
    with pytest.raises(ValueError):
        analyse_ladder(rungs[:1])
    with pytest.raises(ValueError):
        analyse_ladder([rungs[0], rungs[0]])
    with pytest.raises(ValueError):
        analyse_ladder(rungs, target=0.0)
    with pytest.raises(ValueError):
        analyse_ladder(rungs, n_draws=0)


def test_a_rung_with_nothing_ranked_yet_says_so_instead_of_a_size():
    # a ladder still training: its last rung has started but no architecture there has finished
    truth = {f"a{i}": law(2.0 + 0.05 * i, 1.5, 0.3) for i in range(3)}
    st = analyse_ladder(ladder(truth, sizes=SIZES[:3]) + [Rung("r3", {}, None)], n_draws=200)
    text = "\n".join(ladder_lines(st))
    assert "r0 (1e+05 parameters)" in text and "r3 (none ranked there yet)" in text
    assert "unknown parameters" not in text
    # with the rung's planned size recorded (ladder.json's rung_info), the plan is shown
    from normsearch.stats.rung import RungInfo

    st.rung_info = [RungInfo.of(r, n_params=n) for r, n in zip(st.rungs, SIZES[:3] + [6.4e6])]
    assert "r3 (6.4e+06 parameters planned, none ranked there yet)" in "\n".join(ladder_lines(st))
