"""Control proposals (search.control, issue 25 item 6): uniform draws from the space, reproducible,
interleaved among the sampler's proposals, on top of search.trials, unseen by the sampler, and marked
as controls in the status, the ranking and the report."""

import csv
import json
import subprocess
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from normsearch.cli import app
from normsearch.recipe import load_recipe
from normsearch.records import A_ARCH, A_CONTROL, A_LABEL
from normsearch.search import census, open_results, run_study, searched_proposals, status_text
from normsearch.search._controls import (control_params, control_seed, control_slot, controls_left, due_control,
                                         unseen)

from tiny import write_tiny_recipe

ROOT = Path(__file__).resolve().parents[2]
QUICK = ROOT / "recipes" / "quickstart.yaml"


def with_search(recipe, **changes):
    return replace(recipe, search=replace(recipe.search, **changes))


# -- the draw ---------------------------------------------------------------------------------------


def test_control_draws_are_uniform_over_the_space():
    """1,000 draws of the quickstart's space (64 points: six sites, none or norm): every site has a norm
    in about half of them, and the 64 points come up as often as a chi-square test expects."""
    from scipy.stats import binomtest, chisquare

    recipe = load_recipe(QUICK)
    n = 1000
    draws = [control_params(recipe, j) for j in range(n)]
    names = sorted(p for p in draws[0] if len({d[p] for d in draws}) > 1)  # site.final has one choice
    assert len(names) == 6
    for name in names:
        k = sum(d[name] == "norm" for d in draws)
        assert binomtest(k, n, 0.5).pvalue > 0.001, (name, k)
    cells = Counter(tuple(d[p] for p in names) for d in draws)
    assert len(cells) == 64
    assert chisquare([cells[c] for c in sorted(cells)]).pvalue > 0.001


def test_control_draws_depend_on_the_seed_and_j_alone():
    recipe = load_recipe(QUICK)
    first = [control_params(recipe, j) for j in range(6)]
    assert first == [control_params(recipe, j) for j in range(6)]
    assert len({json.dumps(p, sort_keys=True) for p in first}) > 1
    other = with_search(recipe, seed=1)
    assert [control_params(other, j) for j in range(6)] != first
    assert control_seed(0, 1) != control_seed(0, 2) and control_seed(0, 1) != control_seed(1, 1)
    from normsearch.search._propose import proposal_seed

    assert control_seed(0, 1) != proposal_seed(0, 1)  # not the sampler's own draw for proposal 1


# -- the interleaving -------------------------------------------------------------------------------


def test_controls_cut_the_proposals_into_near_equal_stretches():
    assert [control_slot(j, 8, 3) for j in range(3)] == [2, 4, 6]
    assert [control_slot(j, 10, 3) for j in range(3)] == [2, 5, 7]
    assert [control_slot(j, 4, 1) for j in range(1)] == [2]
    assert [control_slot(j, 2, 3) for j in range(3)] == [0, 1, 1]  # more controls than proposals
    assert [control_slot(j, 0, 2) for j in range(2)] == [0, 0]


def _t(number, state="COMPLETE", control=None, system=None, baseline=None, **ua):
    attrs = dict(ua)
    if control is not None:
        attrs[A_CONTROL] = control
    if baseline:
        attrs["baseline"] = baseline
    return SimpleNamespace(number=number, state=SimpleNamespace(name=state), user_attrs=attrs,
                           system_attrs=dict(system or {}), values=[1.0])


def test_a_control_is_due_once_its_slot_is_reached_and_queued_once():
    recipe = with_search(load_recipe(QUICK), trials=8, control=3)
    Q = {"fixed_params": {}}
    base = [_t(0, baseline="pre_ln", system=Q)]
    proposals = [_t(i + 1) for i in range(2)]  # two fresh proposals asked
    assert due_control(recipe, base + proposals[:1], False) is None  # control 0 waits for 2 proposals
    assert due_control(recipe, base + proposals, False) == 0
    queued = _t(3, "WAITING", control=0, system=Q)
    assert due_control(recipe, base + proposals + [queued], False) is None  # queued: control 1 waits for 4
    assert due_control(recipe, base + proposals + [queued], True) == 1  # the sampler is done: every control is due
    failed = [_t(3 + i, "FAIL", control=0, system=Q) for i in range(3)]
    assert due_control(recipe, base + proposals + failed[:1], False) == 0  # an error: queued again
    assert due_control(recipe, base + proposals + failed, False) is None  # three errors: given up
    assert controls_left(recipe, base + proposals + failed) == 2 and controls_left(recipe, base) == 3
    assert due_control(with_search(recipe, control=0), base + proposals, True) is None


def test_the_sampler_does_not_see_a_result_it_took_from_a_control():
    """A proposal that repeated a control's architecture would have trained it without controls: it
    counts as trained (the random start-up counts trained proposals only)."""
    control = _t(3, control=0, arch_id="A")
    reused = _t(4, arch_id="A", reused_from=3)
    also = _t(5, arch_id="B", reused_from=2)  # repeats a proposal: stays a repeat
    seen = unseen([reused, also], [_t(2, arch_id="B"), control, reused, also])
    assert "reused_from" not in seen[0].user_attrs and reused.user_attrs["reused_from"] == 3  # a copy
    assert seen[1] is also
    earlier = _t(1, arch_id="A")  # a proposal had drawn it before the control: a repeat either way
    assert unseen([reused], [earlier, control, reused])[0] is reused


def test_searched_proposals_are_read_back_by_kind_and_order():
    recipe = with_search(load_recipe(QUICK), trials=4, control=2)
    Q = {"fixed_params": {}}
    trials = [_t(0, baseline="pre_ln", system=Q), _t(1, proposal=0, startup=True, label="t1"),
              _t(2, control=0, system=Q, label="c0"), _t(3, control=0, system=Q, label="c0"),  # queued twice
              _t(4, proposal=1, startup=False, label="t2", reused_from=2), _t(5, "FAIL", proposal=2),
              _t(6, control=1, system=Q, label="c1"), _t(7, "RUNNING", proposal=3)]
    got = [(p.kind, p.order, p.number, p.label) for p in searched_proposals(trials, recipe)]
    assert got == [("startup", 0, 1, "t1"), ("model", 1, 4, "t2"), ("control", 0, 2, "c0"), ("control", 1, 6, "c1")]


# -- a study with controls --------------------------------------------------------------------------


def _study(tmp_path, name, control):
    recipe = load_recipe(write_tiny_recipe(tmp_path, name=name, steps=20, trials=4))
    recipe = with_search(recipe, control=control, in_flight=1, startup_trials=1)
    return run_study(recipe)


def _by_label(study):
    return {t.user_attrs[A_LABEL]: (t.params, t.user_attrs.get(A_ARCH)) for t in study.get_trials()
            if t.state.name == "COMPLETE"}


def test_controls_come_on_top_of_the_trials_unseen_by_the_sampler_and_marked(tmp_path):
    plain = _by_label(_study(tmp_path, "plain", 0).study)
    handle = _study(tmp_path, "ctl", 2)
    study, recipe = handle.study, handle.recipe
    c = census(study)
    assert c.searched_done == 4 and c.controls_done == {0, 1}  # on top of search.trials
    got = _by_label(study)
    for j in range(2):  # each control is its seeded uniform draw, labelled c<j>
        assert got[f"c{j}"][0] == control_params(recipe, j)
    # the sampler's proposals are the ones of the same study without controls: it does not see them
    assert {k: v for k, v in got.items() if k.startswith("t")} == {k: v for k, v in plain.items() if k.startswith("t")}
    # interleaved: control j is asked for once floor((j+1) * 4 / 3) proposals were
    order = [t.user_attrs[A_LABEL] for t in sorted(study.get_trials(), key=lambda t: t.number)
             if t.user_attrs.get(A_LABEL, "")[:1] in ("t", "c")]
    assert order.index("c0") == 1 and order.index("c1") == 3, order
    assert "4/4 searched, 2/2 controls" in status_text(handle)
    # the ranking and the report mark their rows; the analysis counts them as controls
    from normsearch.ranking import rank
    from normsearch.report import write_report

    ranking = write_report(handle, tmp_path / "report")
    sv = ranking.judgement.search
    proposals = [t for t in study.get_trials() if t.user_attrs.get("proposal") is not None]  # repeats included
    assert sv.n_controls == 2 and len(sv.scores) == len(proposals) >= 4 and sv.control_at == [1, 2]
    rows = {r.label for r in rank(handle).rows}
    md = (tmp_path / "report" / "report.md").read_text()
    for label in rows & {"c0", "c1"}:
        assert f"| {label} (control) |" in md
    with open(tmp_path / "report" / "ranking.csv", newline="") as f:
        marked = {row["label"] for row in csv.DictReader(f) if row["is_control"] == "True"}
    assert marked == rows & {"c0", "c1"}
    data = json.loads((tmp_path / "report" / "ranking.json").read_text())
    assert data["judgement"]["search"]["n_controls"] == 2


@pytest.mark.slow
def test_controls_are_the_same_on_2_workers_and_on_1(tmp_path):
    """The same command with 2 local workers and with 1: every trial's label names the same
    architecture, the controls' (c<j>) and the sampler's (t<n>) alike."""
    recipe = write_tiny_recipe(tmp_path, name="rep", steps=40, trials=4)
    common = ["--train.lr", "[1.0e-2]", "--train.batch_size", "8", "--search.in_flight", "2", "--search.control", "3",
              "--train.threads", "1"]
    out = {}
    for name, jobs in (("two", 2), ("one", 1)):
        p = subprocess.run([sys.executable, "-m", "normsearch", "run", str(recipe), "--name", name, "--jobs",
                            str(jobs), *common], cwd=tmp_path, capture_output=True, text=True, timeout=900)
        assert p.returncode == 0, p.stderr[-3000:]
        handle = open_results(tmp_path / "results" / name)
        out[name] = _by_label(handle.study)
        assert census(handle.study).controls_done == {0, 1, 2}
    assert {k for k in out["two"] if k.startswith("c")} == {"c0", "c1", "c2"}
    assert out["two"] == out["one"]


# -- bad values -------------------------------------------------------------------------------------


@pytest.mark.parametrize("value, message", [
    ("-1", "search.control must be >= 0 (uniform draws from the space"),
    ("1.5", "search.control must be an integer, not 1.5"),
    ("many", "search.control must be an integer, not 'many'"),
])
def test_bad_control_values_get_one_line(value, message):
    r = CliRunner().invoke(app, ["validate", str(QUICK), "--search.control", value])
    assert r.exit_code == 2 and message in r.output, r.output
    assert len(r.output.strip().splitlines()) == 1, r.output


def test_controls_need_a_space(tmp_path):
    path = write_tiny_recipe(tmp_path, name="nospace", trials=0)
    text = path.read_text()
    path.write_text(text[:text.index("space:")] + text[text.index("search:"):])
    r = CliRunner().invoke(app, ["validate", str(path), "--search.control", "2"])
    assert r.exit_code == 2 and "no `space` but search.control is 2" in r.output, r.output
