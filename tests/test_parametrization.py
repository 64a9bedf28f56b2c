"""model.parametrization: mup's rules (normsearch.parametrization), that standard and every old
recipe are unchanged by it, and the coordinate check of the muP papers."""

import dataclasses
from pathlib import Path

import pytest

from normsearch.config import ModelConfig
from normsearch.errors import NormsearchError

BASE = dict(n_layers=2, d_model=64, n_heads=4, context_length=32)


def _model(placement="pre_ln", seed=0, **cfg):
    import torch

    from normsearch.model import build_model

    torch.manual_seed(seed)
    return build_model(placement, {**BASE, **cfg})


# --------------------------------------------------------------------------------------------------
# Config: the default is not written, so old recipes and study fingerprints compare equal


def test_the_default_is_standard_and_is_not_written():
    cfg = ModelConfig()
    assert cfg.parametrization == "standard" and cfg.width_mult == 1.0
    assert "parametrization" not in cfg.to_dict() and "mup_base_width" not in cfg.to_dict()
    mup = ModelConfig(d_model=256, parametrization="mup", mup_base_width=64)
    assert mup.to_dict()["parametrization"] == "mup" and mup.to_dict()["mup_base_width"] == 64
    assert ModelConfig.from_dict(mup.to_dict()) == mup and mup.width_mult == 4.0
    assert ModelConfig.from_dict(cfg.to_dict()) == cfg


def test_bad_values_are_errors():
    with pytest.raises(NormsearchError, match="model.parametrization must be standard | mup"):
        ModelConfig.from_dict({"parametrization": "ntk"})
    with pytest.raises(NormsearchError, match="mup_base_width must be >= 1"):
        ModelConfig.from_dict({"parametrization": "mup", "mup_base_width": 0})


def test_a_study_saved_before_the_key_existed_has_the_same_fingerprint():
    from normsearch import _yaml
    from normsearch.recipe import recipe_from_dict
    from normsearch.search import fingerprint
    from normsearch.search._open import stored_fingerprint
    from normsearch.search._open import first_difference

    saved = _yaml.load(Path(__file__).parent / "fixtures/study_v1/results/v1/recipe.yaml")
    now = recipe_from_dict(saved).raw
    assert first_difference(stored_fingerprint(saved), fingerprint(now)) is None
    mup = recipe_from_dict({**saved, "model": {**saved["model"], "parametrization": "mup"}}).raw
    assert first_difference(stored_fingerprint(saved), fingerprint(mup)) == \
        "model.parametrization: None in the study, 'mup' now"


# --------------------------------------------------------------------------------------------------
# The rules


def test_every_parameter_of_every_baseline_has_a_role():
    from normsearch.baselines import baselines

    for name, placement in baselines().items():
        for gate in ("none", "head", "elementwise"):
            model = _model(dataclasses.replace(placement, gate=gate), parametrization="mup", d_model=128)
            roles = {n: model.param_role(n, p) for n, p in model.named_parameters()}
            assert roles["wte.weight"] == "input" and roles["lm_head.weight"] == "output", name
            assert roles["blocks.0.attn.qkv.weight"] == "hidden"
            assert all(r == "vector" for n, r in roles.items() if ".norms." in f".{n}"), name
            if gate != "none":
                assert roles["blocks.1.attn.gate.weight"] == ("readout" if gate == "head" else "hidden")


def test_param_group_learning_rates_and_weight_decay():
    """At width 256 on base 64 (m = 4): hidden matrices lr / 4 and weight decay x 4 (lr x wd as at
    the base), the per-head gate likewise; embeddings, head and vectors as given; every parameter in
    exactly one group, vectors never decayed."""
    from normsearch.baselines import baseline

    model = _model(dataclasses.replace(baseline("pre_ln"), gate="head"),
                   d_model=256, parametrization="mup", mup_base_width=64, rope=False)
    groups = model.param_groups(0.01, 0.1)
    by_param = {}
    for g in groups:
        for p in g["params"]:
            assert id(p) not in by_param
            by_param[id(p)] = g
    params = dict(model.named_parameters())
    assert set(by_param) == {id(p) for p in params.values()}
    expect = {"wte.weight": (0.01, 0.1), "wpe.weight": (0.01, 0.1), "lm_head.weight": (0.01, 0.1),
              "blocks.0.attn.qkv.weight": (0.0025, 0.4), "blocks.1.ffn.down.weight": (0.0025, 0.4),
              "blocks.0.attn.out.weight": (0.0025, 0.4), "blocks.0.attn.gate.weight": (0.0025, 0.4),
              "blocks.0.norms.attn_in.weight": (0.01, 0.0), "norms.final.weight": (0.01, 0.0)}
    for name, (lr, wd) in expect.items():
        g = by_param[id(params[name])]
        assert (g["lr"], g["weight_decay"]) == pytest.approx((lr, wd)), name
    assert groups[0]["lr"] == 0.01  # the group the progress display reads holds the lr as given


def test_standard_groups_are_the_two_of_before():
    model = _model()
    groups = model.param_groups(0.01, 0.1)
    assert [(g["lr"], g["weight_decay"]) for g in groups] == [(0.01, 0.1), (0.01, 0.0)]
    decayed = {id(p) for p in groups[0]["params"]}
    for name, p in model.named_parameters():
        assert (id(p) in decayed) == (".norms." not in f".{name}" and p.ndim >= 2), name


def test_init_attention_scale_and_output_multiplier_follow_the_width():
    import math

    std = _model(d_model=256)
    mup = _model(d_model=256, parametrization="mup", mup_base_width=64)
    assert mup.output_mult == 0.25 and std.output_mult == 1.0
    attn = mup.blocks[0].attn
    assert attn.scale == pytest.approx(math.sqrt(64 / 4) / 64)  # sqrt(base head dim) / head dim
    assert std.blocks[0].attn.scale is None  # SDPA's own 1/sqrt(head_dim)
    for name, target in (("wte.weight", 0.02), ("lm_head.weight", 0.02), ("blocks.0.attn.qkv.weight", 0.01),
                         ("blocks.0.ffn.down.weight", 0.01 / 2)):  # / sqrt(2 n_layers): gpt's residual init
        assert dict(mup.named_parameters())[name].std().item() == pytest.approx(target, rel=0.05), name
        assert dict(std.named_parameters())[name].std().item() == pytest.approx(
            0.02 if "down" not in name else 0.01, rel=0.05), name


@pytest.mark.parametrize("extra", [{}, {"tie_embeddings": True, "rope": False}, {"init": "small", "ffn": "swiglu"}])
def test_mup_at_the_base_width_is_standard_exactly(extra, one_thread):
    import torch

    from normsearch.baselines import baselines

    x = torch.randint(0, 256, (2, 16))
    for name in ("pre_ln", "post_ln", "deepnorm"):
        placement = baselines()[name]
        std, mup = _model(placement, **extra), _model(placement, parametrization="mup", mup_base_width=64, **extra)
        assert torch.equal(std(x), mup(x)), name
        assert [(g["lr"], g["weight_decay"]) for g in std.param_groups(1e-3, 0.1)] == \
               [(g["lr"], g["weight_decay"]) for g in mup.param_groups(1e-3, 0.1)]


# --------------------------------------------------------------------------------------------------
# The coordinate check (Yang et al. 2022, Fig. 5): activations after a few Adam steps, and how much
# those steps changed them


def _coordinates(parametrization: str, width: int, steps: int = 4, lr: float = 3e-3) -> tuple[float, float]:
    """RMS of the logits and of the residual stream leaving the last block after ``steps`` AdamW
    steps on one fixed batch."""
    import torch
    import torch.nn.functional as F

    model = _model(d_model=width, parametrization=parametrization, mup_base_width=64)
    opt = torch.optim.AdamW(model.param_groups(lr, 0.0), lr=lr)
    x = torch.randint(0, 256, (8, 33), generator=torch.Generator().manual_seed(1))
    for _ in range(steps):
        loss = F.cross_entropy(model(x[:, :-1]).flatten(0, 1), x[:, 1:].flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        logits, hidden = model(x[:, :-1], return_hidden=True)
    return logits.pow(2).mean().sqrt().item(), hidden[-1].pow(2).mean().sqrt().item()


def test_coordinate_check(one_thread):
    """The sizes after training: under mup the logits and the residual stream stay O(1) from width 64
    to 256 (within a factor of 2 either way); under standard both grow with the width, the stream
    many times over. (The change the steps made is checked below, to 512.)"""
    widths = (64, 128, 256)
    mup = [_coordinates("mup", w) for w in widths]
    std = [_coordinates("standard", w) for w in widths]
    for i in range(2):
        assert all(0.5 < m[i] / mup[0][i] < 2.0 for m in mup), mup
        assert std[0][i] < std[1][i] < std[2][i], std
    assert std[2][0] / std[0][0] > 2.0 and std[2][1] / std[0][1] > 4.0, std


def _changes(parametrization: str, width: int, placement: str = "pre_ln", steps: int = 5,
             lr: float = 3e-3) -> tuple[float, float]:
    """How much training moved each coordinate: the RMS of (after - before) of the logits and of the
    residual stream leaving the last block, over ``steps`` AdamW steps on one fixed batch (the
    quantity the muP papers' coordinate check plots against width)."""
    import torch
    import torch.nn.functional as F

    from normsearch.baselines import baselines

    model = _model(baselines()[placement], d_model=width, parametrization=parametrization, mup_base_width=64)
    x = torch.randint(0, 256, (8, 33), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits0, hidden0 = model(x[:, :-1], return_hidden=True)
    opt = torch.optim.AdamW(model.param_groups(lr, 0.0), lr=lr)
    for _ in range(steps):
        loss = F.cross_entropy(model(x[:, :-1]).flatten(0, 1), x[:, 1:].flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        logits1, hidden1 = model(x[:, :-1], return_hidden=True)
    return (logits1 - logits0).pow(2).mean().sqrt().item(), (hidden1[-1] - hidden0[-1]).pow(2).mean().sqrt().item()


@pytest.mark.parametrize("placement, stream", [("pre_ln", True), ("qk_pre_ln", True), ("hybridnorm", False)])
def test_coordinate_check_of_the_change_in_activations(placement, stream, one_thread):
    """Widths 64 to 512 on base 64: under mup the change that 5 Adam steps make to each coordinate of
    the logits and of the residual stream stays within a factor of 2 across widths; under standard
    it grows with every doubling (about 4x to 6x for the logits and 20x to 30x for the stream here),
    which is what makes standard's best learning rate shrink with width. Placements with q/k norms
    too (qk_pre_ln, hybridnorm). HybridNorm's stream is normalised after each FFN (post-norm), so its
    change is bounded under both and only its logits are checked."""
    widths = (64, 128, 256, 512)
    mup = [_changes("mup", w, placement) for w in widths]
    std = [_changes("standard", w, placement) for w in widths]
    for i, grows in ((0, 3.0), (1, 10.0))[: 2 if stream else 1]:
        m, s = [c[i] for c in mup], [c[i] for c in std]
        assert max(m) / min(m) < 2.0, (placement, i, m)
        assert all(a < b for a, b in zip(s, s[1:])) and s[-1] / s[0] > grows, (placement, i, s)
    assert mup[0] == pytest.approx(std[0])  # at the base width the two are the same model


def test_an_exported_mup_model_computes_the_same_logits(tmp_path, one_thread):
    """The standalone model.py applies the attention scale and the output multiplier too (the
    export compares the two models' logits and refuses to write a folder where they differ)."""
    import torch

    from normsearch.export import export_architecture, load_exported

    cfg = {**BASE, "d_model": 128, "parametrization": "mup", "mup_base_width": 64}
    model = _model(**cfg)
    out = export_architecture("pre_ln", cfg, tmp_path / "mup", state_dict=model)
    x = torch.randint(0, 256, (2, 16))
    assert torch.equal(load_exported(out)(x), model(x))
    import json

    assert json.loads((out / "config.json").read_text())["parametrization"] == "mup"


# --------------------------------------------------------------------------------------------------
# The 2026 speedruns (issue 28): the residual's and x0's own learning rates, weight decay on gains


def _groups_by_name(model, *args, **kw):
    """parameter name -> (lr, weight_decay) of its AdamW group; every parameter in exactly one group."""
    groups = model.param_groups(*args, **kw)
    by_id = {}
    for g in groups:
        for p in g["params"]:
            assert id(p) not in by_id
            by_id[id(p)] = (g["lr"], g["weight_decay"])
    named = dict(model.named_parameters())
    assert set(by_id) == {id(p) for p in named.values()}
    return {n: by_id[id(p)] for n, p in named.items()}, groups


def test_stream_gain_and_x0_learning_rates_land_in_their_groups():
    from normsearch.spec import Placement

    placement = Placement.from_yaml(
        "block: {attn_in: rmsnorm, ffn_in: rmsnorm}\nfinal: rmsnorm\n"
        "residual: {stream: sublayer, stream_lr: 5, gain: vector, gain_init: 1, gain_lr: 0.5}\n"
        "x0: {at: attn, gate: linear, lr: 3}\nsinks: true")
    by_name, groups = _groups_by_name(_model(placement), 0.01, 0.1)
    assert groups[0]["lr"] == 0.01  # the group the progress display reads holds the lr as given
    for i in range(2):
        b = f"blocks.{i}."
        assert by_name[b + "residual.attn_stream"] == by_name[b + "residual.ffn_stream"] == pytest.approx((0.05, 0.0))
        assert by_name[b + "residual.attn_gain"] == by_name[b + "residual.ffn_gain"] == pytest.approx((0.005, 0.0))
        assert by_name[b + "x0.gate.weight"] == by_name[b + "x0.gate.bias"] == pytest.approx((0.03, 0.0))
        assert by_name[b + "attn.sinks"] == (0.01, 0.0)
        assert by_name[b + "attn.qkv.weight"] == (0.01, 0.1) and by_name[b + "norms.attn_in.weight"] == (0.01, 0.0)
    # the presets: modded-nanogpt's stream at 5x, its branch gain at 1x; nanochat's block stream at 1/100
    mod, _ = _groups_by_name(_model("modded_nanogpt"), 0.01, 0.1)
    assert mod["blocks.1.residual.attn_stream"] == pytest.approx((0.05, 0.0))
    assert mod["blocks.1.residual.attn_gain"] == (0.01, 0.0) and mod["blocks.1.x0.gate.weight"] == (0.01, 0.0)
    chat, _ = _groups_by_name(_model("nanochat"), 0.01, 0.1)
    assert chat["blocks.0.residual.block_stream"] == pytest.approx((1e-4, 0.0)) and chat["blocks.0.x0.lam"] == (0.01, 0.0)


def test_the_lr_factors_multiply_with_mups():
    from normsearch.spec import Placement

    placement = Placement.from_yaml("block: {attn_in: rmsnorm}\nresidual: {stream: block, stream_lr: 2}\n"
                                    "x0: {at: input, gate: linear, lr: 3}")
    model = _model(placement, d_model=256, parametrization="mup", mup_base_width=64)
    assert model.param_role("blocks.0.x0.gate.weight", model.blocks[0].x0.gate.weight) == "readout"
    by_name, _ = _groups_by_name(model, 0.01, 0.1)
    assert by_name["blocks.0.residual.block_stream"] == pytest.approx((0.02, 0.0))     # a vector: x 1
    assert by_name["blocks.0.x0.gate.weight"] == pytest.approx((0.03 / 4, 0.0))       # readout: / m, never decayed
    assert by_name["blocks.0.x0.gate.bias"] == pytest.approx((0.03, 0.0))
    assert by_name["blocks.0.attn.qkv.weight"] == pytest.approx((0.0025, 0.4))


def test_gain_decay_decays_norm_gains_and_biases_but_not_dyt_alpha():
    import dataclasses

    from normsearch.sections import TrainConfig
    from normsearch.spec import Placement
    from normsearch.train import optimizer

    text = ("embed: {kind: dyt}\nblock: {attn_in: layernorm, q: {kind: rmsnorm, gain: one_plus}, ffn_in: derf}\n"
            "final: rmsnorm\nresidual: {gain: scalar}\nx0: attn\nsinks: true")
    plain = Placement.from_yaml(text)
    decayed_names = {"norms.embed.weight", "norms.embed.bias", "blocks.0.norms.attn_in.weight",
                     "blocks.0.norms.attn_in.bias", "blocks.0.norms.q.weight", "blocks.0.norms.ffn_in.weight",
                     "blocks.0.norms.ffn_in.bias", "norms.final.weight"}
    never = {"norms.embed.alpha", "blocks.0.norms.ffn_in.alpha", "blocks.0.norms.ffn_in.shift",
             "blocks.0.residual.attn_gain", "blocks.0.x0.gate.weight", "blocks.0.x0.gate.bias", "blocks.0.attn.sinks"}

    def decayed(by_name):
        return {n for n, (_, wd) in by_name.items()
                if wd > 0 and (".norms." in f".{n}" or n in never) and not n.startswith("blocks.1.")}

    model = _model(plain)
    off, _ = _groups_by_name(model, 0.01, 0.1)
    assert decayed(off) == set()
    # the placement's gain_decay, the recipe's train.gain_decay: the same groups
    on_placement, _ = _groups_by_name(_model(dataclasses.replace(plain, gain_decay=True)), 0.01, 0.1)
    on_recipe, _ = _groups_by_name(model, 0.01, 0.1, True)
    assert decayed(on_placement) == decayed(on_recipe) == decayed_names
    assert on_recipe["norms.final.weight"] == (0.01, 0.1) and on_recipe["blocks.0.attn.qkv.weight"] == (0.01, 0.1)
    assert all(on_recipe[n][1] == 0.0 for n in never)
    # train.gain_decay reaches AdamW through normsearch.train.optimizer
    opt, _ = optimizer(model, TrainConfig(gain_decay=True, weight_decay=0.2), 0.01)
    wd = {id(p): g["weight_decay"] for g in opt.param_groups for p in g["params"]}
    params = dict(model.named_parameters())
    assert all(wd[id(params[n])] == pytest.approx(0.2) for n in decayed_names)
    assert all(wd[id(params[n])] == 0.0 for n in never)
    opt, _ = optimizer(model, TrainConfig(weight_decay=0.2), 0.01)
    wd = {id(p): g["weight_decay"] for g in opt.param_groups for p in g["params"]}
    assert all(wd[id(params[n])] == 0.0 for n in decayed_names | never)


def test_decay_pulls_a_one_plus_gain_toward_one():
    """Qwen3-Next's reason for 1 + w: AdamW's decoupled decay shrinks w, so the gain goes to 1, not 0."""
    import torch

    model = _model("qwen3_next")
    w = model.blocks[0].norms.attn_in.weight
    with torch.no_grad():
        w.fill_(0.5)
    opt = torch.optim.AdamW(model.param_groups(0.1, 0.5), lr=0.1)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    assert torch.allclose(w, torch.full_like(w, 0.5 * (1 - 0.1 * 0.5)))  # decayed, as the placement asks


def test_train_gain_decay_off_keeps_the_fingerprint_of_a_study_saved_before_it():
    from normsearch import _yaml
    from normsearch.recipe import recipe_from_dict
    from normsearch.search import fingerprint
    from normsearch.search._open import first_difference, stored_fingerprint

    saved = _yaml.load(Path(__file__).parent / "fixtures/study_v1/results/v1/recipe.yaml")
    assert "gain_decay" not in saved["train"]
    off = recipe_from_dict({**saved, "train": {**saved["train"], "gain_decay": False}})
    assert off.train.gain_decay is False
    assert first_difference(stored_fingerprint(saved), fingerprint(off.raw)) is None
    on = recipe_from_dict({**saved, "train": {**saved["train"], "gain_decay": True}})
    assert first_difference(stored_fingerprint(saved), fingerprint(on.raw)) == \
        "train.gain_decay: False in the study, True now"
