"""Text pictures of a placement: the data flow of a block with its norms, and norm parameter counts.
Torch-free, so ``normsearch show`` answers at once."""

from __future__ import annotations

from .config import ModelConfig
from .block_options import PLAIN
from .norms import NORM_KINDS
from .spec import QKV_SITES, RESIDUAL_ADD, SITE, SITE_TABLE, NormSpec, Placement, ResolvedPlacement, layer_span


def norm_param_count(resolved: ResolvedPlacement, config: ModelConfig) -> int:
    def count(spec: NormSpec | None, site: str) -> int:
        if spec is None:
            return 0
        dim = SITE[site].features(spec, config)
        shapes = NORM_KINDS[spec.kind].parameters(spec.opts).values()
        return sum(dim if shape == "dim" else 1 for shape, _ in shapes)

    total = count(resolved.embed, "embed") + count(resolved.final, "final")
    for block in resolved.blocks:
        total += sum(count(spec, site) for site, spec in block)
    return total


def _label(spec: NormSpec | None) -> str:
    if spec is None:
        return "-"
    text = spec.kind
    if spec.granularity:
        text += f"/{spec.granularity}"
    extra = {k: v for k, v in spec.opts.items() if NORM_KINDS[spec.kind].options[k] != v}
    if "gain" in extra:
        extra["gain"] = spec.gain  # vector, none or one_plus, as a spec writes it
    if extra:
        text += " (" + ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in extra.items()) + ")"
    if spec.depth_scale:
        text += " x 1/sqrt(layer + 1)"
    return text


def options_lines(r: ResolvedPlacement) -> list[str]:
    """The block options in words (none: no lines)."""
    lines = []
    if r.gate != "none":
        per = "one per head" if r.gate == "head" else "one per channel"
        lines.append(f"gate:     SDPA output x sigmoid(x W_g) before W_o, {per} ({r.gate})")
    res = r.residual
    if res != PLAIN:
        gain = "no gain" if res["gain"] == "none" else f"{res['gain']} gain from {_init(res['gain_init'])}"
        init = "scaled init of W_o, W_down" if res["scaled_init"] else "no scaled init"
        stream = res.get("stream", "none")
        s = "" if stream == "none" else (" s" if res["alpha"] != 1.0 else "s")
        alpha = "" if res["alpha"] == 1.0 and s else f"{res['alpha']:.4g}"
        lines.append(f"residual: x = [post]({alpha}{s} x + g f(x)); {gain}; v, W_o, FFN init "
                     f"x {res['beta']:.4g}; {init}")
        if stream != "none":
            where = "one per sublayer" if stream == "sublayer" else "one per block, on its input"
            lines.append(f"          s: a learned stream multiplier, {where}, "
                         f"from {_init(res.get('stream_init', 1.0))}, lr x {res.get('stream_lr', 1.0):g}; "
                         f"g's lr x {res.get('gain_lr', 1.0):g}")
    if r.x0:
        x0 = r.x0
        lam = "one learned scalar" if x0["gate"] == "scalar" else "x0 . w + b per token (w from 0)"
        where = "the block's input" if x0["at"] == "input" else "the attention branch's sum"
        lines.append(f"x0:       + lambda x0 into {where}; lambda {lam}, from {_init(x0['init'])}, lr x {x0['lr']:g}")
    if r.sinks:
        lines.append("sinks:    a learned logit per head joins each softmax and takes no value (from 0)")
    if r.gain_decay:
        lines.append("gain_decay: weight decay on the norms' gains and biases")
    return lines


def _init(init) -> str:
    return f"{init[0]:g} (layer 0) to {init[1]:g} (last)" if isinstance(init, (list, tuple)) else f"{init:g}"


_RESIDUAL = "x ──┬──────────────────────────────┐ residual"
_ADD = "   (+)◄────────────────────────────┘"


def block_picture(block: dict[str, NormSpec]) -> list[str]:
    """The data flow of one block, every site of the site table in order; ``-`` marks a site
    without a norm. The q/k/v sites sit side by side, on the projections; ctx on the heads' output."""
    lines: list[str] = []
    stage = None
    sites = [s for s in SITE_TABLE if s.stage != "model"]
    for i, site in enumerate(sites):
        if site.stage != stage:
            lines.append(_RESIDUAL)
            stage = site.stage
        on_projections = site.name in QKV_SITES
        if on_projections and i and sites[i - 1].name in QKV_SITES:
            continue  # drawn on the line of the first projection
        if site.step == RESIDUAL_ADD:
            lines.append(_ADD)
        elif site.step and not on_projections:
            lines.append(f"    │ {site.step}")
        if on_projections:
            row = [s for s in sites[i:] if s.name in QKV_SITES]
            lines.append(f"    │ {site.step} " + "  ".join(f"{s.name}: {_label(block.get(s.name))}" for s in row))
        else:
            note = "      (replaces the stream)" if site.step == RESIDUAL_ADD else ""
            lines.append(f"    │ {site.name:<9} {_label(block.get(site.name))}{note}")
    return lines


def show_text(placement: Placement, config: ModelConfig, source: str | None = None) -> str:
    r = placement.resolve(config.n_layers)
    head = placement.name or "placement"
    lines = [
        f"{head}   arch_id {r.arch_id}   {config.n_layers} layers, d_model {config.d_model}, "
        f"{config.n_heads} heads",
        f"summary: {r.describe()}",
    ]
    if source:
        lines.append(f"source:  {source}")
    lines += options_lines(r)
    lines += ["", f"embed  {_label(r.embed)}"]
    for layers, block in r.groups():
        lines.append(f"layer{'s' if len(layers) > 1 else ''} {layer_span(layers)}:")
        lines += ["  " + line for line in block_picture(dict(block))]
    lines.append(f"final  {_label(r.final)}")
    lines += ["", f"norm parameters: {norm_param_count(r, config):,}"]
    return "\n".join(lines)
