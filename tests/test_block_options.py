"""Block options of the 2026 speedruns (issue 28), torch-free: the residual's learned stream multipliers
and their inits, x0 re-injection, the on/off flags (sinks, gain_decay), their canonical forms (which keep
every older arch_id), their one-line errors, and how ``normsearch show`` words them."""

import pytest
from typer.testing import CliRunner

from normsearch.block_options import (PLAIN, RESIDUAL_PRESETS, X0, X0_PRESETS, Residual, describe_options,
                                      layer_value, parse_flag)
from normsearch.errors import SpecError
from normsearch.spec import Placement


def one_line(excinfo) -> str:
    text = str(excinfo.value)
    assert "\n" not in text, text
    return text


# -- residual: stream multipliers, their inits and lr -------------------------------------------------


def test_the_plain_residual_resolves_without_the_new_keys():
    """A residual written before stream/stream_init/stream_lr/gain_lr existed resolves exactly as it did."""
    assert Residual().resolve(4) == PLAIN == {"alpha": 1.0, "beta": 1.0, "gain": "none", "gain_init": None,
                                              "scaled_init": True}
    for preset in ("plain", "deepnorm", "rezero", "layerscale"):
        resolved = Residual.parse(preset).resolve(6)
        assert not {"stream", "stream_init", "stream_lr", "gain_lr"} & set(resolved), preset
    # written at their defaults, the new keys are left out too
    spelled = Residual.parse({"stream": "none", "gain": "scalar", "gain_lr": 1.0})
    assert spelled == Residual.parse("rezero") and spelled.to_dict() == {"gain": "scalar"}


def test_the_speedrun_presets_are_their_mappings():
    scalars = Residual.parse("scalars")
    assert scalars == Residual.parse({"stream": "sublayer", "stream_init": 1.1 ** 0.5, "stream_lr": 5,
                                      "gain": "scalar", "gain_init": 1})
    assert scalars.resolve(4) == {"alpha": 1.0, "beta": 1.0, "gain": "scalar", "gain_init": 1.0,
                                  "scaled_init": True, "stream": "sublayer",
                                  "stream_init": pytest.approx(1.0488088), "stream_lr": 5.0}
    lambdas = Residual.parse("lambdas")
    assert lambdas.stream == "block" and lambdas.stream_init == (1.15, 1.05) and lambdas.stream_lr == 0.01
    assert lambdas.gain == "none" and lambdas.to_dict() == {"stream": "block", "stream_init": [1.15, 1.05],
                                                            "stream_lr": 0.01}
    assert set(RESIDUAL_PRESETS) >= {"plain", "deepnorm", "rezero", "layerscale", "scalars", "lambdas"}


def test_first_last_inits_spread_linearly_over_the_layers():
    assert [layer_value((1.15, 1.05), i, 5) for i in range(5)] == pytest.approx([1.15, 1.125, 1.10, 1.075, 1.05])
    assert layer_value([0.2, 0.05], 3, 4) == pytest.approx(0.05) and layer_value((0.2, 0.05), 0, 4) == 0.2
    assert layer_value((2.0, 3.0), 0, 1) == 2.0  # one layer: the first
    assert layer_value(0.7, 5, 8) == 0.7
    r = Residual.parse({"gain": "vector", "gain_init": [0.1, 0.3], "stream": "sublayer", "stream_init": [1, 2],
                        "stream_lr": 2, "gain_lr": 0.5})
    assert r.gain_init == (0.1, 0.3) and r.stream_init == (1.0, 2.0)
    assert r.resolve(3) == {"alpha": 1.0, "beta": 1.0, "gain": "vector", "gain_init": [0.1, 0.3],
                            "scaled_init": True, "stream": "sublayer", "stream_init": [1.0, 2.0],
                            "stream_lr": 2.0, "gain_lr": 0.5}


def test_stream_options_round_trip_and_each_changes_the_arch_id():
    base = "block: {attn_in: rmsnorm, ffn_in: rmsnorm}\nfinal: rmsnorm\n"
    text = base + "residual: {stream: sublayer, stream_init: [1.2, 1.0], stream_lr: 3, gain: scalar, gain_init: 0.5, gain_lr: 2}"
    p = Placement.from_yaml(text)
    assert Placement.from_yaml(p.to_yaml()) == p and Placement.from_dict(p.to_dict()) == p
    assert Placement.from_yaml(p.to_yaml()).arch_id(4) == p.arch_id(4)
    variants = [text.replace("stream: sublayer", "stream: block"), text.replace("[1.2, 1.0]", "[1.2, 1.1]"),
                text.replace("stream_lr: 3", "stream_lr: 4"), text.replace("gain_lr: 2", "gain_lr: 3"),
                text.replace("[1.2, 1.0]", "1.2"), base + "residual: {gain: scalar, gain_init: 0.5}"]
    ids = {Placement.from_yaml(v).arch_id(4) for v in variants}
    assert len(ids) == len(variants) and p.arch_id(4) not in ids


@pytest.mark.parametrize("value,message", [
    ({"stream": "sideways"}, "residual.stream: unknown stream 'sideways'; known: none, sublayer, block"),
    ({"stream_init": 2}, "stream_init and stream_lr need a stream multiplier"),
    ({"stream_lr": 2}, "stream_init and stream_lr need a stream multiplier"),
    ({"gain_lr": 2}, "gain_lr needs a gain"),
    ({"stream": "block", "stream_lr": 0}, "residual.stream_lr must be a number > 0"),
    ({"stream": "block", "stream_init": [1, 2, 3]}, "residual.stream_init must be a number or [first, last]"),
    ({"stream": "block", "stream_init": "high"}, "residual.stream_init must be a number or [first, last]"),
    ({"stream": "block", "stream_init": float("nan")}, "residual.stream_init must be a number or [first, last]"),
    ({"gain": "scalar", "gain_init": [0, True]}, "residual.gain_init must be a number or [first, last]"),
    ("lambda", "unknown preset 'lambda' (did you mean 'lambdas'?)"),
])
def test_bad_residual_options_are_one_line(value, message):
    with pytest.raises(SpecError) as e:
        Residual.parse(value)
    assert message in one_line(e)


# -- x0 ----------------------------------------------------------------------------------------------


def test_x0_presets_and_canonical_form():
    assert X0.parse(None) == X0.parse("none") == X0.parse(False) == X0() and X0().to_dict() is None
    assert X0.parse("input").to_dict() == {"at": "input", "gate": "scalar", "init": [0.2, 0.05], "lr": 1.0}
    assert X0.parse("attn").to_dict() == {"at": "attn", "gate": "linear", "init": 0.0, "lr": 1.0}
    assert X0.parse({"at": "attn"}) == X0("attn", "scalar", 0.0, 1.0)  # gate scalar, init 0, lr 1 by default
    assert X0.parse({"at": "input", "init": [0.3, 0.1], "lr": 2}) == X0("input", "scalar", (0.3, 0.1), 2.0)
    assert tuple(X0_PRESETS) == ("none", "input", "attn")
    # as a placement option: in to_dict (and the arch_id) only when set
    plain = Placement.from_yaml("block: {attn_in: rmsnorm}")
    with_x0 = Placement.from_yaml("block: {attn_in: rmsnorm}\nx0: {at: input, gate: linear, init: 0.5, lr: 3}")
    assert "x0" not in plain.to_dict() and Placement.from_yaml("block: {attn_in: rmsnorm}\nx0: none") == plain
    assert with_x0.to_dict()["x0"] == {"at": "input", "gate": "linear", "init": 0.5, "lr": 3.0}
    assert Placement.from_yaml(with_x0.to_yaml()) == with_x0
    assert with_x0.resolve(3).x0 == {"at": "input", "gate": "linear", "init": 0.5, "lr": 3.0}
    variants = ["{at: attn, gate: linear, init: 0.5, lr: 3}", "{at: input, gate: scalar, init: 0.5, lr: 3}",
                "{at: input, gate: linear, init: 0.25, lr: 3}", "{at: input, gate: linear, init: 0.5, lr: 1}"]
    ids = {Placement.from_yaml(f"block: {{attn_in: rmsnorm}}\nx0: {v}").arch_id(3) for v in variants}
    assert len(ids) == 4 and with_x0.arch_id(3) not in ids and plain.arch_id(3) not in ids


@pytest.mark.parametrize("value,message", [
    ({"at": "middle"}, "x0.at: unknown place 'middle'; known: input, attn"),
    ({"gate": "scalar"}, "x0.at: unknown place None"),
    ({"at": "input", "gate": "mlp"}, "x0.gate: unknown gate 'mlp'; known: scalar, linear"),
    ({"at": "input", "lr": -1}, "x0.lr must be a number > 0"),
    ({"at": "input", "init": "small"}, "x0.init must be a number or [first, last]"),
    ({"at": "input", "when": 1}, "x0: unknown key 'when'"),
    ("sideways", "x0: unknown preset 'sideways'; known: none, input, attn"),
    (3, "x0: a preset"),
])
def test_bad_x0_is_one_line(value, message):
    with pytest.raises(SpecError) as e:
        X0.parse(value)
    assert message in one_line(e)


# -- sinks and gain_decay --------------------------------------------------------------------------


def test_flags_are_true_or_false_and_written_only_when_on():
    assert parse_flag("sinks", None) is False and parse_flag("sinks", True) is True
    for bad in ("maybe", 1, "yes please"):
        with pytest.raises(SpecError) as e:
            parse_flag("sinks", bad)
        assert f"sinks must be true or false, not {bad!r}" == one_line(e)
    plain = Placement.from_yaml("block: {attn_in: rmsnorm}")
    off = Placement.from_yaml("block: {attn_in: rmsnorm}\nsinks: false\ngain_decay: false")
    assert off == plain and off.arch_id(4) == plain.arch_id(4) and set(off.to_dict()) == set(plain.to_dict())
    sinks = Placement.from_yaml("block: {attn_in: rmsnorm}\nsinks: true")
    decay = Placement.from_yaml("block: {attn_in: rmsnorm}\ngain_decay: true")
    assert sinks.to_dict()["sinks"] is True and decay.to_dict()["gain_decay"] is True
    assert sinks.resolve(4).sinks and not sinks.resolve(4).gain_decay and decay.resolve(4).gain_decay
    assert len({plain.arch_id(4), sinks.arch_id(4), decay.arch_id(4)}) == 3
    for p in (sinks, decay):
        assert Placement.from_yaml(p.to_yaml()) == p and Placement.from_dict(p.to_dict()).arch_id(4) == p.arch_id(4)
    assert sinks.with_name("x") == sinks and decay.with_name("y").gain_decay  # with_name keeps every option


def test_with_name_keeps_every_block_option():
    p = Placement.from_yaml("block: {attn_in: rmsnorm}\nresidual: lambdas\nx0: input\nsinks: true\ngain_decay: true\n"
                            "gate: head")
    named = p.with_name("mine")
    assert named.name == "mine" and named.arch_id(4) == p.arch_id(4) and named.to_dict() == {**p.to_dict(), "name": "mine"}


def test_describe_options_names_every_new_option():
    r = Placement.from_yaml(
        "block: {attn_in: {kind: rmsnorm, gain: none}, ctx: {kind: rmsnorm, gain: one_plus}}\n"
        "final: rmsnorm\n"
        "residual: {stream: block, stream_init: [1.15, 1.05], stream_lr: 0.01, gain: scalar, gain_init: 1, gain_lr: 2}\n"
        "x0: {at: attn, gate: linear, init: 0, lr: 3}\nsinks: true\ngain_decay: true").resolve(4)
    text = r.describe()
    assert text.startswith("ai0 ctx+ | fin  [rmsnorm]")
    assert "+residual(gain=scalar:1@2lr, stream=block:1.15..1.05@0.01lr)" in text
    assert "+x0(attn, linear:0@3lr)" in text and "+sinks" in text and "+gain_decay" in text
    assert describe_options(PLAIN, "none") == ""


# -- normsearch show --------------------------------------------------------------------------------

EVERY_OPTION = """\
name: every_option
embed: {kind: rmsnorm, gain: none}
block:
  attn_in: {kind: rmsnorm, gain: one_plus}
  q: rmsnorm
  ctx: {kind: rmsnorm, gain: one_plus}
  ffn_in: {kind: layernorm, gain: none, bias: false}
final: rmsnorm
residual: {stream: sublayer, stream_init: [1.2, 1.0], stream_lr: 5, gain: scalar, gain_init: 1, gain_lr: 2}
x0: {at: input, gate: scalar, init: [0.2, 0.05], lr: 3}
sinks: true
gain_decay: true
gate: head
"""


def test_show_prints_every_new_option_and_the_ctx_site(tmp_path):
    from normsearch.cli import app
    from normsearch.show import options_lines

    path = tmp_path / "every.yaml"
    path.write_text(EVERY_OPTION)
    r = CliRunner().invoke(app, ["show", str(path), "--layers", "3", "--d-model", "64"])
    assert r.exit_code == 0, r.output
    resolved = Placement.load(path).resolve(3)
    lines = options_lines(resolved)
    assert lines == [
        "gate:     SDPA output x sigmoid(x W_g) before W_o, one per head (head)",
        "residual: x = [post](s x + g f(x)); scalar gain from 1; v, W_o, FFN init x 1; scaled init of W_o, W_down",
        "          s: a learned stream multiplier, one per sublayer, from 1.2 (layer 0) to 1 (last), lr x 5; "
        "g's lr x 2",
        "x0:       + lambda x0 into the block's input; lambda one learned scalar, from 0.2 (layer 0) to 0.05 (last), "
        "lr x 3",
        "sinks:    a learned logit per head joins each softmax and takes no value (from 0)",
        "gain_decay: weight decay on the norms' gains and biases",
    ]
    for line in lines:
        assert line in r.output, line
    out = r.output.splitlines()
    ctx = [line.strip() for line in out if line.strip().startswith("│ ctx")]
    assert ctx == ["│ ctx       rmsnorm/head (gain=one_plus)"]
    # the ctx site sits after the softmax-weighted sum and before W_o
    i = next(i for i, line in enumerate(out) if line.strip().startswith("│ ctx"))
    assert out[i - 1].strip() == "│ RoPE, softmax(qk^T/sqrt(d)) v" and out[i + 1].strip() == "│ W_o"
    assert "ffn_in    layernorm (gain=none, bias=False)" in r.output and "embed  rmsnorm (gain=none)" in r.output
    assert "summary: ai+:rmsnorm q:rmsnorm ctx+:rmsnorm fi0:layernorm | emb0:rmsnorm fin:rmsnorm" in r.output
    # the linear x0 gate and a block stream say so too
    other = Placement.from_yaml("block: {attn_in: rmsnorm}\nresidual: lambdas\nx0: attn").resolve(4)
    text = "\n".join(options_lines(other))
    assert "one per block, on its input, from 1.15 (layer 0) to 1.05 (last), lr x 0.01" in text
    assert "x0:       + lambda x0 into the attention branch's sum; lambda x0 . w + b per token (w from 0), from 0" in text
    assert options_lines(Placement.from_yaml("block: {attn_in: rmsnorm}").resolve(4)) == []


def test_show_of_a_weightless_norm_counts_no_weights():
    from normsearch.config import ModelConfig
    from normsearch.show import norm_param_count

    cfg = ModelConfig(n_layers=2, d_model=32, n_heads=4)
    p = Placement.from_yaml("block: {attn_in: {kind: rmsnorm, gain: none}, ctx: {kind: rmsnorm, gain: one_plus},"
                            " ffn_in: {kind: layernorm, gain: none, bias: false}}\nfinal: {kind: dyt, gain: none}")
    # ctx per head: head_dim 8 per layer; dyt without gain: alpha and a bias of d_model
    assert norm_param_count(p.resolve(2), cfg) == 2 * 8 + (1 + 32)
