"""normsearch.records: the stored form of runs and architectures. Studies written by earlier versions
share it (tests/fixtures/study_v1), so the names and round trips here are a storage format."""

import json
import math
from pathlib import Path

import optuna
import pytest

from normsearch.records import (
    A_ARCH,
    A_BASELINE,
    A_LABEL,
    A_PLACEMENT,
    A_REUSED,
    A_RUNS,
    A_SCORE,
    A_SITES,
    ArchRecord,
    RunResult,
    jsonable,
    parse_run_key,
    run_key,
    run_keys,
    run_stem,
    trial_runs,
)

V1_RUNS = Path(__file__).resolve().parent / "fixtures" / "study_v1" / "results" / "v1" / "runs"


def make_run(seed=0, lr=3e-3, value=2.0, init=5.0, **kw) -> RunResult:
    curve = [{"step": 0, "val_bpb": init}, {"step": 10, "val_bpb": value if value is not None else init}]
    return RunResult(arch_id="abc", label="t1", placement={}, n_layers=2, seed=seed, lr=lr, value=value, curve=curve,
                     **kw)


# -- run keys and file names -------------------------------------------------------------------------


@pytest.mark.parametrize("seed, lr, key, stem", [
    (0, 0.003, "run:s0:lr0.003", "seed0_lr0.003"),
    (12, 1e-4, "run:s12:lr0.0001", "seed12_lr0.0001"),
    (3, 3.16e-5, "run:s3:lr3.16e-05", "seed3_lr3.16e-05"),
])
def test_run_keys_and_file_names_are_the_stored_format(seed, lr, key, stem):
    assert run_key(seed, lr) == key and run_stem(seed, lr) == stem
    seed_text, lr_text, tag = parse_run_key(key)
    assert (seed_text, lr_text, tag) == (str(seed), f"{lr:g}", "")
    assert run_stem(int(seed_text), float(lr_text)) == stem  # the file of a run is found from its key
    assert float(lr_text) == lr


def test_a_run_in_a_variant_of_the_grid_has_its_tag_in_key_and_file_name():
    assert run_key(0, 0.003, "init-small") == "run:s0:lr0.003:init-small"
    assert run_stem(0, 0.003, "init-small_warmup-60") == "seed0_lr0.003_init-small_warmup-60"
    assert parse_run_key("run:s0:lr0.003:init-small_warmup-60") == ("0", "0.003", "init-small_warmup-60")


def test_run_keys_picks_runs_out_of_user_attrs_in_order():
    ua = {A_ARCH: "x", run_key(1, 1e-3): {}, A_LABEL: "t0", run_key(0, 1e-3): {}, "runs_total": 4}
    assert run_keys(ua) == ["run:s1:lr0.001", "run:s0:lr0.001"]
    assert run_keys({A_ARCH: "x"}) == []


# -- RunResult ----------------------------------------------------------------------------------------


def test_run_result_round_trips_through_json():
    run = make_run(seed=2, lr=1e-3, value=2.5, spikes=3, steps=10, train_loss=[[0, 5.0], [5, 3.0]],
                   diagnostics=[{"step": 0, "resid_rms": [1.0, 2.0]}], tokens_per_s=1234.5, n_params=999,
                   test_se=0.01, metric="test_bpb")
    again = RunResult.from_dict(json.loads(json.dumps(run.to_dict())))
    assert again == run
    assert again.curve[0]["val_bpb"] == 5.0 and again.diagnostics[0]["resid_rms"] == [1.0, 2.0]


def test_from_dict_ignores_unknown_fields_and_defaults_missing_ones():
    """A run written by a newer version (an extra field) or an older one (fields it did not have) still reads."""
    d = make_run().to_dict()
    d["written_by_a_later_version"] = 1
    for key in ("test_windows", "val_bpb", "compiled", "tf32", "unigram_bpb"):
        d.pop(key)
    run = RunResult.from_dict(d)
    assert run.value == 2.0 and run.test_windows == 0 and run.val_bpb is None and run.compiled is False
    assert not hasattr(run, "written_by_a_later_version")


def test_stored_v1_runs_read_back():
    files = sorted(V1_RUNS.glob("*/seed*_lr*.json"))
    assert files
    for f in files:
        data = json.loads(f.read_text())
        run = RunResult.from_dict(data)
        assert f.stem == run_stem(run.seed, run.lr) and f.parent.name == run.arch_id
        assert run.to_dict().keys() >= data.keys()  # every stored field is still a field
        assert math.isfinite(run.loss) and run.loss <= run.init_loss


def test_compact_thins_the_training_loss_to_about_100_points_and_keeps_the_last():
    tl = [[i, 10.0 - i / 100] for i in range(1001)]
    run = make_run(train_loss=tl)
    out = run.compact()
    assert out["train_loss"][0] == tl[0] and out["train_loss"][-1] == tl[-1]
    assert 90 <= len(out["train_loss"]) <= 102
    steps = [s for s, _ in out["train_loss"]]
    assert steps == sorted(steps)
    assert run.train_loss == tl  # the run itself keeps every point
    short = make_run(train_loss=tl[:100])
    assert short.compact()["train_loss"] == tl[:100]
    assert {k: v for k, v in out.items() if k != "train_loss"} == {k: v for k, v in run.to_dict().items()
                                                                    if k != "train_loss"}


def test_loss_is_final_value_capped_at_init_and_a_failure_counts_as_init():
    assert make_run(value=2.0, init=5.0).loss == 2.0
    assert make_run(value=6.0, init=5.0).loss == 5.0  # worse than at initialisation: capped
    assert make_run(value=2.0, init=5.0, diverged=True).loss == 5.0
    assert make_run(value=None, init=5.0).loss == 5.0
    assert make_run(value=float("nan"), init=5.0).loss == 5.0
    assert make_run(value=float("inf"), init=5.0).loss == 5.0
    never = RunResult(arch_id="a", label=None, placement={}, n_layers=2, seed=0, lr=1e-3, value=None)
    assert never.init_loss == math.inf and never.loss == math.inf


def test_finished_and_outcome():
    ok = make_run(value=2.12345, tokens_per_s=100.0)
    assert ok.finished and ok.outcome() == "val 2.1235 bits/byte"
    assert not make_run(tokens_per_s=0.0).finished  # no throughput: it did not train to the end
    div = make_run(diverged=True, diverged_step=40, tokens_per_s=100.0)
    assert not div.finished and div.outcome() == "diverged at step 40"
    pruned = make_run(value=None, pruned=True, steps=100)
    pruned.curve[-1]["val_bpb"] = 3.1
    assert pruned.outcome() == "pruned at step 100: val 3.1000 bits/byte"


# -- ArchRecord ---------------------------------------------------------------------------------------


def record(**kw) -> ArchRecord:
    base = dict(arch_id="f00d", label="t3", placement={"final": {"kind": "rmsnorm"}}, sites="fin  [rmsnorm]",
                values=[2.5], score={"value": 2.5}, params={"site.final": "norm"},
                runs=[run_key(0, 1e-3), run_key(1, 1e-3)], trial_number=3)
    return ArchRecord(**{**base, **kw})


def test_identity_and_result_attrs_are_what_a_trial_carries():
    r = record()
    assert r.identity_attrs() == {A_ARCH: "f00d", A_LABEL: "t3", A_PLACEMENT: r.placement, A_SITES: "fin  [rmsnorm]"}
    assert r.result_attrs() == {A_SCORE: {"value": 2.5}, A_RUNS: ["run:s0:lr0.001", "run:s1:lr0.001"]}
    attrs = r.to_attrs()
    assert A_BASELINE not in attrs and A_REUSED not in attrs
    assert record(reused_from=1).result_attrs()[A_REUSED] == 1
    assert record(reused_from=0).result_attrs()[A_REUSED] == 0  # trial 0 is a trial
    assert record(label="pre_ln", baseline="pre_ln").to_attrs()[A_BASELINE] == "pre_ln"


def _trial(attrs, state=optuna.trial.TrialState.COMPLETE, value=2.5, number=7):
    trial = optuna.trial.create_trial(state=state, value=value if state.name == "COMPLETE" else None,
                                      params={"site.final": "norm"},
                                      distributions={"site.final": optuna.distributions.CategoricalDistribution(
                                          ["norm"])},
                                      user_attrs=attrs)
    trial.number = number
    return trial


def test_from_trial_reads_back_what_to_attrs_wrote():
    runs = {run_key(0, 1e-3): make_run(seed=0, lr=1e-3).compact(), run_key(1, 1e-3): make_run(seed=1, lr=1e-3).compact()}
    r = record(label="pre_ln", baseline="pre_ln", reused_from=2)
    back = ArchRecord.from_trial(_trial({**r.to_attrs(), **runs}, number=3))
    assert back == r


def test_from_trial_label_falls_back_and_runs_come_from_the_keys():
    # an older trial: no runs list, no label: the runs are its run:* attributes, the label t<number>
    ua = {A_ARCH: "beef", run_key(1, 3e-3): make_run(seed=1).to_dict(), run_key(0, 3e-3): make_run(seed=0).to_dict()}
    back = ArchRecord.from_trial(_trial(ua, number=9))
    assert back.label == "t9" and back.baseline is None and back.runs == ["run:s1:lr0.003", "run:s0:lr0.003"]
    assert back.values == [2.5] and back.params == {"site.final": "norm"} and back.state == "COMPLETE"
    pruned = ArchRecord.from_trial(_trial({A_ARCH: "beef", A_LABEL: "t1"}, state=optuna.trial.TrialState.PRUNED))
    assert pruned.state == "PRUNED" and pruned.values is None and pruned.label == "t1" and pruned.runs == []


def test_arch_json_round_trip_leaves_out_the_reuse():
    r = record(reused_from=4, distributions={"site.final": "{}"})
    d = json.loads(json.dumps(r.to_json()))
    assert "reused_from" not in d and d["runs"] == r.runs and d["trial_number"] == 3
    back = ArchRecord.from_json({**d, "a_field_from_later": True})
    assert back == record(distributions={"site.final": "{}"})  # everything but the reuse


def test_stored_v1_arch_json_reads_back():
    files = sorted(V1_RUNS.glob("*/arch.json"))
    assert files
    for f in files:
        d = json.loads(f.read_text())
        rec = ArchRecord.from_json(d)
        assert rec.arch_id == f.parent.name and rec.to_json() == {**rec.to_json(), **d}
        for k in rec.runs:  # each run key names its file
            seed, lr, tag = parse_run_key(k)
            assert (f.parent / f"{run_stem(int(seed), float(lr), tag)}.json").is_file(), k


def test_trial_runs_in_the_stored_order_skipping_what_is_not_a_run():
    a, b = make_run(seed=0, value=2.0), make_run(seed=1, value=2.2)
    ua = {A_RUNS: [run_key(1, 3e-3), run_key(0, 3e-3), run_key(2, 3e-3)],
          run_key(0, 3e-3): a.compact(), run_key(1, 3e-3): b.compact(), run_key(2, 3e-3): "not a run"}
    runs = trial_runs(_trial(ua))
    assert [r.seed for r in runs] == [1, 0] and runs[1] == a
    # without the list: every run:* attribute
    assert [r.seed for r in trial_runs(_trial({run_key(0, 3e-3): a.to_dict()}))] == [0]


def test_jsonable_is_strict_json_at_any_depth():
    import numpy as np

    data = {"a": float("nan"), 1: [float("inf"), 2.5, (float("-inf"), "x")], "b": {"c": None, "d": np.float64(0.25)},
            "n": np.int64(3), "arr_scalar": np.float32("nan")}
    out = jsonable(data)
    assert out == {"a": None, "1": [None, 2.5, [None, "x"]], "b": {"c": None, "d": 0.25}, "n": 3, "arr_scalar": None}
    assert type(out["n"]) is int and type(out["b"]["d"]) is float
    json.dumps(out, allow_nan=False)  # strict JSON: no NaN or Infinity tokens
