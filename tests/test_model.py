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
