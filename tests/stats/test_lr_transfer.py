"""normsearch.stats.lr_transfer, on synthetic sweeps (no training): an optimum that stays put reads
*same*; one that moves where the first rung's choice is clearly worse at the top reads *does not
transfer*, with the cost and its interval; one that moves within the noise reads *no detectable cost*;
failures at the transferred learning rate count as a cost; a larger rung that did not train the first
rung's choice leaves it *not checked*. And the ladder's report prints the table from ladder.json's data."""

import math

import numpy as np

from normsearch.report._ladder_gate import transfer_lines
from normsearch.stats import Run, analyse_ladder, rung_from_runs
from normsearch.stats.lr_transfer import lr_transfer

LRS = (1e-3, 3e-3, 1e-2)


def rung(name, optimum, curvature=1.0, seeds=4, sigma=0.005, lrs=LRS, seed=0, fail_at=()):
    """One architecture ``a`` swept over ``lrs``: loss 3 + curvature x (log10 lr - log10 optimum)^2 plus
    noise; every run at a learning rate in ``fail_at`` diverges."""
    rng = np.random.default_rng(seed)
    runs = []
    for lr in lrs:
        for s in range(seeds):
            if lr in fail_at:
                runs.append(Run("a", s, lr, None, diverged=True))
            else:
                loss = 3.0 + curvature * (math.log10(lr) - math.log10(optimum)) ** 2 + rng.normal(0, sigma)
                runs.append(Run("a", s, lr, float(loss)))
    return rung_from_runs(name, runs, 1e5)


def test_an_optimum_that_stays_put_reads_same():
    (t,) = lr_transfer([rung("r0", 3e-3), rung("r1", 3e-3, seed=1), rung("r2", 3e-3, seed=2)])
    assert t.lrs == [3e-3, 3e-3, 3e-3] and t.shift_decades == 0.0
    assert t.verdict == "same"
    assert all(c.diff == 0.0 and not c.significant for c in t.costs)


def test_an_optimum_that_moves_a_step_with_a_clear_cost_does_not_transfer():
    (t,) = lr_transfer([rung("r0", 1e-2), rung("r1", 3e-3, seed=1), rung("r2", 1e-3, seed=2)])
    assert t.lrs == [1e-2, 3e-3, 1e-3]
    assert math.isclose(t.shift_decades, -1.0)
    assert t.verdict == "does not transfer"
    top = t.costs[-1]
    # at the top the first rung's 1e-2 sits a decade from the optimum: 1 bit/byte worse, far outside the noise
    assert top.rung == "r2" and top.lr == 1e-3 and top.trained
    assert 0.9 < top.diff < 1.1 and top.ci[0] > 0 and top.significant


def test_a_move_within_the_noise_has_no_detectable_cost():
    """A flat basin (curvature 0.001 bpb per decade squared) under noise 0.02: the choice wanders, but
    its cost at the top is not significant; the interval is printed, and the verdict is not 'same'."""
    for seed in range(20):
        rs = [rung("r0", 3e-3, curvature=1e-3, sigma=0.02, seed=seed),
              rung("r1", 3e-3, curvature=1e-3, sigma=0.02, seed=seed + 100)]
        (t,) = lr_transfer(rs)
        if t.lrs[0] != t.lrs[1]:
            break
    else:
        raise AssertionError("the noise never moved the choice")
    (c,) = t.costs
    assert not c.significant and c.ci[0] <= 0 <= c.ci[1]
    assert t.verdict == "no detectable cost"


def test_failures_at_the_transferred_lr_are_a_cost():
    (t,) = lr_transfer([rung("r0", 1e-2), rung("r1", 3e-3, seed=1, fail_at=(1e-2,))])
    (c,) = t.costs
    assert c.trained and c.failed == (4, 4) and c.failed_chosen == (0, 4) and c.diff is None
    st = analyse_ladder([rung("r0", 1e-2), rung("r1", 3e-3, seed=1, fail_at=(1e-2,))], n_draws=50)
    assert "| **failed 4/4 v 0/4** |" in "\n".join(transfer_lines(st))
    assert c.significant and t.verdict == "does not transfer"


def test_a_larger_rung_that_did_not_train_the_choice_is_not_checked():
    (t,) = lr_transfer([rung("r0", 1e-2), rung("r1", 1e-3, seed=1, lrs=(3e-4, 1e-3, 3e-3))])
    (c,) = t.costs
    assert not c.trained and t.verdict == "not checked"


def test_the_ladder_carries_the_check_into_its_json_and_report():
    st = analyse_ladder([rung("r0", 1e-2), rung("r1", 3e-3, seed=1), rung("r2", 1e-3, seed=2)], n_draws=200)
    (t,) = st.lr_transfer
    assert t.verdict == "does not transfer"
    d = st.to_dict()["lr_transfer"][0]
    assert d["arch"] == "a" and d["verdict"] == "does not transfer" and d["lrs"] == [1e-2, 3e-3, 1e-3]
    text = "\n".join(transfer_lines(st, {"a": "arch-a"}))
    assert "### Does the learning rate transfer?" in text
    row = next(line for line in text.splitlines() if line.startswith("| arch-a"))
    assert "0.01, 0.003, 0.001" in row and "-1.00" in row and row.endswith("| does not transfer |")
    assert row.count("**") == 4  # both larger rungs' costs in bold
