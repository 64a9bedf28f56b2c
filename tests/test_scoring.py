"""normsearch.scoring: how an architecture's runs become the score the sampler sees, by the one rule
that chooses a cell everywhere (normsearch.stats.outcomes.sweep); a failed run never enters a mean."""

import math

import json
from pathlib import Path

import pytest

from normsearch.records import ArchRecord, RunResult, parse_run_key, run_stem
from normsearch.scoring import Score, score_runs

INIT = 5.0
V1_RUNS = Path(__file__).resolve().parent / "fixtures" / "study_v1" / "results" / "v1" / "runs"


def run(seed, lr, value, diverged=False, tokens_per_s=100.0, n_params=1000) -> RunResult:
    return RunResult(arch_id="a", label="t0", placement={}, n_layers=2, seed=seed, lr=lr,
                     value=None if diverged else value, diverged=diverged, diverged_step=7 if diverged else None,
                     curve=[{"step": 0, "val_bpb": INIT}, {"step": 10, "val_bpb": value if value is not None else INIT}],
                     tokens_per_s=tokens_per_s, n_params=n_params)


def test_no_runs_is_an_error():
    with pytest.raises(ValueError, match="no runs"):
        score_runs([])


def test_mean_objective_is_the_mean_over_seeds_at_the_best_lr():
    runs = [run(0, 1e-3, 2.4), run(1, 1e-3, 2.6), run(0, 3e-3, 2.0), run(1, 3e-3, 2.2)]
    s = score_runs(runs)
    assert s.best_lr == 3e-3
    assert s.per_lr == pytest.approx({1e-3: 2.5, 3e-3: 2.1})
    assert s.value == s.score_mean == pytest.approx(2.1)
    assert s.robust == pytest.approx(2.3) and s.sensitivity == pytest.approx(0.2)
    assert s.seeds_at_best == pytest.approx({0: 2.0, 1: 2.2})
    assert (s.n_runs, s.n_diverged, s.n_params) == (4, 0, 1000)
    assert list(s.per_lr) == sorted(s.per_lr)  # learning rates in order


def test_robust_objective_is_the_mean_over_learning_rates():
    runs = [run(0, 1e-3, 2.4), run(1, 1e-3, 2.6), run(0, 3e-3, 2.0), run(1, 3e-3, 2.2)]
    s = score_runs(runs, objective="robust")
    assert s.value == s.robust == pytest.approx(2.3)
    assert s.score_mean == pytest.approx(2.1) and s.best_lr == 3e-3  # the same best lr either way
    assert s.value == pytest.approx(s.score_mean + s.sensitivity)


def test_a_failed_run_enters_no_mean_and_its_lr_is_not_chosen():
    # at 1e-2 one seed reaches 1.0 and the other diverges; at 1e-3 one 0.5 and one diverges
    runs = [run(0, 1e-2, 1.0), run(1, 1e-2, None, diverged=True), run(0, 3e-3, 2.0), run(1, 3e-3, 2.2),
            run(0, 1e-3, 0.5), run(1, 1e-3, None, diverged=True)]
    s = score_runs(runs)
    assert s.per_lr == pytest.approx({1e-3: 0.5, 3e-3: 2.1, 1e-2: 1.0})  # successful runs only: no init loss
    assert s.best_lr == 3e-3 and s.score_mean == pytest.approx(2.1)  # the only lr where no seed failed
    assert s.failure_rate == 0 and s.n_diverged == 2 and s.n_runs == 6
    assert s.robust == pytest.approx((0.5 + 2.1 + 1.0) / 3)
    assert s.sensitivity == pytest.approx(s.robust - 0.5)


def test_a_stable_lr_wins_even_over_a_lower_mean_with_a_divergence():
    runs = [run(0, 1e-2, 0.1), run(1, 1e-2, None, diverged=True), run(0, 1e-3, 3.0), run(1, 1e-3, 3.2)]
    s = score_runs(runs)
    assert s.best_lr == 1e-3 and s.value == pytest.approx(3.1)


def test_when_every_lr_lost_a_seed_the_least_failing_then_lowest_mean_wins():
    runs = [run(0, 1e-2, 1.0), run(1, 1e-2, None, diverged=True), run(0, 1e-3, 2.0),
            run(1, 1e-3, None, diverged=True)]
    s = score_runs(runs)
    assert s.best_lr == 1e-2 and s.score_mean == pytest.approx(1.0) and s.failure_rate == 0.5
    assert s.seeds_at_best == pytest.approx({0: 1.0})
    everything = score_runs([run(0, 1e-3, None, diverged=True), run(1, 1e-3, None, diverged=True)])
    assert everything.value == math.inf and everything.score_mean is None and everything.best_lr is None
    assert everything.failure_rate == 1 and everything.n_diverged == 2 and everything.tokens_per_s == 0.0
    assert everything.to_dict()["value"] is None  # stored as JSON: no infinity


def test_a_run_that_ends_near_its_init_loss_is_a_failure_not_a_number():
    s = score_runs([run(0, 1e-3, 9.0), run(1, 1e-3, 3.0)])
    assert s.seeds_at_best == pytest.approx({1: 3.0}) and s.value == pytest.approx(3.0) and s.failure_rate == 0.5


def test_the_grid_cell_is_chosen_over_variants_and_reported():
    runs = [run(0, 1e-3, 2.4), run(1, 1e-3, 2.6)]
    for r, v in zip([run(0, 1e-3, 2.0), run(1, 1e-3, 2.2)], [{"init": "small"}] * 2):
        r.variant = v
        runs.append(r)
    s = score_runs(runs)
    assert s.variant == {"init": "small"} and s.best_lr == 1e-3 and s.value == pytest.approx(2.1)
    assert s.per_lr == pytest.approx({1e-3: 2.1})  # the chosen variant's sweep


def test_throughput_averages_the_finished_runs_only():
    runs = [run(0, 1e-3, 2.0, tokens_per_s=100.0), run(1, 1e-3, 2.0, tokens_per_s=300.0),
            run(2, 1e-3, None, diverged=True, tokens_per_s=10_000.0), run(3, 1e-3, 2.0, tokens_per_s=0.0)]
    assert score_runs(runs).tokens_per_s == pytest.approx(200.0)


def test_lrs_are_grouped_as_numbers():
    runs = [run(0, 1e-3, 2.0), run(1, "0.001", 2.2)]  # a learning rate read back as text
    s = score_runs(runs)
    assert list(s.per_lr) == [1e-3] and s.seeds_at_best == pytest.approx({0: 2.0, 1: 2.2})


def test_to_dict_is_json_with_string_keys():
    s = score_runs([run(0, 1e-3, 2.4), run(0, 3e-3, 2.0)])
    d = json.loads(json.dumps(s.to_dict()))
    assert d["per_lr"] == {"0.001": pytest.approx(2.4), "0.003": pytest.approx(2.0)}
    assert d["seeds_at_best"] == {"0": pytest.approx(2.0)}
    assert {float(k): v for k, v in d["per_lr"].items()} == pytest.approx(s.per_lr)
    assert set(d) == set(Score.__dataclass_fields__)


def test_the_stored_v1_scores_are_reproduced_from_their_runs_where_nothing_failed():
    """The score a study stored with each architecture is what score_runs makes of its stored runs,
    for the architectures where no run failed (the rule changed only how failures count: a failed run
    entered the mean as its loss at initialisation, and now enters none)."""
    from normsearch.scoring import arch_sweep

    archs = sorted(V1_RUNS.glob("*/arch.json"))
    assert archs
    compared = 0
    for f in archs:
        rec = ArchRecord.from_json(json.loads(f.read_text()))
        runs = []
        for k in rec.runs:
            seed, lr, tag = parse_run_key(k)
            runs.append(RunResult.from_dict(json.loads((f.parent / f"{run_stem(int(seed), float(lr), tag)}.json").read_text())))
        if any(c.n_failed for c in arch_sweep(runs).cells):
            continue
        compared += 1
        s = score_runs(runs).to_dict()
        for key in ("value", "score_mean", "robust", "best_lr", "sensitivity", "tokens_per_s"):
            assert s[key] == pytest.approx(rec.score[key], rel=1e-12), (f.parent.name, key)
        assert s["per_lr"] == pytest.approx(rec.score["per_lr"], rel=1e-12)
        assert s["seeds_at_best"] == pytest.approx(rec.score["seeds_at_best"], rel=1e-12)
        assert (s["n_runs"], s["n_diverged"], s["n_params"]) == (rec.score["n_runs"], rec.score["n_diverged"],
                                                                rec.score["n_params"])
    assert compared
