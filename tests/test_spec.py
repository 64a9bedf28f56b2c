"""The placement spec: canonical form, round trips, arch_id stability, validation."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from normsearch.baselines import baselines
from normsearch.errors import SpecError
from normsearch.norms import NORM_KINDS
from normsearch.spec import BLOCK_SITES, QKV_SITES, NormSpec, Placement


def test_every_baseline_round_trips_through_dict_and_yaml():
    for name, p in baselines().items():
        d = p.to_dict()
        assert Placement.from_dict(d) == p
        assert Placement.from_dict(d).to_dict() == d
        text = p.to_yaml()
        assert Placement.from_yaml(text) == p
        assert Placement.from_yaml(text).to_yaml() == text
        assert Placement.from_yaml(text).name == name


def test_arch_ids_are_pinned():
    """The hash of the canonical resolved form must not change between versions: studies store it."""
    b = baselines("rmsnorm")
    assert b["pre_ln"].arch_id(4) == "5802d031ed5b"
    assert b["peri_ln"].arch_id(4) == "f6a6ecf2af41"
    assert b["hybridnorm_star"].arch_id(12) == b["hybridnorm_star"].arch_id(12)


def test_baseline_arch_ids_are_distinct_and_depend_on_kind_and_depth():
    from normsearch.baselines import BASELINES

    ids = {n: p.arch_id(4) for n, p in baselines().items() if not BASELINES[n].alias_of}
    assert len(set(ids.values())) == len(ids)
    # an alias is the same network: sandwich is peri_ln (Ding et al.'s Sandwich-LN)
    assert BASELINES["sandwich"].alias_of == "peri_ln"
    assert baselines()["sandwich"].arch_id(4) == ids["peri_ln"]
    assert baselines("layernorm")["pre_ln"].arch_id(4) != ids["pre_ln"]
    assert baselines()["pre_ln"].arch_id(6) != ids["pre_ln"]


def test_same_network_same_arch_id_however_written():
    explicit = Placement.from_dict({
        "block": {"attn_in": {"kind": "rmsnorm", "eps": 1e-5, "gain": True},
                  "ffn_in": {"kind": "rmsnorm"}},
        "final": "rmsnorm",
    })
    shorthand = Placement.from_yaml("norm: rmsnorm\nblock: {attn_in: true, ffn_in: true, v: null}\nfinal: true\n")
    assert explicit.arch_id(4) == shorthand.arch_id(4) == baselines()["pre_ln"].arch_id(4)
    # a name is a label, not architecture
    assert explicit.with_name("mine").arch_id(4) == explicit.arch_id(4)
    # an override that names the layers differently but resolves the same
    a = Placement.from_yaml("block: {attn_in: rmsnorm}\noverrides: [{layers: {first: 2}, set: {q: rmsnorm}}]")
    b = Placement.from_yaml("block: {attn_in: rmsnorm}\noverrides: [{layers: [1, 0], set: {q: {kind: rmsnorm, granularity: head}}}]")
    c = Placement.from_yaml("block: {attn_in: rmsnorm}\noverrides: [{layers: {fraction: [0, 0.5]}, set: {q: rmsnorm}}]")
    assert a != b  # different specs...
    assert a.arch_id(4) == b.arch_id(4) == c.arch_id(4)  # ...same network
    # an override that sets what the base already has changes nothing
    d = Placement.from_yaml("block: {attn_in: rmsnorm}\noverrides: [{layers: {last: 1}, set: {attn_in: rmsnorm}}]")
    assert d.arch_id(4) == Placement.from_yaml("block: {attn_in: rmsnorm}").arch_id(4)


def test_options_change_the_arch_id():
    base = Placement(block={"attn_in": "rmsnorm"})
    assert Placement(block={"attn_in": NormSpec("rmsnorm", eps=1e-6)}).arch_id(2) != base.arch_id(2)
    assert Placement(block={"attn_in": NormSpec("rmsnorm", gain=False)}).arch_id(2) != base.arch_id(2)
    full = Placement(block={"q": NormSpec("rmsnorm", "full")})
    head = Placement(block={"q": NormSpec("rmsnorm", "head")})
    assert full.arch_id(2) != head.arch_id(2)


def test_resolution_of_overrides():
    p = Placement.from_yaml("""
block: {attn_in: rmsnorm, ffn_in: rmsnorm}
overrides:
  - {layers: {every: 2, offset: 1}, set: {ffn_in: null, ffn_out: layernorm}}
  - {layers: -1, block: {attn_post: rmsnorm}}
""")
    r = p.resolve(5)
    assert [set(dict(b)) for b in r.blocks] == [
        {"attn_in", "ffn_in"}, {"attn_in", "ffn_out"}, {"attn_in", "ffn_in"},
        {"attn_in", "ffn_out"}, {"attn_post"},
    ]
    assert r.block(1)["ffn_out"].kind == "layernorm"
    assert [ix for ix, _ in r.groups()] == [[0], [1], [2], [3], [4]]
    mix = baselines()["mix_ln"]
    assert [set(dict(b)) for b in mix.resolve(8).blocks[:3]] == [{"attn_post", "ffn_post"}] * 2 + [{"attn_in", "ffn_in"}]
    assert all(set(dict(b)) == {"attn_in", "ffn_in"} for b in mix.resolve(3).blocks)  # floor(3/4) = 0


@pytest.mark.parametrize("text, message", [
    ("block: {atn_in: rmsnorm}", "unknown site 'atn_in' (did you mean 'attn_in'?)"),
    ("block: {attn_in: batchnorm}", "unknown norm kind 'batchnorm'; known: layernorm, rmsnorm, dyt"),
    ("block: {attn_in: {kind: rmsnorm, granularity: head}}", "granularity is only for the q, k, v and ctx sites"),
    ("block: {q: {kind: rmsnorm, granularity: heads}}", "unknown granularity 'heads'"),
    ("block: {attn_in: {kind: rmsnorm, bias: true}}", "norm kind 'rmsnorm' has no option 'bias'"),
    ("block: {attn_in: {kind: rmsnorm, eps: -1}}", "eps must be a finite number > 0"),
    ("block: {attn_in: {kind: layernorm, gain: 1}}", "gain must be vector (or true), none (or false) or one_plus"),
    ("block: {embed: rmsnorm}", "embed and final are model-level"),
    ("attn_in: rmsnorm", "block sites go under `block:`"),
    ("block: {attn_in: rmsnorm}\nfinal: 3", "expected a norm kind, a mapping or null"),
    ("overrides: [{layers: {first: 1}}]", "exactly one of `set`"),
    ("overrides: [{layers: {fraction: [0.5, 0.2]}, set: {q: rmsnorm}}]", "0 <= start <= end <= 1"),
    ("overrides: [{layers: {mid: 1}, set: {q: rmsnorm}}]", "unknown rule 'mid'"),
    ("overrides: [{layers: 1, set: {q: rmsnorm}, when: x}]", "unknown key 'when'"),
    ("block: {attn_in: true}", "has no default `norm`"),
])
def test_bad_specs_say_what_is_wrong(text, message):
    with pytest.raises(SpecError) as e:
        Placement.from_yaml(text)
    assert message in str(e.value)
    assert "\n" not in str(e.value)


def test_errors_name_the_file_and_line(tmp_path):
    f = tmp_path / "spec.yaml"
    f.write_text("block:\n  attn_in: rmsnorm\n  ffn_inn: rmsnorm\n")
    with pytest.raises(SpecError, match=r"spec.yaml:3: .*unknown site 'ffn_inn'"):
        Placement.load(f)


def test_override_addressing_a_missing_layer():
    p = Placement.from_yaml("block: {attn_in: rmsnorm}\noverrides: [{layers: 7, set: {q: rmsnorm}}]")
    p.resolve(8)
    with pytest.raises(SpecError, match="addresses layer 7, but the model has 4 layers"):
        p.resolve(4)
    with pytest.raises(SpecError, match="first 5 layers, but the model has 4"):
        Placement.from_yaml("overrides: [{layers: {first: 5}, set: {q: rmsnorm}}]").resolve(4)


# -- property-based: any spec round-trips and hashes stably -------------------------------------


def norm_specs(site):
    def build(kind, data):
        opts = {}
        for key, default in NORM_KINDS[kind].options.items():
            if isinstance(default, bool):
                opts[key] = data.draw(st.booleans())
            else:
                opts[key] = data.draw(st.sampled_from([1e-6, 1e-5, 0.25, 0.5, 1.0]))
        gran = data.draw(st.sampled_from(["head", "full", None])) if site in QKV_SITES else None
        return NormSpec(kind, gran, **opts)

    return st.builds(build, st.sampled_from(sorted(NORM_KINDS)), st.data())


block_st = st.dictionaries(st.sampled_from(BLOCK_SITES), st.none(), max_size=len(BLOCK_SITES)).flatmap(
    lambda d: st.fixed_dictionaries({s: st.one_of(st.none(), norm_specs(s)) for s in d})
)
selector_st = st.one_of(
    st.builds(lambda ix: {"index": ix}, st.lists(st.integers(0, 3), min_size=1, max_size=3)),
    st.builds(lambda k: {"first": k}, st.integers(1, 4)),
    st.builds(lambda k: {"last": k}, st.integers(1, 4)),
    st.builds(lambda a, b: {"fraction": [min(a, b), max(a, b)]}, st.sampled_from([0, 0.25, 0.5, 1]), st.sampled_from([0, 0.5, 0.75, 1])),
    st.builds(lambda n, o: {"every": n, "offset": o}, st.integers(1, 3), st.integers(0, 3)),
)
override_st = st.one_of(
    st.builds(lambda sel, b: {"layers": sel, "block": {k: v for k, v in b.items() if v is not None}}, selector_st, block_st),
    st.builds(lambda sel, b: {"layers": sel, "set": b}, selector_st,
              block_st.filter(lambda b: len(b) > 0)),
)


def _to_yaml_value(spec):
    return None if spec is None else spec.to_dict()


@settings(max_examples=150, deadline=None)
@given(block=block_st, embed=st.one_of(st.none(), norm_specs("embed")),
       final=st.one_of(st.none(), norm_specs("final")), overrides=st.lists(override_st, max_size=3))
def test_any_spec_round_trips_and_hashes_stably(block, embed, final, overrides):
    raw = {
        "block": {k: _to_yaml_value(v) for k, v in block.items()},
        "embed": _to_yaml_value(embed), "final": _to_yaml_value(final),
        "overrides": [
            {"layers": o["layers"], **({"block": {k: _to_yaml_value(v) for k, v in o["block"].items()}} if "block" in o
                                       else {"set": {k: _to_yaml_value(v) for k, v in o["set"].items()}})}
            for o in overrides
        ],
    }
    p = Placement.from_dict(raw)
    q = Placement.from_yaml(p.to_yaml())
    assert q == p and q.to_dict() == p.to_dict() and q.to_yaml() == p.to_yaml()
    ids = {p.arch_id(4), q.arch_id(4), Placement.from_dict(p.to_dict()).arch_id(4)}
    assert len(ids) == 1
    # resolving removes the overrides but keeps the network: a placement written per layer is the same
    r = p.resolve(4)
    per_layer = Placement(overrides=[{"layers": [i], "block": {s: n for s, n in b}} for i, b in enumerate(r.blocks) if b],
                          embed=r.embed, final=r.final)
    assert per_layer.arch_id(4) == r.arch_id


# -- the site table --------------------------------------------------------------------------------


def test_every_baselines_arch_id_is_what_it_was():
    """tests/fixtures/baseline_arch_ids.json was written by the code before the site table (commit
    99392a7): every baseline, every kind, at several depths."""
    import json
    from pathlib import Path

    from normsearch.baselines import baselines
    from normsearch.norms import NORM_KINDS

    want = json.loads((Path(__file__).parent / "fixtures" / "baseline_arch_ids.json").read_text())
    got = {f"{name}/{kind}/{n}": p.arch_id(n)
           for kind in ("layernorm", "rmsnorm", "dyt") if kind in NORM_KINDS
           for name, p in baselines(kind).items() for n in (1, 2, 3, 4, 8, 12, 24)}
    # the fixture holds every baseline there was; the 2026 speedruns (issue 28) added four, with ids of their own
    new = {"modded_nanogpt", "nanochat", "qwen3_next", "deepseek_v4"}
    assert {k.split("/")[0] for k in want} == set(baselines()) - new
    assert {k: v for k, v in got.items() if k.split("/")[0] not in new} == want


def test_the_site_table_is_the_one_source_of_site_names_widths_and_abbreviations():
    from normsearch.config import ModelConfig
    from normsearch.spec import MODEL_SITES, SITE, SITE_ABBREV, SITE_TABLE, SITES

    from normsearch.spec import HEAD_SITES

    assert SITES == ("embed", "attn_in", "q", "k", "v", "ctx", "attn_out", "attn_post",
                     "ffn_in", "ffn_mid", "ffn_out", "ffn_post", "final")
    assert [s.name for s in SITE_TABLE] == list(SITES) and MODEL_SITES == ("embed", "final")
    assert BLOCK_SITES == SITES[1:-1] and QKV_SITES == ("q", "k", "v") and HEAD_SITES == ("q", "k", "v", "ctx")
    assert list(SITE_ABBREV) == [*BLOCK_SITES, "embed", "final"]  # the report's legend order
    assert len(set(SITE_ABBREV.values())) == len(SITES)
    cfg = ModelConfig(d_model=48, n_heads=4, ffn="swiglu")
    rms = NormSpec("rmsnorm")
    assert SITE["ffn_mid"].features(rms, cfg) == cfg.ffn_dim != cfg.d_model
    assert SITE["q"].features(rms.at("q"), cfg) == cfg.head_dim == 12
    assert SITE["q"].features(NormSpec("rmsnorm", "full"), cfg) == 48
    assert SITE["q"].per_head(rms.at("q")) and not SITE["q"].per_head(NormSpec("rmsnorm", "full"))
    assert not SITE["attn_in"].per_head(rms) and SITE["final"].features(rms, cfg) == 48
    assert SITE["ctx"].features(rms.at("ctx"), cfg) == 12 and SITE["ctx"].per_head(rms.at("ctx"))


def test_layer_span_and_fraction_layers():
    from normsearch.spec import fraction_layers, layer_span

    assert layer_span([0, 2, 3, 4]) == "0, 2-4" and layer_span([1, 2, 3]) == "1-3" and layer_span([5]) == "5"
    assert fraction_layers(0.0, 0.25, 8) == [0, 1] and fraction_layers(0.25, 1.0, 3) == [0, 1, 2]
    assert fraction_layers(0.0, 0.25, 3) == []


# -- the 2026 options: depth-scaled norms, residual scaling, the attention gate ------------------

MODERN = """
block:
  attn_in: {kind: rmsnorm, depth_scale: true}
  q: seednorm
  ffn_in: {kind: derf, alpha_init: 0.5, depth_scale: true}
  ffn_out: ssnorm
final: rmsnorm
residual: {alpha: deepnorm, beta: 0.5, gain: vector, gain_init: 0.01, scaled_init: false}
gate: head
"""


def test_the_2026_options_round_trip_and_change_the_arch_id():
    p = Placement.from_yaml(MODERN)
    assert Placement.from_dict(p.to_dict()) == p
    assert Placement.from_yaml(p.to_yaml()) == p
    assert Placement.from_yaml(p.to_yaml()).arch_id(6) == p.arch_id(6)
    d = p.to_dict()
    assert d["block"]["attn_in"]["depth_scale"] is True and "depth_scale" not in d["block"]["q"]
    assert d["residual"] == {"alpha": "deepnorm", "beta": 0.5, "gain": "vector", "gain_init": 0.01,
                             "scaled_init": False}
    assert d["gate"] == "head"
    # every option is architecture: dropping any one changes the id
    base = p.arch_id(6)
    variants = [
        MODERN.replace("attn_in: {kind: rmsnorm, depth_scale: true}", "attn_in: rmsnorm"),
        MODERN.replace("gate: head", "gate: elementwise"),
        MODERN.replace("gate: head", ""),
        MODERN.replace("alpha: deepnorm, ", ""),
        MODERN.replace("beta: 0.5", "beta: 0.25"),
        MODERN.replace("gain_init: 0.01", "gain_init: 0.02"),
        MODERN.replace("gain: vector", "gain: scalar"),
        MODERN.replace("scaled_init: false", "scaled_init: true"),
    ]
    ids = [Placement.from_yaml(v).arch_id(6) for v in variants]
    assert base not in ids and len(set(ids)) == len(ids)
    # deepnorm's alpha depends on depth: same spec, different depth, different numbers
    r6, r12 = p.resolve(6).residual, p.resolve(12).residual
    assert r6["alpha"] == pytest.approx(12 ** 0.25) and r12["alpha"] == pytest.approx(24 ** 0.25)


def test_defaults_are_left_out_so_old_ids_stay():
    plain = Placement.from_yaml("block: {attn_in: rmsnorm, ffn_in: rmsnorm}\nfinal: rmsnorm")
    spelled = Placement.from_yaml(
        "block: {attn_in: {kind: rmsnorm, depth_scale: false}, ffn_in: rmsnorm}\nfinal: rmsnorm\n"
        "residual: {alpha: 1, beta: 1.0, gain: none, scaled_init: true}\ngate: none")
    assert plain.arch_id(4) == spelled.arch_id(4) == "5802d031ed5b" == baselines()["pre_ln"].arch_id(4)
    assert "residual" not in spelled.to_dict() and "gate" not in spelled.to_dict()
    # presets are their mappings
    a = Placement.from_yaml("block: {attn_post: rmsnorm, ffn_post: rmsnorm}\nresidual: deepnorm")
    b = Placement.from_yaml("block: {attn_post: rmsnorm, ffn_post: rmsnorm}\n"
                            "residual: {alpha: deepnorm, beta: deepnorm, scaled_init: false}")
    assert a == b and a.arch_id(12) == baselines()["deepnorm"].arch_id(12)
    # a number equal to what the rule gives at this depth builds the same network
    c = Placement.from_yaml("block: {attn_post: rmsnorm, ffn_post: rmsnorm}\n"
                            f"residual: {{alpha: {24 ** 0.25!r}, beta: {96 ** -0.25!r}, scaled_init: false}}")
    assert c.arch_id(12) == a.arch_id(12)


def test_the_depth_scale_is_one_over_the_root_of_the_one_based_layer_index():
    spec = NormSpec("rmsnorm", depth_scale=True)
    assert [spec.scale(i) for i in range(4)] == pytest.approx([1, 2 ** -0.5, 3 ** -0.5, 0.5])
    assert NormSpec("rmsnorm").scale(3) == 1.0


@pytest.mark.parametrize("text,message", [
    ("block: {attn_in: rmsnorm}\nfinal: {kind: rmsnorm, depth_scale: true}", "depth_scale is for the block's sites"),
    ("block: {attn_in: {kind: rmsnorm, depth_scale: yes please}}", "depth_scale must be true or false"),
    ("block: {attn_in: rmsnorm}\nresidual: deep", "unknown preset 'deep'"),
    ("block: {attn_in: rmsnorm}\nresidual: {alpha: -1}", "residual.alpha must be a number > 0"),
    ("block: {attn_in: rmsnorm}\nresidual: {alpha: admin}", "residual.alpha: unknown rule 'admin'"),
    ("block: {attn_in: rmsnorm}\nresidual: {gain_init: 0.1}", "gain_init needs a gain"),
    ("block: {attn_in: rmsnorm}\nresidual: {gain: matrix}", "unknown gain 'matrix'"),
    ("block: {attn_in: rmsnorm}\nresidual: {alhpa: 2}", "unknown key 'alhpa'"),
    ("block: {attn_in: rmsnorm}\ngate: yes", "gate: unknown gate"),
    ("block: {attn_in: rmsnorm}\ngate: headwise", "unknown gate 'headwise'"),
])
def test_bad_2026_options_say_what_is_wrong(text, message):
    with pytest.raises(SpecError, match=message):
        Placement.from_yaml(text)


def test_a_default_norm_with_depth_scale_skips_the_model_sites():
    p = Placement.from_yaml("norm: {kind: rmsnorm, depth_scale: true}\nblock: {attn_in: true, ffn_in: true}\nfinal: true")
    assert p.to_dict()["final"] == {"kind": "rmsnorm", "eps": 1e-5, "gain": True}
    assert all(s.depth_scale for _, s in p.block)
    assert p.arch_id(4) != baselines()["lns"].arch_id(4)  # lns also drops the scaled init
    lns = Placement.from_dict({**p.to_dict(), "residual": {"scaled_init": False}})
    assert lns.arch_id(4) == baselines()["lns"].arch_id(4)


# -- the 2026 speedruns (issue 28): gain parametrization, the ctx site, the new block options ----------


def test_gain_vector_and_none_are_the_old_booleans_so_ids_stay():
    for kind in ("rmsnorm", "layernorm", "dyt", "derf"):
        assert NormSpec(kind, gain="vector") == NormSpec(kind, gain=True) == NormSpec(kind)
        assert NormSpec(kind, gain="none") == NormSpec(kind, gain=False) == NormSpec(kind, gain=None)
        assert NormSpec(kind).gain == "vector" and NormSpec(kind, gain=False).gain == "none"
        assert NormSpec(kind, gain="one_plus").gain == "one_plus"
        assert NormSpec(kind, gain="vector").to_dict()["gain"] is True  # stored as before
    assert NormSpec("ssnorm").gain is None and NormSpec("seednorm").gain is None  # kinds without the option
    pre_ln = baselines()["pre_ln"]
    for gain in ("vector", True):
        spelled = Placement.from_yaml(f"norm: {{kind: rmsnorm, gain: {gain}}}\nblock: {{attn_in: true, ffn_in: true}}\n"
                                      "final: true")
        assert spelled.arch_id(4) == pre_ln.arch_id(4) == "5802d031ed5b"
    none = Placement.from_yaml("block: {attn_in: {kind: rmsnorm, gain: none}}")
    false = Placement.from_yaml("block: {attn_in: {kind: rmsnorm, gain: false}}")
    assert none == false and none.arch_id(3) == false.arch_id(3)


def test_gain_one_plus_round_trips_with_its_arch_id(tmp_path):
    text = ("embed: {kind: dyt, gain: one_plus}\n"
            "block: {attn_in: {kind: rmsnorm, gain: one_plus}, q: {kind: layernorm, gain: one_plus, bias: false},"
            " ctx: {kind: derf, gain: one_plus}}\nfinal: {kind: rmsnorm, gain: one_plus}\n")
    p = Placement.from_yaml(text)
    assert p.to_dict()["block"]["attn_in"] == {"kind": "rmsnorm", "eps": 1e-5, "gain": "one_plus"}
    assert Placement.from_dict(p.to_dict()) == p and Placement.from_yaml(p.to_yaml()) == p
    assert Placement.from_yaml(p.to_yaml()).to_yaml() == p.to_yaml()
    (tmp_path / "p.yaml").write_text(p.to_yaml())
    ids = {p.arch_id(4), Placement.from_dict(p.to_dict()).arch_id(4), Placement.load(tmp_path / "p.yaml").arch_id(4)}
    assert len(ids) == 1
    # one_plus is architecture: the same sites with vector gains are another network
    vector = Placement.from_yaml(text.replace("one_plus", "vector"))
    none = Placement.from_yaml(text.replace("gain: one_plus", "gain: none"))
    assert len({p.arch_id(4), vector.arch_id(4), none.arch_id(4)}) == 3


@pytest.mark.parametrize("value", ["1", "0", "2", "maybe", "Vector", "[vector]", "one-plus"])
def test_a_gain_that_is_no_parametrization_is_one_clear_line(value):
    with pytest.raises(SpecError) as e:
        Placement.from_yaml(f"block: {{attn_in: {{kind: rmsnorm, gain: {value}}}}}")
    msg = str(e.value)
    assert "\n" not in msg and "rmsnorm.gain must be vector (or true), none (or false) or one_plus, not" in msg
    assert msg.startswith("site 'attn_in'")


def test_describe_marks_weightless_and_one_plus_gains():
    p = Placement.from_yaml("block: {attn_in: {kind: rmsnorm, gain: none}, q: {kind: rmsnorm, gain: one_plus},"
                            " k: rmsnorm, ctx: {kind: rmsnorm, granularity: full, gain: none}}\n"
                            "embed: {kind: rmsnorm, gain: none}\nfinal: {kind: rmsnorm, gain: one_plus}")
    assert p.resolve(2).describe() == "ai0 q+ k ctxF0 | emb0 fin+  [rmsnorm]"
    mixed = Placement.from_yaml("block: {attn_in: {kind: dyt, gain: none}, ffn_in: ssnorm}")
    assert mixed.resolve(2).describe() == "ai0:dyt fi:ssnorm"  # a kind without a gain option has no mark


def test_the_ctx_site_takes_a_granularity_and_changes_the_id():
    head = Placement.from_yaml("block: {attn_in: rmsnorm, ctx: rmsnorm}")
    assert dict(head.block)["ctx"] == NormSpec("rmsnorm", "head")
    full = Placement.from_yaml("block: {attn_in: rmsnorm, ctx: {kind: rmsnorm, granularity: full}}")
    plain = Placement.from_yaml("block: {attn_in: rmsnorm}")
    assert len({head.arch_id(3), full.arch_id(3), plain.arch_id(3)}) == 3
    assert Placement.from_yaml(full.to_yaml()) == full
    assert head.resolve(3).present_sites() == {"attn_in", "ctx"}
    ov = Placement.from_yaml("block: {attn_in: rmsnorm}\noverrides: [{layers: {last: 1}, set: {ctx: rmsnorm}}]")
    assert ["ctx" in dict(b) for b in ov.resolve(3).blocks] == [False, False, True]


def test_the_new_block_options_round_trip_and_are_architecture():
    text = ("block: {attn_in: {kind: rmsnorm, gain: none}, q: rmsnorm, k: rmsnorm, ffn_in: rmsnorm}\n"
            "final: rmsnorm\nresidual: scalars\nx0: attn\nsinks: true\ngain_decay: true\n")
    p = Placement.from_yaml(text)
    assert Placement.from_dict(p.to_dict()) == p and Placement.from_yaml(p.to_yaml()) == p
    d = p.to_dict()
    assert d["x0"] == {"at": "attn", "gate": "linear", "init": 0.0, "lr": 1.0}
    assert d["sinks"] is True and d["gain_decay"] is True and d["residual"]["stream"] == "sublayer"
    r = p.resolve(4)
    assert r.to_dict()["x0"] == d["x0"] and r.sinks and r.gain_decay
    ids = {Placement.from_yaml(text.replace(old, new)).arch_id(4)
           for old, new in [("x0: attn", "x0: input"), ("x0: attn", ""), ("sinks: true", ""),
                            ("gain_decay: true", ""), ("residual: scalars", "residual: lambdas"),
                            ("residual: scalars", "")]}
    assert len(ids) == 6 and p.arch_id(4) not in ids


def test_the_new_baselines_round_trip_and_are_what_their_sources_say():
    b = baselines()
    for name in ("modded_nanogpt", "nanochat", "qwen3_next", "deepseek_v4"):
        p = b[name]
        assert Placement.from_yaml(p.to_yaml()) == p and Placement.from_yaml(p.to_yaml()).arch_id(12) == p.arch_id(12)
    mod, chat, qwen, ds = (b[n].resolve(4) for n in ("modded_nanogpt", "nanochat", "qwen3_next", "deepseek_v4"))
    for r in (mod, chat):  # weightless norms everywhere
        assert {s.gain for blk in r.blocks for _, s in blk} | {r.embed.gain, r.final.gain} == {"none"}
        assert set(r.block(0)) == {"attn_in", "q", "k", "ffn_in"} and r.block(0)["q"].granularity == "head"
    assert mod.residual["stream"] == "sublayer" and mod.residual["stream_lr"] == 5.0 and mod.x0["at"] == "attn"
    assert chat.residual["stream"] == "block" and chat.residual["stream_init"] == [1.15, 1.05]
    assert chat.x0 == {"at": "input", "gate": "scalar", "init": [0.2, 0.05], "lr": 1.0}
    assert {s.gain for blk in qwen.blocks for _, s in blk} == {"one_plus"} and qwen.gain_decay
    assert qwen.gate == "elementwise" and qwen.embed is None
    assert ds.sinks and ds.block(0)["q"].gain == "none" and ds.block(0)["k"].gain == "vector"
