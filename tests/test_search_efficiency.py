"""benchmarks/search_efficiency.py stays runnable: its training at a tiny size, its replay on a fake
table, and its analytic reference against brute force."""

import itertools
import json
import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import search_efficiency as se  # noqa: E402


def test_random_order_cost_is_the_brute_force_expectation():
    n, first, target = 6, ["a"], {"c", "e"}
    rest = [x for x in "abcdef" if x not in first]
    costs = []
    for perm in itertools.permutations(rest):
        order = first + list(perm)
        costs.append(next(i for i, a in enumerate(order, 1) if a in target))
    assert se.random_order_cost(n, first, target) == pytest.approx(sum(costs) / len(costs))
    assert se.random_order_cost(n, ["x", "c"], target) == 2.0  # a baseline is a target
    values, probs = se.random_order_costs(n, first, target)  # the whole distribution, not only its mean
    assert sum(probs) == pytest.approx(1.0)
    assert {v: p for v, p in zip(values, probs)} == pytest.approx(
        {v: costs.count(v) / len(costs) for v in set(costs)})


def test_the_p_value_against_random_order_is_small_only_for_a_search_that_beats_it():
    n, first, target = 128, ["a", "b", "c"], {"t1", "t2", "t3", "t4"}
    expected = se.random_order_cost(n, first, target) / n
    assert se.p_vs_random(n, first, target, [expected] * 10) > 0.3  # as good as chance: no evidence
    assert se.p_vs_random(n, first, target, [0.05] * 10) < 0.001  # 10 seeds all far ahead of chance
    assert se.p_vs_random(n, first, target, [1.0] * 10) > 0.99  # never found it


def fake_table(out: Path, steps: int) -> dict[str, float]:
    """Every point with a made-up loss: each norm helps a little, attn_in most (one best point)."""
    r = se.recipe(steps)
    table = se.load_table(out / "table.json", steps)
    rng = random.Random(0)
    seed0 = {}
    for arch, values in se.grid(r).items():
        loss = 3.0 - sum(0.01 * (i + 1) for i, v in enumerate(values.values()) if v == "norm")
        seed0[arch] = loss
        for s in range(3):
            table["runs"][se.run_key(arch, s)] = {"loss": loss + (0 if s == 0 else rng.gauss(0, 0.002)),
                                                 "diverged": False, "seconds": 0.0}
    (out / "table.json").write_text(json.dumps(table))
    return seed0


def test_replay_on_a_fake_table(tmp_path, capsys):
    seed0 = fake_table(tmp_path, steps=7)
    assert len(seed0) == 128
    assert se.main(["--out", str(tmp_path), "--steps", "7", "--sampler-seeds", "2", "--variants", "random,tpe"]) == 0
    results = json.loads((tmp_path / "replay.json").read_text())
    best = min(seed0, key=seed0.__getitem__)
    assert results["targets"]["best"] == [best] and len(results["targets"]["top3"]) == 3
    assert best in results["targets"]["mean"] and set(results["targets"]["mean"]) <= set(results["top"])
    assert results["points"] == 128 and len(results["baselines"]) == 3
    for v in ("random", "tpe"):
        for run in results["variants"][v]["runs"]:
            hit = run["evaluated"]["best"]
            assert hit is None or 1 <= hit <= 128
            assert run["distinct"] <= 128
    out = capsys.readouterr().out
    assert "| random order (expected) |" in out and "| tpe | 2 |" in out and "(p " in out
    assert (tmp_path / "search_efficiency.png").stat().st_size > 10_000


def test_an_unknown_variant_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="unknown variant 'nope'"):
        se.main(["--out", str(tmp_path), "--variants", "nope"])


def test_training_at_a_tiny_size_is_cached(tmp_path):
    args = ["--out", str(tmp_path), "--points", "2", "--steps", "5", "--top", "1", "--extra-seeds", "1",
            "--workers", "1"]
    assert se.main(args) == 0
    table = json.loads((tmp_path / "table.json").read_text())
    assert len(table["runs"]) == 3  # 2 points on seed 0, the better one on seed 1
    assert all(run["loss"] > 0 for run in table["runs"].values())
    assert se.main(args) == 0  # everything cached: nothing retrained
    assert json.loads((tmp_path / "table.json").read_text())["runs"] == table["runs"]
    with pytest.raises(SystemExit, match="made with other settings"):
        se.main([*args[:5], "6", *args[6:]])
