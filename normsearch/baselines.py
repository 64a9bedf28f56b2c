"""The named placements from the papers, written in sites (see docs/norm-sites.md).

Each baseline is a function of the norm kind (a recipe choice: the papers use both LayerNorm and
RMSNorm), except ``dyt``, which is DyT by definition. An alias (``sandwich``) is another name for a
baseline: the same placement, the same arch_id.

Each baseline also names its *paper init* (``Baseline.init``, a value of ``model.init``; the rules are
normsearch.config.INITS): the weight init of its authors' code or paper, with where it was read
(``init_source``). Where the authors' setup could not be found it is ``gpt``, and the source says so.
A found placement has no paper init (:func:`paper_init` gives None).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .errors import NormsearchError, SpecError, unknown
from .norms import NORM_KINDS
from .spec import NormSpec, Placement


@dataclass(frozen=True)
class Baseline:
    name: str
    build: Callable[[str], Placement]
    source: str
    notes: str = ""
    alias_of: str | None = None  # the baseline this one is another name for
    init: str = "gpt"  # the paper init: a value of model.init (normsearch.config.INITS)
    init_source: str = ""  # where that init was read: a file at a commit, or a paper's section

    def placement(self, kind: str = "rmsnorm") -> Placement:
        return self.build(kind).with_name(self.name)


BASELINES: dict[str, Baseline] = {}


def _baseline(name: str, source: str, notes: str = "", init: str = "gpt", init_source: str = ""):
    def deco(fn: Callable[[str], Placement]):
        BASELINES[name] = Baseline(name, fn, source, notes, None, init, init_source)
        return fn

    return deco


def _alias(name: str, of: str, source: str):
    base = BASELINES[of]
    BASELINES[name] = Baseline(name, base.build, source, f"another name for {of} (same arch_id): {base.notes}", of,
                               base.init, f"as {of}: {base.init_source}")


# Where each paper init was read (repositories at the commit fetched; see the report of issue 25).
_FAIRSEQ = ("fairseq @3d262bb: modules/multihead_attention.py reset_parameters (q, k, v xavier_uniform gain "
            "1/sqrt(2), out_proj xavier_uniform), transformer_layer.py build_fc1/fc2 (nn.Linear default), "
            "models/transformer/transformer_base.py Embedding (N(0, d^-1/2))")
_MEGATRON = ("Megatron-LM's defaults (init_method_std 0.02, output layers scaled_init_method_normal: "
             "std / sqrt(2L))")
_HF_LLAMA = "N(0, initializer_range 0.02) for every Linear and Embedding, no scaled init"
_HYBRID = ("BryceZhuo/HybridNorm @f0dd605: dense_model/configs/exps/1.2B-dense-HybriedNorm.yaml (init_fn "
           "full_megatron, init_std 0.013975 = sqrt(2/(5 x 2048)), init_cutoff_factor 3, tied), "
           "dense_model/olmo/model.py reset_parameters")


def _sites(kind: str, *sites: str, granularity: str | None = None) -> dict[str, NormSpec]:
    out = {}
    for s in sites:
        out[s] = NormSpec(kind, granularity if s in ("q", "k", "v") else None)
    return out


@_baseline("post_ln", "Vaswani et al. 2017; Xiong et al. 2020, arXiv 2002.04745",
           "x = Norm(x + F(x)) for both sublayers; the last post-norm is the output norm, no final",
           init="fairseq",
           init_source=_FAIRSEQ + "; the Post-LN Transformer as Xiong et al. ran it (fairseq, Xavier "
                       "init); Vaswani et al.'s tensor2tensor setup not checked")
def _post_ln(kind):
    return Placement(_sites(kind, "attn_post", "ffn_post"))


@_baseline("pre_ln", "GPT-2 (Radford et al. 2019); LLaMA (Touvron et al. 2023)",
           "x = x + F(Norm(x)); final norm before the head",
           init="gpt",
           init_source="GPT-1 paper, Sec. 4.1 (N(0, 0.02)); GPT-2 paper, Sec. 2.3 (the residual layers' weights "
                       "times 1/sqrt(N), N the number of residual layers: 2L)")
def _pre_ln(kind):
    return Placement(_sites(kind, "attn_in", "ffn_in"), final=NormSpec(kind))


@_baseline("peri_ln", "Kim et al. 2025, arXiv 2502.02732 (ICML 2025)",
           "x = x + Norm(F(Norm(x))); as Gemma 2 and CogView's Sandwich-LN",
           init="gpt",
           init_source="the paper trains with Megatron-LM (no code released): " + _MEGATRON
                       + "; the paper's own std not verified here")
def _peri_ln(kind):
    return Placement(_sites(kind, "attn_in", "attn_out", "ffn_in", "ffn_out"), final=NormSpec(kind))


@_baseline("olmo2", "OLMo 2 (Team OLMo 2024, arXiv 2501.00656)",
           "reordered norm x = x + Norm(F(x)) plus QK-norm over the full projection width",
           init="truncnormal",
           init_source="allenai/OLMo @59a53e3: configs/official-1124/OLMo2-7B-stage1.yaml (init_fn normal, "
                       "init_std 0.02, init_cutoff_factor 3; olmo/model.py: that std for every weight, embeddings "
                       "and the untied head too)")
def _olmo2(kind):
    block = _sites(kind, "q", "k", granularity="full") | _sites(kind, "attn_out", "ffn_out")
    return Placement(block, final=NormSpec(kind))


@_baseline("qk_pre_ln", "Wortsman et al. 2023, arXiv 2309.14322",
           "pre-LN plus per-head q/k norms",
           init="gpt",
           init_source="not found: the paper's setup text was not reachable here and its code (a fork of "
                       "google-deepmind/nanodo) is not public; fallback gpt")
def _qk_pre_ln(kind):
    block = _sites(kind, "attn_in", "q", "k", "ffn_in", granularity="head")
    return Placement(block, final=NormSpec(kind))


@_baseline("hybridnorm", "Zhuo et al. 2025, arXiv 2503.04598 (NeurIPS 2025)",
           "Y = X + MHA(QKV-norm(X)); X' = Norm(Y) + FFN(Norm(Y))",
           init="smallmegatron",
           init_source=_HYBRID)
def _hybridnorm(kind):
    block = _sites(kind, "q", "k", "v", "attn_post", granularity="head")
    return Placement(block, final=NormSpec(kind))


@_baseline("hybridnorm_star", "Zhuo et al. 2025, arXiv 2503.04598 (HybridNorm*)",
           "as hybridnorm, but layer 0 is pre-norm on both sublayers and keeps its q/k/v norms",
           init="smallmegatron",
           init_source=_HYBRID)
def _hybridnorm_star(kind):
    first = _sites(kind, "attn_in", "q", "k", "v", "ffn_in", granularity="head")
    base = _hybridnorm(kind)
    return Placement(base.block, final=base.final,
                     overrides=[{"layers": {"index": [0]}, "block": first}])


@_baseline("mix_ln", "Li et al. 2024, arXiv 2412.13795",
           "the first floor(L/4) layers post-LN, the rest pre-LN",
           init="mixln",
           init_source="pixeli99/MixLN @ff45826: peft_pretraining/modeling_llama.py _init_weights (every "
                       "Linear N(0, 0.02), Embedding N(0, sqrt(2/5)); no scaled init for NORM_TYPE post_pre)")
def _mix_ln(kind):
    post = _sites(kind, "attn_post", "ffn_post")
    return Placement(_sites(kind, "attn_in", "ffn_in"), final=NormSpec(kind),
                     overrides=[{"layers": {"fraction": [0.0, 0.25]}, "block": post}])


@_baseline("normformer", "Shleifer et al. 2021, arXiv 2110.09456",
           "pre-LN plus a norm after attention and after the FFN activation (head scaling left out)",
           init="fairseq",
           init_source=_FAIRSEQ + "; examples/normformer/train_lm.sh (transformer_lm_gpt, tied embeddings)")
def _normformer(kind):
    return Placement(_sites(kind, "attn_in", "attn_out", "ffn_in", "ffn_mid"), final=NormSpec(kind))


@_baseline("dyt", "Zhu et al. 2025, arXiv 2503.10622",
           "pre-LN layout with DyT, gamma * tanh(alpha x) + beta, at every site (final too)",
           init="normal",
           init_source="jiachenzhu/DyT @aab5dde: other_tasks/LLaMA (fms-fsdp modules): trunc_normal_(std "
                       "0.02) with torch's absolute bounds +-2 (no truncation in effect) for every Linear and "
                       "Embedding, no scaled init; its learnable sqrt(d) embedding multiplier is not modelled")
def _dyt(kind):
    return Placement(_sites("dyt", "attn_in", "ffn_in"), final=NormSpec("dyt"))


_alias("sandwich", "peri_ln", "Ding et al. 2021 (CogView), arXiv 2105.13290")


@_baseline("gemma3", "Gemma Team 2025, arXiv 2503.19786 (Gemma 3)",
           "Peri-LN plus per-head q/k norms (QK-norm instead of Gemma 2's logit soft-capping)",
           init="gpt",
           init_source="not found: Gemma's training code and init are not public; fallback gpt")
def _gemma3(kind):
    block = _sites(kind, "attn_in", "q", "k", "attn_out", "ffn_in", "ffn_out", granularity="head")
    return Placement(block, final=NormSpec(kind))


@_baseline("lns", "Sun et al. 2025, arXiv 2502.05795 (LayerNorm Scaling, NeurIPS 2025)",
           "pre-LN with the input norms' outputs times 1/sqrt(l), l = 1..L; no scaled init of the "
           "residual projections, as the authors recommend",
           init="normal",
           init_source="lmsdss/LayerNorm-Scaling @3ac54dd: peft_pretraining/modeling_llama.py _init_weights ("
                       + _HF_LLAMA + "); README: use OLMo's normal init with LNS")
def _lns(kind):
    block = {s: NormSpec(kind, depth_scale=True) for s in ("attn_in", "ffn_in")}
    return Placement(block, final=NormSpec(kind), residual={"scaled_init": False})


@_baseline("deepnorm", "Wang et al. 2022, arXiv 2203.00555 (DeepNet)",
           "x = Norm(alpha x + F(x)), alpha = (2N)^(1/4); v, W_o and FFN weights initialised times "
           "beta = (8N)^(-1/4) (decoder-only, N layers); no final norm, as post_ln",
           init="fairseq",
           init_source="microsoft/torchscale @4d1e0e8: component/multihead_attention.py reset_parameters, "
                       "feedforward_network.py (nn.Linear default), architecture/decoder.py (v, out, fc1, fc2 "
                       "divided by (8N)^(1/4): the residual's beta), examples/fairseq LM (fairseq's Embedding, an "
                       "untied head N(0, d^-1/2)); the paper's pseudo-code has xavier_normal_ instead")
def _deepnorm(kind):
    return Placement(_sites(kind, "attn_post", "ffn_post"), residual="deepnorm")


@_baseline("gated_pre_ln", "Qiu et al. 2025, arXiv 2505.06708 (gated attention, Qwen3-Next)",
           "pre-LN plus an elementwise sigmoid gate on the attention output, computed from the "
           "attention's input, before W_o",
           init="normal",
           init_source="qiuzh20/gated_attention @49645df: modeling_qwen3.py _init_weights (" + _HF_LLAMA
                       + "); the training framework is not public")
def _gated_pre_ln(kind):
    return Placement(_sites(kind, "attn_in", "ffn_in"), final=NormSpec(kind), gate="elementwise")


# -- the 2026 speedruns and frontier models (read in their authors' code; shared/design/field-2026.md) --

_MODDED = "KellerJordan/modded-nanogpt @f411b3d, train_gpt.py"
_NANOCHAT = "karpathy/nanochat @92d63d4, nanochat/gpt.py"
_QWEN3_NEXT = ("huggingface/transformers @7515843b (as released in 5.25.0), "
               "src/transformers/models/qwen3_next/modeling_qwen3_next.py")
_DSV4 = ("huggingface/transformers @7fa433e1 (as released in 5.25.0), "
         "src/transformers/models/deepseek_v4/modular_deepseek_v4.py")


#: ``F.rms_norm(x, shape)`` with eps None, as modded-nanogpt's and nanochat's ``norm()`` call it, takes the
#: input dtype's machine epsilon: 2^-23 in float32 (their norms see the float32 or bf16 stream).
TORCH_EPS = 2.0 ** -23


def _norm(kind: str, gain: str, granularity: str | None = None, eps: float | None = None) -> NormSpec:
    """A norm of ``kind`` with its gain as ``gain`` (vector, none, one_plus) where the kind has one, and
    ``eps`` where given and the kind has one; weightless LayerNorm has no bias either."""
    opts = NORM_KINDS[kind].options
    extra = {"gain": gain} if "gain" in opts else {}
    if gain == "none" and "bias" in opts:
        extra["bias"] = False
    if eps is not None and "eps" in opts:
        extra["eps"] = eps
    return NormSpec(kind, granularity, **extra)


def _weightless(kind: str, *sites: str) -> dict[str, NormSpec]:
    return {s: _norm(kind, "none", "head" if s in ("q", "k", "v", "ctx") else None, TORCH_EPS) for s in sites}


@_baseline("modded_nanogpt", f"modded-nanogpt, the GPT-2 speedrun (record #89, 2026): {_MODDED}",
           "weightless RMSNorm (eps None: 2^-23 in float32) at embed (x0), attn_in, per-head q and k, ffn_in "
           "and final (norm(), L952; QK norm L1106); per sublayer a learned stream multiplier (resid_lambdas, "
           "from sqrt(1.1), lr x 5) "
           "and branch multiplier (post_lambdas, from 1) (L1334-1338, L1638, L1665, lr_mul L2035-2036); x0 "
           "added with the attention branch through a per-token gate (L1638). Not expressed here: the x0 "
           "gates' network (a GELU layer of 64 shared by the layers, computed at layers 0 and 4; here a "
           "linear map of x0 per layer, from 0), sa_lambdas on W_qkv and W_o, value and bigram embeddings, "
           "smear, MUDD skips, XSA, paired heads, the attention skipped at layer 6 and gated at layers 3 and "
           "10, YaRN and sliding windows, relu^2, the logit squash, Muon, FP8",
           init="modded",
           init_source=f"{_MODDED}: GPT.__init__ (lm_head N(0, 0.005), the embedding a copy of it), "
                       "init_attn and init_mlp (uniform, std 0.5/sqrt(d); MLP c_proj zero)")
def _modded_nanogpt(kind):
    return Placement(_weightless(kind, "attn_in", "q", "k", "ffn_in"), embed=_norm(kind, "none", eps=TORCH_EPS),
                     final=_norm(kind, "none", eps=TORCH_EPS), residual="scalars", x0="attn")


@_baseline("nanochat", f"nanochat and autoresearch (Karpathy, 2026): {_NANOCHAT}",
           "weightless RMSNorm (eps None: 2^-23 in float32) at embed (x0), attn_in, per-head q and k, ffn_in "
           "and final (norm(), L42; Block.forward L151-152; QK norm L102, after RoPE, which a weightless norm "
           "commutes with); per block a learned multiplier on its input stream and x0 mixed in before the "
           "pre-norm, x = resid_lambdas[i] x + x0_lambdas[i] x0 (L500), from 1.15 to 1.05 "
           "and 0.20 to 0.05 over the layers (init_weights L238-241), the stream's lr 1/100 of x0's "
           "(setup_optimizer L442-443). Not expressed here: q and k times 1.2 after their norms, value "
           "embeddings and their gates, smear, backout, GQA, sliding windows, relu^2, the logit softcap, "
           "Muon, and the optimizer's per-group betas",
           init="nanochat",
           init_source=f"{_NANOCHAT}: GPT.init_weights (wte N(0, 0.8), lm_head N(0, 0.001), q, k, v "
                       "uniform std 1/sqrt(d), c_fc 0.4x that, c_proj of attention and MLP zero)")
def _nanochat(kind):
    return Placement(_weightless(kind, "attn_in", "q", "k", "ffn_in"), embed=_norm(kind, "none", eps=TORCH_EPS),
                     final=_norm(kind, "none", eps=TORCH_EPS), residual="lambdas", x0="input")


@_baseline("qwen3_next", f"Qwen3-Next (Qwen team, 2025): {_QWEN3_NEXT}",
           "pre-norm with zero-centred RMSNorm gains (eps 1e-6), x_hat (1 + w), w from 0 and weight-decayed (so decay "
           "pulls the gain toward 1), at attn_in, per-head q and k, ffn_in and final; a sigmoid gate on the "
           "attention output, one logit per head and channel, from the attention's input. Dense attention "
           "layers only: not expressed here are the Gated DeltaNet layers (3 of 4), the MoE, partial RoPE",
           init="normal",
           init_source=f"{_QWEN3_NEXT}: Qwen3NextPreTrainedModel._init_weights (N(0, initializer_range 0.02) "
                       "for every Linear and Embedding; RMSNorm weights zero)")
def _qwen3_next(kind):
    block = {s: _norm(kind, "one_plus", "head" if s in ("q", "k") else None, 1e-6)
             for s in ("attn_in", "q", "k", "ffn_in")}
    return Placement(block, final=_norm(kind, "one_plus", eps=1e-6), gate="elementwise", gain_decay=True)


@_baseline("deepseek_v4", f"DeepSeek-V4 (DeepSeek-AI, 2026), a dense-attention reading: {_DSV4}",
           "pre-norm (attn_in, ffn_in, final, with gains; eps 1e-6); a weightless per-head q norm; the key and the "
           "value normalised with a gain (V4's one KV head is both K and V, normed by kv_norm: here k and v "
           "norms per head, one gain each); a learned per-head attention sink. Not expressed here: MLA's "
           "low-rank q latent and its norm, K = V sharing and the single KV head, mHC's 4 residual streams and "
           "their Sinkhorn mixer, the compressed and sparse attention, the MoE",
           init="normal",
           init_source=f"{_DSV4}: the PreTrainedModel's _init_weights (N(0, initializer_range) for every "
                       "Linear and Embedding); the training code is not public")
def _deepseek_v4(kind):
    n = lambda gain="vector", g=None: _norm(kind, gain, g, 1e-6)  # noqa: E731  (rms_norm_eps 1e-6)
    block = {"attn_in": n(), "q": n("none", "head"), "k": n(g="head"), "v": n(g="head"), "ffn_in": n()}
    return Placement(block, final=n(), sinks=True)


def baselines(kind: str = "rmsnorm") -> dict[str, Placement]:
    """Every built-in baseline with norms of ``kind`` (``dyt`` is always DyT), aliases included:
    name -> Placement."""
    if kind not in NORM_KINDS:
        raise SpecError(unknown("norm kind", kind, NORM_KINDS))
    return {name: b.placement(kind) for name, b in BASELINES.items()}


def baseline(name: str, kind: str = "rmsnorm") -> Placement:
    if name not in BASELINES:
        raise SpecError(unknown("baseline", name, BASELINES))
    if kind not in NORM_KINDS:
        raise SpecError(unknown("norm kind", kind, NORM_KINDS))
    return BASELINES[name].placement(kind)


def paper_init(name: str | None) -> str | None:
    """The paper init (a value of ``model.init``) of baseline ``name``; None for anything that is not
    a baseline (a found placement has no paper, so no paper init) or for no name."""
    b = BASELINES.get(name) if name else None
    return b.init if b is not None else None


def named_or_file(name_or_file: str, kind: str):
    """A placement from a baseline's name or a spec file (``.yaml``), with its source (None for a file)."""
    from pathlib import Path

    path = Path(name_or_file)
    if path.suffix in (".yaml", ".yml") or path.is_file():
        if not path.is_file():
            raise NormsearchError(f"{path}: no such spec file")
        placement = Placement.load(path)
        return placement.with_name(placement.name or path.stem), None
    return baseline(name_or_file, kind), BASELINES[name_or_file].source


def listing(kind: str, layers: int, as_json: bool = False) -> str:
    """``normsearch baselines``: every baseline's arch id, sites, source and paper init with where it
    was read (then the legend of the short site names and of the inits), or the canonical specs as
    JSON."""
    import json

    specs = baselines(kind)
    if as_json:
        return json.dumps([{"name": n, "source": BASELINES[n].source, "notes": BASELINES[n].notes,
                            "init": BASELINES[n].init, "init_source": BASELINES[n].init_source,
                            "arch_id": p.arch_id(layers), "sites": p.resolve(layers).describe(),
                            "placement": p.to_dict()} for n, p in specs.items()], indent=2)
    from .config import INITS
    from .legend import site_legend

    width = max(map(len, specs))
    lines = []
    for n, p in specs.items():
        r, b = p.resolve(layers), BASELINES[n]
        lines.append(f"{n:<{width}}  {r.arch_id}  {r.describe()}")
        lines.append(f"{'':<{width}}  {b.source}: {b.notes}")
        lines.append(f"{'':<{width}}  paper init {b.init}: {b.init_source}")
    inits = [f"  {name}: {rule}" for name, rule in INITS.items() if any(b.init == name for b in BASELINES.values())]
    legend = ("paper inits (model.init; a found placement has none; d: d_model, L: n_layers; (scaled): unless "
              "the residual's scaled_init is off):\n" + "\n".join(inits))
    return "\n".join(lines) + "\n\n" + site_legend() + "\n\n" + legend
