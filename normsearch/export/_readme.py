"""The README of an export folder: what it is, its score where one is given, and how to load it."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .._version import __version__
from ..config import ModelConfig
from ..norms import NORM_KINDS
from ..spec import NormSpec, Placement, ResolvedPlacement, layer_span


def _fmt(v: Any) -> str:
    """A number as the README shows it; ``-`` where there is none."""
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def _notes(spec: NormSpec) -> list[str]:
    notes = [spec.kind]
    if spec.granularity:
        notes.append("per head" if spec.granularity == "head" else "full width")
    defaults = NORM_KINDS[spec.kind].options
    notes += [f"{k}={v!r}" for k, v in spec.opts.items() if v != defaults[k]]
    return notes + (["x 1/sqrt(layer + 1)"] if spec.depth_scale else [])


def _site_text(site: str, spec: NormSpec) -> str:
    return f"{site} ({', '.join(_notes(spec))})"


def _spec_text(spec: NormSpec | None) -> str:
    return "-" if spec is None else ", ".join(_notes(spec))


def readme(placement: Placement, config: ModelConfig, resolved: ResolvedPlacement,
           summary: Mapping[str, Any] | None, folder: str, untrained_seed: int | None) -> str:
    from ..show import norm_param_count, options_lines

    name = placement.name or "custom placement"
    lines = [
        f"# {name} ({resolved.arch_id})",
        "",
        f"A decoder-only Transformer exported by normsearch {__version__}: the placement `{name}`, "
        f"architecture id `{resolved.arch_id}`:",
        "",
        f"    {resolved.describe()}",
        "",
        f"{config.n_layers} layers, d_model {config.d_model}, {config.n_heads} heads, "
        f"{config.ffn} FFN ({config.ffn_dim} hidden), "
        + ("RoPE" if config.rope else "learned positions")
        + f", context {config.context_length}, vocabulary {config.vocab_size}, "
        + ("head tied to the token embedding" if config.tie_embeddings else "untied head")
        + f"; {norm_param_count(resolved, config):,} norm parameters.",
        "",
    ]
    if untrained_seed is not None:
        lines += [
            f"**The weights are untrained**: the initialisation of this architecture (seed "
            f"{untrained_seed}), not a trained model.",
            "",
        ]
    if summary:
        lines += _summary_lines(summary)
    lines += [
        "## Load it",
        "",
        "With torch alone (no normsearch needed):",
        "",
        "```python",
        f'import sys; sys.path.insert(0, "{folder}")  # this folder',
        "from model import from_pretrained",
        "model = from_pretrained()  # strict load of model.safetensors, eval mode",
        "```",
        "",
        "With normsearch, as its own `Transformer` (checks the arch_id):",
        "",
        "```python",
        "from normsearch import load_exported",
        f'model = load_exported("{folder}")',
        "```",
        "",
        "## The placement",
        "",
        "| layers | norms in the block |",
        "|---|---|",
        *(f"| {layer_span(ix)} | {', '.join(_site_text(s, n) for s, n in b) or '-'} |"
          for ix, b in resolved.groups()),
        "",
        f"Model level: embed {_spec_text(resolved.embed)}; final {_spec_text(resolved.final)}. "
        f"`normsearch show spec.yaml --layers {config.n_layers} --d-model {config.d_model} "
        f"--n-heads {config.n_heads}` draws the data flow of each block.",
        "",
        *[f"{line}  " for line in options_lines(resolved)],
        *([""] if options_lines(resolved) else []),
        "## Files",
        "",
        "- `spec.yaml`: the placement (canonical form), the model config and the arch_id",
        "- `config.json`: what `model.py` builds: the sizes, and per layer the norm at each site",
        "- `model.py`: normsearch's standalone model (the same file in every export), torch alone",
        "- `norms.py`: the norm kinds this model uses, copied from normsearch's registry",
        "- `model.safetensors`: the weights"
        + (" (the tied head is stored once, as `wte.weight`)" if config.tie_embeddings else ""),
        "",
    ]
    return "\n".join(lines)


def _summary_lines(summary: Mapping[str, Any]) -> list[str]:
    """The score as given: known keys in a sentence and a table, any other keys listed."""
    s = dict(summary)
    lines = ["## Score", ""]
    metric = s.pop("metric", None)
    parts = []
    if "score_mean" in s:
        parts.append(f"{_fmt(s.pop('score_mean'))}")
    if s.get("ci_low") is not None and s.get("ci_high") is not None:
        lo, hi, level = s.pop("ci_low"), s.pop("ci_high"), s.pop("ci_level", None)
        label = f"{_fmt(level * 100 if isinstance(level, float) and level < 1 else level)}% CI" if level else "CI"
        parts.append(f"({label} {_fmt(lo)} to {_fmt(hi)})")
    if parts or metric:
        lines += [(f"{metric}: " if metric else "score: ") + " ".join(parts or ["(no value given)"]), ""]
    comparisons = s.get("comparisons")
    if isinstance(comparisons, list) and comparisons and all(isinstance(r, Mapping) for r in comparisons):
        del s["comparisons"]
        known = ["against", "diff", "ci_low", "ci_high", "p_value"]
        cols = [c for c in known if any(c in row for row in comparisons)]
        cols += sorted({c for row in comparisons for c in row} - set(known))
        lines += ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        for row in comparisons:
            lines.append("| " + " | ".join(_fmt(row[c]) if c in row else "" for c in cols) + " |")
        lines.append("")
    for key, value in s.items():
        plain = isinstance(value, (str, int, float, bool)) or value is None
        lines.append(f"- {key}: {_fmt(value) if plain else json.dumps(value, default=str)}")
    if s:
        lines.append("")
    return lines
