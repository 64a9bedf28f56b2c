"""Across recipe variants (normsearch.stats.robustness): the random-effects mean, the trend with
training length and the per-contrast summary, on data whose truth is set here."""

import math

import numpy as np
import pytest

from normsearch.stats.robustness import gap_trend, random_effects, summarise
from normsearch.stats.rung import Rung, RungArch


def test_random_effects_with_equal_errors_is_the_anova_estimate_and_hartung_knapp():
    """With equal sampling variances REML's tau^2 is the ANOVA one, var(y) - v, the mean is the plain
    mean, and the Hartung-Knapp interval is the one-sample t interval of the gaps."""
    from scipy import stats

    y = np.array([-0.10, -0.20, -0.05, -0.15, -0.30])
    p = random_effects(y, [0.02] * 5)
    assert p.mean == pytest.approx(y.mean())
    assert p.tau ** 2 == pytest.approx(y.var(ddof=1) - 0.02 ** 2, rel=1e-6)
    half = stats.t.ppf(0.975, 4) * y.std(ddof=1) / math.sqrt(5)
    assert (p.ci_low, p.ci_high) == pytest.approx((y.mean() - half, y.mean() + half), rel=1e-6)
    assert p.df == 4 and p.k == 5


def test_homogeneous_gaps_give_tau_zero_and_an_interval_no_narrower_than_fixed_effect():
    y = np.array([-0.100, -0.101, -0.099])
    se = np.array([0.05, 0.05, 0.05])
    p = random_effects(y, se)
    assert p.tau == 0.0
    fixed = 1 / math.sqrt((1 / se ** 2).sum())
    assert p.se == pytest.approx(fixed)  # the floor at 1 of the Hartung-Knapp scale
    assert random_effects([-0.1], [0.05]) is None


def test_the_interval_covers_the_true_mean_at_its_level():
    """500 sets of 7 variants with a true between-variant SD: the 95% interval covers mu about 95% of
    the time (Hartung-Knapp keeps its level with few variants, where a z interval would not)."""
    rng = np.random.default_rng(3)
    mu, tau, cover = -0.1, 0.05, 0
    for _ in range(500):
        se = rng.uniform(0.01, 0.04, 7)
        y = mu + rng.normal(0, tau, 7) + rng.normal(0, se)
        p = random_effects(y, se)
        cover += p.ci_low <= mu <= p.ci_high
    assert 0.92 <= cover / 500 <= 0.99


@pytest.mark.parametrize("diffs, verdict", [
    ([-0.20, -0.10, -0.02], "shrinks toward zero"),
    ([-0.10, -0.10, -0.10], "no clear trend"),
    ([-0.05, -0.15, -0.25], "grows"),
    ([0.20, 0.10, 0.02], "shrinks toward zero"),
])
def test_the_length_trend_says_whether_a_gap_shrinks_toward_zero(diffs, verdict):
    t = gap_trend([1, 4, 16], diffs, [0.005] * 3, [30, 30, 30])
    assert t.verdict == verdict
    assert (t.slope < 0) == (diffs[-1] < diffs[0])


def _rung(name, found, base, n=3, sd=0.01, seed=0):
    rng = np.random.default_rng(seed)
    return Rung(name, {"f": RungArch(lr=1e-2, losses={s: found + rng.normal(0, sd) for s in range(n)}),
                       "b": RungArch(lr=1e-2, losses={s: base + rng.normal(0, sd) for s in range(n)})})


def test_summarise_counts_signs_over_recipe_variants_and_reads_length_apart():
    rungs = [_rung("base", 2.0, 2.1), _rung("swiglu", 2.0, 2.05, seed=1), _rung("bpe", 2.0, 1.98, seed=2),
             Rung("shakespeare", {"f": RungArch(lr=1e-2, n_diverged=3), "b": RungArch(lr=1e-2, losses={0: 2.0})}),
             _rung("steps-4x", 1.8, 1.85, seed=3), _rung("steps-16x", 1.6, 1.62, seed=4)]
    (s,) = summarise(rungs, [("f", "b")], {"base": 1, "steps-4x": 4, "steps-16x": 16})
    assert len(s.gaps) == 6  # every variant's gap is kept
    assert s.n_estimated == 3 and s.n_failed == 1 and s.sign_holds == 2  # base, swiglu, bpe; shakespeare failed
    assert s.pooled.k == 3
    assert s.length is not None and s.length.factors == [1, 4, 16] and s.length.verdict == "shrinks toward zero"
    (failed,) = [g for g in s.gaps if g.variant == "shakespeare"]
    assert failed.verdict == "failed" and "f" in failed.failed


def test_a_variant_still_training_is_not_trained_not_failed():
    """A variant where a side has no run at all yet (the stage in progress) is neither a gap nor a failure:
    counting it as failed would report losses that never happened."""
    rungs = [_rung("base", 2.0, 2.1), Rung("no-warmup", {}), Rung("bpe", {"f": RungArch(lr=1e-2, n_diverged=3)}),
             Rung("steps-4x", {"b": RungArch(lr=1e-2, losses={0: 2.0})})]
    (s,) = summarise(rungs, [("f", "b")], {"base": 1, "steps-4x": 4})
    by = {g.variant: g for g in s.gaps}
    assert by["no-warmup"].verdict == "not trained" and "f and b" in by["no-warmup"].failed
    assert by["bpe"].verdict == "not trained" and by["bpe"].failed == "no run yet: b"
    assert by["steps-4x"].verdict == "not trained"
    assert s.n_failed == 0 and s.n_untrained == 2 and s.n_estimated == 1  # the length series is read apart
    assert s.length is None  # one length trained: no trend
