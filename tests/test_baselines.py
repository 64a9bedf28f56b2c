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
}
HAS_FINAL = {n: n != "post_ln" for n in EXPECTED_SITES}
GRANULARITY = {"olmo2": "full", "qk_pre_ln": "head", "hybridnorm": "head", "hybridnorm_star": "head"}


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
    """A norm from its definition, in float64, reading the module's parameters by name."""
    if group:
        return norm_ref(x.unflatten(-1, (-1, group)), mod).flatten(-2)
    kind, o = mod.spec.kind, mod.spec.opts
    w = getattr(mod, "weight", None)
    b = getattr(mod, "bias", None)
    if kind == "rmsnorm":
        y = x / torch.sqrt((x * x).mean(-1, keepdim=True) + o["eps"])
    elif kind == "layernorm":
        mu = x.mean(-1, keepdim=True)
        y = (x - mu) / torch.sqrt(((x - mu) ** 2).mean(-1, keepdim=True) + o["eps"])
    else:  # dyt
        y = torch.tanh(mod.alpha * x)
    if w is not None:
        y = y * w
    if b is not None:
        y = y + b
    return y


def attn_ref(x, blk, qkv_norm=False, full=False):
    """softmax(q k^T / sqrt(d)) v with RoPE, causal; q/k/v norms per head or over the full width."""
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
    y = (s.softmax(-1) @ v).transpose(1, 2).reshape(B, T, C)
    return y @ blk.attn.out.weight.T


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
