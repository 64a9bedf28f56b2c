"""normsearch.stats on synthetic studies whose truth is set here: interval coverage, Holm's familywise
error, equivalence, the seeds-needed power calculation and P(best) calibration over many simulated
studies; Wilson, outcomes, the unigram loss, the learning-rate basin, expected best of k and the
per-architecture variances (Welch) against hand or brute-force computations. Every simulation uses a
fixed numpy seed. The variance model's own checks (15-fold SDs, 3-10 seeds; the seeds-to-decide power) are
in test_variances.py."""

import gc
import itertools
import math

import numpy as np
import pytest

from normsearch.stats import (
    VARIANCE_METHOD, Run, adjust, analyse, classify_run, compare, expected_best_of_k, hurdle_order, interval, lr_basin,
    front_loading, posterior_ranks, seeds_needed, stall_margin, sweep, unigram_bits_per_byte, variance_fit, welch_df,
    wilson,
)

SIGMA = 0.03  # run-to-run noise, bits/byte, about what the committed studies show
SEED_SD = 0.015  # a seed effect shared by every architecture run with that seed


@pytest.fixture(autouse=True, scope="module")
def frozen_heap():
    """statsmodels' Holm step calls gc.collect(); with the heap frozen that stays cheap over thousands
    of simulated studies (results are unchanged)."""
    import scipy.stats  # noqa: F401  (loaded before the freeze, so that they are frozen too)
    import statsmodels.api  # noqa: F401
    from statsmodels.stats.multitest import multipletests  # noqa: F401

    gc.collect()
    gc.freeze()
    yield
    gc.unfreeze()


def simulate(rng, effects, n_seeds=3, sigma=SIGMA, seed_sd=SEED_SD, sds=None):
    """arch -> {seed: loss}: 3 + effect + seed effect + noise (per-arch noise SDs ``sds`` if given)."""
    seed_fx = rng.normal(0, seed_sd, n_seeds)
    return {a: {s: 3.0 + mu + seed_fx[s] + rng.normal(0, (sds or {}).get(a, sigma)) for s in range(n_seeds)}
            for a, mu in effects.items()}


def verdicts(samples, against, margin=0.02):
    fit = variance_fit(samples)
    comps = [compare(samples, a, b, margin) for b in against for a in samples if a != b]
    adjust(comps)
    return fit, comps


# --- single values against hand computations ---------------------------------------------------

def test_wilson_known_values():
    from statsmodels.stats.proportion import proportion_confint

    assert wilson(5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-4)  # textbook value
    assert wilson(0, 10) == pytest.approx((0.0, 0.2775), abs=1e-4)
    assert wilson(3, 3)[1] == 1.0 and wilson(3, 3)[0] == pytest.approx(0.4385, abs=1e-4)
    for k, n in [(1, 3), (2, 7), (0, 1), (15, 15), (7, 40)]:
        assert wilson(k, n) == pytest.approx(proportion_confint(k, n, method="wilson"), abs=1e-12)
    assert wilson(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError):
        wilson(4, 3)


def test_wilson_holds_the_observed_rate_at_every_n():
    # at k = 0 or k = n, rounding used to leave the bound 1e-16 inside (13 of 13 gave 0.9999999999999999), so the
    # ladder's failure plot got a negative error bar and matplotlib stopped the report
    for n in range(1, 300):
        for k in (0, 1, n - 1, n):
            lo, hi = wilson(k, n)
            assert lo <= k / n <= hi, (k, n, lo, hi)


def test_classify_run():
    assert classify_run(3.0, diverged=True) == "diverged"
    assert classify_run(None) == "diverged"
    assert classify_run(float("nan")) == "diverged"
    assert classify_run(float("inf"), init_loss=8.0) == "diverged"
    # the margin at a unigram loss of 4.31 is 2% of it, 0.0862: a run must end below 4.2238
    assert stall_margin(4.31) == pytest.approx(0.0862)
    assert stall_margin(1.0) == 0.05  # the absolute floor
    assert classify_run(4.312, init_loss=8.0, unigram_loss=4.31) == "stalled"  # at the unigram loss
    assert classify_run(4.23, init_loss=8.0, unigram_loss=4.31) == "stalled"
    assert classify_run(4.22, init_loss=8.0, unigram_loss=4.31) == "ok"
    assert classify_run(2.9, init_loss=8.0, unigram_loss=4.31) == "ok"
    assert classify_run(7.95, init_loss=8.0) == "stalled"  # never improved on init, unigram unknown
    assert classify_run(6.0, init_loss=8.0) == "ok"
    assert Run("a", 0, 1e-3, 4.3, unigram_loss=4.31).outcome == "stalled"


def test_unigram_bits_per_byte_by_hand():
    # "aab": p = 2/3, 1/3; H = -(2/3 log2 2/3 + 1/3 log2 1/3) = 0.918296 bits
    assert unigram_bits_per_byte(b"aab") == pytest.approx(0.9182958, abs=1e-6)
    assert unigram_bits_per_byte(np.frombuffer(b"abcd" * 10, np.uint8)) == pytest.approx(2.0)
    assert unigram_bits_per_byte(b"zzzz") == 0.0
    # tokens: 1 bit per token, 4 tokens encode 8 bytes -> 0.5 bits/byte
    assert unigram_bits_per_byte([7, 7, 9, 9], n_bytes=8) == pytest.approx(0.5)
    with pytest.raises(ValueError):
        unigram_bits_per_byte(b"")


def test_learning_rate_choice_and_hurdle():
    def runs(arch, lr, losses, div=()):
        return [Run(arch, s, lr, v, s in div, 8.0, 4.31) for s, v in enumerate(losses)]

    rs = (runs("a", 1e-3, [3.00, 3.02, 3.01]) + runs("a", 1e-2, [2.80, 2.82, 2.81], div={1})  # lower but fails
          + runs("b", 1e-3, [3.10, 4.30, 3.12]) + runs("b", 1e-2, [2.90, 2.91, 2.93], div={0})  # fails everywhere
          + runs("c", 1e-3, [3.05, 3.06, 3.04])
          + runs("d", 1e-3, [4.31, 4.30, None]))  # two stalls and a missing loss: nothing succeeded
    sw = sweep(rs)
    assert sw["a"].best_lr == 1e-3 and not sw["a"].fails_at_best_lr
    assert sw["a"].cells[1].n_diverged == 1 and sw["a"].cells[1].mean == pytest.approx(2.805)
    # b: both lrs lose 1 of 3; the lower mean over successes wins (1e-2: 2.92; 4.30 at 1e-3 is a stall)
    assert sw["b"].cells[0].n_stalled == 1 and sw["b"].cells[0].mean == pytest.approx(3.11)
    assert sw["b"].best_lr == 1e-2 and sw["b"].fails_at_best_lr
    assert sw["b"].failure_rate == pytest.approx(1 / 3)
    assert sw["d"].best_lr is None and sw["d"].fails_at_best_lr and sw["d"].failure_rate == 1.0
    # hurdle: failure-free a and c first by loss, then b (its 2.92 beats both, but it fails), then d
    assert hurdle_order(sw) == ["a", "c", "b", "d"]


def test_lr_basin_on_a_quadratic():
    x = np.linspace(-4, -1, 7)
    lrs = 10 ** x
    curve = dict(zip(lrs, 3.0 + 0.5 * (x + 2.5) ** 2))
    b = lr_basin(curve, tolerance=0.05)
    assert b.width == pytest.approx(2 * math.sqrt(0.05 / 0.5))
    assert math.log10(b.best_lr) == pytest.approx(-2.5) and b.best_loss == pytest.approx(3.0)
    assert not b.at_edge and b.n_points == 7
    # default tolerance: max(0.05, 2% of 3.0) = 0.06
    assert lr_basin(curve).width == pytest.approx(2 * math.sqrt(0.06 / 0.5))
    # optimum beyond the sweep: measured inside it only, and flagged
    edge = lr_basin(dict(zip(lrs, 3.0 + 0.5 * (x + 0.5) ** 2)), tolerance=0.5)
    assert edge.at_edge and edge.best_lr == pytest.approx(0.1)
    assert edge.width == pytest.approx(math.sqrt(1.25) - 0.5)  # 0.5 (x + 0.5)^2 <= 0.125 + 0.5 from x = -1.618
    assert lr_basin(dict(list(curve.items())[:2])) is None


def test_expected_best_of_k_against_enumeration():
    pool = [3.2, 2.9, 3.0, 2.9, 3.5, 3.1, 2.8]
    exp = expected_best_of_k(pool)
    for k in range(1, len(pool) + 1):
        brute = np.mean([min(c) for c in itertools.combinations(pool, k)])
        assert exp[k - 1] == pytest.approx(brute, abs=1e-12)
    assert expected_best_of_k([3.0, float("nan"), 2.0])[1] == pytest.approx(2.0 * 2 / 3 + 3.0 / 3)


def test_front_loading():
    """The earlier 'did the search help' measure, kept under its name: whether the best came early."""
    pool = [3.2, 2.9, 3.0, 3.5, 3.1, 2.8]
    ahead = front_loading(sorted(pool))  # found the best first
    assert ahead.verdict == "ahead" and ahead.k_reached_best == 1 and ahead.n_behind == 0
    assert ahead.p_random_by_then == pytest.approx(1 / 6)
    behind = front_loading(sorted(pool, reverse=True))
    assert behind.verdict == "behind" and behind.k_reached_best == 6 and behind.p_random_by_then == 1.0
    assert behind.n_behind == 5 and behind.n_ahead == 0  # level at k = 6, behind before
    assert front_loading([3.0, 2.9], pool=pool).k_reached_best is None


def test_variances_are_each_architecture_s_own_and_welch_s_by_hand():
    from scipy import stats

    rng = np.random.default_rng(1)
    samples = simulate(rng, {"a": 0.0, "b": 0.05, "c": -0.02, "d": 0.1}, n_seeds=4)
    del samples["b"][3], samples["d"][0]  # unbalanced: two failed runs left out
    samples["e"] = {0: 3.2}  # one run: no variance of its own
    fit = variance_fit(samples)
    for a in "abcd":
        v = list(samples[a].values())
        assert fit.sd[a] == pytest.approx(np.std(v, ddof=1)) and fit.n[a] == len(v)
        iv = interval(samples, a)
        half = stats.t.ppf(0.975, len(v) - 1) * np.std(v, ddof=1) / math.sqrt(len(v))
        assert (iv.ci_low, iv.ci_high, iv.method) == (pytest.approx(np.mean(v) - half), pytest.approx(np.mean(v) + half),
                                                      "per-arch")
    assert fit.sd["e"] is None and interval(samples, "e").method == "none" and compare(samples, "e", "a").method == "none"
    # the pooled within-architecture SD is kept only for the rank draws of a one-run architecture
    within = [np.var(list(samples[a].values()), ddof=1) * (len(samples[a]) - 1) for a in "abcd"]
    assert fit.within_df == 14 - 4 and fit.within_sd == pytest.approx(math.sqrt(sum(within) / (14 - 4)))
    # equal seed counts: Welch's test exactly (scipy), whatever the other architectures
    c = compare(samples, "c", "a")
    ref = stats.ttest_ind(list(samples["c"].values()), list(samples["a"].values()), equal_var=False)
    assert c.method == "welch" and c.p_value == pytest.approx(ref.pvalue) and c.df == pytest.approx(ref.df)
    # unequal seed counts: Satterthwaite's df at each variance's 70% upper confidence limit
    b, a = (np.array(list(samples[x].values())) for x in "ba")
    e = [x.var(ddof=1) * (x.size - 1) / stats.chi2.ppf(0.3, x.size - 1) / x.size for x in (b, a)]
    df = (e[0] + e[1]) ** 2 / (e[0] ** 2 / (b.size - 1) + e[1] ** 2 / (a.size - 1))
    cb = compare(samples, "b", "a")
    assert cb.df == pytest.approx(df) and cb.se == pytest.approx(math.sqrt(b.var(ddof=1) / 3 + a.var(ddof=1) / 4))
    assert welch_df(1.0, 1.0, 3, 3) == pytest.approx(6.0)  # equal df: the factor cancels (Welch's own)
    # margin_equivalent: the reach of the 90% interval, where TOST at 0.05 just passes
    t90 = stats.t.ppf(0.95, cb.df)
    assert cb.margin_equivalent == pytest.approx(max(abs(cb.diff - t90 * cb.se), abs(cb.diff + t90 * cb.se)))
    at = compare(samples, "b", "a", margin=cb.margin_equivalent)
    assert at.p_tost == pytest.approx(0.05)


def test_no_pre_test_a_comparison_rests_on_its_two_architectures_only():
    """A very noisy third architecture changes nothing in a - b: no pooled SD, no test that switches."""
    rng = np.random.default_rng(2)
    for _ in range(20):
        samples = simulate(rng, {"a": 0.0, "b": 0.0}, n_seeds=4)
        alone = compare(samples, "b", "a")
        samples["noisy"] = {s: 3.0 + rng.normal(0, 0.3) for s in range(4)}  # a tenfold SD
        with_noisy = compare(samples, "b", "a")
        assert (with_noisy.ci_low, with_noisy.ci_high, with_noisy.p_value) == (alone.ci_low, alone.ci_high,
                                                                              alone.p_value)
        fit, comps = verdicts(samples, ["a"])
        assert {c.method for c in comps} == {"welch"} and {interval(samples, x).method for x in samples} == {"per-arch"}
        assert fit.method == VARIANCE_METHOD


# --- simulated studies -------------------------------------------------------------------------

def test_intervals_cover_the_true_difference():
    rng = np.random.default_rng(3)
    effects = {"a": 0.0, "b": 0.05, "c": -0.03, "d": 0.1, "e": 0.0}
    n_sims, diff_hits, level_hits, shared = 400, 0, 0, 0
    for _ in range(n_sims):
        samples = simulate(rng, effects, seed_sd=0.0)
        c = compare(samples, "b", "a")
        diff_hits += c.ci_low <= 0.05 <= c.ci_high
        iv = interval(samples, "d")
        level_hits += iv.ci_low <= 3.1 <= iv.ci_high
        c = compare(simulate(rng, effects), "b", "a")  # a seed effect shared by the architectures
        shared += c.ci_low <= 0.05 <= c.ci_high
    assert 0.93 <= diff_hits / n_sims <= 0.98  # Welch at 3 seeds and equal SDs: about 0.965
    assert 0.92 <= level_hits / n_sims <= 0.98
    # runs are treated as independent: a shared seed effect, which cancels in the difference, is counted
    # in each architecture's SD, so the interval is wider than it needs to be, never narrower
    assert shared / n_sims >= diff_hits / n_sims - 0.02


def test_welch_intervals_cover_under_unequal_variances():
    rng = np.random.default_rng(4)
    n_sims, hits = 300, 0
    for _ in range(n_sims):
        samples = simulate(rng, {"a": 0.0, "b": 0.04, "c": 0.0}, n_seeds=6, sds={"a": 0.01, "b": 0.08}, seed_sd=0.0)
        c = compare(samples, "b", "a")
        assert c.method == "welch"  # always: no test decides it
        hits += c.ci_low <= 0.04 <= c.ci_high
    assert 0.92 <= hits / n_sims <= 0.98


def test_holm_keeps_the_familywise_error():
    rng = np.random.default_rng(5)
    effects = {a: 0.0 for a in "abcdefgh"}
    n_sims, any_holm, any_raw = 400, 0, 0
    for _ in range(n_sims):
        _, comps = verdicts(simulate(rng, effects, seed_sd=0.0), ["a", "b"])  # independent runs, as modelled
        assert len(comps) == 14  # 7 against a, 7 against b (a vs b twice: the helper does not dedupe)
        any_holm += any(c.verdict in ("better", "worse") for c in comps)
        any_raw += any(c.p_value < 0.05 for c in comps)
    assert any_holm / n_sims <= 0.05 + 0.02  # ~1.8 binomial SE over 0.05
    assert any_raw / n_sims > 0.25  # without the correction the family errs often


def test_equivalent_only_inside_the_margin():
    """TOST's properties, on runs without a shared seed effect (the model treats runs as independent: a
    shared seed effect would only cost power here)."""
    rng = np.random.default_rng(6)

    def rate(true_diff, n_sims=200, n_seeds=10, sigma=0.01):
        out = [verdicts(simulate(rng, {"a": 0.0, "b": true_diff}, n_seeds, sigma, seed_sd=0.0), ["a"])[1][0].verdict
               for _ in range(n_sims)]
        return out.count("equivalent") / n_sims

    assert rate(0.0) > 0.9  # inside the margin, with power: found
    assert rate(0.02) <= 0.05 + 0.03  # on the margin: TOST's error is at most alpha
    assert rate(0.03) <= 0.02  # outside: rarely
    # truths spread over [-0.05, 0.05]: when "equivalent" is said the truth is inside the margin
    said, inside = 0, 0
    for _ in range(300):
        d = rng.uniform(-0.05, 0.05)
        if verdicts(simulate(rng, {"a": 0.0, "b": d}, 10, 0.01, seed_sd=0.0), ["a"])[1][0].verdict == "equivalent":
            said += 1
            inside += abs(d) < 0.02
    assert said >= 30 and inside / said >= 0.95


def test_seeds_needed_resolves_an_undecided_comparison():
    rng = np.random.default_rng(7)
    samples = simulate(rng, {"a": 0.0, "b": 0.0}, n_seeds=3)
    comp = verdicts(samples, ["a"])[1][0]
    assert comp.verdict == "undecided" and comp.seeds_needed is not None
    # planned for the observed difference shrunk toward 0 by diff^2 / (diff^2 + se^2)
    shrink = comp.diff ** 2 / (comp.diff ** 2 + comp.se ** 2)
    assert comp.diff_planned == pytest.approx(comp.diff * shrink) and abs(comp.diff_planned) < abs(comp.diff)
    assert comp.seeds_needed == seeds_needed(comp.diff_planned, comp.sd_arch, comp.sd_against, 3, 3, 0.02, 0.05)
    # more seeds on top of those run: with equal counts, the fresh-study count less those already run
    for d in (0.0, 0.03, 0.08):
        fresh = seeds_needed(d, SIGMA, SIGMA)
        assert seeds_needed(d, SIGMA, SIGMA, 3, 3) == max(1, fresh - 3)
    # a real difference is resolved by the difference test: fewer seeds for a larger gap; a stricter
    # level or a noisier architecture needs more (the power check is in test_variances.py)
    assert seeds_needed(0.1, SIGMA, SIGMA) < seeds_needed(0.05, SIGMA, SIGMA) < 20
    assert seeds_needed(0.05, SIGMA, SIGMA, alpha=0.005) > seeds_needed(0.05, SIGMA, SIGMA)
    assert seeds_needed(0.05, SIGMA, 3 * SIGMA) > seeds_needed(0.05, SIGMA, SIGMA)
    assert seeds_needed(0.0, 1.0, 1.0, margin=0.001) is None  # beyond MAX_SEEDS


def test_p_best_one_clear_winner():
    """Each architecture is drawn from its own t with n - 1 df: at 3 seeds (2 df, heavy tails) a winner
    six SEs ahead gets P(best) > 0.9 in about three studies of four; from 4 seeds in nine of ten."""
    rng = np.random.default_rng(8)
    effects = {"a": 0.0, "b": 0.0, "c": 0.02, "d": 0.05, "w": -0.1}
    high = {3: 0, 4: 0}
    for n_seeds in high:
        for _ in range(150):
            samples = simulate(rng, effects, n_seeds, seed_sd=0.0)
            r = posterior_ranks(samples, variance_fit(samples), n_draws=2000, seed=1)
            high[n_seeds] += r.p_best["w"] > 0.9
            assert r.rank_low["w"] == 1
    assert high[4] / 150 >= 0.9 and high[3] / 150 >= 0.65


def test_p_best_no_winner_spreads_and_matches_the_argmax_frequency():
    rng = np.random.default_rng(9)
    archs = "abcd"
    p_sum, argmax, lows = np.zeros(4), np.zeros(4), []
    for _ in range(200):
        samples = simulate(rng, {a: 0.0 for a in archs})
        r = posterior_ranks(samples, variance_fit(samples), n_draws=2000, seed=2)
        p_sum += [r.p_best[a] for a in archs]
        argmax[np.argmin([np.mean(list(samples[a].values())) for a in archs])] += 1
        lows += [r.rank_low[a] for a in archs]
    assert np.mean(np.array(lows) == 1) > 0.8  # rank intervals mostly include first place
    assert np.allclose(p_sum / 200, 0.25, atol=0.05)
    assert np.allclose(p_sum / 200, argmax / 200, atol=0.07)


def test_p_best_is_calibrated_when_truths_vary():
    """Truths drawn per study; among architectures given P(best) in a bin, the share that truly is best
    matches the bin's mean P(best). Without a shared seed effect: the draws treat runs as independent, and a
    seed effect shared by every architecture (which cancels in the order) would make them underconfident."""
    rng = np.random.default_rng(10)
    forecasts, truths = [], []
    for _ in range(300):
        effects = dict(zip("abcde", rng.normal(0, 0.04, 5)))
        samples = simulate(rng, effects, seed_sd=0.0)
        r = posterior_ranks(samples, variance_fit(samples), n_draws=1000, seed=3)
        best = min(effects, key=effects.get)
        forecasts += [r.p_best[a] for a in effects]
        truths += [a == best for a in effects]
    f, t = np.array(forecasts), np.array(truths)
    for lo, hi in [(0.0, 0.1), (0.1, 0.5), (0.5, 0.9), (0.9, 1.01)]:
        m = (f >= lo) & (f < hi)
        assert m.sum() >= 30, (lo, hi)
        assert abs(f[m].mean() - t[m].mean()) < 0.1, (lo, hi, f[m].mean(), t[m].mean())


def test_analyse_a_study_with_failures():
    rng = np.random.default_rng(11)
    true = {"pre_ln": 0.0, "peri_ln": -0.02, "good": -0.12, "flaky": -0.2, "dead": 0.0}
    runs = []
    for arch, mu in true.items():
        for lr in (1e-3, 3e-3, 1e-2):
            for s in range(3):
                loss = 3.0 + mu + 0.4 * (math.log10(lr) + 2.5) ** 2 + rng.normal(0, 0.02)
                diverged = arch == "flaky" and s == 2  # fails at every lr, though best when it trains
                if arch == "dead":
                    loss = 4.31 + rng.normal(0, 0.003)  # stalls at the unigram loss
                runs.append(Run(arch, s, lr, None if diverged else loss, diverged, 8.0, 4.31))
    st = analyse(runs, against=["pre_ln", "peri_ln"], n_draws=2000)
    assert list(st.archs) == ["good", "peri_ln", "pre_ln", "flaky", "dead"]
    flaky, dead, good = st.archs["flaky"], st.archs["dead"], st.archs["good"]
    assert flaky.fails_at_best_lr and flaky.n_failed == 1 and flaky.failure_rate == pytest.approx(1 / 3)
    assert flaky.interval.n == 2  # the diverged run is not in its mean
    assert (flaky.failure_ci_low, flaky.failure_ci_high) == pytest.approx(wilson(1, 3))
    assert flaky.rank_low == 4 and flaky.p_best == 0.0  # below every failure-free architecture
    assert dead.best_lr is None and dead.interval.mean is None and dead.rank_low == dead.rank_high == 5
    assert good.p_best > 0.9 and good.rank_low == 1 and good.basin is not None
    assert not good.basin.at_edge and 0.3 < good.basin.width < 1.0  # 2 sqrt(0.05 / 0.4) = 0.71
    assert st.variance_method == VARIANCE_METHOD and st.fit.within_df > 0
    pairs = [(c.arch, c.against) for c in st.comparisons]
    assert ("peri_ln", "pre_ln") in pairs and ("pre_ln", "peri_ln") not in pairs
    assert ("dead", "pre_ln") in pairs and len(pairs) == 7
    vs = {(c.arch, c.against): c for c in st.comparisons}
    assert vs["good", "pre_ln"].verdict == "better" and vs["good", "pre_ln"].p_improve > 0.99
    assert vs["dead", "pre_ln"].method == "none" and vs["dead", "pre_ln"].verdict == "undecided"
    assert all(c.p_holm >= c.p_value for c in st.comparisons if c.p_value is not None)
    assert all(c.verdict in ("better", "worse", "equivalent", "undecided") for c in st.comparisons)


def test_analyse_edge_cases():
    one_seed = analyse([Run(a, 0, 1e-3, 3.0 + i / 10, False, 8.0, 4.31) for i, a in enumerate("abc")], against=["a"])
    assert one_seed.fit is None and one_seed.variance_method.startswith("per-architecture")
    assert [x.p_best for x in one_seed.archs.values()] == [None] * 3  # no noise estimate: no P(best)
    assert {c.method for c in one_seed.comparisons} == {"none"}
    assert all(c.verdict == "undecided" and c.seeds_needed is None for c in one_seed.comparisons)
    all_failed = analyse([Run(a, s, 1e-3, None, True) for a in "ab" for s in range(3)], against=["a"])
    assert [x.failure_ci_low for x in all_failed.archs.values()] == pytest.approx([wilson(3, 3)[0]] * 2)
    assert [x.p_best for x in all_failed.archs.values()] == [0.0, 0.0]
    alone = analyse([Run("a", s, 1e-3, 3.0 + s / 100) for s in range(3)], against=["missing"])
    assert alone.archs["a"].p_best == 1.0 and alone.comparisons == []
