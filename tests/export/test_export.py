"""Exported architectures: a standalone model.py that is normsearch's model to the last bit.

The central check runs every exported folder in ONE fresh Python process where ``normsearch`` and
``safetensors`` cannot be imported, and compares its logits with normsearch's own model holding the
same weights (float32 and float64), its parameter names, and its seeded initialisation.

model.py is ``normsearch/export/standalone.py`` copied; the architecture is config.json beside it.
"""

import ast
import copy
import json
import re
import subprocess
import sys
import textwrap

import pytest
import torch

from normsearch.baselines import baselines
from normsearch.checkpoint import save_weights
from normsearch.config import ModelConfig
from normsearch.errors import NormsearchError
from normsearch.export import EXPORT_FILES, architecture, export_architecture, load_exported
from normsearch.model import build_model
from normsearch.norms import NORM_KINDS, NormKind, register_norm
from normsearch.spec import BLOCK_SITES, QKV_SITES, Placement

CFG = ModelConfig(vocab_size=32, n_layers=4, d_model=24, n_heads=2, context_length=8, tie_embeddings=True)


pytestmark = pytest.mark.usefixtures("one_thread")


def cfg(**kw):
    return ModelConfig(**{**CFG.to_dict(), **kw})


def _cases():
    cases = {}
    for kind in ("rmsnorm", "layernorm"):
        for name, p in baselines(kind).items():
            if kind == "rmsnorm" or name != "dyt":
                cases[f"{name}-{kind}"] = (p, CFG)
    # per-layer overrides by rule (every/offset, last) editing sites; mixed kinds; head and full q/k
    cases["custom-every-set"] = (Placement.from_dict({
        "name": "custom",
        "norm": "rmsnorm",
        "block": {"attn_in": True, "ffn_in": True},
        "final": True,
        "overrides": [
            {"layers": {"every": 2, "offset": 1},
             "set": {"attn_in": None, "attn_out": {"kind": "layernorm", "bias": False},
                     "q": {"granularity": "full"}, "k": True}},
            {"layers": {"last": 1}, "set": {"ffn_mid": {"kind": "dyt", "alpha_init": 0.8}, "ffn_post": "layernorm"}},
        ],
    }), CFG)
    # DyT with options, q/k/v over the full width, embed norm
    cases["dyt-options-full-qkv"] = (Placement.from_dict({
        "embed": {"kind": "dyt", "alpha_init": 1.5},
        "block": {"attn_in": {"kind": "dyt", "alpha_init": 0.9},
                  "q": {"kind": "dyt", "granularity": "full", "gain": False},
                  "k": {"kind": "dyt", "granularity": "full", "bias": False},
                  "v": {"kind": "dyt", "granularity": "full"},
                  "ffn_in": "dyt"},
        "final": {"kind": "dyt", "alpha_init": 0.3},
    }), CFG)
    # gain/bias switched off (everywhere for rmsnorm; at some sites for layernorm), eps set
    cases["no-gain-mixed-bias"] = (Placement.from_dict({
        "block": {"attn_in": {"kind": "rmsnorm", "gain": False, "eps": 1e-6},
                  "attn_out": {"kind": "layernorm", "bias": False},
                  "ffn_in": {"kind": "layernorm", "gain": False, "bias": False, "eps": 1e-3},
                  "ffn_out": "layernorm"},
        "final": {"kind": "rmsnorm", "gain": False},
    }), CFG)
    # every site, and the config's other branches: swiglu, learned positions, untied head, no RoPE
    every = {s: ("rmsnorm" if s not in "qkv" else {"kind": "rmsnorm", "granularity": "head"}) for s in BLOCK_SITES}
    cases["all-sites-swiglu-wpe-untied"] = (
        Placement.from_dict({"embed": "layernorm", "block": every, "final": "layernorm"}),
        cfg(ffn="swiglu", rope=False, tie_embeddings=False),
    )
    cases["peri-swiglu-rope"] = (baselines()["peri_ln"], cfg(ffn="swiglu", ffn_hidden=40))
    cases["olmo2-untied-dropout"] = (baselines()["olmo2"], cfg(tie_embeddings=False, dropout=0.1))
    cases["hybridnorm-wpe-small-init"] = (baselines()["hybridnorm"], cfg(rope=False, init="small"))
    cases["no-norms-at-all"] = (Placement(), cfg(n_layers=2))
    # the paper inits (issue 25): each rule, with an untied head, learned positions, both gates, swiglu,
    # the residual's scaled_init off (lns) and DeepNorm's beta on top of fairseq's uniform inits
    cases["olmo2-truncnormal-untied"] = (baselines()["olmo2"], cfg(init="truncnormal", tie_embeddings=False))
    cases["hybridnorm-smallmegatron-untied-wpe"] = (baselines()["hybridnorm"],
                                                    cfg(init="smallmegatron", tie_embeddings=False, rope=False))
    cases["lns-smallmegatron-no-scaled-init"] = (baselines()["lns"], cfg(init="smallmegatron"))
    cases["deepnorm-fairseq-swiglu-untied"] = (baselines()["deepnorm"],
                                               cfg(init="fairseq", ffn="swiglu", tie_embeddings=False))
    cases["gated-normal-swiglu"] = (baselines()["gated_pre_ln"], cfg(init="normal", ffn="swiglu"))
    cases["mixln-wpe-untied"] = (baselines()["mix_ln"], cfg(init="mixln", rope=False, tie_embeddings=False))
    cases["head-gate-fairseq"] = (Placement.from_dict({"block": {"attn_in": "rmsnorm"}, "gate": "head"}),
                                  cfg(init="fairseq"))
    # the 2026 kinds (per head too), depth-scaled norms, every residual option, both gates, swiglu
    cases["modern-kinds-layerscale-head-gate"] = (Placement.from_dict({
        "embed": "ssnorm",
        "block": {"attn_in": {"kind": "derf", "alpha_init": 0.7, "depth_scale": True},
                  "q": "seednorm", "k": {"kind": "seednorm", "granularity": "full"},
                  "attn_out": "ssnorm", "ffn_in": {"kind": "seednorm", "depth_scale": True},
                  "ffn_mid": {"kind": "derf", "bias": False}, "ffn_post": "rmsnorm"},
        "final": "derf",
        "residual": {"alpha": 1.5, "beta": 0.7, "gain": "vector", "gain_init": 0.05, "scaled_init": False},
        "gate": "head",
    }), cfg(ffn="swiglu"))
    cases["rezero-elementwise-gate-deepnorm-beta"] = (Placement.from_dict({
        "block": {"attn_in": "rmsnorm", "ffn_in": "rmsnorm"}, "final": "rmsnorm",
        "residual": {"alpha": "deepnorm", "beta": "deepnorm", "gain": "scalar"}, "gate": "elementwise",
    }), cfg(ffn="swiglu", tie_embeddings=False))
    cases.update(_speedrun_cases())
    return cases


#: The 2026 speedruns' options (issue 28), each in a case of its own; the four new baselines are in the
#: baselines' cases above (rmsnorm and layernorm), and here again with their own inits.
SPEEDRUN = {
    "one-plus-gains": ("""
embed: {kind: dyt, gain: one_plus}
block: {attn_in: {kind: rmsnorm, gain: one_plus}, q: {kind: layernorm, gain: one_plus},
        k: {kind: rmsnorm, gain: one_plus, granularity: full}, ctx: {kind: derf, gain: one_plus},
        ffn_in: {kind: layernorm, gain: one_plus}, ffn_post: {kind: dyt, gain: one_plus}}
final: {kind: rmsnorm, gain: one_plus}
gain_decay: true
""", {}),
    "weightless-no-bias": ("""
embed: {kind: derf, gain: none, bias: false}
block: {attn_in: {kind: layernorm, gain: none, bias: false}, q: {kind: rmsnorm, gain: none},
        k: {kind: rmsnorm, gain: none}, ffn_in: {kind: dyt, gain: none, bias: false},
        ffn_mid: {kind: layernorm, gain: none}}
final: {kind: rmsnorm, gain: none}
""", {"ffn": "swiglu"}),
    "ctx-head-full-head-gate": ("""
block: {attn_in: rmsnorm, ctx: rmsnorm, ffn_in: rmsnorm}
final: rmsnorm
overrides: [{layers: {last: 2}, set: {ctx: {kind: layernorm, granularity: full}}}]
gate: head
""", {}),
    "ctx-elementwise-gate-untied": ("""
block: {attn_in: rmsnorm, q: rmsnorm, k: rmsnorm, ctx: {kind: rmsnorm, gain: none}, ffn_in: rmsnorm}
final: rmsnorm
gate: elementwise
""", {"tie_embeddings": False}),
    "stream-sublayer-first-last": ("""
block: {attn_in: rmsnorm, attn_post: rmsnorm, ffn_in: rmsnorm}
final: rmsnorm
residual: {alpha: 1.5, stream: sublayer, stream_init: [1.3, 1.0], stream_lr: 5, gain: vector,
           gain_init: [0.2, 0.1], gain_lr: 2}
""", {}),
    "stream-block-swiglu": ("""
block: {attn_in: rmsnorm, ffn_in: rmsnorm}
final: rmsnorm
residual: {stream: block, stream_init: [1.15, 1.05], stream_lr: 0.01}
""", {"ffn": "swiglu"}),
    "x0-input-scalar": ("""
embed: rmsnorm
block: {attn_in: rmsnorm, ffn_in: rmsnorm}
final: rmsnorm
x0: {at: input, gate: scalar, init: [0.3, 0.1], lr: 2}
""", {}),
    "x0-attn-linear-post": ("""
embed: layernorm
block: {attn_in: rmsnorm, attn_post: rmsnorm, ffn_in: rmsnorm}
final: rmsnorm
residual: scalars
x0: {at: attn, gate: linear, init: 0.2}
""", {"rope": False}),
    "sinks-untied": ("""
block: {attn_in: rmsnorm, q: rmsnorm, k: rmsnorm, ffn_in: rmsnorm}
final: rmsnorm
sinks: true
""", {"tie_embeddings": False}),
    "everything-at-once": ("""
embed: {kind: rmsnorm, gain: none}
block: {attn_in: {kind: rmsnorm, gain: one_plus}, q: {kind: rmsnorm, gain: none}, k: rmsnorm,
        v: {kind: rmsnorm, gain: one_plus}, ctx: rmsnorm, ffn_in: {kind: rmsnorm, gain: none}}
final: {kind: rmsnorm, gain: one_plus}
residual: {stream: block, stream_init: [1.2, 1.0], gain: scalar, gain_init: 1}
x0: input
sinks: true
gain_decay: true
gate: elementwise
""", {"ffn": "swiglu", "dropout": 0.1}),
}
NEW_BASELINES = ("modded_nanogpt", "nanochat", "qwen3_next", "deepseek_v4")


def _speedrun_cases():
    cases = {name: (Placement.from_yaml(text), cfg(**kw)) for name, (text, kw) in SPEEDRUN.items()}
    cases["modded_nanogpt-modded-init"] = (baselines()["modded_nanogpt"], cfg(init="modded"))
    cases["nanochat-nanochat-init-untied"] = (baselines()["nanochat"], cfg(init="nanochat", tie_embeddings=False))
    cases["qwen3_next-normal-swiglu"] = (baselines()["qwen3_next"], cfg(init="normal", ffn="swiglu"))
    cases["deepseek_v4-layernorm-normal"] = (baselines("layernorm")["deepseek_v4"], cfg(init="normal"))
    return cases


CASES = _cases()

SCRIPT = r"""
import importlib.util, json, sys
sys.modules["normsearch"] = None    # `import normsearch` raises ImportError
sys.modules["safetensors"] = None   # and so does safetensors: model.py reads the file itself
try:
    import normsearch  # noqa: F401
    raise SystemExit("normsearch was importable")
except ImportError:
    pass
import torch

torch.set_num_threads(1)
jobs = json.loads(sys.argv[1])
out = {}
for i, (name, folder) in enumerate(jobs):
    spec = importlib.util.spec_from_file_location(f"exported_{i}", f"{folder}/model.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    model = mod.from_pretrained(folder)
    idx = torch.load(f"{folder}/../{name}.idx.pt")
    with torch.no_grad():
        f32 = model(idx)
        f64 = model.double()(idx)
    torch.manual_seed(0)
    fresh = mod.Transformer()
    out[name] = {
        "training": model.training,
        "f32": f32, "f64": f64,
        "names": sorted(model.state_dict()),
        "init": {k: v.clone() for k, v in fresh.state_dict().items()},
    }
    try:
        model(torch.zeros(1, idx.shape[1] + 1, dtype=torch.long))
        out[name]["too_long"] = "no error"
    except ValueError as e:
        out[name]["too_long"] = str(e)
leaked = sorted(m for m in sys.modules if m.split(".")[0] in ("normsearch", "safetensors") and sys.modules[m])
out["__leaked__"] = leaked
torch.save(out, sys.argv[2])
"""


def perturbed(placement, config, seed=0):
    """A model whose norm parameters and branch gains are not at their initial values (so each one
    matters; ReZero's gains start at 0)."""
    torch.manual_seed(seed)
    model = build_model(placement, config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if (".norms." in f".{name}" or ".residual." in f".{name}" or ".x0." in f".{name}"
                    or name.endswith(".attn.sinks")):  # x0's linear gate starts at 0, the sinks at 0
                p.add_(0.3 * torch.randn_like(p))
    return model.eval()


@pytest.fixture(scope="module")
def exported(tmp_path_factory, one_thread):
    root = tmp_path_factory.mktemp("exports")
    refs = {}
    for name, (placement, config) in CASES.items():
        model = perturbed(placement, config)
        export_architecture(placement, config, root / name, state_dict=model)
        idx = torch.randint(0, config.vocab_size, (3, config.context_length), generator=torch.Generator().manual_seed(1))
        torch.save(idx, root / f"{name}.idx.pt")
        with torch.no_grad():
            f32 = model(idx)
            f64 = copy.deepcopy(model).double()(idx)
        torch.manual_seed(0)
        init = build_model(placement, config).state_dict()
        refs[name] = {"f32": f32, "f64": f64, "names": sorted(model.state_dict()), "init": init, "model": model,
                      "idx": idx}
    jobs = json.dumps([[name, str(root / name)] for name in CASES])
    res = subprocess.run([sys.executable, "-c", SCRIPT, jobs, str(root / "out.pt")], cwd=root,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    return root, refs, torch.load(root / "out.pt")


def test_export_writes_its_files(exported):
    root, _, _ = exported
    for name in CASES:
        assert sorted(p.name for p in (root / name).iterdir()) == sorted(EXPORT_FILES)


def test_the_fresh_process_could_not_import_normsearch(exported):
    _, _, got = exported
    assert got["__leaked__"] == []


@pytest.mark.parametrize("name", list(CASES))
def test_standalone_module_gives_normsearchs_logits(exported, name):
    _, refs, got = exported
    ref, out = refs[name], got[name]
    assert out["names"] == ref["names"]  # parameter names match normsearch's exactly (strict load passed)
    assert out["training"] is False
    torch.testing.assert_close(out["f32"], ref["f32"], rtol=0, atol=1e-6)
    torch.testing.assert_close(out["f64"], ref["f64"], rtol=0, atol=1e-12)
    assert "context length" in out["too_long"]


@pytest.mark.parametrize("name", list(CASES))
def test_standalone_module_initialises_like_normsearch(exported, name):
    """Same seed, same weights: the module registers and initialises in normsearch's order."""
    _, refs, got = exported
    ref, out = refs[name]["init"], got[name]["init"]
    assert set(out) == set(ref)
    for k in ref:
        torch.testing.assert_close(out[k], ref[k], rtol=0, atol=0, msg=k)


def test_load_exported_gives_the_same_model(exported):
    root, refs, _ = exported
    for name, (placement, config) in CASES.items():
        model = load_exported(root / name)
        assert model.arch_id == placement.resolve(config.n_layers).arch_id
        assert not model.training
        with torch.no_grad():
            torch.testing.assert_close(model(refs[name]["idx"]), refs[name]["f32"], rtol=0, atol=0, msg=name)
        if config.tie_embeddings:
            assert model.lm_head.weight is model.wte.weight


def test_exported_model_py_passes_ruff(exported):
    root, _, _ = exported
    files = [str(root / name / f) for name in CASES for f in ("model.py", "norms.py")]
    res = subprocess.run([sys.executable, "-m", "ruff", "check", "--isolated", "--select", "F,E,W", "--no-cache",
                          "--line-length", "120", *files], cwd=root, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]


def module_level_names_unused(source: str) -> set[str]:
    tree = ast.parse(source)
    defined = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, ast.Assign):
            defined |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return defined - used - {"from_pretrained", "load"}


def test_exported_model_py_has_no_unused_code_and_needs_torch_only(exported):
    root, _, _ = exported
    for name in CASES:
        source = (root / name / "model.py").read_text()
        assert module_level_names_unused(source) == set(), name
        imported = set()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import):
                imported |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                imported.add(node.module.split(".")[0])
        assert imported <= {"__future__", "importlib", "json", "math", "pathlib", "torch"}, (name, imported)
        assert "strict=True" in source
        norms = ast.parse((root / name / "norms.py").read_text())
        imported = {a.name.split(".")[0] for n in ast.walk(norms) if isinstance(n, ast.Import) for a in n.names}
        imported |= {n.module.split(".")[0] for n in ast.walk(norms) if isinstance(n, ast.ImportFrom)}
        assert imported <= {"__future__", "torch"}, (name, imported)


def config_json(root, name):
    return json.loads((root / name / "config.json").read_text())


@pytest.mark.parametrize("name", ["pre_ln-rmsnorm", "hybridnorm_star-rmsnorm", "custom-every-set", "no-norms-at-all"])
def test_absent_sites_are_absent_from_the_data_and_identities_in_the_model(exported, name):
    root, _, _ = exported
    placement, config = CASES[name]
    resolved = placement.resolve(config.n_layers)
    arch = config_json(root, name)
    present = {s for b in arch["norms"]["blocks"] for s in b}
    present |= {s for s in ("embed", "final") if arch["norms"][s] is not None}
    assert present == resolved.present_sites()
    # norms.py defines the kinds the placement uses, and no other
    kinds = {s.kind for b in resolved.blocks for _, s in b} | {s.kind for s in (resolved.embed, resolved.final) if s}
    source = (root / name / "norms.py").read_text()
    for kind, cls in (("rmsnorm", "RMSNorm"), ("layernorm", "LayerNorm"), ("dyt", "DyT")):
        assert (f"class {cls}(" in source) == (kind in kinds), (name, cls)


def test_config_json_holds_each_layers_norms(exported):
    root, _, _ = exported
    for name in ("hybridnorm_star-rmsnorm", "mix_ln-layernorm", "custom-every-set"):
        placement, config = CASES[name]
        blocks = config_json(root, name)["norms"]["blocks"]
        resolved = placement.resolve(config.n_layers)
        assert [{s: (e["kind"], e["options"]) for s, e in b.items()} for b in blocks] == [
            {s: (spec.kind, spec.opts) for s, spec in b} for b in resolved.blocks]
    assert [sorted(b) for b in config_json(root, "custom-every-set")["norms"]["blocks"]] == [
        ["attn_in", "ffn_in"], ["attn_out", "ffn_in", "k", "q"], ["attn_in", "ffn_in"],
        ["attn_out", "ffn_in", "ffn_mid", "ffn_post", "k", "q"]]


def test_head_and_full_granularity_are_written_out():
    olmo2 = architecture(baselines()["olmo2"].resolve(CFG.n_layers), CFG)["norms"]["blocks"][0]
    assert olmo2["q"] == {"kind": "rmsnorm", "options": {"eps": 1e-5, "gain": True}, "width": CFG.d_model,
                          "per_head": False}
    qk = architecture(baselines()["qk_pre_ln"].resolve(CFG.n_layers), CFG)["norms"]["blocks"][0]
    assert qk["q"]["width"] == CFG.head_dim == 12 and qk["q"]["per_head"] and not qk["attn_in"]["per_head"]


def test_config_json_is_the_config():
    c = cfg(ffn="swiglu", rope=False, tie_embeddings=False)
    arch = architecture(Placement.from_dict({"block": {"ffn_mid": "rmsnorm"}}).resolve(c.n_layers), c)
    assert arch["ffn_dim"] == 64  # 8/3 * 24 rounded up to a multiple of 16
    assert arch["norms"]["blocks"][0]["ffn_mid"]["width"] == 64
    assert {k: arch[k] for k in c.to_dict()} == c.to_dict() and arch["head_dim"] == 12
    assert arch["sites"] == list(BLOCK_SITES) and set(QKV_SITES) < set(arch["sites"])
    assert json.loads(json.dumps(arch)) == arch


def test_the_standalone_block_is_normsearchs_block():
    """The data flow is written twice, in the model and in the file an export ships: word for word."""
    import inspect

    from normsearch import model
    from normsearch.export import standalone

    assert inspect.getsource(standalone.Block.forward) == inspect.getsource(model.Block.forward)

    def code(fn):  # the statements, docstring left out
        body = ast.parse(textwrap.dedent(inspect.getsource(fn))).body[0].body
        return [ast.dump(n) for n in body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]

    assert code(standalone.add_norm) == code(model.add_norm)
    # the 2026 block options are written twice too (an export needs torch alone): the same statements
    from normsearch.block_options import layer_value

    assert code(standalone.layer_value) == code(layer_value)
    assert code(standalone.sink_attention) == code(model.sink_attention)
    for cls, methods in (("X0", ("__init__", "forward")), ("Residual", ("enter", "stream")), ("Norm", ("params",))):
        for m in methods:
            assert code(getattr(getattr(standalone, cls), m)) == code(getattr(getattr(model, cls), m)), f"{cls}.{m}"


def test_spec_yaml_is_the_canonical_spec(exported):
    root, _, _ = exported
    from normsearch._yaml import load

    for name in ("hybridnorm_star-rmsnorm", "custom-every-set", "all-sites-swiglu-wpe-untied"):
        placement, config = CASES[name]
        data = load(root / name / "spec.yaml")
        assert data["arch_id"] == placement.resolve(config.n_layers).arch_id
        assert Placement.from_dict(data["placement"]) == placement
        assert ModelConfig.from_dict(data["model"]) == config
        assert Placement.load(root / name / "spec.yaml") == placement  # a spec file as normsearch reads it


def test_readme_says_what_it_is_and_how_to_load_it(exported):
    root, _, _ = exported
    text = (root / "hybridnorm_star-rmsnorm" / "README.md").read_text()
    r = baselines()["hybridnorm_star"].resolve(CFG.n_layers)
    assert "None" not in text
    assert r.arch_id in text and r.describe() in text and "hybridnorm_star" in text
    assert "from model import from_pretrained" in text and "load_exported" in text
    assert "untrained" not in text and "## Score" not in text  # trained weights given, no summary


def test_untrained_export_and_summary(tmp_path):
    summary = {
        "metric": "val_loss", "score_mean": 3.2104, "ci_low": 3.18, "ci_high": 3.24,
        "comparisons": [{"against": "pre_ln", "diff": -0.0312, "ci_low": -0.05, "ci_high": -0.01, "p_value": 0.004}],
        "n_seeds": 5,
    }
    out = export_architecture(baselines()["peri_ln"], CFG, tmp_path / "e", summary=summary, seed=3)
    text = (out / "README.md").read_text()
    assert "untrained" in text and "seed 3" in text
    assert "val_loss: 3.21 (CI 3.18 to 3.24)" in text
    assert "| against | diff | ci_low | ci_high | p_value |" in text
    assert "| pre_ln | -0.0312 | -0.05 | -0.01 | 0.004 |" in text
    assert "- n_seeds: 5" in text
    torch.manual_seed(3)
    want = build_model(baselines()["peri_ln"], CFG).state_dict()
    got = load_exported(out).state_dict()
    for k in want:
        torch.testing.assert_close(got[k], want[k], rtol=0, atol=0)
    # a partial summary renders only what is given
    out2 = export_architecture("pre_ln", CFG, tmp_path / "f", summary={"score_mean": 1.5})
    text2 = (out2 / "README.md").read_text()
    assert "score: 1.5" in text2 and "CI" not in text2 and "| against" not in text2


def test_weights_path_is_copied(tmp_path):
    model = perturbed("qk_pre_ln", CFG)
    src = save_weights(model, tmp_path / "trial.safetensors")
    out = export_architecture("qk_pre_ln", CFG, tmp_path / "e", weights_path=src)
    assert (out / "model.safetensors").read_bytes() == src.read_bytes()
    torch.testing.assert_close(load_exported(out).state_dict()["blocks.1.norms.q.weight"],
                               model.state_dict()["blocks.1.norms.q.weight"], rtol=0, atol=0)


def one_line(excinfo):
    assert "\n" not in str(excinfo.value)
    return str(excinfo.value)


def test_out_dir_rules(tmp_path):
    other = tmp_path / "notes"
    other.mkdir()
    (other / "todo.txt").write_text("keep me")
    with pytest.raises(NormsearchError) as e:
        export_architecture("pre_ln", CFG, other)
    assert "not empty" in one_line(e)
    export_architecture("pre_ln", CFG, other, overwrite=True)
    assert (other / "todo.txt").read_text() == "keep me" and (other / "model.py").is_file()

    export_architecture("pre_ln", CFG, other)  # the same architecture again: fine
    with pytest.raises(NormsearchError) as e:
        export_architecture("peri_ln", CFG, other)  # another architecture's export: refused
    assert "holds the export of" in one_line(e)

    afile = tmp_path / "file"
    afile.write_text("x")
    with pytest.raises(NormsearchError, match="not a folder"):
        export_architecture("pre_ln", CFG, afile, overwrite=True)


def test_bad_inputs_fail_with_one_line(tmp_path):
    with pytest.raises(NormsearchError) as e:
        export_architecture("pre_ln", CFG, tmp_path / "a", arch_id="000000000000")
    assert "arch_id 000000000000" in one_line(e)
    with pytest.raises(NormsearchError) as e:
        export_architecture("pre_ln", CFG, tmp_path / "b", state_dict={}, weights_path=tmp_path / "w")
    assert "not both" in one_line(e)
    peri = build_model("peri_ln", CFG).state_dict()
    with pytest.raises(NormsearchError) as e:
        export_architecture("pre_ln", CFG, tmp_path / "c", state_dict=peri)
    assert "does not fit" in one_line(e) and "unexpected" in str(e.value)
    with pytest.raises(NormsearchError) as e:
        export_architecture("pre_ln", CFG, tmp_path / "d", weights_path=tmp_path / "missing.safetensors")
    assert "no such file" in one_line(e)
    untied = {k: v.clone() for k, v in build_model("pre_ln", CFG).state_dict().items()}
    untied["lm_head.weight"] += 1
    with pytest.raises(NormsearchError) as e:
        export_architecture("pre_ln", CFG, tmp_path / "e", state_dict=untied)
    assert "ties them" in one_line(e)
    assert not any((tmp_path / n).exists() for n in "abcde")


def test_a_kind_whose_source_cannot_stand_alone_is_refused(tmp_path):
    @register_norm
    class LeakyTanh(NormKind):
        name = "leaky_tanh_export_test"
        options = {"alpha_init": 0.5}

        @staticmethod
        def parameters(o):
            return {"alpha": ("scalar", o["alpha_init"])}

        @staticmethod
        def forward(x, p, o):
            return torch.tanh(p["alpha"] * x)  # `torch` is this test module's, not norms.py's

    try:
        with pytest.raises(NormsearchError) as e:
            export_architecture(Placement(block={"attn_in": "leaky_tanh_export_test"}), CFG, tmp_path / "e")
        assert "would not run" in one_line(e) and "torch" in str(e.value)
        assert not (tmp_path / "e").exists()
    finally:
        NORM_KINDS.pop("leaky_tanh_export_test")


def test_load_exported_checks_arch_id_and_weights(tmp_path):
    out = export_architecture("peri_ln", CFG, tmp_path / "peri")
    spec = out / "spec.yaml"
    text = spec.read_text()
    spec.write_text(text.replace(re.search(r"arch_id: (\w+)", text).group(1), "abcdefabcdef"))
    with pytest.raises(NormsearchError) as e:
        load_exported(out)
    assert "arch_id abcdefabcdef" in one_line(e)
    spec.write_text(text)

    # another placement's weights in the folder: strict loading refuses them
    save_weights(build_model("pre_ln", CFG).state_dict(), out / "model.safetensors")
    with pytest.raises(NormsearchError) as e:
        load_exported(out)
    assert "does not fit" in one_line(e) or "weights are of" in str(e.value)
    save_weights(dict(build_model("pre_ln", CFG).state_dict()), out / "model.safetensors",
                 metadata={"normsearch.arch_id": build_model("peri_ln", CFG).arch_id})
    with pytest.raises(NormsearchError) as e:
        load_exported(out)
    assert "does not fit" in one_line(e) and "missing" in str(e.value)

    with pytest.raises(NormsearchError, match="no such folder"):
        load_exported(tmp_path / "nowhere")
    with pytest.raises(NormsearchError, match="no spec.yaml"):
        load_exported(tmp_path)


def test_the_architecture_data_is_written_without_torch():
    code = textwrap.dedent("""
        import sys
        from normsearch.export import architecture, norms_source
        from normsearch.baselines import baseline
        from normsearch.config import ModelConfig
        arch = architecture(baseline("hybridnorm_star").resolve(3), ModelConfig(n_layers=3))
        src = norms_source(["rmsnorm", "dyt"])
        print("TORCH", "torch" in sys.modules, len(arch["norms"]["blocks"]), "class DyT" in src)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "TORCH False 3 True" in out


def test_weights_of_a_same_shaped_architecture_are_refused(tmp_path):
    """eps is architecture: its weights have the same names and shapes, and the arch_id tells them apart."""
    other = Placement.from_dict({"block": {"attn_in": {"kind": "rmsnorm", "eps": 1e-6}, "ffn_in": "rmsnorm"},
                                 "final": "rmsnorm"})
    model = build_model(other, CFG)
    with pytest.raises(NormsearchError) as e:
        export_architecture("pre_ln", CFG, tmp_path / "a", state_dict=model)
    assert f"of architecture {model.arch_id}" in one_line(e)
    path = save_weights(model, tmp_path / "w.safetensors")
    with pytest.raises(NormsearchError, match="of architecture"):
        export_architecture("pre_ln", CFG, tmp_path / "b", weights_path=path)
    export_architecture(other, CFG, tmp_path / "c", weights_path=path)  # its own placement: fine


def test_export_leaves_the_callers_random_state_alone(tmp_path):
    torch.manual_seed(123)
    want = torch.rand(3)
    torch.manual_seed(123)
    export_architecture("pre_ln", CFG, tmp_path / "e", seed=7)
    torch.testing.assert_close(torch.rand(3), want, rtol=0, atol=0)


# -- normsearch export: from a study ---------------------------------------------------------------


def test_export_command_from_a_study(tiny_study, tmp_path):
    """The ranked best architecture exports with its kept weights and loads without normsearch."""
    from typer.testing import CliRunner

    from normsearch.checkpoint import load_state_dict
    from normsearch.cli import app
    from normsearch.ranking import rank
    from normsearch.search import open_results

    runner = CliRunner()
    out = tmp_path / "best"
    r = runner.invoke(app, ["export", str(tiny_study), "--rank", "1", "--out", str(out)])
    assert r.exit_code == 0, r.output
    ranking = rank(open_results(tiny_study))
    best = ranking.rows[0]
    assert set(EXPORT_FILES) <= {p.name for p in out.iterdir()}
    assert f"arch_id: {best.arch_id}" in (out / "spec.yaml").read_text()
    readme = (out / "README.md").read_text()
    # ten steps of a tiny model stall: the README shows "-" for a score a row does not have
    shown = "-" if best.score_mean is None else f"{best.score_mean:.4g}"[:4]
    assert shown in readme and "peri_ln" not in readme.split("## Score")[0]
    # the weights are the kept checkpoint of the best seed at the best learning rate
    kept = load_state_dict(tiny_study / "checkpoints" / f"{best.arch_id}.safetensors")
    model = load_exported(out)
    assert all(torch.equal(model.state_dict()[k], v) for k, v in kept.items())
    # trial and baseline selections, retraining, and bad selections
    base = next(row for row in ranking.rows if row.label == "post_ln")
    r = runner.invoke(app, ["export", str(tiny_study), "--baseline", "post_ln", "--out", str(tmp_path / "post")])
    assert r.exit_code == 0 and f"arch_id: {base.arch_id}" in (tmp_path / "post" / "spec.yaml").read_text()
    r = runner.invoke(app, ["export", str(tiny_study), "--trial", str(best.trials[0]), "--steps", "3",
                            "--out", str(tmp_path / "again")])
    assert r.exit_code == 0, r.output
    assert "retrained: seed" in (tmp_path / "again" / "README.md").read_text()
    for args, message in [
        (["--rank", "99"], "--rank 99: the study ranks"),
        (["--baseline", "dyt"], "not a finished baseline"),
        (["--trial", "999"], "no finished trial 999"),
        (["--rank", "1", "--trial", "0"], "exactly one of --rank K, --trial N or --baseline NAME"),
    ]:
        r = runner.invoke(app, ["export", str(tiny_study), *args, "--out", str(tmp_path / "x")])
        assert r.exit_code == 2 and r.output.startswith("error: ") and message in r.output, r.output
    (tiny_study / "checkpoints" / f"{base.arch_id}.safetensors").rename(tmp_path / "moved.safetensors")
    try:
        r = runner.invoke(app, ["export", str(tiny_study), "--baseline", "post_ln", "--out", str(tmp_path / "y")])
        assert r.exit_code == 2 and "add --retrain" in r.output
    finally:
        (tmp_path / "moved.safetensors").rename(tiny_study / "checkpoints" / f"{base.arch_id}.safetensors")


def test_config_json_holds_the_block_options_and_depth_scales(exported):
    root, _, _ = exported
    name = "modern-kinds-layerscale-head-gate"
    arch = config_json(root, name)
    assert arch["gate"] == "head"
    assert arch["residual"] == {"alpha": 1.5, "beta": 0.7, "gain": "vector", "gain_init": 0.05, "scaled_init": False}
    blocks = arch["norms"]["blocks"]
    assert [b["attn_in"]["scale"] for b in blocks] == pytest.approx([1, 2 ** -0.5, 3 ** -0.5, 0.5])
    assert all("scale" not in b["q"] for b in blocks)
    source = (root / name / "norms.py").read_text()
    assert all(f"class {c}(" in source for c in ("Derf", "SeeDNorm", "SingleScaleRMSNorm"))
    plain = config_json(root, "pre_ln-rmsnorm")
    assert plain["gate"] == "none" and plain["residual"]["alpha"] == 1.0


# -- the 2026 speedruns (issue 28) -------------------------------------------------------------------


def test_every_speedrun_feature_and_baseline_has_an_export_case():
    for name in NEW_BASELINES:
        assert f"{name}-rmsnorm" in CASES and f"{name}-layernorm" in CASES, name
    assert set(SPEEDRUN) <= set(CASES)
    resolved = [p.resolve(c.n_layers) for p, c in CASES.values()]
    gains = {s.gain for r in resolved for b in r.blocks for _, s in b}
    assert {"vector", "none", "one_plus"} <= gains
    assert any("ctx" in dict(b) for r in resolved for b in r.blocks)
    assert {r.residual.get("stream", "none") for r in resolved} >= {"none", "sublayer", "block"}
    assert {(r.x0 or {}).get("gate") for r in resolved} >= {None, "scalar", "linear"}
    assert {(r.x0 or {}).get("at") for r in resolved} >= {"input", "attn"}
    assert any(r.sinks for r in resolved)


@pytest.mark.parametrize("name", [*SPEEDRUN, *(f"{b}-rmsnorm" for b in NEW_BASELINES)])
def test_a_speedrun_export_round_trips_through_its_spec(exported, name):
    from normsearch._yaml import load

    root, _, _ = exported
    placement, config = CASES[name]
    data = load(root / name / "spec.yaml")
    arch_id = placement.resolve(config.n_layers).arch_id
    assert data["arch_id"] == arch_id == config_json(root, name)["arch_id"]
    back = Placement.from_dict(data["placement"])
    assert back == placement and back.arch_id(config.n_layers) == arch_id
    assert Placement.load(root / name / "spec.yaml").arch_id(config.n_layers) == arch_id


def test_config_json_holds_the_speedrun_options(exported):
    root, _, _ = exported
    arch = config_json(root, "x0-attn-linear-post")
    assert arch["x0"] == {"at": "attn", "gate": "linear", "init": 0.2, "lr": 1.0} and "sinks" not in arch
    assert arch["residual"]["stream"] == "sublayer" and arch["residual"]["stream_lr"] == 5.0
    arch = config_json(root, "stream-sublayer-first-last")
    assert arch["residual"]["stream_init"] == [1.3, 1.0] and arch["residual"]["gain_init"] == [0.2, 0.1]
    assert "x0" not in arch and "sinks" not in arch
    arch = config_json(root, "sinks-untied")
    assert arch["sinks"] is True and arch["tie_embeddings"] is False
    arch = config_json(root, "one-plus-gains")
    assert arch["norms"]["blocks"][0]["ctx"] == {"kind": "derf", "options": {"alpha_init": 1.0, "shift_init": 0.0,
                                                                           "gain": "one_plus", "bias": True},
                                                 "width": CFG.head_dim, "per_head": True}
    assert arch["norms"]["final"]["options"]["gain"] == "one_plus"
    blocks = config_json(root, "ctx-head-full-head-gate")["norms"]["blocks"]
    assert [(b["ctx"]["width"], b["ctx"]["per_head"]) for b in blocks] == [(12, True), (12, True), (24, False),
                                                                           (24, False)]
    # the exported weights hold the one_plus offsets (w, not 1 + w) and no weight for a weightless norm
    from normsearch.export.standalone import load

    state = load(root / "weightless-no-bias" / "model.safetensors")
    assert not any(k.endswith(("attn_in.weight", "attn_in.bias", "final.weight", "embed.weight")) for k in state)
    assert "blocks.0.norms.ffn_mid.bias" in state and "blocks.0.norms.ffn_in.alpha" in state


def test_sinks_and_x0_under_mup_export_with_the_attention_scale(tmp_path):
    """muP's attention scale reaches the sink attention of the standalone model too (its init is not
    normsearch's under mup, so this case is not among CASES, whose inits are compared)."""
    import importlib.util

    placement = Placement.from_yaml("block: {attn_in: rmsnorm, q: rmsnorm, k: rmsnorm, ffn_in: rmsnorm}\n"
                                    "final: rmsnorm\nsinks: true\nx0: {at: attn, gate: linear, init: 0.1}")
    config = cfg(d_model=48, n_heads=2, parametrization="mup", mup_base_width=12, tie_embeddings=False)
    model = perturbed(placement, config)
    assert model.blocks[0].attn.scale is not None  # not SDPA's own 1/sqrt(head_dim)
    out = export_architecture(placement, config, tmp_path / "e", state_dict=model)
    spec = importlib.util.spec_from_file_location("exported_mup_sinks", out / "model.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    standalone = mod.from_pretrained(out).double()
    idx = torch.randint(0, config.vocab_size, (2, config.context_length), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(standalone(idx), copy.deepcopy(model).double()(idx), rtol=0, atol=1e-12)
