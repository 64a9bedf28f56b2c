"""``normsearch ablate`` (issue 27): the design between two architectures (the sites where they differ,
mixed layer by layer, A and B as its corners, the half fraction's missing corner trained beside it),
bad input in one line with exit code 2, ``--dry-run`` writing nothing, and an ablation that resumes
after ``kill -9`` without training anything twice, then reports its effects."""

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from normsearch.baselines import baseline
from normsearch.cli import app
from normsearch.search import open_results
from normsearch.spec import Placement
from normsearch.stages import A_STAGE, find_stage, stage_names
from normsearch.stages._ablate_design import Side, changes, combinations, differing, mix, single_changes

from tiny import killed_then_resumed, learned_study, skip_plots, write_tiny_recipe

ROOT = Path(__file__).resolve().parents[2]
V1 = ROOT / "tests" / "fixtures" / "study_v1" / "results" / "v1"  # pre_ln, post_ln, t3 (ai ao fi | fin), t5
runner = CliRunner()
N = 4


def _side(label, p, init="small"):
    return Side(label, p, p.arch_id(N), 0.01, {"init": init}, init)


def test_sites_where_they_differ_and_the_mixed_networks():
    t6 = Placement.from_dict({"block": {"k": {"kind": "rmsnorm", "granularity": "head"}, "ffn_out": "rmsnorm"}})
    assert differing(t6, baseline("pre_ln"), N) == ["attn_in", "k", "ffn_in", "ffn_out", "final"]
    assert differing(t6, baseline("hybridnorm"), N) == ["q", "v", "attn_post", "ffn_out", "final"]  # k is the same
    assert differing(t6, baseline("deepnorm"), N)[-1] == "residual"
    mixln, pre = baseline("mix_ln"), baseline("pre_ln")
    assert mix(pre, mixln, [], N).arch_id(N) == pre.arch_id(N)
    assert mix(pre, mixln, differing(pre, mixln, N), N).arch_id(N) == mixln.arch_id(N)  # per-layer overrides carry
    half = mix(pre, mixln, ["attn_post"], N).resolve(N)  # B's attn_post sits in layer 0 alone
    assert [dict(b).keys() for b in half.blocks] == [{"attn_in", "attn_post", "ffn_in"}] + [{"attn_in", "ffn_in"}] * 3


def test_the_2026_block_options_are_factors_where_a_and_b_differ():
    """x0, sinks and gain_decay are factors like the residual and the gate; a weightless or 1 + w gain makes
    its site differ (the site's norm differs)."""
    modded, nanochat, pre = baseline("modded_nanogpt"), baseline("nanochat"), baseline("pre_ln")
    assert differing(modded, pre, N) == ["embed", "attn_in", "q", "k", "ffn_in", "final", "residual", "x0"]
    assert differing(modded, nanochat, N) == ["residual", "x0"]  # the same weightless sites
    assert differing(baseline("qwen3_next"), baseline("gated_pre_ln"), N) == ["attn_in", "q", "k", "ffn_in", "final",
                                                                            "gain_decay"]
    assert differing(baseline("deepseek_v4"), pre, N)[-1] == "sinks"
    one = mix(modded, pre, ["x0"], N).resolve(N)
    assert one.x0 is None and one.residual == modded.resolve(N).residual
    assert mix(modded, pre, differing(modded, pre, N), N).arch_id(N) == pre.arch_id(N)
    dsv4 = baseline("deepseek_v4")
    assert not mix(dsv4, pre, ["sinks"], N).sinks and mix(pre, dsv4, ["sinks"], N).sinks


def test_the_designs_corners_labels_and_the_init_factor():
    a, b = _side("t6", baseline("peri_ln")), _side("pre_ln", baseline("pre_ln"), "gpt")
    factors = differing(a.placement, b.placement, N)  # attn_out, ffn_out
    full = combinations(a, b, factors, "full", N)
    assert [c["label"] for c in full] == ["t6", "t6+fo", "t6+ao", "pre_ln"]
    assert full[0]["arch_id"] == a.arch_id and full[-1]["arch_id"] == b.arch_id
    with_init = combinations(a, b, [*factors, "init"], "full", N, inits=["small", "gpt"])
    assert len(with_init) == 8 and {c["variant"]["init"] for c in with_init} == {"small", "gpt"}
    assert {c["label"] for c in with_init} >= {"t6", "t6@gpt", "pre_ln", "pre_ln@small"}
    seven = Placement.from_dict({"block": {s: "rmsnorm" for s in ("attn_in", "q", "k", "v", "attn_post", "ffn_mid",
                                                                  "ffn_post")}})
    bare = _side("t0", Placement())
    odd = combinations(bare, _side("x", seven), differing(bare.placement, seven, N), "half", N)  # 2^6 + A's corner
    assert len(odd) == 65 and not odd[0]["in_design"] and odd[0]["label"] == "t0"
    assert sum(c["in_design"] for c in odd) == 64 and odd[-1]["label"] == "x"


def test_leave_one_out_removes_each_norm_and_fills_each_empty_site():
    t6 = _side("t6", Placement.from_dict({"block": {"k": {"kind": "rmsnorm", "granularity": "head"},
                                                     "ffn_out": "rmsnorm"}}))
    hy = _side("hybridnorm", baseline("hybridnorm"), "smallmegatron")
    assert changes(t6, hy, N) == [("q", "from_b"), ("k", "remove"), ("v", "from_b"), ("attn_post", "from_b"),
                                  ("ffn_out", "from_b"), ("final", "from_b")]
    combos = single_changes(t6, hy, N, inits=["small", "smallmegatron"])
    assert [c["label"] for c in combos] == ["t6", "t6+q", "t6-k", "t6+v", "t6+ap", "t6-fo", "t6+fin",
                                            "t6@smallmegatron", "hybridnorm"]
    assert not combos[-1]["in_design"] and combos[2]["sites"] == "fo  [rmsnorm]"


def test_the_job_of_an_ablation_goes_to_workers_and_back(tmp_path):
    from normsearch.jobs import Job
    from normsearch.recipe import load_recipe
    from normsearch.sections import AblateConfig

    cfg = AblateConfig(between=["t6", "pre_ln"], sites=["attn_in", "final"], seeds=5, init=["small", "gpt"],
                       design="full", test_bytes=5000)
    job = Job("ablate", load_recipe(write_tiny_recipe(tmp_path)), ablate=cfg)
    back = Job.from_json(json.loads(json.dumps(job.to_json())))
    assert back.kind == "ablate" and back.ablate == cfg and "ablation" in back.what


def _answer(truth, k=3):
    import numpy as np

    from normsearch.report._ablate import answer
    from normsearch.stats.ablate import design_points, factorial

    rng = np.random.default_rng(7)
    factors = ["attn_in", "k", "final"][:k]
    codes = {f"c{i}": p for i, p in enumerate(design_points(k))}
    samples = {x: {s: 3.0 + truth(p) + float(rng.normal(0, 0.01)) for s in range(3)} for x, p in codes.items()}
    f = factorial(factors, codes, samples, a="c0", b=f"c{2 ** k - 1}")
    data = {"gap": f.gap.__dict__, "alpha": 0.05, "reference": ["c0", f"c{2 ** k - 1}"], "fraction": "full",
            "effects": [e.to_dict() for e in f.effects], "interactions": [e.to_dict() for e in f.interactions]}
    return " ".join(answer(data, "t6", "pre_ln"))


def test_the_plain_answer_names_what_carries_the_gap():
    assert "**attn_in carries the gap**" in _answer(lambda p: 0.2 * (p[0] > 0))
    both = _answer(lambda p: 0.2 * (p[0] > 0 and p[2] > 0))
    assert ("**attn_in and final carry the gap**" in both or "**final and attn_in carry the gap**" in both) \
        and "**attn_in and final act together**" in both, both
    assert "**Nothing carries the gap beyond noise**" in _answer(lambda p: 0.0)


@pytest.fixture
def v1(tmp_path):
    shutil.copytree(V1, tmp_path / "v1")
    (tmp_path / "same.yaml").write_text("block: {attn_in: rmsnorm, ffn_in: rmsnorm}\nfinal: rmsnorm\n")
    return tmp_path


@pytest.mark.parametrize("args, message", [
    (["--between", "t99", "pre_ln"], "--between 't99': study 'v1' has no architecture of that name"),
    (["--between", "pre_ln", "pre_ln"], "--between names pre_ln twice"),
    (["--between", "pre_ln", "{same}"], "they differ in no site"),
    (["--between", "t3", "pre_ln", "--sites", "ffn_in"], "--sites ffn_in: t3 and pre_ln do not differ there; they "
                                                        "differ at attn_out"),
    (["--between", "t3", "pre_ln", "--seeds", "1"], "--seeds must be >= 2"),
    (["--between", "t3", "pre_ln", "--design", "most"], "ablate.design must be"),
    (["--between", "t3"], "requires 2 arguments"),
    (["--between", "t3", "nosuch.yaml"], "--between nosuch.yaml: no such spec file"),
    pytest.param(["--between", "t3", "pre_ln"], "--between t3: study 'v1' has no chosen cell for it",
                 marks=pytest.mark.slow),  # every v1 run stalled; the ranking that says so takes seconds
])
def test_bad_input_gets_one_line_and_exit_code_2(v1, args, message):
    args = [a.format(same=v1 / "same.yaml") for a in args]
    result = runner.invoke(app, ["ablate", str(v1 / "v1"), "--dry-run", *args])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], result.output
    assert not [k for k in stage_names(open_results(v1 / "v1")) if k.startswith("ablate-")]


# --------------------------------------------------------------------------------------------------
# A trained tiny study


_skip_plots = skip_plots


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    return learned_study(tmp_path_factory.mktemp("ablate"), "abl")


def _files(folder: Path) -> dict[Path, tuple[float, int]]:
    return {p: (p.stat().st_mtime, p.stat().st_size) for p in folder.rglob("*") if p.is_file()}


def _runs(folder: Path) -> dict[Path, float]:
    return {p: p.stat().st_mtime for p in folder.glob("ablate-*/runs/*/seed*.json")}


@pytest.mark.slow  # the study it describes is trained first
def test_dry_run_prints_the_design_and_writes_nothing(searched):
    before = _files(searched.parent.parent)
    result = runner.invoke(app, ["ablate", str(searched), "--between", "pre_ln", "post_ln", "--seeds", "2",
                                 "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "full factorial: 2^5 = 32 combinations" in result.output and "64 runs" in result.output
    assert "pre_ln+ai+fin" in result.output and "about" in result.output  # a combination, the time estimate
    half = runner.invoke(app, ["ablate", str(searched), "--between", "pre_ln", "post_ln", "--design", "half",
                               "--dry-run"])
    assert "I = +ai*ap*fi*fp*fin" in half.output and "17 architectures to train" in half.output, half.output
    assert _files(searched.parent.parent) == before
    assert not [k for k in stage_names(open_results(searched)) if k.startswith("ablate-")]




@pytest.mark.slow
def test_ablation_resumes_after_kill_9_trains_nothing_twice_and_reports(searched):
    args = ["ablate", searched, "--between", "pre_ln", "post_ln", "--sites", "attn_in,final", "--seeds", "2",
            "--test-bytes", "5000", "--jobs", "1"]
    after = killed_then_resumed(args, lambda: _runs(searched))
    assert len(after) == 4 * 2  # 2^2 combinations x 2 seeds at pre_ln's one learning rate
    assert {json.loads(q.read_text())["seed"] for q in after} == {4000, 4001}
    assert {json.loads(q.read_text())["metric"] for q in after} == {"test_bpb"}
    info = find_stage(open_results(searched), "ablate-0").user_attrs[A_STAGE]
    assert info["settings"]["sites"] == ["attn_in", "final"] and info["design"]["factors"] == ["attn_in", "final"]
    data = json.loads((searched / "ablate-0" / "ablate.json").read_text())
    assert [r["label"] for r in data["design"]] == ["pre_ln", "pre_ln+fin", "pre_ln+ai", "pre_ln+ai+fin"]
    assert data["design"][2]["levels"] == {"attn_in": "B", "final": "A"}
    assert [e["name"] for e in data["effects"]] == ["attn_in", "final"]
    assert [e["name"] for e in data["interactions"]] == ["attn_in x final"]
    assert {"estimate", "ci_low", "ci_high", "p_holm"} <= set(data["effects"][0])
    assert (searched / "ablate-0" / "ablate.md").read_text().startswith("# Ablation of `pre_ln` against `post_ln`")
    with pytest.MonkeyPatch.context() as mp:  # the study's report links the ablation
        _skip_plots(mp)
        from normsearch.report import write_report

        write_report(open_results(searched), searched, overwrite=True)
    assert "- **Ablations** (`normsearch ablate`): [pre_ln vs post_ln](ablate-0/ablate.md)." in \
        (searched / "report.md").read_text()
    again = runner.invoke(app, [str(a) for a in args[:-2]] + ["--seeds", "3"])
    assert again.exit_code == 2 and "was started with --seeds 2, not 3" in again.output, again.output
