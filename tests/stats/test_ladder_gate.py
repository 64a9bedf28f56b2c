"""normsearch.stats.gate, the promotion gate, on synthetic ladders built rung by rung (no training):
a steady gain is promoted; a true gain that shrinks to zero with size is not, and says so with its
slope; one that loses at one rung is not; one with more failures near its optimum than the baseline
is not (failures further away do not count); an untested rung and a gain short of Holm are not
promoted either, each with its reason. Fixed numpy seeds throughout."""

import numpy as np
import pytest

from normsearch.report._ladder_gate import gate_lines
from normsearch.stats import LrCell, Run, RungArch, analyse_ladder, rung_from_runs
from normsearch.stats.gate import promotion_gates
from normsearch.stats.ladder import Rung
from normsearch.stats.rung import mean_draws

SIZES = [1e5, 4e5, 1.6e6, 6.4e6]


def base_law(n):
    return 2.0 + 1.5 * (n / 1e5) ** -0.3


def rungs_for(gaps, n_seeds=6, sigma=0.004, seed=0, cells=None):
    """Two architectures, ``found`` = ``base`` + gaps[k] at rung k; ``cells``: rung index -> {arch: the
    cells trained there besides what the losses say} (the failures around the chosen lr)."""
    rng = np.random.default_rng(seed)
    out = []
    for k, (n, g) in enumerate(zip(SIZES, gaps)):
        archs = {}
        for a, shift in (("base", 0.0), ("found", g)):
            losses = {s: float(base_law(n) + shift + rng.normal(0, sigma)) for s in range(n_seeds)}
            extra = (cells or {}).get(k, {}).get(a, ())
            archs[a] = RungArch(lr=1e-3, losses=losses,
                                cells=(LrCell(lr=1e-3, losses=losses), *extra) if extra else ())
        out.append(Rung(f"r{k}", archs, n))
    return out


def the_gate(rungs, n_draws=2000):
    st = analyse_ladder(rungs, n_draws=n_draws, baselines=["base"])
    (g,) = st.promotion
    assert (g.found, g.baseline) == ("found", "base")
    return st, g


def test_a_steady_gain_is_promoted():
    st, g = the_gate(rungs_for([-0.05] * 4))
    assert g.promoted and g.better and g.stable and g.holds and g.shrinks is False and g.reasons == []
    assert g.p_holm < 1e-4 and g.slope_ci[0] < 0 < g.slope_ci[1]
    assert all(r.gap == pytest.approx(-0.05, abs=0.01) for r in g.rungs)
    assert g.hold_size == pytest.approx(4 * SIZES[-1]) and g.hold_ci[1] < 0
    assert g.reason.startswith("better at every rung") and "the gain holds with size" in g.reason
    text = "\n".join(gate_lines(st))
    assert "| found | base | **promoted** |" in text and "**`found` over `base`: promoted**" in text


def test_a_true_gain_that_shrinks_to_zero_with_size_is_not_promoted():
    """The gap halves at every rung (-0.1 (N/N0)^-0.5): significant at every rung, and no more failures,
    but the slope of the gap over log10 N is positive with an interval clear of 0."""
    st, g = the_gate(rungs_for([-0.1 * (n / 1e5) ** -0.5 for n in SIZES]))
    assert g.better and g.stable  # (a) and (b) hold: only (c) blocks it
    assert not g.promoted and g.shrinks and not g.holds and g.slope_ci[0] > 0
    assert len(g.reasons) == 1 and g.reasons[0].startswith("the gain shrinks with size: slope +0.05")
    assert SIZES[1] < g.zero_at < 1e7  # where the fitted line of the gap reaches 0: a straight line in log N
    assert "not promoted: the gain shrinks with size" in "\n".join(gate_lines(st))


def test_a_gain_that_grows_with_size_is_promoted():
    """A slope clear of zero on the other side (the gap widens) is no reason to hold a placement back."""
    _, g = the_gate(rungs_for([-0.02, -0.04, -0.06, -0.08]))
    assert g.promoted and g.slope_ci[1] < 0 and g.shrinks is False


def test_one_that_loses_at_one_rung_is_not_promoted():
    _, g = the_gate(rungs_for([-0.05, -0.05, +0.03, -0.05]))
    assert not g.promoted and not g.better and g.stable
    assert any(r.startswith("not ahead at every rung: a higher mean loss at r2 (+0.03") for r in g.reasons)
    assert g.p_every > 0.99  # its one-sided p at r2


def test_every_criterion_that_fails_is_named_even_with_a_rung_missing():
    """Behind at every rung it trained, and not trained at the top rung (a ladder in progress): the
    verdict named the missing rung alone (the robustness ladder's t6 over HybridNorm read so while it
    was behind at three rungs and its gap's line at 4x the top was not a gain)."""
    rungs = rungs_for([+0.03] * 4)
    del rungs[-1].archs["found"]
    _, g = the_gate(rungs)
    assert not g.promoted and not g.holds
    assert g.reasons[0] == "not trained at every rung (not at r3)"
    assert any(r.startswith("not ahead at every rung: a higher mean loss at r0 (+0.0") and "at r2 (+0.0" in r
               for r in g.reasons), g.reasons
    assert any(r.startswith("no gain over the rungs on average: the gap's line at 4x the largest rung")
               for r in g.reasons), g.reasons


def test_more_failures_near_its_optimum_than_the_baseline_is_not_promoted():
    """Both chosen at 1e-3 and never failing there; at 2e-3 (within 2x) the found placement failed 2 of
    6 runs, the baseline none: (b) fails at that rung alone, with the counts."""
    near = {2: {"found": (LrCell(lr=2e-3, n_diverged=2, losses={s: 2.5 for s in range(4)}),),
                "base": (LrCell(lr=2e-3, losses={s: 2.5 for s in range(6)}),)}}
    _, g = the_gate(rungs_for([-0.05] * 4, cells=near))
    assert g.better and not g.stable and not g.promoted
    (r2,) = [r for r in g.rungs if r.rung == "r2"]
    assert (r2.found_failed, r2.found_runs, r2.base_failed, r2.base_runs) == (2, 12, 0, 12)
    assert r2.found_lrs == (1e-3, 2e-3)
    assert g.reasons == ["less stable near its optimum: more failed runs within 2x of its own learning rate (and at "
                         "its nearest trained neighbours) than the baseline near its own, at r2 (2/12 against 0/12)"]


def test_failures_further_than_2x_from_the_chosen_lr_do_not_block():
    ok = {s: 3.0 for s in range(6)}
    far = {2: {"found": (LrCell(lr=2e-3, losses=ok), LrCell(lr=1e-2, n_diverged=6))}}
    _, g = the_gate(rungs_for([-0.05] * 4, cells=far))
    assert g.promoted and g.stable
    assert [(r.found_failed, r.found_runs) for r in g.rungs][2] == (0, 12)


def test_a_coarse_sweep_keeps_the_nearest_neighbour_in_the_window():
    """A sweep whose points are more than 2x apart would leave the chosen lr alone in the window: the
    nearest trained lr on each side is always in, so failures one step above the optimum block."""
    coarse = {2: {"found": (LrCell(lr=3.16e-3, n_diverged=3, losses={s: 3.0 for s in range(3)}),
                            LrCell(lr=1e-2, n_diverged=6))}}
    _, g = the_gate(rungs_for([-0.05] * 4, cells=coarse))
    assert not g.promoted and not g.stable
    assert [(r.found_failed, r.found_runs) for r in g.rungs][2] == (3, 12)


def test_the_window_from_runs_uses_the_sweep_and_its_chosen_variant():
    """rung_from_runs keeps every cell: the window around the chosen lr counts a failure at 2x, not at
    4x, and not in another variant (another init is another recipe)."""
    runs = [Run("a", s, 1e-3, 3.0 + 0.01 * s) for s in range(3)]
    runs += [Run("a", s, 2e-3, None if s == 0 else 3.1, diverged=s == 0) for s in range(3)]
    runs += [Run("a", s, 4e-3, None, diverged=True) for s in range(3)]
    runs += [Run("a", s, 1e-3, None, diverged=True, variant="init=0.5") for s in range(3)]
    ra = rung_from_runs("r0", runs, 1e5).archs["a"]
    assert ra.lr == 1e-3 and ra.variant == ""
    assert ra.window() == (1, 6, (1e-3, 2e-3))
    assert ra.window(4.0) == (4, 9, (1e-3, 2e-3, 4e-3))


def test_an_untested_rung_or_a_gain_short_of_holm_is_not_promoted():
    one_seed = rungs_for([-0.05] * 4)
    one_seed[1].archs["found"].losses = {0: one_seed[1].archs["found"].losses[0]}
    one_seed[1].archs["base"].losses = {0: one_seed[1].archs["base"].losses[0]}
    _, g = the_gate(one_seed)
    assert not g.promoted and g.p_every is None and g.reasons[0] == "untested at r1 (too few successful runs)"
    _, g = the_gate(rungs_for([-0.004] * 4, n_seeds=3, sigma=0.01, seed=1))
    assert not g.promoted and not g.better
    assert g.reasons[0].startswith("ahead at every rung, but not significantly") or \
        g.reasons[0].startswith("not ahead at every rung")


def test_holm_runs_over_every_pair_and_a_missing_rung_blocks():
    rungs = rungs_for([-0.05] * 4)
    for r in rungs:
        r.archs["other"] = RungArch(lr=1e-3, losses={s: v + 0.01 for s, v in r.archs["base"].losses.items()})
    del rungs[3].archs["other"]
    draws = mean_draws(rungs, 500, 0)
    gates = promotion_gates(rungs, ["found"], ["base", "other"], draws)
    assert [(g.found, g.baseline) for g in gates] == [("found", "base"), ("found", "other")]
    ok, missing = gates
    assert ok.p_holm == pytest.approx(ok.p_every)  # the only pair tested: Holm's step is x1
    assert missing.p_every is None and not missing.promoted
    assert missing.reason.startswith("not trained at every rung (not at r3)")


def test_a_failed_rung_is_behind_on_the_hurdle():
    rungs = rungs_for([-0.05] * 4)
    kept = dict(list(rungs[2].archs["found"].losses.items())[:4])
    rungs[2].archs["found"] = RungArch(lr=1e-3, n_diverged=2, losses=kept)
    _, g = the_gate(rungs)
    assert not g.promoted and g.rungs[2].diff.by == "failures"
    assert any("more failures at r2" in r for r in g.reasons)


def test_a_gain_reaching_zero_just_past_the_ladder_is_not_promoted_at_the_noise_of_a_real_ladder():
    """3 rungs, 3 seeds, seed noise 0.01, a true gap of -0.09, -0.06, -0.03 (zero one step past the top
    rung): the slope's interval is too wide to show the shrinking in most such ladders, and that is the
    point: the gate asks the found placement to show that its gain holds to 4x the top rung, where the true
    gap is 0, so few of 40 such ladders are promoted (the rule that only blocked a significant shrinking
    promoted 14 of them)."""
    sizes = [1e5, 4e5, 1.6e6]
    promoted, reasons = 0, set()
    for seed in range(40):
        rungs = rungs_for([-0.09, -0.06, -0.03], n_seeds=3, sigma=0.01, seed=seed)[:3]
        for r, n in zip(rungs, sizes):
            r.size = n
        _, g = the_gate(rungs, n_draws=1000)
        promoted += g.promoted
        reasons |= {r.split(":")[0] for r in g.reasons}
    assert promoted <= 4  # the projection's one-sided level is 2.5%: 2 of these 40 pass (the old rule passed 14)
    assert "shrinkage toward zero not excluded" in reasons


def test_a_gate_without_a_slope_is_not_promoted_and_says_why():
    """No size at a rung, or no draws: the trend is unknown, so that the gain holds is not shown."""
    rungs = rungs_for([-0.06, -0.03, -0.01, -0.005])
    rungs[1].size = None
    _, g = the_gate(rungs)
    assert not g.promoted and g.slope is None and "a rung has no size" in g.slope_note
    assert any(r.startswith("the gap's trend with size was not estimated (a rung has no size)") for r in g.reasons)
    (g,) = promotion_gates(rungs_for([-0.05] * 4), ["found"], ["base"], draws=None)
    assert not g.promoted and g.better and any("no interval (no draws)" in r for r in g.reasons)


def test_fewer_failures_than_the_baseline_never_count_against_a_found_placement():
    """0.1 lower at every rung and never failing, against a baseline that stalled once at r1: Fisher's test on
    0/6 against 1/7 (p 0.54) would block it; fewer failures are judged on the loss of the successful runs."""
    rungs = rungs_for([-0.1] * 4)
    rungs[1].archs["base"] = RungArch(lr=1e-3, n_diverged=1, losses=rungs[1].archs["base"].losses)
    _, g = the_gate(rungs)
    assert g.rungs[1].diff.by == "loss" and g.rungs[1].p_one_sided < 1e-6
    assert g.promoted, g.reason
    rungs[1].archs["found"] = RungArch(lr=1e-3, n_diverged=2, losses=rungs[1].archs["found"].losses)
    _, g = the_gate(rungs)  # more failures than the baseline: behind on the hurdle, as before
    assert not g.promoted and g.rungs[1].diff.by == "failures"


def test_holm_over_two_tested_pairs_changes_a_verdict(monkeypatch):
    """Two tested pairs with one-sided p 0.03 and 0.30: alone, 0.03 is better at 0.05; beside the other pair
    Holm multiplies the smaller by 2 (0.06) and it is not, and says so."""
    from types import SimpleNamespace

    import normsearch.stats.gate as G

    def fake(rungs, f, b, *a, **k):
        ahead = [G.GateRung("r0", 1e5, SimpleNamespace(diff=-0.05), 0.0)]
        return G.Gate(f, b, False, "", p_every={"x": 0.03, "y": 0.30}[f], stable=True, holds=True, rungs=ahead,
                      slope=0.0, slope_ci=(-0.01, 0.01), hold_size=4e5, hold_gap=-0.05, hold_ci=(-0.06, -0.04))

    monkeypatch.setattr(G, "gate", fake)
    present = [Rung("r0", {"x": RungArch(), "y": RungArch(), "base": RungArch()}, 1e5)]
    (alone,) = G.promotion_gates(present, ["x"], ["base"])
    assert alone.p_holm == pytest.approx(0.03) and alone.better
    x, y = G.promotion_gates(present, ["x", "y"], ["base"])
    assert x.p_holm == pytest.approx(0.06) and y.p_holm == pytest.approx(0.30)
    assert not x.better and not x.promoted and x.reasons[0].startswith("ahead at every rung, but not significantly")
