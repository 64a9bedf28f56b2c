"""Every baseline: the sites it has (against the design note's table) and the block's output against
the paper's equation, written out by hand with the same weights."""

import math

import pytest
import torch
import torch.nn.functional as F

from normsearch.baselines import BASELINES, baselines
from normsearch.config import ModelConfig
from normsearch.model import build_model
from reference import speedrun_refs as R

L = 4
# From shared/design/norm-sites.md, layer by layer at depth 4.
EXPECTED_SITES = {
    "post_ln": [{"attn_post", "ffn_post"}] * L,
    "pre_ln": [{"attn_in", "ffn_in"}] * L,
    "peri_ln": [{"attn_in", "attn_out", "ffn_in", "ffn_out"}] * L,
    "olmo2": [{"q", "k", "attn_out", "ffn_out"}] * L,
    "qk_pre_ln": [{"attn_in", "q", "k", "ffn_in"}] * L,
    "hybridnorm": [{"q", "k", "v", "attn_post"}] * L,
    "hybridnorm_star": [{"attn_in", "q", "k", "v", "ffn_in"}] + [{"q", "k", "v", "attn_post"}] * (L - 1),
    "mix_ln": [{"attn_post", "ffn_post"}] + [{"attn_in", "ffn_in"}] * (L - 1),
    "normformer": [{"attn_in", "attn_out", "ffn_in", "ffn_mid"}] * L,
    "dyt": [{"attn_in", "ffn_in"}] * L,
    # added in 2026 (the search-space issue)
    "sandwich": [{"attn_in", "attn_out", "ffn_in", "ffn_out"}] * L,
    "gemma3": [{"attn_in", "q", "k", "attn_out", "ffn_in", "ffn_out"}] * L,
    "lns": [{"attn_in", "ffn_in"}] * L,
    "deepnorm": [{"attn_post", "ffn_post"}] * L,
    "gated_pre_ln": [{"attn_in", "ffn_in"}] * L,
    # the 2026 speedruns and frontier models (commit 5b7f42b; tests/reference/README.md)
    "modded_nanogpt": [{"attn_in", "q", "k", "ffn_in"}] * L,
    "nanochat": [{"attn_in", "q", "k", "ffn_in"}] * L,
    "qwen3_next": [{"attn_in", "q", "k", "ffn_in"}] * L,
    "deepseek_v4": [{"attn_in", "q", "k", "v", "ffn_in"}] * L,
}
HAS_FINAL = {n: n not in ("post_ln", "deepnorm") for n in EXPECTED_SITES}
HAS_EMBED = {"modded_nanogpt", "nanochat"}  # x0 = norm(embedding) (MNG:1549, NC:473)
GRANULARITY = {"olmo2": "full", "qk_pre_ln": "head", "hybridnorm": "head", "hybridnorm_star": "head",
               "gemma3": "head", "modded_nanogpt": "head", "nanochat": "head", "qwen3_next": "head",
               "deepseek_v4": "head"}
# What `normsearch baselines` prints for them (0: weightless, +: a 1 + w gain, plain: a gain from 1).
DESCRIBED = {
    "modded_nanogpt": "ai0 q0 k0 fi0 | emb0 fin0  [rmsnorm]  +residual(gain=scalar:1, stream=sublayer:1.04881@5lr)"
                      "  +x0(attn, linear:0)",
    "nanochat": "ai0 q0 k0 fi0 | emb0 fin0  [rmsnorm]  +residual(stream=block:1.15..1.05@0.01lr)"
                "  +x0(input, scalar:0.2..0.05)",
    "qwen3_next": "ai+ q+ k+ fi+ | fin+  [rmsnorm]  +gate:elementwise  +gain_decay",
    "deepseek_v4": "ai q0 k v fi | fin  [rmsnorm]  +sinks",
}


def test_the_table_covers_every_baseline():
    assert set(EXPECTED_SITES) == set(BASELINES)


@pytest.mark.parametrize("name", list(EXPECTED_SITES))
def test_sites_per_block(name):
    r = baselines()[name].resolve(L)
    assert [set(dict(b)) for b in r.blocks] == EXPECTED_SITES[name]
    assert (r.final is not None) == HAS_FINAL[name]
    assert (r.embed is not None) == (name in HAS_EMBED)
    for b in r.blocks:
        for site, spec in b:
            assert spec.kind == ("dyt" if name == "dyt" else "rmsnorm")
            if site in "qkv":
                assert spec.granularity == GRANULARITY[name]


# -- the equations -------------------------------------------------------------------------------

CFG = ModelConfig(vocab_size=50, n_layers=L, d_model=24, n_heads=3, context_length=12, rope=True, tie_embeddings=True)


def norm_ref(x, mod, group=None):
    """A norm from its definition, in float64, reading the module's parameters by name (the kind's
    maths only: a depth scale is the caller's to write out)."""
    if group:
        return norm_ref(x.unflatten(-1, (-1, group)), mod).flatten(-2)
    kind, o = mod.spec.kind, mod.spec.opts
    w = getattr(mod, "weight", None)
    b = getattr(mod, "bias", None)
    rms = lambda t: t / torch.sqrt((t * t).mean(-1, keepdim=True) + o["eps"])
    if kind in ("rmsnorm", "ssnorm"):  # ssnorm: one scalar weight (checked in test_new_kinds_parameters)
        y = rms(x)
    elif kind == "layernorm":
        mu = x.mean(-1, keepdim=True)
        y = (x - mu) / torch.sqrt(((x - mu) ** 2).mean(-1, keepdim=True) + o["eps"])
    elif kind == "derf":  # Chen et al. 2025: gamma * erf(alpha x + s) + beta
        y = torch.erf(mod.alpha * x + mod.shift)
    elif kind == "seednorm":  # Cai et al. 2025, eq. 1: [tanh(x . beta) alpha + gamma] * x / RMS(x)
        dot = (x * mod.beta).sum(-1, keepdim=True)
        return (torch.tanh(dot) * mod.alpha + w) * rms(x)
    else:  # dyt
        y = torch.tanh(mod.alpha * x)
    if w is not None:
        y = y * w
    if b is not None:
        y = y + b
    return y


def attn_ref(x, blk, qkv_norm=False, full=False, gate=None):
    """softmax(q k^T / sqrt(d)) v with RoPE, causal; q/k/v norms per head or over the full width;
    ``gate`` (head or elementwise): SDPA's output times sigmoid(x W_g), x the attention's input, one
    gate per head or per channel, before W_o (Qiu et al. 2025, and the authors' modeling_qwen3.py)."""
    B, T, C = x.shape
    H, hd = CFG.n_heads, CFG.head_dim
    Wq, Wk, Wv = blk.attn.qkv.weight.split(C, 0)
    q, k, v = x @ Wq.T, x @ Wk.T, x @ Wv.T
    n = blk.norms
    g = None if full else hd
    if qkv_norm:
        q, k = norm_ref(q, n.q, g), norm_ref(k, n.k, g)
        if n.v.present:
            v = norm_ref(v, n.v, g)
    heads = lambda t: t.view(B, T, H, hd).transpose(1, 2)
    q, k, v = heads(q), heads(k), heads(v)
    pos = torch.arange(T, dtype=torch.float64)
    inv = 1.0 / CFG.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    ang = pos[:, None] * inv[None]
    cos, sin = ang.cos(), ang.sin()

    def rot(t):
        a, b = t[..., : hd // 2], t[..., hd // 2:]
        return torch.cat([a * cos - b * sin, a * sin + b * cos], -1)

    q, k = rot(q), rot(k)
    s = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
    s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    y = (s.softmax(-1) @ v).transpose(1, 2)  # (B, T, H, hd)
    if gate is not None:
        g = torch.sigmoid(x @ blk.attn.gate.weight.T)  # (B, T, H) or (B, T, C)
        y = y * (g[..., None] if gate == "head" else g.view(B, T, H, hd))
    return y.reshape(B, T, C) @ blk.attn.out.weight.T


def ffn_ref(x, blk, mid=False):
    h = F.gelu(x @ blk.ffn.up.weight.T)
    if mid:
        h = norm_ref(h, blk.norms.ffn_mid)
    return h @ blk.ffn.down.weight.T


def N(blk, site):
    return lambda t: norm_ref(t, blk.norms[site])


def pre_ln(x, b):
    y = x + attn_ref(N(b, "attn_in")(x), b)
    return y + ffn_ref(N(b, "ffn_in")(y), b)


def post_ln(x, b):
    y = N(b, "attn_post")(x + attn_ref(x, b))
    return N(b, "ffn_post")(y + ffn_ref(y, b))


def peri_ln(x, b):
    y = x + N(b, "attn_out")(attn_ref(N(b, "attn_in")(x), b))
    return y + N(b, "ffn_out")(ffn_ref(N(b, "ffn_in")(y), b))


def olmo2(x, b):
    y = x + N(b, "attn_out")(attn_ref(x, b, qkv_norm=True, full=True))
    return y + N(b, "ffn_out")(ffn_ref(y, b))


def qk_pre_ln(x, b):
    y = x + attn_ref(N(b, "attn_in")(x), b, qkv_norm=True)
    return y + ffn_ref(N(b, "ffn_in")(y), b)


def hybridnorm(x, b):
    # Zhuo et al. eq.: Y = X + MHA(QKV-Norm(X)); X' = FFN(Norm(Y)) + Norm(Y)
    y = x + attn_ref(x, b, qkv_norm=True)
    ny = N(b, "attn_post")(y)
    return ffn_ref(ny, b) + ny


def hybridnorm_star_first(x, b):
    y = x + attn_ref(N(b, "attn_in")(x), b, qkv_norm=True)
    return y + ffn_ref(N(b, "ffn_in")(y), b)


def normformer(x, b):
    y = x + N(b, "attn_out")(attn_ref(N(b, "attn_in")(x), b))
    return y + ffn_ref(N(b, "ffn_in")(y), b, mid=True)


def gemma3(x, b):
    y = x + N(b, "attn_out")(attn_ref(N(b, "attn_in")(x), b, qkv_norm=True))
    return y + N(b, "ffn_out")(ffn_ref(N(b, "ffn_in")(y), b))


def lns(i):
    """Sun et al. 2025: h = x + F(LN(x) / sqrt(l)), l = i + 1 the 1-based layer index."""
    def block(x, b):
        s = 1.0 / math.sqrt(i + 1)
        y = x + attn_ref(s * norm_ref(x, b.norms.attn_in), b)
        return y + ffn_ref(s * norm_ref(y, b.norms.ffn_in), b)
    return block


def deepnorm(x, b):
    """Wang et al. 2022: x_{l+1} = LN(alpha x_l + G(x_l)), alpha = (2N)^(1/4) for a decoder of N layers."""
    alpha = (2 * L) ** 0.25
    y = N(b, "attn_post")(alpha * x + attn_ref(x, b))
    return N(b, "ffn_post")(alpha * y + ffn_ref(y, b))


def gated_pre_ln(x, b):
    h = N(b, "attn_in")(x)
    y = x + attn_ref(h, b, gate="elementwise")
    return y + ffn_ref(N(b, "ffn_in")(y), b)


EQUATIONS = {
    "post_ln": [post_ln] * L,
    "pre_ln": [pre_ln] * L,
    "peri_ln": [peri_ln] * L,
    "olmo2": [olmo2] * L,
    "qk_pre_ln": [qk_pre_ln] * L,
    "hybridnorm": [hybridnorm] * L,
    "hybridnorm_star": [hybridnorm_star_first] + [hybridnorm] * (L - 1),
    "mix_ln": [post_ln] + [pre_ln] * (L - 1),
    "normformer": [normformer] * L,
    "dyt": [pre_ln] * L,
    "sandwich": [peri_ln] * L,
    "gemma3": [gemma3] * L,
    "lns": [lns(i) for i in range(L)],
    "deepnorm": [deepnorm] * L,
    "gated_pre_ln": [gated_pre_ln] * L,
}


@pytest.mark.parametrize("name", list(EQUATIONS))
@pytest.mark.parametrize("kind", ["rmsnorm", "layernorm"])
def test_block_matches_the_papers_equation(name, kind):
    torch.manual_seed(0)
    model = build_model(baselines(kind)[name], CFG).double()
    with torch.no_grad():  # make every norm parameter matter
        for pname, p in model.named_parameters():
            if ".norms." in f".{pname}":
                p.add_(0.3 * torch.randn_like(p))
    x = torch.randn(2, CFG.context_length, CFG.d_model, dtype=torch.float64)
    rope = model.rope(CFG.context_length, x.device, torch.float64)
    for i, block in enumerate(model.blocks):
        got = block(x, rope)
        want = EQUATIONS[name][i](x, block)
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10, msg=f"{name} layer {i}")


@pytest.mark.parametrize("name", ["pre_ln", "post_ln"])
def test_model_level_final_norm(name):
    torch.manual_seed(0)
    model = build_model(baselines()[name], CFG).double()
    idx = torch.randint(0, CFG.vocab_size, (2, 8))
    logits, hidden = model(idx, return_hidden=True)
    x = model.wte.weight[idx]
    torch.testing.assert_close(hidden[0], x)
    last = hidden[-1]
    if name == "pre_ln":
        last = norm_ref(last, model.norms.final)
    torch.testing.assert_close(logits, last @ model.wte.weight.T)


# -- the 2026 kinds and block options ------------------------------------------------------------

NEW_KINDS = ["derf", "seednorm", "ssnorm"]


def _perturbed(placement, cfg=CFG):
    torch.manual_seed(0)
    model = build_model(placement, cfg).double()
    with torch.no_grad():  # make every norm parameter and branch gain matter (ReZero starts at 0)
        for pname, p in model.named_parameters():
            if ".norms." in f".{pname}" or ".residual." in f".{pname}":
                p.add_(0.3 * torch.randn_like(p))
    return model


def _check_blocks(model, equations, what):
    x = torch.randn(2, CFG.context_length, CFG.d_model, dtype=torch.float64)
    rope = model.rope(CFG.context_length, x.device, torch.float64)
    for i, block in enumerate(model.blocks):
        torch.testing.assert_close(block(x, rope), equations[i](x, block), rtol=1e-10, atol=1e-10,
                                   msg=f"{what} layer {i}")


@pytest.mark.parametrize("name", ["pre_ln", "peri_ln", "gemma3", "lns", "deepnorm", "gated_pre_ln"])
@pytest.mark.parametrize("kind", NEW_KINDS)
def test_new_kinds_in_the_baselines_match_their_equations(name, kind):
    """Derf, SeeDNorm and single-scale RMSNorm at d_model sites and per head (gemma3's q/k)."""
    _check_blocks(_perturbed(baselines(kind)[name]), EQUATIONS[name], f"{name}/{kind}")


def test_new_kinds_parameters():
    from normsearch.model import Norm
    from normsearch.spec import NormSpec

    derf = Norm(NormSpec("derf"), 6)
    assert (derf.alpha.shape, derf.alpha.item(), derf.shift.shape, derf.shift.item()) == ((), 1.0, (), 0.0)
    assert derf.weight.shape == derf.bias.shape == (6,)
    seed = Norm(NormSpec("seednorm"), 6)
    assert {n: tuple(p.shape) for n, p in seed.named_parameters()} == {"weight": (6,), "alpha": (6,), "beta": (6,)}
    assert seed.weight.eq(1).all() and seed.alpha.eq(1).all() and seed.beta.eq(0).all()
    ss = Norm(NormSpec("ssnorm"), 6)
    assert {n: tuple(p.shape) for n, p in ss.named_parameters()} == {"weight": ()}
    # at init SeeDNorm is RMSNorm (beta = 0), and SSNorm too (gain 1)
    x = torch.randn(3, 6, dtype=torch.float64)
    rms = Norm(NormSpec("rmsnorm"), 6).double()
    torch.testing.assert_close(seed.double()(x), rms(x))
    torch.testing.assert_close(ss.double()(x), rms(x))


def _residual_pre_ln(gain_of):
    """x + g_attn * F(LN(x)), then the FFN the same: the residual with a learnable branch gain."""
    def block(x, b):
        y = x + gain_of(b, "attn") * attn_ref(N(b, "attn_in")(x), b)
        return y + gain_of(b, "ffn") * ffn_ref(N(b, "ffn_in")(y), b)
    return block


@pytest.mark.parametrize("preset,shape,init", [("rezero", (), 0.0), ("layerscale", (CFG.d_model,), 0.1)])
def test_residual_gains_match_their_equations(preset, shape, init):
    """ReZero (Bachlechner et al.: x + alpha F(x), alpha a scalar from 0) and LayerScale (Touvron et
    al.: x + diag(lambda) F(x), lambda a vector from a small value)."""
    from normsearch.spec import Placement

    p = Placement.from_dict({"norm": "rmsnorm", "block": {"attn_in": True, "ffn_in": True}, "final": True,
                             "residual": preset})
    fresh = build_model(p, CFG)
    for b in fresh.blocks:
        assert b.residual.attn_gain.shape == b.residual.ffn_gain.shape == shape
        assert b.residual.attn_gain.eq(init).all()
    gain = lambda b, branch: getattr(b.residual, f"{branch}_gain")
    _check_blocks(_perturbed(p), [_residual_pre_ln(gain)] * L, preset)


def test_head_gate_matches_its_equation():
    from normsearch.spec import Placement

    p = Placement.from_dict({"norm": "rmsnorm", "block": {"attn_in": True, "ffn_in": True}, "final": True,
                             "gate": "head"})
    model = _perturbed(p)
    assert model.blocks[0].attn.gate.weight.shape == (CFG.n_heads, CFG.d_model)

    def eq(x, b):
        y = x + attn_ref(N(b, "attn_in")(x), b, gate="head")
        return y + ffn_ref(N(b, "ffn_in")(y), b)

    _check_blocks(model, [eq] * L, "gate head")


def test_deepnorm_and_lns_initialisation():
    """DeepNorm (torchscale): v, W_o and the FFN weights divided by (8N)^(1/4), q and k untouched,
    no GPT-2 scaled init; LNS (the authors' code): no scaled init of W_o, W_down either."""
    def weights(name):
        torch.manual_seed(0)
        return dict(build_model(baselines()[name], CFG).named_parameters())

    post, deep = weights("post_ln"), weights("deepnorm")
    beta, C, scaled = (8 * L) ** -0.25, CFG.d_model, 1 / math.sqrt(2 * L)
    for i in range(L):
        w = f"blocks.{i}."
        torch.testing.assert_close(deep[w + "attn.qkv.weight"][:2 * C], post[w + "attn.qkv.weight"][:2 * C])
        torch.testing.assert_close(deep[w + "attn.qkv.weight"][2 * C:], beta * post[w + "attn.qkv.weight"][2 * C:])
        torch.testing.assert_close(deep[w + "ffn.up.weight"], beta * post[w + "ffn.up.weight"])
        for proj in ("attn.out.weight", "ffn.down.weight"):  # post_ln's carry the 1/sqrt(2N); deepnorm's don't
            torch.testing.assert_close(deep[w + proj], beta * post[w + proj] / scaled)
    pre, lns_w = weights("pre_ln"), weights("lns")
    torch.testing.assert_close(lns_w["blocks.0.attn.out.weight"], pre["blocks.0.attn.out.weight"] / scaled)
    torch.testing.assert_close(lns_w["blocks.0.attn.qkv.weight"], pre["blocks.0.attn.qkv.weight"])


# -- the paper inits -------------------------------------------------------------------------------

def test_every_baseline_names_a_paper_init_that_the_model_accepts():
    import typing

    from normsearch.baselines import paper_init

    inits = typing.get_args(typing.get_type_hints(ModelConfig)["init"])
    for name, b in BASELINES.items():
        assert b.init in inits, name
        assert b.init_source, name  # where it was read, or why it is the fallback
        assert paper_init(name) == b.init
        cfg = ModelConfig.from_dict({**CFG.to_dict(), "init": b.init})
        out = build_model(baselines()[name], cfg)(torch.zeros(1, 4, dtype=torch.long))
        assert torch.isfinite(out).all(), name
        if b.alias_of:
            assert b.init == BASELINES[b.alias_of].init
    # a found placement (or no architecture) has no paper init
    assert paper_init(None) is None and paper_init("t4") is None and paper_init("") is None
    # one word each: a grid variant's tag is init-<name>, split on "_" and "-"
    assert all(name.isalnum() for name in inits)
    assert {b.init for b in BASELINES.values()} >= {"gpt", "fairseq", "truncnormal", "smallmegatron", "normal", "mixln"}


def test_paper_inits_read_from_the_authors_code():
    """The ones found (see the sources): OLMo 2 truncated normal, HybridNorm OLMo's full_megatron with
    the small std, Mix-LN's wide embeddings, LNS / DyT / gated attention plain N(0, 0.02), the
    fairseq-family Post-LN, NormFormer and DeepNet; the rest fall back to gpt and say so."""
    want = {"post_ln": "fairseq", "pre_ln": "gpt", "peri_ln": "gpt", "olmo2": "truncnormal", "qk_pre_ln": "gpt",
            "hybridnorm": "smallmegatron", "hybridnorm_star": "smallmegatron", "mix_ln": "mixln",
            "normformer": "fairseq", "dyt": "normal", "sandwich": "gpt", "gemma3": "gpt", "lns": "normal",
            "deepnorm": "fairseq", "gated_pre_ln": "normal", "modded_nanogpt": "modded", "nanochat": "nanochat",
            "qwen3_next": "normal", "deepseek_v4": "normal"}
    assert {n: b.init for n, b in BASELINES.items()} == want
    for name in ("qk_pre_ln", "gemma3"):
        assert "not found" in BASELINES[name].init_source and "fallback gpt" in BASELINES[name].init_source


def test_deepnorm_paper_init_is_torchscale(one_thread):
    """fairseq's uniform inits, then v, W_o and the FFN's weights times beta = (8N)^(-1/4)."""
    torch.manual_seed(0)
    cfg = ModelConfig.from_dict({**CFG.to_dict(), "d_model": 96, "n_heads": 4, "init": "fairseq"})
    model = build_model("deepnorm", cfg)
    C, beta = 96, (8 * L) ** -0.25
    w = model.blocks[1].attn.qkv.weight
    assert w[:2 * C].abs().max().item() <= math.sqrt(3 / (2 * C)) + 1e-7
    assert w[2 * C:].abs().max().item() <= beta * math.sqrt(3 / (2 * C)) + 1e-7
    assert w[2 * C:].abs().max().item() > 0.95 * beta * math.sqrt(3 / (2 * C))
    assert model.blocks[1].ffn.down.weight.abs().max().item() <= beta / math.sqrt(cfg.ffn_dim) + 1e-7


def test_the_baselines_command_shows_each_paper_init_and_its_source():
    import json

    from typer.testing import CliRunner

    from normsearch.cli import app

    r = CliRunner().invoke(app, ["baselines"])
    assert r.exit_code == 0, r.output
    assert "paper init smallmegatron: BryceZhuo/HybridNorm" in r.output
    assert "paper init truncnormal: allenai/OLMo" in r.output
    assert "smallmegatron: N(0, s) truncated at 3 std, s = sqrt(2/(5d))" in r.output  # the legend of the rules
    r = CliRunner().invoke(app, ["baselines", "--json"])
    rows = {row["name"]: row for row in json.loads(r.output)}
    assert rows["mix_ln"]["init"] == "mixln" and "pixeli99/MixLN" in rows["mix_ln"]["init_source"]
    assert all(row["init"] == BASELINES[n].init and row["init_source"] for n, row in rows.items())


# -- the 2026 speedruns and frontier models against their authors' code -----------------------------
#
# tests/reference/speedrun_refs.py computes each baseline's block as its authors' code does (modded-nanogpt
# MNG, nanochat NC, Qwen3-Next QN, DeepSeek-V4 DS; README.md there cites the lines). What is not the norm
# scheme is passed in from our model: the MLP (ffn.up, ffn.down, GELU or SwiGLU), the rotary embedding
# (apply_rope with model.rope) and the softmax scale (1/sqrt(head_dim)); our norms' eps goes to every
# reference norm. Where the authors have something our baseline does not express (its notes in
# normsearch/baselines.py), the reference is set so that it reduces to what the baseline expresses, and each
# test's docstring says what was reduced.

import dataclasses  # noqa: E402

from normsearch.model import Norm, apply_rope, is_norm_parameter, is_residual_gain, is_x0  # noqa: E402
from normsearch.spec import NormSpec  # noqa: E402

SPEEDRUNS = ["modded_nanogpt", "nanochat", "qwen3_next", "deepseek_v4"]
SCFG = ModelConfig(vocab_size=64, n_layers=3, d_model=32, n_heads=4, context_length=16, rope=True)
F64 = torch.float64


def test_the_2026_baselines_as_normsearch_baselines_prints_them():
    specs = baselines()
    for name, line in DESCRIBED.items():
        assert specs[name].resolve(L).describe() == line, name


def _speedrun_model(placement, cfg=SCFG):
    """Our model in float64 with every norm gain, stream and branch multiplier, x0 lambda or gate (weight
    and bias) and attention sink moved off its init, so that each one matters."""
    torch.manual_seed(0)
    model = build_model(placement, cfg).double()
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if is_norm_parameter(pname) or is_residual_gain(pname) or is_x0(pname) or pname.endswith(".attn.sinks"):
                p.add_(0.3 * torch.randn_like(p))
    return model


def _eps(model):
    """The one eps of the model's norms (passed to the references in place of the authors')."""
    eps = {m.opts["eps"] for m in model.modules() if isinstance(m, Norm)}
    assert len(eps) == 1, eps
    return eps.pop()


def _rope(model, T):
    """Our rotary embedding as the references' ``rope`` callable on (B, H, T, head_dim)."""
    cos, sin = model.rope(T, torch.device("cpu"), F64)
    return lambda t: apply_rope(t, cos, sin)


def _mlp(blk):
    """Our MLP, written out, as the references' ``mlp`` callable (the authors' relu^2 MLP or MoE is not the
    norm scheme)."""
    f = blk.ffn

    def mlp(h):
        a = F.silu(h @ f.gate.weight.T) * (h @ f.up.weight.T) if f.swiglu else F.gelu(h @ f.up.weight.T)
        return a @ f.down.weight.T

    return mlp


def _wqkvo(blk):
    """Our fused attn.qkv.weight rows are [W_q; W_k; W_v]; W_o is attn.out.weight."""
    Wq, Wk, Wv = blk.attn.qkv.weight.split(blk.attn.qkv.weight.size(1), 0)
    return Wq, Wk, Wv, blk.attn.out.weight


def _inputs(cfg=SCFG):
    torch.manual_seed(1)
    shape = (2, cfg.context_length, cfg.d_model)
    return torch.randn(*shape, dtype=F64), torch.randn(*shape, dtype=F64)  # the stream x and an x0


def _cfg(ffn):
    return dataclasses.replace(SCFG, ffn=ffn)


# modded-nanogpt ------------------------------------------------------------------------------------

def _modded_ref_block(x, x0, b, rope, eps):
    H, hd = SCFG.n_heads, SCFG.head_dim
    r = b.residual
    return R.modded_nanogpt_block(
        x, x0, qkvo_w=R.modded_nanogpt_qkvo(*_wqkvo(b)), sa_lambdas=torch.ones(2, dtype=F64),
        resid_lambda=torch.stack([r.attn_stream, r.ffn_stream]), post_lambda=torch.stack([r.attn_gain, r.ffn_gain]),
        x0_gate=F.linear(x0, b.x0.gate.weight, b.x0.gate.bias), mlp=_mlp(b), rope=rope, scale=hd**-0.5, n_heads=H,
        eps=eps)


@pytest.mark.parametrize("ffn", ["gelu", "swiglu"])
def test_modded_nanogpt_block_matches_the_authors_code(ffn):
    """x = resid_lambdas[i,0] x + post_lambdas[i,0] attn(norm(x)) + x0 * x0_gate; then the MLP the same
    (MNG:1598, 1638, 1643, 1665), with weightless QK norm per head before RoPE (MNG:1106, 1109).

    Reduced in the reference (not expressed by the baseline): sa_lambdas = (1, 1) (MNG:1103, 1161: W_qkv and
    W_o unscaled); the x0 gate is a linear map of x0 per layer, x0 . w_i + b_i (our blocks.{i}.x0.gate),
    where the authors' is a GELU network of x0 (layers 0-3) or of the residual at layer 4 (layers 4-9)
    shared by the layers (MNG:1465-1484), which a linear gate cannot reproduce; no attention gate, value or
    bigram embeddings, XSA, paired heads; our softmax scale 1/sqrt(hd) and full RoPE instead of YaRN's
    0.1 and half-truncated RoPE; our eps instead of F.rms_norm's eps=None."""
    model = _speedrun_model(baselines()["modded_nanogpt"], _cfg(ffn))
    x, x0 = _inputs()
    T, eps = SCFG.context_length, _eps(model)
    tables = model.rope(T, x.device, F64)
    for i, b in enumerate(model.blocks):
        want = _modded_ref_block(x, x0, b, _rope(model, T), eps)
        torch.testing.assert_close(b(x, tables, x0), want, rtol=1e-10, atol=1e-10, msg=f"modded layer {i}")


# nanochat ------------------------------------------------------------------------------------------

def _nanochat_ref_block(x, x0, b, rope, eps, qk_gain=1.0):
    Wq, Wk, Wv, Wo = _wqkvo(b)
    return R.nanochat_block(x, x0, c_q=Wq, c_k=Wk, c_v=Wv, c_proj=Wo, resid_lambda=b.residual.block_stream,
                            x0_lambda=b.x0.lam, mlp=_mlp(b), rope=rope, n_head=SCFG.n_heads, scale=None,
                            qk_gain=qk_gain, eps=eps)


def test_nanochat_qk_norm_after_rope_commutes_with_it():
    """nanochat normalises q and k after RoPE (NC:101-102); our q and k sites are before it. RoPE rotates
    pairs of a head's channels: an orthogonal map of the head's vector, so mean(x^2) over head_dim (and with
    it the eps term) is unchanged and a weightless RMSNorm commutes with it: norm(rope(q)) = rope(norm(q)).
    A norm with a gain would not (the rotation mixes channels the gain weighs differently)."""
    model = build_model("nanochat", SCFG).double()
    rope, eps = _rope(model, SCFG.context_length), _eps(model)
    torch.manual_seed(0)
    q = 3.0 * torch.randn(2, SCFG.n_heads, SCFG.context_length, SCFG.head_dim, dtype=F64)
    torch.testing.assert_close(R.nanochat_norm(rope(q), eps), rope(R.nanochat_norm(q, eps)), rtol=1e-12, atol=1e-12)
    w = 1.0 + 0.3 * torch.randn(SCFG.head_dim, dtype=F64)
    assert not torch.allclose(w * R.nanochat_norm(rope(q), eps), rope(w * R.nanochat_norm(q, eps)))


@pytest.mark.parametrize("ffn", ["gelu", "swiglu"])
def test_nanochat_block_matches_the_authors_code(ffn):
    """x = resid_lambdas[i] x + x0_lambdas[i] x0 (NC:500); x = x + attn(norm(x)); x = x + mlp(norm(x))
    (NC:151-152), weightless QK norm per head after RoPE (NC:101-102; it commutes, see above).

    Reduced in the reference: qk_gain = 1.0 instead of the authors' q, k x 1.2 (NC:103-104; not expressed:
    with 1.2 the blocks differ, checked below); no value embeddings; our softmax scale is the authors'
    1/sqrt(hd); our RoPE (theta 10000, +theta) for theirs (base 100000, -theta, NC:57-65, 270); our eps
    instead of eps=None."""
    model = _speedrun_model(baselines()["nanochat"], _cfg(ffn))
    x, x0 = _inputs()
    T, eps = SCFG.context_length, _eps(model)
    tables, rope = model.rope(T, x.device, F64), _rope(model, T)
    for i, b in enumerate(model.blocks):
        got = b(x, tables, x0)
        torch.testing.assert_close(got, _nanochat_ref_block(x, x0, b, rope, eps), rtol=1e-10, atol=1e-10,
                                   msg=f"nanochat layer {i}")
        assert not torch.allclose(got, _nanochat_ref_block(x, x0, b, rope, eps, qk_gain=1.2))


# Qwen3-Next ----------------------------------------------------------------------------------------

def _qwen_ref_block(x, b, rope, eps):
    Wq, Wk, Wv, Wo = _wqkvo(b)
    n = b.norms
    return R.qwen3_next_block(
        x, input_layernorm_weight=n.attn_in.weight, post_attention_layernorm_weight=n.ffn_in.weight,
        q_proj=R.qwen3_next_fuse_q_gate(Wq, b.attn.gate.weight, SCFG.n_heads), k_proj=Wk, v_proj=Wv, o_proj=Wo,
        q_norm_weight=n.q.weight, k_norm_weight=n.k.weight, n_heads=SCFG.n_heads, mlp=_mlp(b), rope=rope,
        scale=None, eps=eps)


@pytest.mark.parametrize("ffn", ["gelu", "swiglu"])
def test_qwen3_next_block_matches_the_authors_code(ffn):
    """Qwen3NextDecoderLayer (QN:981-1024), full-attention layer: every norm x_hat (1 + w) with our w as the
    authors' weight (QN:126-140); q/k norms per head with one (hd,) weight shared by the heads, before RoPE
    (QN:253-256, 275-280); the elementwise sigmoid gate from the normalised input, our attn.gate.weight as
    the gate half of the authors' interleaved q_proj (QN:270-273, 301).

    Nothing of the dense layer is reduced; our MLP stands for the MoE, our full RoPE for the partial one,
    our eps for rms_norm_eps 1e-6; the authors' float32 norm and softmax casts are not in float64."""
    model = _speedrun_model(baselines()["qwen3_next"], _cfg(ffn))
    x, _ = _inputs()
    T, eps = SCFG.context_length, _eps(model)
    tables, rope = model.rope(T, x.device, F64), _rope(model, T)
    for i, b in enumerate(model.blocks):
        assert b.norms.q.weight.shape == (SCFG.head_dim,)
        torch.testing.assert_close(b(x, tables), _qwen_ref_block(x, b, rope, eps), rtol=1e-10, atol=1e-10,
                                   msg=f"qwen3_next layer {i}")


# DeepSeek-V4 ---------------------------------------------------------------------------------------

#: An eps that is nothing next to any mean square in float64 (our NormSpec needs eps > 0), for the DeepSeek-V4
#: comparisons: the q latent's weighted RMSNorm (q_a_norm) with q_a_proj = I is an identity only up to eps.
NO_EPS = 1e-300


def _with_eps(placement, eps):
    e = lambda s: None if s is None else NormSpec(s.kind, s.granularity, depth_scale=s.depth_scale,
                                                  **{**s.opts, "eps": eps})
    return dataclasses.replace(placement, block={k: e(v) for k, v in placement.block},
                               embed=e(placement.embed), final=e(placement.final))


def _deepseek_model(cfg=SCFG):
    """Our deepseek_v4 (eps NO_EPS), perturbed, with K = V as the authors' single shared KV head: every head's
    rows of W_k are one (hd, C) matrix W_kv, W_v = W_k, and the v norm's gain is the k norm's (kv_norm)."""
    model = _speedrun_model(_with_eps(baselines()["deepseek_v4"], NO_EPS), cfg)
    C = cfg.d_model
    with torch.no_grad():
        for b in model.blocks:
            w = b.attn.qkv.weight
            w_kv = w[C:C + cfg.head_dim].clone()
            w[C:2 * C] = w_kv.repeat(cfg.n_heads, 1)
            w[2 * C:] = w_kv.repeat(cfg.n_heads, 1)
            b.norms.v.weight.copy_(b.norms.k.weight)
    return model


def _mhc_off(n_coef, C, pre_logit=50.0):
    """(fn, base, scale) of an mHC with N = 1 stream that does nothing: fn = 0, so pre = sigmoid(base_pre) = 1
    (base_pre = 50: 1.0 in float64), post = 2 sigmoid(0) = 1, comb = softmax of one entry = 1 (hc_eps = 0)."""
    base = torch.zeros(n_coef, dtype=F64)
    base[0] = pre_logit
    return torch.zeros(n_coef, C, dtype=F64), base, torch.ones(3, dtype=F64)


def _deepseek_ref_block(S, b, cfg=SCFG):
    C, hd = cfg.d_model, cfg.head_dim
    Wq, Wk, _, Wo = _wqkvo(b)
    n = b.norms
    attn = dict(q_a_proj=torch.eye(C, dtype=F64), q_a_norm_weight=torch.ones(C, dtype=F64), q_b_proj=Wq,
                kv_proj=Wk[:hd], kv_norm_weight=n.k.weight, sinks=b.attn.sinks, o_proj=Wo)
    identity = lambda t: t
    return R.deepseek_v4_block(S, input_layernorm_weight=n.attn_in.weight, post_attention_layernorm_weight=n.ffn_in.weight,
                               attn_hc=_mhc_off(3, C), ffn_hc=_mhc_off(3, C), attn=attn, mlp=_mlp(b), rope=identity,
                               rope_inverse=identity, n_heads=cfg.n_heads, scale=None, hc_eps=0.0, eps=NO_EPS)


@pytest.mark.parametrize("ffn", ["gelu", "swiglu"])
def test_deepseek_v4_block_matches_the_authors_code(ffn):
    """DeepseekV4DecoderLayer (DS:1174-1198) in the dense reading: weighted pre-norms (DS:1189, 1195), the q
    head norm weightless (DS:828), the K (= V) norm weighted over head_dim (DS:831), per-head sinks that join
    the softmax unscaled (DS:742-750).

    Reduced in the reference, and in our weights where the reference cannot be reduced:
    - mHC off: N = 1 stream, fn = 0, pre = 1, post = 1, comb = 1, hc_eps = 0 (DS:951-995), i.e. a plain
      residual;
    - the q latent: q_a_proj = I (q_lora_rank = C), q_a_norm weight 1, q_b_proj = our W_q; its extra RMSNorm is
      an identity only without eps, so both sides run at eps 1e-300 here (at our eps 1e-5 the blocks differ
      by 6e-6, all of it from this norm: rms(W_q rms(h)) vs rms(W_q h) differ by a relative
      eps (mean(h^2) - 1) / (2 mean((W_q h)^2)));
    - K = V, one KV head: the reference has one kv_proj used as both K and V, which it cannot split, and a
      kv_norm over the whole projection (so no per-head norm with H_kv > 1); so our weights are tied to its
      case: each head's W_k rows the same W_kv, W_v = W_k, the v gain = the k gain. Separate k and v (and their
      gains) are not compared with the authors' code;
    - RoPE: the reference rotates V with K (one tensor) and undoes it on the output (DS:832, 876), which our
      model does not (V is not rotated); so this runs without RoPE (identity in the reference, rope=None in our
      block). Our RoPE on q, k is the same code as in the other three comparisons;
    - the grouped low-rank W_o is a plain o_proj (our W_o); our MLP for the MoE; our scale 1/sqrt(hd) is the
      authors'; no window, no compressed KV."""
    cfg = _cfg(ffn)
    model = _deepseek_model(cfg)
    assert _eps(model) == NO_EPS
    x, _ = _inputs()
    for i, b in enumerate(model.blocks):
        want = _deepseek_ref_block(x.unsqueeze(2), b, cfg).squeeze(2)
        torch.testing.assert_close(b(x, None), want, rtol=1e-10, atol=1e-10, msg=f"deepseek_v4 layer {i}")


def test_deepseek_v4_sinks_match_the_authors_softmax():
    """Our sink_attention's probabilities against softmax_with_sink (DS:742-750): the sink logit joins each
    query's softmax unscaled and takes no value."""
    from normsearch.model import sink_attention

    torch.manual_seed(0)
    B, H, T, D = 2, 4, 7, 8
    q, k, v = (torch.randn(B, H, T, D, dtype=F64) for _ in range(3))
    sinks = torch.randn(H, dtype=F64)
    scale = D**-0.5
    want = R.softmax_with_sink(R._causal_logits(q, k, scale), sinks) @ v
    torch.testing.assert_close(sink_attention(q, k, v, sinks, scale), want, rtol=1e-12, atol=1e-12)


# the whole model's logits --------------------------------------------------------------------------

def _reference_logits(name, model, idx):
    """Logits from the references end to end: embedding, the x0 side, the blocks, the final norm, lm_head."""
    T = idx.size(1)
    emb = model.wte.weight[idx]
    if name == "deepseek_v4":  # no RoPE (see the block test): learned absolute positions, our choice of embedding
        emb = emb + model.wpe.weight[:T]
        S = R.deepseek_v4_x0(emb, hc_mult=1)
        for b in model.blocks:
            S = _deepseek_ref_block(S, b, model.config)
        fn, base, scale = _mhc_off(1, model.config.d_model)
        h = R.deepseek_v4_final(S, fn, base, scale[:1], model.norms.final.weight, hc_eps=0.0, eps=NO_EPS)
        return h @ model.lm_head.weight.T
    eps, rope = _eps(model), _rope(model, T)
    if name == "modded_nanogpt":
        x = x0 = R.modded_nanogpt_x0(emb, eps)
        for b in model.blocks:
            x = _modded_ref_block(x, x0, b, rope, eps)
        h = R.modded_nanogpt_final(x, eps)
    elif name == "nanochat":
        x = x0 = R.nanochat_x0(emb, eps)
        for b in model.blocks:
            x = _nanochat_ref_block(x, x0, b, rope, eps)
        h = R.nanochat_final(x, eps)
    else:
        x = R.qwen3_next_x0(emb)
        for b in model.blocks:
            x = _qwen_ref_block(x, b, rope, eps)
        h = R.qwen3_next_final(x, model.norms.final.weight, eps)
    return h @ model.lm_head.weight.T


@pytest.mark.parametrize("name", SPEEDRUNS)
def test_speedrun_model_logits_match_the_authors_code(name):
    """A 3-layer model (d_model 32, 4 heads, context 16, vocab 64, float64, untied head) built from the
    references end to end against build_model(name, cfg).double(), every norm gain, multiplier, x0 lambda or
    gate and sink perturbed. The reductions are the block tests'; at the ends: no smear before x0, no backout,
    MUDD mix or logit soft cap before or after the final norm (modded-nanogpt, nanochat); for deepseek_v4
    the hyper head off (N = 1, fn = 0: pre = 1) and learned positions instead of RoPE (rope: false)."""
    if name == "deepseek_v4":
        model = _deepseek_model(dataclasses.replace(SCFG, rope=False))
    else:
        model = _speedrun_model(baselines()[name])
    torch.manual_seed(2)
    idx = torch.randint(0, SCFG.vocab_size, (2, SCFG.context_length))
    torch.testing.assert_close(model(idx), _reference_logits(name, model, idx), rtol=1e-10, atol=1e-10)


# the paper inits ---------------------------------------------------------------------------------

ICFG = ModelConfig(vocab_size=512, n_layers=3, d_model=128, n_heads=4, context_length=16)


def _is_uniform(w, std):
    """Uniform on [-sqrt(3) std, sqrt(3) std]: inside the bound, reaching close to it, with that std."""
    bound = math.sqrt(3.0) * std
    return (w.abs().max().item() <= bound * (1 + 1e-6) and w.abs().max().item() > 0.97 * bound
            and abs(w.std().item() / std - 1) < 0.05)


def _is_normal(w, std):
    """N(0, std): that std, and tails beyond a uniform's bound sqrt(3) std (a sample of >= 16k has its
    largest |w| near 4 std)."""
    return abs(w.std().item() / std - 1) < 0.05 and w.abs().max().item() > 3.0 * std


def test_modded_nanogpt_paper_init_is_the_authors(one_thread):
    """train_gpt.py @ f411b3d: lm_head N(0, 0.005) (MNG:1225-1226) and the embedding a copy of it at init
    (MNG:1228-1231; ours is its own N(0, 0.005) draw unless tied); W_q, W_k (qk_bank), W_v, W_o (vo_bank)
    uniform with std 0.5/sqrt(dim), bound sqrt(3) std (MNG:1288-1293; W_o not zero); MLP c_fc the same, c_proj
    zero (MNG:1304-1308). The scalars: resid_lambdas sqrt(1.1), post_lambdas 1 (MNG:1334-1338), x0 gates 0
    (w2 = 0 and b2 = 0 on the x0 lanes, MNG:1447, 1451-1463), resid_lambdas at 5x and post_lambdas at 1x the lr
    (MNG:2035-2036)."""
    torch.manual_seed(0)
    model = build_model("modded_nanogpt", dataclasses.replace(ICFG, init="modded"))
    d = ICFG.d_model
    assert _is_normal(model.lm_head.weight, 0.005) and _is_normal(model.wte.weight, 0.005)
    for i, b in enumerate(model.blocks):
        for w in (b.attn.qkv.weight, b.attn.out.weight, b.ffn.up.weight):
            assert _is_uniform(w, 0.5 / math.sqrt(d)), i
        assert b.ffn.down.weight.eq(0).all()
        r = b.residual
        assert r.attn_stream.item() == r.ffn_stream.item() == pytest.approx(1.1**0.5)
        assert r.attn_gain.item() == r.ffn_gain.item() == 1.0
        assert b.x0.gate.weight.eq(0).all() and b.x0.gate.bias.eq(0).all()
        assert model.lr_factor(f"blocks.{i}.residual.attn_stream") == 5.0
        assert model.lr_factor(f"blocks.{i}.residual.attn_gain") == 1.0


def test_nanochat_paper_init_is_the_authors(one_thread):
    """nanochat/gpt.py @ 92d63d4, GPT.init_weights: wte N(0, 0.8), lm_head N(0, 0.001) (NC:220-221); c_q, c_k,
    c_v uniform with bound s = sqrt(3)/sqrt(n_embd) (NC:224-229), c_fc with 0.4 s (NC:231), attention and MLP
    c_proj zero (NC:230, 232); resid_lambdas[i] = 1.15 - 0.10 i/(L-1), x0_lambdas[i] = 0.20 - 0.15 i/(L-1)
    (NC:237-241); resid_lambdas at 1/100 of x0_lambdas' lr (NC:442-443)."""
    torch.manual_seed(0)
    model = build_model("nanochat", dataclasses.replace(ICFG, init="nanochat"))
    d, n = ICFG.d_model, ICFG.n_layers
    assert _is_normal(model.wte.weight, 0.8) and _is_normal(model.lm_head.weight, 0.001)
    for i, b in enumerate(model.blocks):
        assert _is_uniform(b.attn.qkv.weight, 1.0 / math.sqrt(d)), i
        assert _is_uniform(b.ffn.up.weight, 0.4 / math.sqrt(d)), i
        assert b.attn.out.weight.eq(0).all() and b.ffn.down.weight.eq(0).all()
        assert b.residual.block_stream.item() == pytest.approx(1.15 - 0.10 * i / (n - 1))
        assert b.x0.lam.item() == pytest.approx(0.20 - 0.15 * i / (n - 1))
        assert model.lr_factor(f"blocks.{i}.residual.block_stream") == 0.01 * model.lr_factor(f"blocks.{i}.x0.lam")


def test_qwen3_next_and_deepseek_v4_paper_inits_are_the_authors(one_thread):
    """Both from transformers' _init_weights: every Linear and Embedding N(0, 0.02) (QN:1043; DS's
    PreTrainedModel), Qwen3-Next's RMSNorm weights zero, i.e. a gain of 1 (QN:1051-1053) and weight-decayed
    (gain_decay); DeepSeek-V4's RMSNorm weights one (DS:51) and sinks zero (DS:805, 1279)."""
    torch.manual_seed(0)
    qwen = build_model("qwen3_next", dataclasses.replace(ICFG, init="normal"))
    decayed = {id(p) for g in qwen.param_groups(1e-3, 0.1) if g["weight_decay"] > 0 for p in g["params"]}
    for pname, p in qwen.named_parameters():
        if is_norm_parameter(pname):
            assert p.eq(0).all(), pname
            assert id(p) in decayed, pname
        elif pname.endswith("weight") and p.numel() >= 16384:
            assert _is_normal(p, 0.02), pname
    ds = build_model("deepseek_v4", dataclasses.replace(ICFG, init="normal"))
    for pname, p in ds.named_parameters():
        if is_norm_parameter(pname):
            assert p.eq(1).all(), pname
        elif pname.endswith(".attn.sinks"):
            assert p.eq(0).all(), pname
        elif p.numel() >= 16384:
            assert _is_normal(p, 0.02), pname


def test_modded_nanogpt_x0_has_the_authors_scale_at_its_paper_init(one_thread):
    """x0 = norm(embedding) (MNG:1549) with norm(x) = F.rms_norm(x, (x.size(-1),)) (MNG:952-953): eps=None,
    which is torch.finfo(float32).eps = 1.19e-7 for float32 and bfloat16 inputs, so x0 has RMS 1 (0.998) under
    the embedding's N(0, 0.005) init (MNG:1226-1231). With the kind's eps 1e-5 against a mean square of
    2.5e-5, x0 had RMS sqrt(2.5/3.5) = 0.845; the baseline now takes the authors' eps (2^-23)."""
    torch.manual_seed(0)
    model = build_model("modded_nanogpt", dataclasses.replace(ICFG, init="modded"))
    idx = torch.randint(0, ICFG.vocab_size, (2, ICFG.context_length))
    _, hidden = model(idx, return_hidden=True)
    torch.testing.assert_close(hidden[0], R.modded_nanogpt_x0(model.wte.weight[idx]), rtol=1e-3, atol=1e-3)
