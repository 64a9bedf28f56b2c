"""The model that obeys a placement: parameter names by site, hidden states, init, strict loading."""

import math

import pytest
import torch

from normsearch.baselines import baselines
from normsearch.config import ModelConfig
from normsearch.errors import NormsearchError
from normsearch.model import build_model
from normsearch.spec import Placement


def test_norm_parameters_are_named_by_site(tiny_config):
    m = build_model("peri_ln", tiny_config)
    names = {n for n in m.state_dict() if ".norms." in f".{n}"}
    want = {f"blocks.{i}.norms.{s}.weight" for i in range(4) for s in ("attn_in", "attn_out", "ffn_in", "ffn_out")}
    assert names == want | {"norms.final.weight"}
    dyt = build_model("dyt", tiny_config)
    assert {"blocks.2.norms.ffn_in.alpha", "blocks.2.norms.ffn_in.weight", "blocks.2.norms.ffn_in.bias",
            "norms.final.alpha"} <= set(dyt.state_dict())
    ln = build_model(baselines("layernorm")["pre_ln"], tiny_config)
    assert "blocks.0.norms.attn_in.bias" in ln.state_dict()


def test_weights_of_one_placement_do_not_load_into_another(tiny_config):
    peri = build_model("peri_ln", tiny_config).state_dict()
    pre = build_model("pre_ln", tiny_config)
    with pytest.raises(RuntimeError, match="Unexpected key"):
        pre.load_state_dict(peri)
    again = build_model("peri_ln", tiny_config)
    again.load_state_dict(peri)  # same placement: loads


def test_qkv_granularity_shapes(tiny_config):
    head = build_model("qk_pre_ln", tiny_config)
    full = build_model("olmo2", tiny_config)
    assert head.blocks[0].norms.q.weight.shape == (tiny_config.head_dim,)
    assert full.blocks[0].norms.q.weight.shape == (tiny_config.d_model,)
    mid = build_model("normformer", tiny_config)
    assert mid.blocks[0].norms.ffn_mid.weight.shape == (tiny_config.ffn_dim,)


def test_head_norm_normalises_each_head_separately(tiny_config):
    m = build_model("qk_pre_ln", tiny_config)
    q = torch.randn(2, 5, tiny_config.d_model) * torch.linspace(0.1, 10, tiny_config.d_model)
    y = m.blocks[0].norms.q(q).unflatten(-1, (tiny_config.n_heads, -1))
    torch.testing.assert_close(y.pow(2).mean(-1), torch.ones(2, 5, tiny_config.n_heads), rtol=1e-3, atol=1e-3)


def test_return_hidden_gives_the_stream_into_and_out_of_every_block(tiny_config):
    m = build_model("pre_ln", tiny_config)
    idx = torch.randint(0, tiny_config.vocab_size, (3, 10))
    logits, hidden = m(idx, return_hidden=True)
    assert logits.shape == (3, 10, tiny_config.vocab_size)
    assert len(hidden) == tiny_config.n_layers + 1
    x = hidden[0]
    for i, block in enumerate(m.blocks):
        x = block(x, m.rope(10, idx.device))
        torch.testing.assert_close(x, hidden[i + 1])
    torch.testing.assert_close(m(idx), logits)


def test_init(tiny_config):
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=64, n_layers=8, d_model=256, n_heads=4, context_length=16)
    m = build_model("dyt", cfg)
    assert torch.all(m.blocks[0].norms.attn_in.weight == 1)
    assert torch.all(m.blocks[0].norms.attn_in.bias == 0)
    assert m.blocks[0].norms.attn_in.alpha.item() == 0.5
    assert m.blocks[0].attn.qkv.weight.std().item() == pytest.approx(0.02, rel=0.05)
    assert m.blocks[0].attn.out.weight.std().item() == pytest.approx(0.02 / math.sqrt(16), rel=0.05)
    small = build_model("pre_ln", ModelConfig(**{**cfg.to_dict(), "init": "small"}))
    assert small.blocks[0].attn.qkv.weight.std().item() == pytest.approx(math.sqrt(2 / (5 * 256)), rel=0.05)
    alpha = Placement.from_yaml("block: {attn_in: {kind: dyt, alpha_init: 2.0}}")
    assert build_model(alpha, cfg).blocks[3].norms.attn_in.alpha.item() == 2.0


def test_per_layer_overrides_build_different_blocks(tiny_config):
    m = build_model("hybridnorm_star", tiny_config)
    assert m.blocks[0].norms.attn_in.present and not m.blocks[0].norms.attn_post.present
    assert not m.blocks[1].norms.attn_in.present and m.blocks[1].norms.attn_post.present


def test_swiglu_learned_positions_and_untied_head():
    cfg = ModelConfig(vocab_size=40, n_layers=2, d_model=48, n_heads=4, ffn="swiglu", rope=False,
                      tie_embeddings=False, context_length=8)
    m = build_model("peri_ln", cfg)
    assert cfg.ffn_dim == 128 and m.blocks[0].ffn.gate.weight.shape == (128, 48)
    assert m.wpe is not None and m.lm_head.weight is not m.wte.weight
    out = m(torch.randint(0, 40, (2, 8)))
    assert out.shape == (2, 8, 40) and torch.isfinite(out).all()


def test_probe_attention_records_the_largest_logit(tiny_config):
    m = build_model("pre_ln", tiny_config)
    idx = torch.randint(0, 64, (2, 16))
    with m.probe_attention() as logits:
        m(idx)
    assert len(logits) == tiny_config.n_layers and all(torch.isfinite(t) for t in logits)
    assert all(b.attn.max_logit is None and not b.attn.probe for b in m.blocks)


def test_bad_config_and_kernels():
    with pytest.raises(NormsearchError, match="divisible"):
        ModelConfig(d_model=30, n_heads=4)
    with pytest.raises(NormsearchError, match="unknown key 'n_layer' \\(did you mean 'n_layers'\\?\\)"):
        ModelConfig.from_dict({"n_layer": 3})
    with pytest.raises(NormsearchError, match="model.ffn must be gelu | swiglu"):
        ModelConfig.from_dict({"ffn": "relu"})
    with pytest.raises(NormsearchError, match="unknown kernels"):
        build_model("pre_ln", ModelConfig(), kernels="cuda")


# -- the inits (model.init; normsearch.config.INITS) ------------------------------------------------

#: sha256 (first 16 hex digits) of the state dict of a fixed-seed model, computed before the paper
#: inits were added (issue 25): gpt and small must not change by a bit, under standard and mup.
FINGERPRINT_BASE = dict(vocab_size=48, n_layers=3, d_model=32, n_heads=2, context_length=8)
FINGERPRINTS = [
    ("pre_ln", {"init": "gpt"}, "6ecb322a53a70c33"),
    ("pre_ln", {"init": "small"}, "f9546fa3ed39cd9d"),
    ("deepnorm", {"init": "gpt", "ffn": "swiglu"}, "0cef1fbfc374e142"),
    ("deepnorm", {"init": "small"}, "00106a57003a2bf9"),
    ("lns", {"init": "gpt"}, "1984dcaabb8476da"),
    ("gated_pre_ln", {"init": "gpt", "tie_embeddings": True}, "211df91a0aae4e0f"),
    ("olmo2", {"init": "small", "rope": False}, "e1005cfdb5ffc802"),
    ("pre_ln", {"init": "gpt", "parametrization": "mup", "mup_base_width": 16}, "4310580808f6ab2c"),
    ("pre_ln", {"init": "small", "parametrization": "mup", "mup_base_width": 16}, "4441a1da49cc527a"),
    ("pre_ln", {"init": "gpt", "init_std": 0.05}, "79865c8b37cb6005"),
]


def _fingerprint(model) -> str:
    import hashlib

    h = hashlib.sha256()
    for n, t in model.state_dict().items():
        h.update(n.encode())
        h.update(t.detach().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


@pytest.mark.parametrize("name,kw,want", FINGERPRINTS)
def test_gpt_and_small_inits_are_unchanged_bit_for_bit(name, kw, want, one_thread):
    torch.manual_seed(1234)
    assert _fingerprint(build_model(name, ModelConfig(**{**FINGERPRINT_BASE, **kw}))) == want


TRUNC3 = math.sqrt(1 - 6 * math.exp(-4.5) / math.sqrt(2 * math.pi) / math.erf(3 / math.sqrt(2)))  # std of N(0,1) cut at 3


def _stated(init, group, d, L, fan_in, std0=0.02, scaled=True):
    """(distribution, std) of a parameter group as docs/norm-sites.md and config.INITS state them."""
    small, resid = math.sqrt(2 / (5 * d)), group in ("out", "down") and scaled
    return {
        "normal": ("normal", std0),
        "truncnormal": ("trunc", std0),
        "mixln": ("normal", math.sqrt(2 / 5) if group == "embed" else std0),
        "smallmegatron": ("trunc", d ** -0.5 if group == "head" else small / math.sqrt(2 * L) if resid else small),
        "fairseq": ("normal", d ** -0.5) if group in ("embed", "head") else
                   ("uniform", (2 * d) ** -0.5 if group == "qkv" else d ** -0.5 if group == "out" else (3 * fan_in) ** -0.5),
    }[init]


GROUPS = {"wte.weight": "embed", "wpe.weight": "embed", "lm_head.weight": "head", "attn.qkv.weight": "qkv",
          "attn.out.weight": "out", "attn.gate.weight": "gate", "ffn.up.weight": "up", "ffn.gate.weight": "up",
          "ffn.down.weight": "down"}
NEW_INITS = ["normal", "truncnormal", "smallmegatron", "fairseq", "mixln"]


@pytest.mark.parametrize("init", NEW_INITS)
@pytest.mark.parametrize("placement", ["gated_pre_ln", "lns"])
def test_each_new_init_gives_its_stated_std_per_parameter_group(init, placement, one_thread):
    """d_model 64: every matrix's std against its rule (5%), its range (truncated at 3 std; uniform
    reaches sqrt(3) std and no further); lns has the residual's scaled_init off (no depth scaling)."""
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=256, n_layers=4, d_model=64, n_heads=4, context_length=64, init=init,
                      ffn="swiglu", rope=False)
    model = build_model(placement, cfg)
    seen = set()
    for name, p in model.named_parameters():
        if ".norms." in f".{name}" or p.ndim < 2:
            continue
        group = next(g for suffix, g in GROUPS.items() if name.endswith(suffix))
        dist, std = _stated(init, group, 64, 4, p.shape[1], scaled=placement != "lns")
        seen.add(group)
        got, top = p.std().item(), p.abs().max().item()
        assert got == pytest.approx(std * (TRUNC3 if dist == "trunc" else 1.0), rel=0.05), name
        if dist == "trunc":
            assert 2.5 * std < top <= 3 * std + 1e-7, name
        elif dist == "uniform":
            assert 0.95 * math.sqrt(3) * std < top <= math.sqrt(3) * std + 1e-7, name
        elif p.numel() >= 4096:
            assert top > 3 * std, name  # a normal: some of 4096 draws beyond 3 std (p < 1e-4 that none is)
    assert seen == {"embed", "head", "qkv", "out", "gate", "up", "down"} - ({"gate"} if placement == "lns" else set())


@pytest.mark.parametrize("init", NEW_INITS)
def test_new_inits_under_mup(init, one_thread):
    """At d_model == mup_base_width, mup is standard bit for bit; wider, each rule is taken at the base
    width and times its role's factor: a hidden matrix m^-1/2, embeddings and the head x 1."""
    base = dict(vocab_size=64, n_layers=2, d_model=32, n_heads=2, context_length=8, init=init, tie_embeddings=False)
    torch.manual_seed(3)
    std_model = build_model("pre_ln", ModelConfig(**base))
    torch.manual_seed(3)
    mup_model = build_model("pre_ln", ModelConfig(**base, parametrization="mup", mup_base_width=32))
    assert _fingerprint(std_model) == _fingerprint(mup_model)
    torch.manual_seed(3)
    wide = build_model("pre_ln", ModelConfig(**{**base, "d_model": 128}, parametrization="mup", mup_base_width=32))
    m = 4.0
    for name, group in (("wte.weight", "embed"), ("lm_head.weight", "head"), ("blocks.0.attn.qkv.weight", "qkv"),
                        ("blocks.0.ffn.down.weight", "down")):
        p = dict(wide.named_parameters())[name]
        dist, std = _stated(init, group, 32, 2, p.shape[1] / m)
        factor = 1.0 if group in ("embed", "head") else m ** -0.5
        want = std * factor * (TRUNC3 if dist == "trunc" else 1.0)
        assert p.std().item() == pytest.approx(want, rel=0.08), name


# -- the 2026 speedruns (issue 28): gains, the ctx norm, stream multipliers, x0, sinks ----------------
# Every check in float64 against the equation written out by hand.

F64 = torch.float64
SMALL = ModelConfig(vocab_size=40, n_layers=3, d_model=32, n_heads=4, context_length=12)


def _model64(placement, config=SMALL, seed=0):
    torch.manual_seed(seed)
    return build_model(Placement.from_yaml(placement) if isinstance(placement, str) else placement, config).double()


def _perturb(module, seed=1, scale=0.3):
    """Every parameter of ``module`` moved off its init (so that each one matters)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g, dtype=p.dtype))


def _rms(x, eps=1e-5):
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def _one_plus_formula(kind, x, p, eps=1e-5):
    g = 1.0 + p["weight"]
    if kind == "rmsnorm":
        return _rms(x, eps) * g
    if kind == "layernorm":
        c = x - x.mean(-1, keepdim=True)
        return c / torch.sqrt(c.pow(2).mean(-1, keepdim=True) + eps) * g + p["bias"]
    if kind == "dyt":
        return torch.tanh(p["alpha"] * x) * g + p["bias"]
    return torch.erf(p["alpha"] * x + p["shift"]) * g + p["bias"]  # derf


@pytest.mark.parametrize("kind", ["rmsnorm", "layernorm", "dyt", "derf"])
def test_a_one_plus_gain_starts_at_zero_and_computes_x_hat_times_one_plus_w(kind):
    from normsearch.model import Norm
    from normsearch.spec import NormSpec

    norm = Norm(NormSpec(kind, gain="one_plus"), 16).double()
    vector = Norm(NormSpec(kind), 16).double()
    assert torch.all(norm.weight == 0) and torch.all(vector.weight == 1)
    assert set(dict(norm.named_parameters())) == set(dict(vector.named_parameters()))  # same names, same shapes
    x = 2.0 * torch.randn(3, 5, 16, dtype=F64) + 0.5
    torch.testing.assert_close(norm(x), vector(x), rtol=0, atol=1e-14)  # at init: the vector gain's init
    _perturb(norm)
    p = dict(norm.named_parameters())
    torch.testing.assert_close(norm(x), _one_plus_formula(kind, x, p), rtol=0, atol=1e-12)
    # the fused add path too, and the gradient reaches w
    s, y = norm.add(x, x.flip(0))
    torch.testing.assert_close(y, _one_plus_formula(kind, x + x.flip(0), p), rtol=0, atol=1e-12)
    norm(x).pow(2).sum().backward()
    assert norm.weight.grad is not None and norm.weight.grad.abs().sum() > 0


def test_a_one_plus_gain_per_head_is_shared_by_the_heads():
    from normsearch.model import site_norm
    from normsearch.spec import NormSpec

    norm = site_norm("q", NormSpec("rmsnorm", gain="one_plus").at("q"), SMALL).double()
    assert norm.weight.shape == (SMALL.head_dim,)
    _perturb(norm)
    x = torch.randn(2, 3, SMALL.d_model, dtype=F64)
    heads = x.unflatten(-1, (SMALL.n_heads, -1))
    want = (_rms(heads) * (1 + norm.weight)).flatten(-2)
    torch.testing.assert_close(norm(x), want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("kind,left", [("rmsnorm", set()), ("layernorm", {"bias"}), ("dyt", {"alpha", "bias"}),
                                       ("derf", {"alpha", "shift", "bias"})])
def test_a_weightless_norm_has_no_weight(kind, left):
    from normsearch.model import Norm
    from normsearch.spec import NormSpec

    norm = Norm(NormSpec(kind, gain="none"), 16).double()
    assert set(dict(norm.named_parameters())) == left
    x = torch.randn(4, 16, dtype=F64)
    if kind == "rmsnorm":
        torch.testing.assert_close(norm(x), _rms(x), rtol=0, atol=1e-12)
    if kind == "layernorm":
        assert not list(Norm(NormSpec(kind, gain="none", bias=False), 16).parameters())
    model = build_model(Placement.from_yaml(f"block: {{attn_in: {{kind: {kind}, gain: none}}}}"), SMALL)
    assert "blocks.0.norms.attn_in.weight" not in model.state_dict()


def test_the_one_plus_baseline_starts_with_zero_weights_that_build_unchanged():
    model = build_model("qwen3_next", SMALL)
    weights = {n: p for n, p in model.named_parameters() if n.endswith("norms.attn_in.weight") or n == "norms.final.weight"}
    assert len(weights) == SMALL.n_layers + 1 and all(torch.all(p == 0) for p in weights.values())
    assert model.blocks[0].norms.q.weight.shape == (SMALL.head_dim,)


# -- ctx --------------------------------------------------------------------------------------------


def _manual_attention(attn, h, rope, nq=None, nk=None):
    """The softmax-weighted sum of the heads, (B, T, H, head_dim), written out: no norms at q/k/v."""
    from normsearch.model import apply_rope

    B, T, C = h.shape
    H, D = attn.n_heads, attn.head_dim
    q, k, v = attn.qkv(h).split(C, dim=-1)
    q, k, v = (t.view(B, T, H, D).transpose(1, 2) for t in (q, k, v))
    q, k = apply_rope(q, *rope), apply_rope(k, *rope)
    logits = (q @ k.transpose(-2, -1)) / math.sqrt(D)
    logits = logits.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    return (torch.softmax(logits, dim=-1) @ v).transpose(1, 2)


def test_the_ctx_norm_normalises_each_heads_output_before_w_o():
    model = _model64("block: {attn_in: rmsnorm, ctx: rmsnorm}\nfinal: rmsnorm")
    blk = model.blocks[1]
    assert blk.norms.ctx.weight.shape == (SMALL.head_dim,) and blk.norms.ctx.group == SMALL.head_dim
    _perturb(blk.norms)
    x = torch.randn(2, 7, SMALL.d_model, dtype=F64)
    rope = model.rope(7, x.device, F64)
    h = blk.norms.attn_in(x)
    y = _manual_attention(blk.attn, h, rope)                     # (B, T, H, hd)
    want = blk.attn.out((_rms(y) * blk.norms.ctx.weight).flatten(-2))  # rms over hd, the shared gain, then W_o
    n = blk.norms
    torch.testing.assert_close(blk.attn(h, n.q, n.k, n.v, rope, n.ctx), want, rtol=0, atol=1e-12)
    # through the block: x + attn(...) then the FFN
    mid = x + want
    torch.testing.assert_close(blk(x, rope), mid + blk.ffn(n.ffn_in(mid), n.ffn_mid), rtol=0, atol=1e-12)
    # the ctx norm matters: without it the output is the plain sum's W_o
    assert not torch.allclose(want, blk.attn.out(y.flatten(-2)))


def test_the_ctx_norm_at_full_granularity_normalises_over_d_model():
    model = _model64("block: {attn_in: rmsnorm, ctx: {kind: layernorm, granularity: full}}")
    blk = model.blocks[0]
    assert blk.norms.ctx.weight.shape == (SMALL.d_model,) and not blk.norms.ctx.group
    _perturb(blk.norms)
    x = torch.randn(2, 6, SMALL.d_model, dtype=F64)
    rope = model.rope(6, x.device, F64)
    h = blk.norms.attn_in(x)
    y = _manual_attention(blk.attn, h, rope).flatten(-2)
    c = y - y.mean(-1, keepdim=True)
    normed = c / torch.sqrt(c.pow(2).mean(-1, keepdim=True) + 1e-5) * blk.norms.ctx.weight + blk.norms.ctx.bias
    n = blk.norms
    torch.testing.assert_close(blk.attn(h, n.q, n.k, n.v, rope, n.ctx), blk.attn.out(normed), rtol=0, atol=1e-12)


def test_the_ctx_norm_sits_before_the_gate_so_a_head_gate_is_not_normalised_away():
    model = _model64("block: {attn_in: rmsnorm, ctx: {kind: rmsnorm, gain: none}}\ngate: head")
    blk = model.blocks[0]
    _perturb(blk.attn.gate)
    with torch.no_grad():
        blk.attn.qkv.weight.mul_(20)  # an output of order 1, so that eps is no matter
    x = torch.randn(2, 6, SMALL.d_model, dtype=F64)
    rope = model.rope(6, x.device, F64)
    h = blk.norms.attn_in(x)
    y = _manual_attention(blk.attn, h, rope)                             # (B, T, H, hd)
    gate = torch.sigmoid(blk.attn.gate(h)).unsqueeze(-1)                 # one per head
    before = blk.attn.out((_rms(y) * gate).flatten(-2))                 # ctx, then the gate (the model's order)
    after = blk.attn.out(_rms(y * gate).flatten(-2))                    # the gate, then ctx: its scale normalised away
    n = blk.norms
    got = blk.attn(h, n.q, n.k, n.v, rope, n.ctx)
    torch.testing.assert_close(got, before, rtol=0, atol=1e-12)
    torch.testing.assert_close(after, blk.attn.out(_rms(y).flatten(-2)), rtol=0, atol=1e-4)  # why the order matters
    assert (got - after).abs().max() > 1e-3


def test_a_placement_with_ctx_builds_and_trains_its_ctx_weights():
    model = build_model("pre_ln", SMALL)
    with_ctx = build_model(Placement.from_yaml("block: {attn_in: rmsnorm, ffn_in: rmsnorm, ctx: rmsnorm}\n"
                                               "final: rmsnorm"), SMALL)
    names = set(with_ctx.state_dict()) - set(model.state_dict())
    assert names == {f"blocks.{i}.norms.ctx.weight" for i in range(SMALL.n_layers)}
    idx = torch.randint(0, SMALL.vocab_size, (2, 8))
    with_ctx(idx).logsumexp(-1).sum().backward()
    assert all(with_ctx.blocks[i].norms.ctx.weight.grad.abs().sum() > 0 for i in range(SMALL.n_layers))


# -- residual stream multipliers ------------------------------------------------------------------


def test_sublayer_stream_multipliers_follow_their_equation():
    model = _model64("block: {attn_in: rmsnorm, ffn_in: rmsnorm}\n"
                     "residual: {alpha: 2, stream: sublayer, stream_init: 1.3, gain: scalar, gain_init: 0.5}")
    blk = model.blocks[1]
    r, n = blk.residual, blk.norms
    assert {k for k, _ in r.named_parameters()} == {"attn_gain", "ffn_gain", "attn_stream", "ffn_stream"}
    assert r.attn_stream.item() == r.ffn_stream.item() == pytest.approx(1.3) and r.attn_gain.item() == 0.5
    _perturb(r)
    x = torch.randn(2, 5, SMALL.d_model, dtype=F64)
    rope = model.rope(5, x.device, F64)
    mid = 2 * r.attn_stream * x + r.attn_gain * blk.attn(n.attn_in(x), n.q, n.k, n.v, rope)
    want = 2 * r.ffn_stream * mid + r.ffn_gain * blk.ffn(n.ffn_in(mid), n.ffn_mid)
    torch.testing.assert_close(blk(x, rope), want, rtol=0, atol=1e-12)


def test_sublayer_stream_multipliers_sit_inside_a_post_norm():
    model = _model64("block: {attn_post: rmsnorm, ffn_post: rmsnorm}\nresidual: scalars")
    blk = model.blocks[0]
    r, n = blk.residual, blk.norms
    _perturb(blk)
    x = torch.randn(2, 5, SMALL.d_model, dtype=F64)
    rope = model.rope(5, x.device, F64)
    mid = n.attn_post(r.attn_stream * x + r.attn_gain * blk.attn(x, n.q, n.k, n.v, rope))
    want = n.ffn_post(r.ffn_stream * mid + r.ffn_gain * blk.ffn(mid, n.ffn_mid))
    torch.testing.assert_close(blk(x, rope), want, rtol=0, atol=1e-12)


def test_a_block_stream_multiplier_scales_the_blocks_input():
    model = _model64("block: {attn_in: rmsnorm, ffn_in: rmsnorm}\nresidual: {stream: block, stream_init: 1.2}")
    blk = model.blocks[2]
    r, n = blk.residual, blk.norms
    assert {k for k, _ in r.named_parameters()} == {"block_stream"} and r.block_stream.item() == pytest.approx(1.2)
    _perturb(r)
    x = torch.randn(2, 5, SMALL.d_model, dtype=F64)
    rope = model.rope(5, x.device, F64)
    s = r.block_stream * x
    mid = s + blk.attn(n.attn_in(s), n.q, n.k, n.v, rope)
    want = mid + blk.ffn(n.ffn_in(mid), n.ffn_mid)
    torch.testing.assert_close(blk(x, rope), want, rtol=0, atol=1e-12)


def test_first_last_inits_spread_over_the_layers():
    cfg = ModelConfig(**{**SMALL.to_dict(), "n_layers": 5})
    model = build_model(Placement.from_yaml(
        "block: {attn_in: rmsnorm}\nresidual: {stream: sublayer, stream_init: [1.4, 1.0], gain: vector,"
        " gain_init: [0.0, 0.2]}\nx0: {at: input, init: [0.2, 0.0]}"), cfg)
    assert [b.residual.attn_stream.item() for b in model.blocks] == pytest.approx([1.4, 1.3, 1.2, 1.1, 1.0])
    assert [b.residual.ffn_stream.item() for b in model.blocks] == pytest.approx([1.4, 1.3, 1.2, 1.1, 1.0])
    assert [b.residual.attn_gain[3].item() for b in model.blocks] == pytest.approx([0.0, 0.05, 0.1, 0.15, 0.2])
    assert [b.x0.lam.item() for b in model.blocks] == pytest.approx([0.2, 0.15, 0.1, 0.05, 0.0])
    chat = build_model("nanochat", ModelConfig(**{**SMALL.to_dict(), "n_layers": 4}))
    assert [b.residual.block_stream.item() for b in chat.blocks] == pytest.approx([1.15, 1.15 - 0.1 / 3, 1.05 + 0.1 / 3, 1.05])
    assert [b.x0.lam.item() for b in chat.blocks] == pytest.approx([0.2, 0.15, 0.1, 0.05])


# -- x0 ---------------------------------------------------------------------------------------------


def test_x0_is_the_stream_entering_block_0_after_the_embed_norm():
    model = _model64("embed: rmsnorm\nblock: {attn_in: rmsnorm, ffn_in: rmsnorm}\nfinal: rmsnorm\n"
                     "x0: {at: input, init: 0.7}")
    _perturb(model.norms)
    idx = torch.randint(0, SMALL.vocab_size, (2, 9))
    logits, hidden = model(idx, return_hidden=True)
    rope = model.rope(9, idx.device, F64)
    x0 = model.norms.embed(model.wte(idx))
    torch.testing.assert_close(hidden[0], x0, rtol=0, atol=0)

    def run(inject):
        x = x0
        for b in model.blocks:
            x = b(x, rope, inject)
        return model.lm_head(model.norms.final(x))

    torch.testing.assert_close(logits, run(x0), rtol=0, atol=1e-12)
    assert (logits - run(model.wte(idx))).abs().max() > 1e-3  # the embedding before its norm is another x0


def test_x0_at_input_joins_the_blocks_input_before_attn_in():
    model = _model64("block: {attn_in: rmsnorm, ffn_in: rmsnorm}\nresidual: {stream: block}\n"
                     "x0: {at: input, gate: scalar, init: 0.4}")
    blk = model.blocks[1]
    r, n = blk.residual, blk.norms
    _perturb(r)
    x, x0 = torch.randn(2, 2, 5, SMALL.d_model, dtype=F64)
    rope = model.rope(5, x.device, F64)
    assert blk.x0.lam.item() == pytest.approx(0.4)
    inp = r.block_stream * x + blk.x0.lam * x0  # nanochat: resid_lambdas[i] x + x0_lambdas[i] x0
    mid = inp + blk.attn(n.attn_in(inp), n.q, n.k, n.v, rope)
    want = mid + blk.ffn(n.ffn_in(mid), n.ffn_mid)
    torch.testing.assert_close(blk(x, rope, x0), want, rtol=0, atol=1e-12)


def test_x0_at_attn_joins_the_attention_branch_before_the_post_norm():
    model = _model64("block: {attn_in: rmsnorm, attn_out: rmsnorm, attn_post: rmsnorm}\n"
                     "residual: {stream: sublayer, gain: scalar, gain_init: 0.5}\n"
                     "x0: {at: attn, gate: linear, init: 0.25}")
    blk = model.blocks[2]
    r, n, j = blk.residual, blk.norms, blk.x0
    assert torch.all(j.gate.weight == 0) and j.gate.weight.shape == (1, SMALL.d_model)
    assert j.gate.bias.item() == 0.25
    _perturb(blk)
    x, x0 = torch.randn(2, 2, 5, SMALL.d_model, dtype=F64)
    rope = model.rope(5, x.device, F64)
    lam = x0 @ j.gate.weight[0] + j.gate.bias  # per token: x0 . w + b
    branch = r.attn_gain * n.attn_out(blk.attn(n.attn_in(x), n.q, n.k, n.v, rope))
    mid = n.attn_post(r.attn_stream * x + branch + lam.unsqueeze(-1) * x0)  # x0 inside the post norm, not times g
    want = r.ffn_stream * mid + r.ffn_gain * blk.ffn(mid, n.ffn_mid)
    torch.testing.assert_close(blk(x, rope, x0), want, rtol=0, atol=1e-12)


def test_x0_sinks_and_branch_gains_keep_their_values_through_reset_parameters():
    model = build_model(Placement.from_yaml("block: {attn_in: rmsnorm}\nresidual: scalars\nx0: attn\nsinks: true"),
                        SMALL)
    kept = [n for n, _ in model.named_parameters() if ".x0." in n or ".residual." in n or n.endswith("attn.sinks")]
    assert {n.split(".", 2)[2] for n in kept} == {"x0.gate.weight", "x0.gate.bias", "residual.attn_gain",
                                                 "residual.ffn_gain", "residual.attn_stream", "residual.ffn_stream",
                                                 "attn.sinks"}
    params = dict(model.named_parameters())
    with torch.no_grad():
        for n in kept:
            params[n].fill_(0.123)
    model.reset_parameters()
    assert all(torch.all(params[n] == 0.123) for n in kept)
    assert not torch.all(params["blocks.0.attn.qkv.weight"] == 0.123)


# -- attention sinks --------------------------------------------------------------------------------


def _qkv(B=2, H=3, T=6, D=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(B, H, T, D, generator=g, dtype=F64, requires_grad=True) for _ in range(3))


@pytest.mark.parametrize("scale", [None, 0.3])
def test_sink_attention_is_a_softmax_with_one_more_logit_that_has_no_value(scale):
    from normsearch.model import sink_attention

    q, k, v = _qkv()
    sinks = torch.tensor([0.5, -1.0, 2.0], dtype=F64, requires_grad=True)
    got = sink_attention(q, k, v, sinks, scale)
    s = 1 / math.sqrt(4) if scale is None else scale
    want = torch.zeros_like(got)
    for b in range(2):
        for h in range(3):
            for i in range(6):
                e = torch.exp((q[b, h, i] * k[b, h, : i + 1]).sum(-1) * s)
                want[b, h, i] = (e[:, None] * v[b, h, : i + 1]).sum(0) / (e.sum() + torch.exp(sinks[h]))
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    got.pow(2).sum().backward()
    assert sinks.grad is not None and torch.all(sinks.grad != 0)
    # a sink at -inf (-1e9) takes nothing: SDPA itself
    off = sink_attention(q, k, v, torch.full((3,), -1e9, dtype=F64), scale)
    sdpa = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
    torch.testing.assert_close(off, sdpa, rtol=0, atol=1e-12)


def test_a_model_with_sinks_is_sdpa_when_the_sinks_are_minus_infinity_and_trains_a_step():
    sinks = Placement.from_yaml("block: {attn_in: rmsnorm, ffn_in: rmsnorm}\nfinal: rmsnorm\nsinks: true")
    model = _model64(sinks, seed=5)
    plain = _model64("block: {attn_in: rmsnorm, ffn_in: rmsnorm}\nfinal: rmsnorm", seed=5)
    assert set(model.state_dict()) - set(plain.state_dict()) == {f"blocks.{i}.attn.sinks" for i in range(3)}
    assert all(torch.all(b.attn.sinks == 0) and b.attn.sinks.shape == (SMALL.n_heads,) for b in model.blocks)
    idx = torch.randint(0, SMALL.vocab_size, (2, 10))
    with torch.no_grad():
        assert (model(idx) - plain(idx)).abs().max() > 1e-4  # a sink at 0 takes some of the attention
        for b in model.blocks:
            b.attn.sinks.fill_(-1e9)
        torch.testing.assert_close(model(idx), plain(idx), rtol=0, atol=1e-12)
    # one AdamW step in float32: finite, and the sinks learn
    torch.manual_seed(0)
    model = build_model(sinks, SMALL)
    opt = torch.optim.AdamW(model.param_groups(1e-2, 0.1), lr=1e-2)
    logits = model(idx[:, :-1])
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, SMALL.vocab_size), idx[:, 1:].reshape(-1))
    loss.backward()
    assert torch.isfinite(loss) and all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    opt.step()
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert all(torch.all(b.attn.sinks != 0) for b in model.blocks)
    assert torch.isfinite(model(idx)).all()


@pytest.mark.parametrize("name", ["modded_nanogpt", "nanochat", "qwen3_next", "deepseek_v4"])
def test_the_speedrun_baselines_train_a_step(name):
    torch.manual_seed(0)
    model = build_model(name, SMALL)
    idx = torch.randint(0, SMALL.vocab_size, (2, 10))
    opt = torch.optim.AdamW(model.param_groups(3e-3, 0.1), lr=3e-3)
    for _ in range(2):
        logits = model(idx[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, SMALL.vocab_size), idx[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        assert torch.isfinite(loss), name
    assert all(torch.isfinite(p).all() for p in model.parameters()), name


def test_the_diagnostics_record_a_one_plus_norms_gain_as_one_plus_w():
    import contextlib

    from normsearch._monitor import _diagnostics

    windows = torch.randint(0, SMALL.vocab_size, (4, 9), generator=torch.Generator().manual_seed(0))
    one_plus = build_model("qwen3_next", SMALL)
    vector = build_model(Placement.from_yaml("block: {attn_in: rmsnorm, q: rmsnorm, k: rmsnorm, ffn_in: rmsnorm}\n"
                                             "final: rmsnorm\ngate: elementwise"), SMALL)
    # both start with the gain 1 on every feature: the same numbers in the diagnostics
    got = _diagnostics(one_plus, windows, contextlib.nullcontext)["gains"]
    assert got == _diagnostics(vector, windows, contextlib.nullcontext)["gains"]
    assert got["attn_in"] == [1.0] * SMALL.n_layers and got["final"] == [1.0]
