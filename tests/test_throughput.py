"""normsearch._throughput and its use in the ranking: what a norm costs (throughput ratio, effective speed-up
against the best baseline, read off its validation curve, a lower bound rather than an extrapolation), the
sentence for a placement ahead per step but behind per second, and runs of different precisions never pooled.

The synthetic study of tests/test_ranking.py: every run's curve is 8.0 at step 0, (8 + v) / 2 at step 50 and v
at step 100 (v its final loss); its tokens/s 1000 + 100 x the architecture's index in ARCHS (peri_ln 1100)."""

import csv
import json
import math

import pytest
import test_ranking
from test_ranking import ARCHS, INIT, L, build_study, placement_of

from normsearch._throughput import compared_precision, mean_curve, paired_ratio, steps_to_reach
from normsearch.ranking import OTHER_PRECISION, rank
from normsearch.records import RunResult
from normsearch.report import Importance, ranking_json, report_markdown, write_csv

MEAN = lambda xs: sum(xs) / len(xs)  # noqa: E731
PERI = ARCHS["peri_ln"][1][3e-3]  # the best baseline's chosen cell: lr 3e-3, three successful seeds


def log_interp(s0, v0, s1, v1, loss):
    """The steps at which the line through (log s0, v0), (log s1, v1) reaches ``loss``."""
    f = (v0 - loss) / (v0 - v1)
    return math.exp(math.log(s0) + f * (math.log(s1) - math.log(s0)))


def test_steps_to_reach_reads_the_curve_in_log_steps_and_never_extrapolates():
    curve = [(0, 8.0), (50, 4.0), (100, 2.0)]
    steps, how = steps_to_reach(curve, 3.0)
    assert how == "at" and steps == pytest.approx(50 * 2 ** 0.5)
    assert steps_to_reach(curve, 2.0) == (100.0, "at") and steps_to_reach(curve, 4.0) == (50.0, "at")
    assert steps_to_reach(curve, 1.5) == (100.0, "lower")  # below anything reached: the last step, a bound
    assert steps_to_reach(curve, 5.0) == (None, "above")  # above its first evaluation after step 0
    assert steps_to_reach([(0, 8.0)], 5.0) == (None, "none")
    # a curve that goes up again: the first time it reaches the loss
    assert steps_to_reach([(10, 4.0), (20, 2.0), (40, 3.0)], 2.5)[0] == pytest.approx(log_interp(10, 4, 20, 2, 2.5))


def test_mean_curve_over_the_evaluations_every_run_has():
    def run(points):
        return RunResult(arch_id="a", label="a", placement={}, n_layers=1, seed=0, lr=1e-3, value=points[-1][1],
                         curve=[{"step": s, "val_bpb": v} for s, v in points])

    curve = mean_curve([run([(0, 8.0), (50, 4.0), (100, 2.0)]), run([(0, 8.0), (50, 5.0), (75, 3.0), (100, 3.0)])])
    assert curve == [(0, 8.0), (50, 4.5), (100, 2.5)]


@pytest.fixture(scope="module")
def ranking():
    return rank(build_study())


def test_throughput_ratio_and_effective_speedup_by_hand(ranking):
    peri, t4, t3 = ranking.row("peri_ln"), ranking.row("t4"), ranking.row("t3")
    assert {r.speedup_against for r in ranking.rows} == {"peri_ln"}  # the best-ranked baseline
    assert peri.throughput_ratio == 1.0 and peri.effective_speedup == pytest.approx(1.0)
    # t4 (chosen lr 1e-3, final 2.30, 1400 tokens/s) is reached by peri_ln's mean curve between steps 50 and 100
    base50, base100 = MEAN([(INIT + v) / 2 for v in PERI]), MEAN(PERI)
    loss = MEAN(ARCHS["t4"][1][1e-3])
    steps = log_interp(50, base50, 100, base100, loss)
    assert t4.throughput_ratio == pytest.approx(1400 / 1100)
    assert t4.step_speedup == pytest.approx(steps / 100) and t4.step_speedup < 1
    assert t4.effective_speedup == pytest.approx(steps / 100 * 1400 / 1100) and not t4.speedup_lower_bound
    assert t4.speedup_at_baseline_loss is None  # t4 never reaches peri_ln's final loss
    # t3 ends below anything peri_ln reached: a lower bound at peri_ln's last step, not an extrapolation
    assert t3.speedup_lower_bound and t3.step_speedup == 1.0
    assert t3.effective_speedup == pytest.approx(1300 / 1100) and "a lower bound" in t3.speedup_note
    # ... and the other way round: peri_ln's final loss on t3's own curve
    t3_cell = ARCHS["t3"][1][3e-3]
    own = log_interp(50, MEAN([(INIT + v) / 2 for v in t3_cell]), 100, MEAN(t3_cell), base100)
    assert t3.speedup_at_baseline_loss == pytest.approx(100 / own * 1300 / 1100)
    assert ranking.row("t8").effective_speedup is None and ranking.row("t8").speedup_note == "not ranked"


def written(ranking, tmp_path):
    """report.md's text, ranking.json's rows by label and ranking.csv's lines by label (no plots: fast)."""
    write_csv(ranking, tmp_path / "ranking.csv")
    with open(tmp_path / "ranking.csv") as f:
        table = {r["label"]: r for r in csv.DictReader(f)}
    data = json.loads(json.dumps(ranking_json(ranking)))
    md = report_markdown(ranking, [], Importance("none", note="not computed here"))
    return md, data, table


def patched(monkeypatch, change):
    """build_study's runs passed through ``change(label, run dict)`` first."""
    make = test_ranking.make_run

    def make_run(label, seed, lr, value, pruned=False):
        run = make(label, seed, lr, value, pruned)
        change(label, run)
        return run

    monkeypatch.setattr(test_ranking, "make_run", make_run)


def test_ahead_per_step_behind_per_second_is_said_in_the_report(monkeypatch, tmp_path):
    def slow_t3(label, run):
        if label == "t3":
            run["tokens_per_s"] = 800.0

    patched(monkeypatch, slow_t3)
    result = rank(build_study(only=["pre_ln", "peri_ln", "t3", "t4"]))
    md, data, by_label = written(result, tmp_path)
    t3 = result.row("t3")
    assert t3.throughput_ratio == pytest.approx(800 / 1100) and t3.speedup_lower_bound
    assert t3.speedup_at_baseline_loss < 1  # it reaches peri_ln's final loss a little sooner per step, later per second
    sentence = (f"t3 is ahead per step but 0.73x the tokens/s of peri_ln: per second it is behind (effective "
                f"speed-up {t3.speedup_at_baseline_loss:.2f}x at peri_ln's final loss, >= {t3.effective_speedup:.2f}x "
                f"at its own)")
    assert sentence in md
    t4 = result.row("t4")
    assert (f"t4 is behind per step but 1.27x the tokens/s of peri_ln: per second it is ahead (effective speed-up "
            f"{t4.effective_speedup:.2f}x)") in md
    line = next(x for x in md.splitlines() if x.startswith("| ") and "| t3 |" in x)
    assert "| 0.73x |" in line and f"| >= {t3.effective_speedup:.2f}x |" in line
    rows = {r["label"]: r for r in data["rows"]}
    assert rows["t3"]["throughput_ratio"] == pytest.approx(800 / 1100) and rows["t3"]["speedup_lower_bound"] is True
    assert rows["t4"]["effective_speedup"] == pytest.approx(t4.effective_speedup)
    assert {"score_mean", "tokens_per_s", "precision", "seeds", "seed_scores", "comparisons"} <= set(rows["t3"])
    assert float(by_label["t4"]["effective_speedup"]) == pytest.approx(t4.effective_speedup)
    assert by_label["t3"]["speedup_lower_bound"] == "True"


def test_a_loss_above_the_baselines_first_evaluation_has_no_speedup(monkeypatch):
    def fast_peri(label, run):  # peri_ln already at its final loss + 0.05 by step 50
        if label == "peri_ln" and run["value"] is not None:
            run["curve"][1]["val_bpb"] = run["value"] + 0.05

    patched(monkeypatch, fast_peri)
    ranking = rank(build_study(only=["pre_ln", "peri_ln", "t4"]))
    t4 = ranking.row("t4")
    assert t4.throughput_ratio == pytest.approx(1400 / 1100)
    assert t4.effective_speedup is None and t4.step_speedup is None and not t4.speedup_lower_bound
    assert "above peri_ln's at its first evaluation (step 50)" in t4.speedup_note


def test_no_baseline_no_speedup():
    ranking = rank(build_study(only=["t3", "t4"]))
    assert all(r.throughput_ratio is None and r.effective_speedup is None for r in ranking.rows)
    assert ranking.row("t3").speedup_note == "no ranked baseline to compare with"


# --------------------------------------------------------------------------------------------------
# one precision at a time


def test_runs_of_another_precision_are_left_out_not_pooled(monkeypatch, tmp_path):
    def bf16(label, run):
        if label == "t5" or (label == "pre_ln" and run["seed"] == 0 and run["lr"] == 3e-3):
            run["precision"] = "bf16-mixed"

    patched(monkeypatch, bf16)
    result = rank(build_study(only=["pre_ln", "peri_ln", "t3", "t5"]))
    md, data, _ = written(result, tmp_path)
    j = result.judgement
    assert j.precision == "32-true" and j.precisions == {"32-true": 17, "bf16-mixed": 7} and j.precision_excluded == 7
    t5, pre = result.row("t5"), result.row("pre_ln")
    assert t5.state == OTHER_PRECISION and t5.rank is None and t5.n_other_precision == 6 and not t5.runs
    assert t5.precision == "bf16-mixed"
    assert pre.n_other_precision == 1 and pre.n_runs == 5 and pre.precision == "32-true,bf16-mixed"
    assert 0 not in pre.seeds and pre.best_lr == 3e-3  # its bf16 run is in no mean
    assert [r.label for r in result.ranked] == ["t3", "peri_ln", "pre_ln"]
    assert "t5" not in {h.label for h in result.history}  # not compared: not a failure of the search either
    assert "**Runs of more than one precision** (17 at 32-true, 7 at bf16-mixed)" in md
    assert "compares the runs at 32-true" in md and "| only bf16-mixed |" in md
    assert data["judgement"]["precision"] == "32-true" and data["judgement"]["precision_excluded"] == 7


def test_the_majority_precision_is_the_one_compared(monkeypatch):
    patched(monkeypatch, lambda label, run: run.update(precision="bf16-mixed") if label != "t3" else None)
    ranking = rank(build_study(only=["pre_ln", "peri_ln", "t3"]))
    assert ranking.judgement.precision == "bf16-mixed" and ranking.row("t3").state == OTHER_PRECISION
    assert ranking.judgement.precision_excluded == 6


def test_one_precision_changes_nothing_and_a_tie_goes_to_fp32():
    ranking = rank(build_study(only=["pre_ln", "peri_ln"]))
    assert ranking.judgement.precisions == {"32-true": 12} and ranking.judgement.precision_excluded == 0
    peri, pre = ranking.row("peri_ln"), ranking.row("pre_ln")
    for r in pre.runs:
        r.precision = "bf16-mixed"
    assert compared_precision([peri, pre]) == ("32-true", {"32-true": 6, "bf16-mixed": 6})
    assert compared_precision([pre]) == ("bf16-mixed", {"bf16-mixed": 6})


# --------------------------------------------------------------------------------------------------
# tokens/s measured interleaved in one process (throughput.json), and runs too noisy to read a verdict from


def handle_of(study, folder):
    from normsearch.search import StudyHandle, recipe_of

    return StudyHandle(recipe_of(study), study, "", folder)


def test_the_interleaved_measurement_of_two_tiny_architectures(tmp_path):
    from normsearch._cost_bench import measure_archs, read_measurement, shape_key, write_measurement
    from normsearch.config import ModelConfig

    model = ModelConfig(n_layers=2, d_model=32, n_heads=2, context_length=16, vocab_size=256)
    said = []
    measured = measure_archs({"a": "pre_ln", "b": "peri_ln"}, model, 4, warmup=1, rounds=3, steps=2, echo=said.append)
    assert "2 architecture(s) interleaved: 3 round(s) of 2 step(s) each (12 timed steps" in said[0]
    for m in measured.values():
        assert m.tokens_per_s > 0 and len(m.rounds) == 3 and m.q1 <= m.tokens_per_s <= m.q3
        assert m.tokens_per_s == sorted(m.rounds)[1] and m.spread >= 0
    key = shape_key(model, 4, 1, "32-true")
    write_measurement(tmp_path, measured, {"key": key, "cpu": "here"})
    data = json.loads((tmp_path / "throughput.json").read_text())
    assert data["archs"]["a"]["spread"] == pytest.approx(measured["a"].spread)
    back, meta = read_measurement(tmp_path, key)
    assert back == measured and meta["cpu"] == "here"
    assert read_measurement(tmp_path, shape_key(model, 8, 1, "32-true")) is None  # another batch: ignored
    assert read_measurement(tmp_path, shape_key(model, 4, 1, "bf16-mixed")) is None  # another precision
    # a stage (the confirmation in <folder>/confirm) reads its study's measurement
    assert read_measurement(tmp_path / "confirm", key, stage=True) is not None
    assert read_measurement(tmp_path / "confirm", key) is None


def test_measure_study_times_every_ranked_architecture_into_the_results_folder(tmp_path):
    from normsearch._cost_bench import FILE, measure_study

    handle = handle_of(build_study(only=["pre_ln", "peri_ln"]), tmp_path)
    path = measure_study(handle, rank(handle, against=[]), warmup=1, rounds=2, steps=1)
    data = json.loads(path.read_text())
    assert path == tmp_path / FILE and {a["label"] for a in data["archs"].values()} == {"pre_ln", "peri_ln"}
    meta = data["meta"]
    assert meta["threads"] == 1 and meta["precision"] == "32-true" and meta["batch"] == [4, 16]
    assert meta["key"]["d_model"] == 32 and meta["key"]["batch_size"] == 4 and meta["cpu"] and meta["torch"]
    assert (meta["rounds"], meta["steps"], meta["study"]) == (2, 1, "synth")


def noisy_t3(label, run):  # t3's runs recorded 800, 1100 and 1400 tokens/s (coefficient of variation 27%)
    if label == "t3":
        run["tokens_per_s"] = 800.0 + 300 * run["seed"]


def test_noisy_recorded_tokens_per_s_give_no_per_second_verdict(monkeypatch, tmp_path):
    patched(monkeypatch, noisy_t3)
    result = rank(build_study(only=["pre_ln", "peri_ln", "t3", "t4"]))
    md, data, by_label = written(result, tmp_path)
    t3, t4 = result.row("t3"), result.row("t4")
    assert t3.throughput_source == "runs" and t3.throughput_noisy and t3.throughput_cv == pytest.approx(0.2727, abs=1e-3)
    assert t3.throughput_ratio == pytest.approx(1100 / 1100) and t3.effective_speedup is not None  # kept, marked
    assert not t4.throughput_noisy and not result.row("peri_ln").throughput_noisy
    assert "t3 is ahead per step" not in md  # no verdict from noise ...
    assert "t4 is behind per step but 1.27x the tokens/s of peri_ln: per second it is ahead" in md  # ... t4's stands
    assert ("Training throughput recorded by the runs varies by up to 27% within an architecture (a shared machine): "
            "no per-second verdict from it; `normsearch report STUDY --measure-throughput` measures every "
            "architecture interleaved in one process.") in md
    line = next(x for x in md.splitlines() if x.startswith("| ") and "| t3 |" in x)
    assert "| 1.00x~ |" in line and f"| >= {t3.effective_speedup:.2f}x~ |" in line
    assert "a trailing `~`" in md and "more than 10% (coefficient of variation)" in md
    rows = {r["label"]: r for r in data["rows"]}
    assert rows["t3"]["throughput_noisy"] is True and rows["t3"]["throughput_source"] == "runs"
    assert by_label["t3"]["throughput_noisy"] == "True" and by_label["t4"]["throughput_noisy"] == "False"


def store(folder, recipe, tokens_per_s, rounds=None, **key):
    """A throughput.json: every architecture at ``tokens_per_s`` in each of 10 rounds, or at ``rounds[label]``."""
    from normsearch._cost_bench import Measured, study_key, write_measurement

    meta = {"key": study_key(recipe, "32-true") | key, "cpu": "a test CPU", "device": "cpu", "threads": 1,
            "torch": "x", "precision": "32-true", "date": "2025-01-02T03:04:05", "rounds": 10, "steps": 5}
    rounds = rounds or {}
    archs = {placement_of(k).arch_id(L): Measured(v, v * 0.98, v * 1.02, rounds.get(k, [v] * 10), k)
             for k, v in tokens_per_s.items()}
    write_measurement(folder, archs, meta)


def test_paired_ratio_is_the_median_of_the_rounds_ratios_with_order_statistic_bounds():
    base = [100.0, 200.0, 50.0, 100.0, 100.0, 400.0, 100.0, 100.0, 80.0, 100.0]
    ratios = [1.0, 1.5, 0.5, 1.2, 1.1, 0.9, 1.3, 0.8, 1.05, 0.95]  # per round
    med, lo, hi = paired_ratio([b * r for b, r in zip(base, ratios)], base)
    xs = sorted(ratios)
    assert med == pytest.approx((xs[4] + xs[5]) / 2)
    # n = 10: (x_(2), x_(9)) covers the median with 1 - 2 P(B <= 1) = 0.979; (x_(3), x_(8)) only 0.891
    assert (lo, hi) == (pytest.approx(xs[1]), pytest.approx(xs[8]))
    assert paired_ratio([1.0] * 5, [1.0] * 5) == (1.0, None, None)  # 5 rounds: at most 0.9375, no 95% interval
    assert paired_ratio([2.0] * 6, [1.0] * 6) == (2.0, 2.0, 2.0)  # 6 rounds: (x_(1), x_(6)), 0.969
    assert paired_ratio([1.0] * 10, [1.0] * 9) is None and paired_ratio([], []) is None  # unpaired: none


def test_the_paired_interval_covers_the_true_median_at_least_95_percent_of_the_time():
    import random

    rng = random.Random(0)
    for n in (10, 30):
        covered = 0
        for _ in range(2000):  # a round's tokens/s: a shared burst of load (both) and each one's own noise
            burst = [rng.lognormvariate(0, 0.4) for _ in range(n)]
            a = [1100 / b * rng.lognormvariate(0, 0.15) for b in burst]
            base = [1000 / b * rng.lognormvariate(0, 0.15) for b in burst]
            _, lo, hi = paired_ratio(a, base)
            covered += lo <= 1.1 <= hi
        assert covered / 2000 >= 0.94, (n, covered)


def test_a_measurement_replaces_the_noisy_recordings(monkeypatch, tmp_path):
    patched(monkeypatch, noisy_t3)
    handle = handle_of(build_study(only=["pre_ln", "peri_ln", "t3", "t4"]), tmp_path)
    store(tmp_path, handle.recipe, {"pre_ln": 1000.0, "peri_ln": 1000.0, "t3": 800.0})
    result = rank(handle)
    md, data, _ = written(result, tmp_path)
    t3, t4 = result.row("t3"), result.row("t4")
    assert t3.throughput_source == "measured" and not t3.throughput_noisy and t3.throughput_ratio == pytest.approx(0.8)
    assert t3.measured_tokens_per_s == 800.0 and t3.throughput_cv == pytest.approx(0.2727, abs=1e-3)
    assert t4.throughput_source == "runs" and t4.measured_tokens_per_s is None  # not measured: its runs' ratio
    assert t3.speedup_at_baseline_loss < 1
    assert (t3.throughput_ratio_low, t3.throughput_ratio_high) == (pytest.approx(0.8), pytest.approx(0.8))
    assert ("t3 is ahead per step but 0.80x [0.80, 0.80] the tokens/s of peri_ln: per second it is behind (effective "
            f"speed-up {t3.speedup_at_baseline_loss:.2f}x at peri_ln's final loss, >= {t3.effective_speedup:.2f}x at "
            "its own)") in md
    assert "A ratio is the median of the per-round ratios" in md
    assert "Tokens/s measured by `normsearch report --measure-throughput` on 2025-01-02 (a test CPU, 1 thread(s)" in md
    assert "the interquartile range of an architecture's rounds is 4% to 4% of its median" in md
    rows = {r["label"]: r for r in data["rows"]}
    assert rows["t3"]["throughput_ratio_low"] == pytest.approx(0.8) and "measured_rounds" not in rows["t3"]
    assert "Training throughput recorded by the runs varies" not in md
    assert data["judgement"]["throughput"]["cpu"] == "a test CPU"


def test_a_measurement_of_another_shape_is_ignored(monkeypatch, tmp_path):
    patched(monkeypatch, noisy_t3)
    handle = handle_of(build_study(only=["pre_ln", "peri_ln", "t3"]), tmp_path)
    store(tmp_path, handle.recipe, {"pre_ln": 1000.0, "peri_ln": 1000.0, "t3": 800.0}, batch_size=64)
    result = rank(handle)
    assert {r.throughput_source for r in result.rows} == {"runs"} and result.row("t3").throughput_noisy
    assert result.judgement.throughput == {} and result.row("t3").measured_tokens_per_s is None


def test_a_measured_ratio_whose_interval_reaches_across_1_decides_nothing_per_second(monkeypatch, tmp_path):
    """t3 is ahead per step (a lower bound against peri_ln) and measured at a median 0.90x peri_ln's tokens/s, but
    its rounds' ratios run from 0.6 to 1.4: no 'behind per second', the interval instead; with rounds that agree
    the same median gives the verdict."""
    handle = handle_of(build_study(only=["pre_ln", "peri_ln", "t3"]), tmp_path)
    base = [1000.0] * 10
    wide = [1000.0 * x for x in (0.6, 0.7, 0.8, 0.85, 0.9, 0.9, 1.1, 1.2, 1.3, 1.4)]
    store(tmp_path, handle.recipe, {"pre_ln": 1000.0, "peri_ln": 1000.0, "t3": 900.0},
          rounds={"peri_ln": base, "t3": wide})
    result = rank(handle)
    md, data, table = written(result, tmp_path)
    t3 = result.row("t3")
    assert t3.throughput_ratio == pytest.approx(0.9) and t3.speedup_at_baseline_loss < 1
    assert (t3.throughput_ratio_low, t3.throughput_ratio_high) == (pytest.approx(0.7), pytest.approx(1.3))
    lo, hi = (t3.speedup_at_baseline_loss * x / 0.9 for x in (0.7, 1.3))
    assert hi > 1
    assert ("t3 is ahead per step and 0.90x [0.70, 1.30] the tokens/s of peri_ln: per second the measurement does "
            f"not decide (effective speed-up {t3.speedup_at_baseline_loss:.2f}x [{lo:.2f}, {hi:.2f}] at peri_ln's "
            "final loss)") in md
    assert "t3 is ahead per step but" not in md
    line = next(x for x in md.splitlines() if x.startswith("| ") and "| t3 |" in x)
    e = t3.effective_speedup
    assert "| 0.90x [0.70, 1.30] |" in line and f"| >= {e:.2f}x [{e * 0.7 / 0.9:.2f}, {e * 1.3 / 0.9:.2f}] |" in line
    assert float(table["t3"]["throughput_ratio_high"]) == pytest.approx(1.3)
    store(tmp_path, handle.recipe, {"pre_ln": 1000.0, "peri_ln": 1000.0, "t3": 900.0},
          rounds={"peri_ln": base, "t3": [900.0 + i for i in range(-5, 5)]})
    md = written(rank(handle), tmp_path)[0]
    assert "t3 is ahead per step but 0.90x [0.90, 0.90] the tokens/s of peri_ln: per second it is behind" in md
