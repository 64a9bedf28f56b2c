"""normsearch.scoring: how an architecture's runs become the score the sampler sees (Wortsman et al.
2023, Section 3.2: a diverged run counts as its loss at initialisation, no run as worse than that)."""

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


def test_a_diverged_run_counts_as_its_init_loss_and_its_lr_is_not_chosen():
    # at 1e-2 one seed reaches 1.0 and the other diverges: mean (1.0 + 5.0) / 2 = 3.0 ...
    runs = [run(0, 1e-2, 1.0), run(1, 1e-2, None, diverged=True), run(0, 3e-3, 2.0), run(1, 3e-3, 2.2),
            run(0, 1e-3, 0.5), run(1, 1e-3, None, diverged=True)]  # ... at 1e-3 (0.5 + 5.0) / 2 = 2.75
    s = score_runs(runs)
    assert s.per_lr == pytest.approx({1e-3: 2.75, 3e-3: 2.1, 1e-2: 3.0})
    assert s.best_lr == 3e-3 and s.score_mean == pytest.approx(2.1)  # the only lr where no seed diverged
    assert s.n_diverged == 2 and s.n_runs == 6
    assert s.robust == pytest.approx((2.75 + 2.1 + 3.0) / 3)
    assert s.sensitivity == pytest.approx(s.robust - 2.1)


def test_a_stable_lr_wins_even_over_a_lower_mean_with_a_divergence():
    runs = [run(0, 1e-2, 0.1), run(1, 1e-2, None, diverged=True),  # mean 2.55, lower than 1e-3's
            run(0, 1e-3, 3.0), run(1, 1e-3, 3.2)]
    s = score_runs(runs)
    assert s.per_lr[1e-2] == pytest.approx(2.55) and s.per_lr[1e-3] == pytest.approx(3.1)
    assert s.best_lr == 1e-3 and s.value == pytest.approx(3.1)
    assert s.sensitivity == pytest.approx((2.55 + 3.1) / 2 - 2.55)  # against the lowest L, stable or not


def test_when_every_lr_lost_a_seed_the_lowest_mean_wins():
    runs = [run(0, 1e-2, 1.0), run(1, 1e-2, None, diverged=True), run(0, 1e-3, 2.0),
            run(1, 1e-3, None, diverged=True)]
    s = score_runs(runs)
    assert s.best_lr == 1e-2 and s.score_mean == pytest.approx(3.0)
    assert s.seeds_at_best == pytest.approx({0: 1.0, 1: INIT})
    everything = score_runs([run(0, 1e-3, None, diverged=True), run(1, 1e-3, None, diverged=True)])
    assert everything.value == INIT and everything.n_diverged == 2 and everything.tokens_per_s == 0.0


def test_a_run_worse_than_at_initialisation_counts_as_init():
    s = score_runs([run(0, 1e-3, 9.0), run(1, 1e-3, 3.0)])
    assert s.seeds_at_best == pytest.approx({0: INIT, 1: 3.0}) and s.value == pytest.approx(4.0)


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


def test_the_stored_v1_scores_are_reproduced_from_their_runs():
    """The score a study stored with each architecture is what score_runs makes of its stored runs."""
    archs = sorted(V1_RUNS.glob("*/arch.json"))
    assert archs
    for f in archs:
        rec = ArchRecord.from_json(json.loads(f.read_text()))
        runs = []
        for k in rec.runs:
            seed, lr = parse_run_key(k)
            runs.append(RunResult.from_dict(json.loads((f.parent / f"{run_stem(int(seed), float(lr))}.json").read_text())))
        s = score_runs(runs).to_dict()
        for key in ("value", "score_mean", "robust", "best_lr", "sensitivity", "tokens_per_s"):
            assert s[key] == pytest.approx(rec.score[key], rel=1e-12), (f.parent.name, key)
        assert s["per_lr"] == pytest.approx(rec.score["per_lr"], rel=1e-12)
        assert s["seeds_at_best"] == pytest.approx(rec.score["seeds_at_best"], rel=1e-12)
        assert (s["n_runs"], s["n_diverged"], s["n_params"]) == (rec.score["n_runs"], rec.score["n_diverged"],
                                                                rec.score["n_params"])
