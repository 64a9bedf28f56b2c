"""Every baseline: the sites it has (against the design note's table) and the block's output against
the paper's equation, written out by hand with the same weights."""

import math

import pytest
import torch
import torch.nn.functional as F

from normsearch.baselines import BASELINES, baselines
from normsearch.config import ModelConfig
from normsearch.model import build_model

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
}
HAS_FINAL = {n: n not in ("post_ln", "deepnorm") for n in EXPECTED_SITES}
GRANULARITY = {"olmo2": "full", "qk_pre_ln": "head", "hybridnorm": "head", "hybridnorm_star": "head",
               "gemma3": "head"}


def test_the_table_covers_every_baseline():
    assert set(EXPECTED_SITES) == set(BASELINES)


@pytest.mark.parametrize("name", list(EXPECTED_SITES))
def test_sites_per_block(name):
    r = baselines()[name].resolve(L)
    assert [set(dict(b)) for b in r.blocks] == EXPECTED_SITES[name]
    assert (r.final is not None) == HAS_FINAL[name]
    assert r.embed is None
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
            "deepnorm": "fairseq", "gated_pre_ln": "normal"}
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
