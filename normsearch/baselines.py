"""The named placements from the papers, written in sites (see docs/norm-sites.md).

Each baseline is a function of the norm kind (a recipe choice: the papers use both LayerNorm and
RMSNorm), except ``dyt``, which is DyT by definition. An alias (``sandwich``) is another name for a
baseline: the same placement, the same arch_id.
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

    def placement(self, kind: str = "rmsnorm") -> Placement:
        return self.build(kind).with_name(self.name)


BASELINES: dict[str, Baseline] = {}


def _baseline(name: str, source: str, notes: str = ""):
    def deco(fn: Callable[[str], Placement]):
        BASELINES[name] = Baseline(name, fn, source, notes)
        return fn

    return deco


def _alias(name: str, of: str, source: str):
    base = BASELINES[of]
    BASELINES[name] = Baseline(name, base.build, source, f"another name for {of} (same arch_id): {base.notes}", of)


def _sites(kind: str, *sites: str, granularity: str | None = None) -> dict[str, NormSpec]:
    out = {}
    for s in sites:
        out[s] = NormSpec(kind, granularity if s in ("q", "k", "v") else None)
    return out


@_baseline("post_ln", "Vaswani et al. 2017; Xiong et al. 2020, arXiv 2002.04745",
           "x = Norm(x + F(x)) for both sublayers; the last post-norm is the output norm, no final")
def _post_ln(kind):
    return Placement(_sites(kind, "attn_post", "ffn_post"))


@_baseline("pre_ln", "GPT-2 (Radford et al. 2019); LLaMA (Touvron et al. 2023)",
           "x = x + F(Norm(x)); final norm before the head")
def _pre_ln(kind):
    return Placement(_sites(kind, "attn_in", "ffn_in"), final=NormSpec(kind))


@_baseline("peri_ln", "Kim et al. 2025, arXiv 2502.02732 (ICML 2025)",
           "x = x + Norm(F(Norm(x))); as Gemma 2 and CogView's Sandwich-LN")
def _peri_ln(kind):
    return Placement(_sites(kind, "attn_in", "attn_out", "ffn_in", "ffn_out"), final=NormSpec(kind))


@_baseline("olmo2", "OLMo 2 (Team OLMo 2024, arXiv 2501.00656)",
           "reordered norm x = x + Norm(F(x)) plus QK-norm over the full projection width")
def _olmo2(kind):
    block = _sites(kind, "q", "k", granularity="full") | _sites(kind, "attn_out", "ffn_out")
    return Placement(block, final=NormSpec(kind))


@_baseline("qk_pre_ln", "Wortsman et al. 2023, arXiv 2309.14322",
           "pre-LN plus per-head q/k norms")
def _qk_pre_ln(kind):
    block = _sites(kind, "attn_in", "q", "k", "ffn_in", granularity="head")
    return Placement(block, final=NormSpec(kind))


@_baseline("hybridnorm", "Zhuo et al. 2025, arXiv 2503.04598 (NeurIPS 2025)",
           "Y = X + MHA(QKV-norm(X)); X' = Norm(Y) + FFN(Norm(Y))")
def _hybridnorm(kind):
    block = _sites(kind, "q", "k", "v", "attn_post", granularity="head")
    return Placement(block, final=NormSpec(kind))


@_baseline("hybridnorm_star", "Zhuo et al. 2025, arXiv 2503.04598 (HybridNorm*)",
           "as hybridnorm, but layer 0 is pre-norm on both sublayers and keeps its q/k/v norms")
def _hybridnorm_star(kind):
    first = _sites(kind, "attn_in", "q", "k", "v", "ffn_in", granularity="head")
    base = _hybridnorm(kind)
    return Placement(base.block, final=base.final,
                     overrides=[{"layers": {"index": [0]}, "block": first}])


@_baseline("mix_ln", "Li et al. 2024, arXiv 2412.13795",
           "the first floor(L/4) layers post-LN, the rest pre-LN")
def _mix_ln(kind):
    post = _sites(kind, "attn_post", "ffn_post")
    return Placement(_sites(kind, "attn_in", "ffn_in"), final=NormSpec(kind),
                     overrides=[{"layers": {"fraction": [0.0, 0.25]}, "block": post}])


@_baseline("normformer", "Shleifer et al. 2021, arXiv 2110.09456",
           "pre-LN plus a norm after attention and after the FFN activation (head scaling left out)")
def _normformer(kind):
    return Placement(_sites(kind, "attn_in", "attn_out", "ffn_in", "ffn_mid"), final=NormSpec(kind))


@_baseline("dyt", "Zhu et al. 2025, arXiv 2503.10622",
           "pre-LN layout with DyT, gamma * tanh(alpha x) + beta, at every site (final too)")
def _dyt(kind):
    return Placement(_sites("dyt", "attn_in", "ffn_in"), final=NormSpec("dyt"))


_alias("sandwich", "peri_ln", "Ding et al. 2021 (CogView), arXiv 2105.13290")


@_baseline("gemma3", "Gemma Team 2025, arXiv 2503.19786 (Gemma 3)",
           "Peri-LN plus per-head q/k norms (QK-norm instead of Gemma 2's logit soft-capping)")
def _gemma3(kind):
    block = _sites(kind, "attn_in", "q", "k", "attn_out", "ffn_in", "ffn_out", granularity="head")
    return Placement(block, final=NormSpec(kind))


@_baseline("lns", "Sun et al. 2025, arXiv 2502.05795 (LayerNorm Scaling, NeurIPS 2025)",
           "pre-LN with the input norms' outputs times 1/sqrt(l), l = 1..L; no scaled init of the "
           "residual projections, as the authors recommend")
def _lns(kind):
    block = {s: NormSpec(kind, depth_scale=True) for s in ("attn_in", "ffn_in")}
    return Placement(block, final=NormSpec(kind), residual={"scaled_init": False})


@_baseline("deepnorm", "Wang et al. 2022, arXiv 2203.00555 (DeepNet)",
           "x = Norm(alpha x + F(x)), alpha = (2N)^(1/4); v, W_o and FFN weights initialised times "
           "beta = (8N)^(-1/4) (decoder-only, N layers); no final norm, as post_ln")
def _deepnorm(kind):
    return Placement(_sites(kind, "attn_post", "ffn_post"), residual="deepnorm")


@_baseline("gated_pre_ln", "Qiu et al. 2025, arXiv 2505.06708 (gated attention, Qwen3-Next)",
           "pre-LN plus an elementwise sigmoid gate on the attention output, computed from the "
           "attention's input, before W_o")
def _gated_pre_ln(kind):
    return Placement(_sites(kind, "attn_in", "ffn_in"), final=NormSpec(kind), gate="elementwise")


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
    """``normsearch baselines``: every baseline's arch id, sites and source (then the legend of the
    short site names), or the canonical specs as JSON."""
    import json

    specs = baselines(kind)
    if as_json:
        return json.dumps([{"name": n, "source": BASELINES[n].source, "notes": BASELINES[n].notes,
                            "arch_id": p.arch_id(layers), "sites": p.resolve(layers).describe(),
                            "placement": p.to_dict()} for n, p in specs.items()], indent=2)
    from .legend import site_legend

    width = max(map(len, specs))
    lines = []
    for n, p in specs.items():
        r = p.resolve(layers)
        lines.append(f"{n:<{width}}  {r.arch_id}  {r.describe()}")
        lines.append(f"{'':<{width}}  {BASELINES[n].source}: {BASELINES[n].notes}")
    return "\n".join(lines) + "\n\n" + site_legend()
