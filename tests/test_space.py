"""The search space on its own: its points, the inverse ``params_of``, and the arch ids of every
shipped space pinned to the values they had before the restructuring (commit 99392a7)."""

import hashlib
import itertools
import random
from pathlib import Path

import pytest

from normsearch.baselines import BASELINES, baseline
from normsearch.errors import NormsearchError
from normsearch.space import load_space, parse_space

SPACES = Path(__file__).resolve().parents[1] / "search_spaces"

# sha256 over the arch ids of the space's points (all of them, or 300 drawn with random.Random(0)
# from the first 3000 of the grid), as computed at commit 99392a7
PINNED = {
    ("quick.yaml", 4): "5936a4252305f95f", ("quick.yaml", 12): "e7114dc318cfd3f1",
    ("sites.yaml", 4): "3b057f11c583249d", ("sites.yaml", 12): "459fb51726f60be5",
    ("depth.yaml", 4): "a3413bc544966845", ("depth.yaml", 12): "85ed9245e8131a5c",
    ("sites-kinds.yaml", 4): "3f800c56577210b1", ("sites-kinds.yaml", 12): "e5b0fc65c256657e",
    # added with the space itself (issue 18)
    ("modern.yaml", 4): "1b96bfe6fd91fe65", ("modern.yaml", 12): "1f5b0a360d9bf938",
}


def points(sp):
    pts = list(itertools.islice(sp.grid(), 0, 3000))
    return pts if sp.size() <= 3000 else random.Random(0).sample(pts, 300)


@pytest.mark.parametrize("name,n_layers", sorted(PINNED))
def test_every_point_of_the_shipped_spaces_keeps_its_arch_id(name, n_layers):
    sp = load_space(name, SPACES)
    h = hashlib.sha256()
    for v in points(sp):
        h.update(sp.placement(v).arch_id(n_layers).encode())
    assert h.hexdigest()[:16] == PINNED[(name, n_layers)]


@pytest.mark.parametrize("name", ["quick.yaml", "sites.yaml", "depth.yaml", "sites-kinds.yaml", "modern.yaml"])
def test_params_of_inverts_placement(name):
    """For every point v: params_of(placement(v)) is a point of the same network, and v itself
    whenever v is the space's only spelling of that network."""
    sp = load_space(name, SPACES)
    L = 4
    by_arch: dict[str, list[dict]] = {}
    pts = points(sp)
    for v in pts:
        by_arch.setdefault(sp.placement(v).arch_id(L), []).append(v)
    for v in pts:
        p = sp.placement(v)
        back = sp.params_of(p, L)
        assert back is not None, v
        assert sp.placement(back).arch_id(L) == p.arch_id(L)
        if len(by_arch[p.arch_id(L)]) == 1 and sp.size() == len(pts):
            assert back == v


def test_grid_size_matches_size_and_points_are_distinct_settings():
    sp = load_space("quick.yaml", SPACES)
    grid = list(sp.grid())
    assert len(grid) == sp.size() == 64
    assert len({tuple(sorted(v.items())) for v in grid}) == 64


def test_baselines_inside_a_space_are_points_of_it_and_others_are_not():
    sp = parse_space({"kind": "rmsnorm", "sites": {"attn_in": ["none", "norm"], "ffn_in": ["none", "norm"],
                                                   "attn_post": ["none", "norm"], "ffn_post": ["none", "norm"],
                                                   "final": ["none", "norm"]}})
    assert sp.params_of(baseline("pre_ln"), 4) == {"site.attn_in": "norm", "site.ffn_in": "norm",
                                                   "site.attn_post": "none", "site.ffn_post": "none",
                                                   "site.final": "norm"}
    assert sp.params_of(baseline("post_ln"), 4)["site.attn_post"] == "norm"
    assert sp.params_of(baseline("peri_ln"), 4) is None  # attn_out is not a site of this space
    assert set(BASELINES) >= {"pre_ln", "post_ln", "peri_ln"}


def test_tied_sites_move_together():
    sp = parse_space({"kind": "rmsnorm", "sites": {"attn_in": ["none", "norm"], "ffn_in": ["none", "norm"]},
                      "tie": [["attn_in", "ffn_in"]]})
    assert list(sp.distributions()) == ["site.attn_in+ffn_in"]
    assert sp.size() == 2
    r = sp.placement({"site.attn_in+ffn_in": "norm"}).resolve(2)
    assert all({"attn_in", "ffn_in"} <= set(r.block(i)) for i in range(2))
    r = sp.placement({"site.attn_in+ffn_in": "none"}).resolve(2)
    assert not any(set(r.block(i)) & {"attn_in", "ffn_in"} for i in range(2))


def test_a_space_is_checked_against_the_depth():
    sp = load_space("depth.yaml", SPACES)
    with pytest.raises(NormsearchError, match="holds no layer"):
        sp.check_depth(1)


@pytest.mark.parametrize("bad,match", [
    ({"sites": {"atn_in": ["none", "norm"]}}, "atn_in"),
    ({"sites": {"attn_in": ["none", "sometimes"]}}, "sometimes"),
    ({"kind": "batchnorm", "sites": {"attn_in": ["none", "norm"]}}, "batchnorm"),
])
def test_bad_spaces_are_one_clear_error(bad, match):
    with pytest.raises(NormsearchError, match=match):
        parse_space(bad)


# -- block options (issue 18) ---------------------------------------------------------------------


def test_the_modern_space_searches_the_block_options_and_holds_the_new_baselines():
    from normsearch.baselines import baselines

    sp = load_space("modern.yaml", SPACES)
    dist = sp.distributions()
    assert dist["opt.depth_scale"] == ("off", "on")  # YAML's off/on arrive as booleans
    assert dist["opt.residual"] == ("plain", "deepnorm", "layerscale")
    assert dist["opt.gate"] == ("none", "head", "elementwise")
    assert {"derf", "seednorm"} <= set(dist["site.attn_in+ffn_in"]) and dist["kind"] == ("rmsnorm", "ssnorm")
    for name in ("pre_ln", "post_ln", "peri_ln", "qk_pre_ln", "gemma3", "lns", "deepnorm", "gated_pre_ln"):
        for L in (4, 12):
            v = sp.params_of(baselines()[name], L)
            assert v is not None, name
            assert sp.placement(v).arch_id(L) == baselines()[name].arch_id(L)
    assert sp.params_of(baselines()["lns"], 4)["opt.depth_scale"] == "on"
    assert sp.params_of(baselines()["deepnorm"], 4)["opt.residual"] == "deepnorm"
    assert sp.params_of(baselines()["gated_pre_ln"], 4)["opt.gate"] == "elementwise"
    assert sp.params_of(baselines()["olmo2"], 4) is None  # full-width q/k norms are not in it


def test_a_space_without_options_cannot_express_them():
    from normsearch.baselines import baselines

    sp = parse_space({"kind": "rmsnorm", "sites": {"attn_in": ["none", "norm"], "ffn_in": ["none", "norm"],
                                                   "attn_post": ["none", "norm"], "ffn_post": ["none", "norm"],
                                                   "final": ["none", "norm"]}})
    assert sp.params_of(baselines()["pre_ln"], 4) is not None
    for name in ("lns", "deepnorm", "gated_pre_ln"):
        assert sp.params_of(baselines()[name], 4) is None, name


@pytest.mark.parametrize("options,message", [
    ({"gates": ["none"]}, "unknown option 'gates'"),
    ({"gate": ["none", "sometimes"]}, "unknown choice 'sometimes'"),
    ({"residual": ["plain", "admin"]}, "unknown choice 'admin'"),
    ([1, 2], "a mapping of option"),
])
def test_bad_options_say_what_is_wrong(options, message):
    with pytest.raises(NormsearchError, match=message):
        parse_space({"sites": {"attn_in": ["none", "norm"]}, "options": options})


# -- the speedrun space (issue 28) ------------------------------------------------------------------


def test_the_speedrun_space_loads_and_its_points_build():
    import torch

    from normsearch.config import ModelConfig
    from normsearch.model import build_model

    sp = load_space("speedrun.yaml", SPACES)
    dist = sp.distributions()
    assert dist["opt.gain"] == ("vector", "none", "one_plus") and dist["opt.x0"] == ("none", "input", "attn")
    assert dist["opt.residual"] == ("plain", "scalars", "lambdas") and dist["opt.sinks"] == ("off", "on")
    assert dist["opt.gain_decay"] == ("off", "on") and dist["site.ctx"] == ("none", "norm")
    assert dist["site.q+k"] == ("none", "norm") and dist["site.final"] == ("norm",)
    cfg = ModelConfig(vocab_size=32, n_layers=2, d_model=16, n_heads=2, context_length=8)
    idx = torch.zeros(1, 8, dtype=torch.long)
    grid = list(sp.grid())
    assert len(grid) == sp.size()
    ids = set()
    sample = random.Random(0).sample(grid, 200)
    for i, v in enumerate(sample):
        p = sp.placement(v)
        r = p.resolve(2)
        ids.add(r.arch_id)
        gains = {s.gain for b in r.blocks for _, s in b} | {s.gain for s in (r.embed, r.final) if s is not None}
        assert gains == {v["opt.gain"]}, v  # the gain option reaches every norm
        assert (r.x0 or {}).get("at", "none") == {"none": "none", "input": "input", "attn": "attn"}[v["opt.x0"]]
        assert r.sinks == (v["opt.sinks"] == "on") and r.gain_decay == (v["opt.gain_decay"] == "on")
        assert ("ctx" in r.block(0)) == (v["site.ctx"] == "norm") and r.gate == v["opt.gate"]
        if "ctx" in r.block(0):
            assert r.block(0)["ctx"].granularity == "head"
        back = sp.params_of(p, 2)
        assert back is not None and sp.placement(back).arch_id(2) == r.arch_id, v
        if i < 12:  # the first dozen build and run
            torch.manual_seed(0)
            with torch.no_grad():
                assert torch.isfinite(build_model(p, cfg)(idx)).all(), v
    assert len(ids) == 200


def _at_default_eps(placement):
    """The placement with every norm at its kind's default eps (the 2026 baselines keep their authors')."""
    from normsearch.spec import Placement

    def strip(d):
        if isinstance(d, dict):
            return {k: strip(v) for k, v in d.items() if k != "eps"}
        return [strip(v) for v in d] if isinstance(d, list) else d

    return Placement.from_dict(strip(placement.to_dict()))


@pytest.mark.parametrize("name", ["modded_nanogpt", "nanochat", "qwen3_next"])
def test_the_speedrun_baselines_at_the_default_eps_are_points_of_their_space(name):
    """The space holds each of these blocks (sites, gains, residual, x0, gate, gain decay); the baselines
    themselves keep their authors' eps (commit 30f08f8), which the space does not search."""
    sp = load_space("speedrun.yaml", SPACES)
    assert sp.params_of(baseline(name), 4) is None  # the authors' eps: beside the space, not in it
    p = _at_default_eps(baseline(name))
    assert p.arch_id(4) != baseline(name).arch_id(4)
    for L in (4, 12):
        v = sp.params_of(p, L)
        assert v is not None, (name, L)
        assert sp.placement(v).arch_id(L) == p.arch_id(L)
    v = sp.params_of(p, 4)
    want = {"modded_nanogpt": ("none", "scalars", "attn", "off"), "nanochat": ("none", "lambdas", "input", "off"),
            "qwen3_next": ("one_plus", "plain", "none", "on")}[name]
    assert (v["opt.gain"], v["opt.residual"], v["opt.x0"], v["opt.gain_decay"]) == want


@pytest.mark.parametrize("name", ["deepseek_v4", "hybridnorm"])
def test_baselines_outside_the_speedrun_space_are_not_points_of_it(name):
    sp = load_space("speedrun.yaml", SPACES)
    assert sp.params_of(baseline(name), 4) is None
    assert sp.params_of(_at_default_eps(baseline(name)), 4) is None  # not for the eps: a weightless q beside a weighted k
    assert sp.params_of(baseline("pre_ln"), 4) is not None


def test_a_space_without_the_new_options_cannot_express_them():
    sp = parse_space({"kind": "rmsnorm", "sites": {"embed": ["none", "norm"], "attn_in": ["none", "norm"],
                                                   "ffn_in": ["none", "norm"], "q": ["none", "norm"],
                                                   "k": ["none", "norm"], "final": ["none", "norm"]},
                      "tie": [["attn_in", "ffn_in"], ["q", "k"]]})
    for name in ("modded_nanogpt", "nanochat", "qwen3_next"):
        assert sp.params_of(_at_default_eps(baseline(name)), 4) is None, name
    assert sp.params_of(baseline("qk_pre_ln"), 4) is not None
    # a vector gain is the default choice: points without the option are unchanged
    assert all(s.gain == "vector" for _, s in sp.placement(next(iter(sp.grid()))).block)


def test_a_ctx_granularity_is_searched_like_q_k_v():
    sp = parse_space({"sites": {"attn_in": ["none", "norm"], "ctx": ["none", "norm"]},
                      "granularity": {"ctx": ["head", "full"]}})
    assert sp.distributions()["gran.ctx"] == ("head", "full")
    full = sp.placement({"site.attn_in": "norm", "site.ctx": "norm", "gran.ctx": "full"})
    assert dict(full.block)["ctx"].granularity == "full"
    assert sp.params_of(full, 4)["gran.ctx"] == "full"


@pytest.mark.parametrize("options,message", [
    ({"x0": ["sideways"]}, "space options.x0: unknown choice 'sideways'; known: none, input, attn"),
    ({"gain": ["vector", "maybe"]}, "space options.gain: unknown choice 'maybe'; known: vector, none, one_plus"),
    ({"sinks": ["off", "sometimes"]}, "space options.sinks: unknown choice 'sometimes'; known: off, on"),
    ({"residual": ["plain", "lambda"]}, "unknown choice 'lambda' (did you mean 'lambdas'?)"),
    ({"gain_decay": ["maybe"]}, "space options.gain_decay: unknown choice 'maybe'"),
])
def test_bad_speedrun_options_are_one_line_naming_the_choices(options, message):
    with pytest.raises(NormsearchError) as e:
        parse_space({"sites": {"attn_in": ["none", "norm"]}, "options": options})
    assert message in str(e.value) and "\n" not in str(e.value)


def test_a_ctx_granularity_outside_the_head_sites_is_refused():
    with pytest.raises(NormsearchError, match="only q, k, v and ctx have one, not 'attn_in'"):
        parse_space({"sites": {"attn_in": ["none", "norm"]}, "granularity": {"attn_in": "head"}})


def test_a_weightless_norm_of_a_space_has_no_bias_either_as_the_baselines_weightless_norms():
    """gain: none is weightless: a LayerNorm (or DyT) of the space then has neither gain nor bias, the same
    norm as a baseline's weightless one (baselines._norm), so a weightless baseline block with LayerNorm is a
    point of a space that holds its sites, and the point's arch_id is the baseline's."""
    from normsearch.baselines import _norm
    from normsearch.spec import Placement

    sp = parse_space({"kind": "layernorm", "sites": {"attn_in": ["none", "norm"], "ffn_in": ["none", "norm"],
                                                     "final": ["none", "norm"]},
                      "options": {"gain": ["vector", "none"]}})
    v = next(v for v in sp.grid() if v.get("opt.gain") == "none" and v["site.attn_in"] == "norm")
    norms = [s for _, s in sp.placement(v).block] + [sp.placement(v).final]
    assert norms and all(s.gain == "none" and s.opts["bias"] is False for s in norms if s is not None)
    ln = _norm("layernorm", "none")
    hand = Placement(block={"attn_in": ln, "ffn_in": ln}, final=ln)
    w = sp.params_of(hand, 4)
    assert w is not None and sp.placement(w).arch_id(4) == hand.arch_id(4)
    vector = next(v for v in sp.grid() if v.get("opt.gain") == "vector" and v["site.attn_in"] == "norm")
    assert all(s.opts["bias"] is True for _, s in sp.placement(vector).block)  # a gain keeps its bias
