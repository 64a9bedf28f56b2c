"""Text pictures of a placement: the data flow of a block with its norms, and norm parameter counts.
Torch-free, so ``normsearch show`` answers at once."""

from __future__ import annotations

from .config import ModelConfig
from .norms import NORM_KINDS
from .spec import QKV_SITES, NormSpec, Placement, ResolvedPlacement, _span


def norm_param_count(resolved: ResolvedPlacement, config: ModelConfig) -> int:
    def count(spec: NormSpec | None, site: str) -> int:
        if spec is None:
            return 0
        dim = config.ffn_dim if site == "ffn_mid" else config.d_model
        if site in QKV_SITES and spec.granularity == "head":
            dim = config.head_dim
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
    if extra:
        text += " (" + ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in extra.items()) + ")"
    return text


def block_picture(block: dict[str, NormSpec]) -> list[str]:
    """The data flow of one block, every site in order; ``-`` marks a site without a norm."""
    s = lambda name: _label(block.get(name))
    qkv = "  ".join(f"{n}: {s(n)}" for n in QKV_SITES)
    return [
        "x ──┬──────────────────────────────┐ residual",
        f"    │ attn_in   {s('attn_in')}",
        f"    │ W_q W_k W_v -> {qkv}",
        "    │ RoPE, softmax(qk^T/sqrt(d)) v, W_o",
        f"    │ attn_out  {s('attn_out')}",
        "   (+)◄────────────────────────────┘",
        f"    │ attn_post {s('attn_post')}      (replaces the stream)",
        "x ──┬──────────────────────────────┐ residual",
        f"    │ ffn_in    {s('ffn_in')}",
        "    │ W_up, activation",
        f"    │ ffn_mid   {s('ffn_mid')}",
        "    │ W_down",
        f"    │ ffn_out   {s('ffn_out')}",
        "   (+)◄────────────────────────────┘",
        f"    │ ffn_post  {s('ffn_post')}      (replaces the stream)",
    ]


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
    lines += ["", f"embed  {_label(r.embed)}"]
    for layers, block in r.groups():
        lines.append(f"layer{'s' if len(layers) > 1 else ''} {_span(layers)}:")
        lines += ["  " + line for line in block_picture(dict(block))]
    lines.append(f"final  {_label(r.final)}")
    lines += ["", f"norm parameters: {norm_param_count(r, config):,}"]
    return "\n".join(lines)
