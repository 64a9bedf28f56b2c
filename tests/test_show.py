"""normsearch show: the block picture and the norm parameter count, drawn from the site table."""

import json
from pathlib import Path

import pytest

from normsearch.baselines import baselines
from normsearch.config import ModelConfig
from normsearch.model import build_model
from normsearch.show import block_picture, norm_param_count, show_text
from normsearch.spec import BLOCK_SITES, Placement

# Written before the site table; since the context norm site (ctx) exists, the step before attn_out
# is drawn as three lines: the softmax-weighted sum, the ctx site, W_o. Nothing else changed.
_OLD_STEP = "│ RoPE, softmax(qk^T/sqrt(d)) v, W_o"


def _with_ctx(text: str) -> str:
    out = []
    for line in text.split("\n"):
        if line.endswith(_OLD_STEP):
            pad = line[: -len(_OLD_STEP)]
            out += [pad + "│ RoPE, softmax(qk^T/sqrt(d)) v", pad + f"│ {'ctx':<9} -", pad + "│ W_o"]
        else:
            out.append(line)
    return "\n".join(out)


WANT = {k: _with_ctx(v) for k, v in json.loads((Path(__file__).parent / "fixtures" / "show_v1.json").read_text()).items()}
CUSTOM = Placement.from_dict({
    "embed": {"kind": "dyt", "alpha_init": 1.5},
    "block": {"q": {"kind": "layernorm", "granularity": "full", "bias": False}, "ffn_mid": "rmsnorm",
              "ffn_post": {"kind": "rmsnorm", "eps": 1e-6}},
    "final": "dyt",
})


@pytest.mark.parametrize("kind", ["rmsnorm", "layernorm"])
def test_show_text_is_what_it_was_before_the_site_table(kind):
    """tests/fixtures/show_v1.json holds the text written by the hand-drawn picture (commit 99392a7)."""
    cfg = ModelConfig(n_layers=4, d_model=64, n_heads=4)
    old = {key.split("/")[0] for key in WANT if key.endswith(f"/{kind}")}
    assert old <= set(baselines(kind))  # the baselines of 2025 are all still there (2026 added more)
    for name in sorted(old):
        assert show_text(baselines(kind)[name], cfg, source="x") == WANT[f"{name}/{kind}"], name
    assert show_text(CUSTOM, ModelConfig(n_layers=2, d_model=48, n_heads=3, ffn="swiglu")) == WANT["custom"]


def test_the_picture_has_every_block_site_in_data_flow_order():
    text = "\n".join(block_picture({}))
    positions = [text.index(f" {s}") for s in BLOCK_SITES]
    assert positions == sorted(positions)


@pytest.mark.parametrize("name", ["qk_pre_ln", "olmo2", "normformer", "dyt", "hybridnorm_star"])
def test_norm_param_count_is_the_models(name):
    cfg = ModelConfig(vocab_size=32, n_layers=3, d_model=24, n_heads=2, context_length=8, ffn="swiglu")
    for p in (baselines()[name], CUSTOM):
        assert norm_param_count(p.resolve(3), cfg) == build_model(p, cfg).num_parameters(norms_only=True)
