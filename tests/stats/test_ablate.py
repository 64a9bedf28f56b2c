"""The factorial ablation's statistics (normsearch.stats.ablate, issue 27) on synthetic data whose truth
is set: one site carrying the whole gap, two sites that help only together, no effect at all (Holm's
familywise error simulated); the half fraction is resolution V or more (nothing of interest aliased);
a combination with no variance of its own is left out and named; the contrast's df is Welch's."""

import itertools
import math

import numpy as np
import pytest

from normsearch.stats.ablate import aliased, contrast, design_points, factorial, leave_one_out
from normsearch.stats.inference import adjust, compare

SEEDS = (0, 1, 2)


def _data(k: int, truth, sd, rng, fraction: str = "full", seeds=SEEDS):
    """A design of ``k`` factors, losses truth(codes) + N(0, sd(i)^2) per run: (factors, codes, samples)."""
    factors = [f"f{i}" for i in range(k)]
    codes, samples = {}, {}
    for i, p in enumerate(design_points(k, fraction)):
        label = "+".join(f for f, c in zip(factors, p) if c > 0) or "A"
        codes[label] = p
        samples[label] = {s: 3.0 + truth(p) + float(rng.normal(0.0, sd(i))) for s in seeds}
    return factors, codes, samples


def _corner(codes, sign):
    return next(x for x, c in codes.items() if all(v == sign for v in c))


def test_the_full_and_half_designs():
    for k in range(1, 7):
        full = design_points(k)
        assert len(full) == 2 ** k and len(set(full)) == 2 ** k and full[0] == (-1,) * k
        assert not aliased(full)
    for k in range(5, 10):  # resolution k >= V: no main effect or two-way interaction aliased with another
        half = design_points(k, "half")
        assert len(half) == 2 ** (k - 1) and (1,) * k in half
        assert ((-1,) * k in half) == (k % 2 == 0)  # A's corner only when k is even (trained beside it otherwise)
        assert not aliased(half)
        x = np.array([[math.prod(p[i] for i in w) for w in itertools.chain(
            itertools.combinations(range(k), 1), itertools.combinations(range(k), 2))] for p in half])
        assert np.allclose(x.T @ x, len(half) * np.eye(x.shape[1]))  # every column orthogonal to every other
    assert aliased(design_points(4, "half"))  # resolution IV: two-way interactions aliased in pairs
    assert aliased(design_points(3, "half"))  # resolution III: main effects aliased with two-way interactions


def test_one_site_carries_the_whole_gap():
    rng = np.random.default_rng(1)
    factors, codes, samples = _data(4, lambda p: 0.15 * (p[2] > 0), lambda i: 0.01 + 0.002 * (i % 5), rng)
    f = factorial(factors, codes, samples, a=_corner(codes, -1), b=_corner(codes, 1))
    assert f.gap.estimate == pytest.approx(0.15, abs=0.03)
    (sig,) = f.significant()
    assert sig.name == "f2" and sig.estimate == pytest.approx(0.15, abs=0.02) and sig.share == pytest.approx(1.0, abs=0.15)
    assert all(e.estimate is not None and abs(e.estimate) < 0.03 for e in f.effects + f.interactions if e is not sig)


def test_two_sites_that_help_only_together():
    """A gain c when f0 and f3 are both at B's level, nothing otherwise: main effects c/2 each (half the gap
    each), their interaction c/2, significant; nothing else is."""
    c = 0.2
    rng = np.random.default_rng(2)
    factors, codes, samples = _data(5, lambda p: c * (p[0] > 0 and p[3] > 0), lambda i: 0.015, rng)
    f = factorial(factors, codes, samples, a=_corner(codes, -1), b=_corner(codes, 1))
    names = {e.name for e in f.significant()}
    assert names == {"f0", "f3", "f0 x f3"}, names
    for e in f.effects[0], f.effects[3], next(e for e in f.interactions if e.name == "f0 x f3"):
        assert e.estimate == pytest.approx(c / 2, abs=0.02) and e.ci_low < c / 2 < e.ci_high
    assert f.effects[0].share + f.effects[3].share == pytest.approx(1.0, abs=0.15)


def test_the_half_fraction_recovers_the_effects():
    rng = np.random.default_rng(3)
    factors, codes, samples = _data(6, lambda p: 0.1 * (p[1] > 0) - 0.06 * (p[4] > 0), lambda i: 0.012, rng, "half")
    assert len(codes) == 32
    f = factorial(factors, codes, samples, a=_corner(codes, -1), b=_corner(codes, 1))
    assert {e.name for e in f.significant()} == {"f1", "f4"}
    assert f.effects[1].estimate == pytest.approx(0.1, abs=0.02)
    assert f.effects[4].estimate == pytest.approx(-0.06, abs=0.02)


def test_no_effect_holm_keeps_the_familywise_error():
    """200 null datasets (4 factors, 16 combinations, 3 seeds, SDs spread 10-fold over the combinations): the
    share with any significant effect or interaction under Holm stays at 5% plus noise (two binomial SEs)."""
    rng = np.random.default_rng(0)
    sds = np.geomspace(0.01, 0.1, 16)
    hits, n = 0, 200
    for _ in range(n):
        factors, codes, samples = _data(4, lambda p: 0.0, lambda i: sds[i], rng)
        hits += bool(factorial(factors, codes, samples).significant())
    assert hits / n <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / n), hits


def test_a_combination_without_variance_is_left_out_and_named():
    rng = np.random.default_rng(4)
    factors, codes, samples = _data(3, lambda p: 0.1 * (p[0] > 0), lambda i: 0.01, rng)
    lost = "f0+f1"
    samples[lost] = {0: samples[lost][0]}  # two of its runs failed
    f = factorial(factors, codes, samples, failed={lost: 2}, a="A", b="f0+f1+f2")
    assert f.unusable == [lost]
    assert all(lost in e.unused for e in f.effects + f.interactions)
    assert f.effects[0].significant and f.effects[0].estimate == pytest.approx(0.1, abs=0.03)
    cell = next(c for c in f.cells if c.label == lost)
    assert (cell.n_ok, cell.n_failed, cell.failure_rate) == (1, 2, 2 / 3)
    assert cell.failure_ci[0] < 2 / 3 < cell.failure_ci[1]
    nothing = factorial(factors, codes, {x: {} for x in codes}, a="A", b="f0+f1+f2")
    assert all(e.estimate is None and e.p_holm is None for e in nothing.effects) and nothing.gap.estimate is None


def test_the_contrast_of_two_is_welchs_test():
    rng = np.random.default_rng(5)
    samples = {"a": dict(enumerate(rng.normal(3.0, 0.02, 3))), "b": dict(enumerate(rng.normal(3.1, 0.05, 6)))}
    est, se, df, p = contrast({k: list(v.values()) for k, v in samples.items()}, {"b": 1.0, "a": -1.0})
    c = compare(samples, "b", "a")
    assert (est, se, df, p) == pytest.approx((c.diff, c.se, c.df, c.p_value))


def test_leave_one_out_is_welch_under_holm_against_a():
    rng = np.random.default_rng(6)
    samples = {x: dict(enumerate(rng.normal(m, 0.01, 3))) for x, m in
               (("A", 3.0), ("A-k", 3.1), ("A+ai", 3.0), ("B", 3.2))}
    f = leave_one_out("A", ["A-k", "A+ai"], samples, b="B")
    comps = [compare(samples, v, "A") for v in ("A-k", "A+ai")]
    adjust(comps)
    for e, c in zip(f.effects, comps):
        assert (e.estimate, e.p_holm) == pytest.approx((c.diff, c.p_holm))
        assert e.share == pytest.approx(c.diff / f.gap.estimate)
    assert [e.significant for e in f.effects] == [True, False]
