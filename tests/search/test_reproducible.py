"""Proposals that depend on the recipe, not on the workers' timing (search.reproducible, issue 24):
the slots a proposal sees, its seed, and whole studies run twice, and on 2 workers against 1."""

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from normsearch.search._propose import SURPLUS, Slots, proposal_seed, propose

from tiny import write_tiny_recipe

ROOT = Path(__file__).resolve().parents[2]


def _t(number, state="COMPLETE", baseline=None, proposal=None, arch=None, system=None, failure=None):
    ua = {}
    if baseline:
        ua["baseline"] = baseline
    if proposal is not None:
        ua["proposal"] = proposal
    if arch:
        ua["arch_id"] = arch
    if failure:
        ua["failure"] = failure
    return SimpleNamespace(number=number, state=SimpleNamespace(name=state), user_attrs=ua,
                           system_attrs=dict(system or {}))


Q = {"fixed_params": {}}  # what enqueue_trial gives a queued trial


def test_proposals_are_numbered_by_the_order_they_were_asked_baselines_and_retries_apart():
    trials = [_t(0, baseline="pre_ln", system=Q), _t(1, baseline="post_ln", system=Q),
              _t(2, baseline="pre_ln", system=Q),  # a second worker queued it too
              _t(3, arch="A"), _t(4, "FAIL", arch="B"), _t(5, "RUNNING", arch="C"),
              _t(6, "WAITING", proposal=1, system={"failed_trial": 4, "retry_history": [4]}),
              _t(7, arch="D", system={"restored": True}, proposal=3)]  # a result stored again from disk
    slots = Slots.read(trials)
    assert slots.number_of == {3: 0, 4: 1, 5: 2, 6: 1, 7: 3}
    assert slots.next_k == 3  # fresh proposals only: the retry and the restored result take no new number
    assert [t.number for t in slots.baselines["pre_ln"]] == [0, 2]


def test_proposal_k_sees_the_baselines_and_proposals_up_to_k_minus_in_flight_once_they_are_decided():
    base = [_t(0, baseline="pre_ln", system=Q), _t(1, baseline="post_ln", system=Q)]
    done = [_t(2, arch="A"), _t(3, arch="B")]
    slots = Slots.read(base + done + [_t(4, "RUNNING", arch="C")])
    names = ["pre_ln", "post_ln"]
    # in_flight 2: proposal 0 sees slots 0..-1+2=... the first B + k - N + 1 slots
    assert [t.number for t in slots.visible(0, names, 2)] == [0]
    assert [t.number for t in slots.visible(1, names, 2)] == [0, 1]
    assert [t.number for t in slots.visible(2, names, 2)] == [0, 1, 2]
    assert [t.number for t in slots.visible(3, names, 2)] == [0, 1, 2, 3]
    assert slots.visible(4, names, 2) is None  # proposal 2 (trial 4) is still running
    assert [t.number for t in slots.visible(4, names, 3)] == [0, 1, 2, 3]  # with 3 in flight it need not wait
    assert slots.visible(0, names, 5) == []  # nothing to see yet: it proposes from the prior alone


def test_a_failed_slot_waits_for_its_retry_and_one_that_nobody_retries_counts_as_failed():
    base = [_t(0, baseline="b", system=Q)]
    failed = _t(1, "FAIL", arch="A")
    retry = _t(2, "WAITING", proposal=0, system={"failed_trial": 1})
    assert Slots.read(base + [failed, retry]).visible(1, ["b"], 1) is None
    assert [t.number for t in Slots.read(base + [failed]).visible(1, ["b"], 1)] == [0, 1]
    done = _t(2, "COMPLETE", proposal=0, arch="A", system={"failed_trial": 1})
    assert [t.number for t in Slots.read(base + [failed, done]).visible(1, ["b"], 1)] == [0, 2]


def test_the_architectures_before_a_proposal_are_known_or_it_waits_and_a_surplus_one_is_marked():
    slots = Slots.read([_t(0, arch="A"), _t(1, "RUNNING")])
    assert slots.archs_before(1) == ["A"]
    assert slots.archs_before(2) is None  # proposal 1 is asked but its architecture is not stored yet
    slots = Slots.read([_t(0, arch="A"), _t(1, "FAIL", failure="surplus: the requested architectures are done")])
    assert slots.archs_before(2) == ["A", SURPLUS]


def test_a_proposal_is_a_function_of_the_seed_k_and_what_it_sees():
    from normsearch.recipe import load_recipe

    recipe = load_recipe(ROOT / "recipes" / "quickstart.yaml")
    first = [propose(recipe, k, [], ["minimize"]) for k in range(6)]
    assert first == [propose(recipe, k, [], ["minimize"]) for k in range(6)]  # same seed, k, history: same
    assert len({json.dumps(p, sort_keys=True) for p in first}) > 1  # k seeds the draw
    assert proposal_seed(0, 1) != proposal_seed(0, 2) and proposal_seed(0, 1) != proposal_seed(1, 1)


def _run(recipe: Path, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "normsearch", "run", str(recipe), *map(str, args)], cwd=recipe.parent,
                          capture_output=True, text=True, timeout=900)


def _rows(folder: Path) -> list[tuple]:
    rows = json.loads((folder / "ranking.json").read_text())["rows"]
    return [(r["label"], r["sites"], r["arch_id"], r["score_mean"], r["n_failed"]) for r in rows]


@pytest.mark.slow
def test_a_study_run_twice_on_2_workers_and_once_on_1_gives_the_same_ranking(tmp_path):
    """The same command twice with 2 local workers, and once with 1 worker at the same threads per run:
    ranking.json's rows (labels, sites, arch ids, scores to the last digit) are identical."""
    recipe = write_tiny_recipe(tmp_path, name="rep", steps=40, trials=3)  # 2 random start-up, 1 from TPE
    common = ["--train.lr", "[1.0e-2]", "--train.batch_size", "8", "--search.in_flight", "2"]
    out = {}
    for name, jobs in (("two", 2), ("again", 2), ("one", 1)):
        p = _run(recipe, "--name", name, "--jobs", jobs, "--train.threads", 1, *common)
        assert p.returncode == 0, p.stderr[-3000:]
        out[name] = _rows(tmp_path / "results" / name)
    assert any(r[3] is not None for r in out["two"]), "every run failed: the test would compare nothing"
    assert len(out["two"]) == 5
    assert out["again"] == out["two"]
    assert out["one"] == out["two"]
