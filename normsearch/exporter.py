"""Export a found architecture as a standalone PyTorch module.

An export is a folder::

    spec.yaml           the placement (canonical form), the model config and the arch_id
    model.py            the model written out for this placement; needs torch and nothing else
    model.safetensors   the weights
    README.md           what it is, its score where one is given, and how to load it

``model.py`` is generated from the spec by :func:`model_source`, never written by hand, so it
cannot drift from the model normsearch trained: the same maths and the same parameter names
(``blocks.{i}.norms.{site}.weight`` ...), loaded with ``strict=True``. Sites without a norm do not
appear in it at all; layers whose blocks differ (per-layer overrides) get one block class per
distinct layout.

:func:`load_exported` reads a folder back into normsearch's own ``Transformer``.

Torch is imported only where weights are touched; :func:`model_source` is plain text work.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .config import ModelConfig
from .errors import NormsearchError
from .norms import NORM_KINDS
from .spec import QKV_SITES, NormSpec, Placement, ResolvedPlacement

EXPORT_FILES = ("spec.yaml", "model.py", "model.safetensors", "README.md")
WIDTH = 88  # the generated model.py passes ruff's default line length

# --------------------------------------------------------------------------------------------------
# model.py: the norm classes
#
# Each supported kind: its class name and the learnable tensors that hang on a boolean option
# (option, attribute, initial value); the maths is in _norm_class. A kind registered later has no
# template, and exporting a placement that uses it says so.

_NORM_CLASSES = {
    "rmsnorm": ("RMSNorm", [("gain", "weight", "torch.ones(dim)")]),
    "layernorm": ("LayerNorm", [("gain", "weight", "torch.ones(dim)"), ("bias", "bias", "torch.zeros(dim)")]),
    "dyt": ("DyT", [("gain", "weight", "torch.ones(dim)"), ("bias", "bias", "torch.zeros(dim)")]),
}
_SOURCES = {"rmsnorm": "Zhang & Sennrich 2019", "layernorm": "Ba et al. 2016", "dyt": "Zhu et al. 2025"}


def _modes(kind: str, specs: list[NormSpec]) -> dict[str, str]:
    """For each boolean option of ``kind``: ``on`` (every site has it), ``off`` (none has) or
    ``arg`` (it varies, so the class takes it as an argument)."""
    out = {}
    for option, default in NORM_KINDS[kind].options.items():
        if isinstance(default, bool):
            values = {s.opts[option] for s in specs}
            out[option] = "arg" if len(values) > 1 else ("on" if values == {True} else "off")
    return out


def _norm_class(kind: str, modes: dict[str, str]) -> list[str]:
    cls, tensors = _NORM_CLASSES[kind]
    needs_dim = any(modes[option] != "off" for option, _, _ in tensors)
    args = ["self"] + (["dim: int"] if needs_dim else [])
    args.append("alpha_init: float" if kind == "dyt" else "eps: float")
    args += [f"{o}: bool = {NORM_KINDS[kind].options[o]!r}" for o, m in modes.items() if m == "arg"]

    def term(option: str, text: str) -> str:
        return {"on": text, "arg": f"{text} (if {option})", "off": ""}[modes[option]]

    if kind == "rmsnorm":
        formula = "x / sqrt(mean(x^2) + eps)" + term("gain", " * weight")
    elif kind == "layernorm":
        formula = "(x - mean) / sqrt(var + eps)" + term("gain", " * weight") + term("bias", " + bias")
    else:
        formula = "tanh(alpha * x)" + term("gain", " * weight") + term("bias", " + bias")
    where = "over the last dimension" if kind != "dyt" else "alpha a learnable scalar"
    lines = [
        f"class {cls}(nn.Module):",
        *_docstring(f"{formula}, {where} ({_SOURCES[kind]}).", 4),
        "",
        *_def("__init__", args),
        "        super().__init__()",
    ]
    if kind == "dyt":
        lines.append("        self.alpha = nn.Parameter(torch.tensor(alpha_init))")
    else:
        lines.append("        self.eps = eps")
    for option, attr, init in tensors:
        if modes[option] == "on":
            lines.append(f"        self.{attr} = nn.Parameter({init})")
        elif modes[option] == "arg":
            lines.append(f"        self.{attr} = nn.Parameter({init}) if {option} else None")
    lines += ["", "    def forward(self, x: Tensor) -> Tensor:"]
    present = {attr: modes[option] != "off" for option, attr, _ in tensors}
    if kind == "rmsnorm":
        w = "self.weight" if present["weight"] else "None"
        lines.append(f"        return F.rms_norm(x, x.shape[-1:], {w}, self.eps)")
    elif kind == "layernorm":
        w = "self.weight" if present["weight"] else "None"
        b = "self.bias" if present["bias"] else "None"
        lines.append(f"        return F.layer_norm(x, x.shape[-1:], {w}, {b}, self.eps)")
    elif "arg" not in modes.values():
        expr = "torch.tanh(self.alpha * x)"
        expr += " * self.weight" if present["weight"] else ""
        expr += " + self.bias" if present["bias"] else ""
        lines.append(f"        return {expr}")
    else:
        lines.append("        y = torch.tanh(self.alpha * x)")
        for (option, attr, _), op in zip(tensors, ("*", "+")):
            if modes[option] == "on":
                lines.append(f"        y = y {op} self.{attr}")
            elif modes[option] == "arg":
                lines += [f"        if self.{attr} is not None:", f"            y = y {op} self.{attr}"]
        lines.append("        return y")
    return lines


def _def(name: str, args: list[str]) -> list[str]:
    """A method's def line, or three lines where one would be too long."""
    one = f"    def {name}({', '.join(args)}):"
    return [one] if len(one) <= WIDTH else [f"    def {name}(", f"        {', '.join(args)}", "    ):"]


def _norm_call(spec: NormSpec, dim: str, modes: dict[str, str]) -> str:
    cls, tensors = _NORM_CLASSES[spec.kind]
    args = [dim] if any(modes[option] != "off" for option, _, _ in tensors) else []
    o = spec.opts
    args.append(f"alpha_init={o['alpha_init']!r}" if spec.kind == "dyt" else f"eps={o['eps']!r}")
    args += [f"{k}={o[k]!r}" for k, m in modes.items() if m == "arg" and o[k] != NORM_KINDS[spec.kind].options[k]]
    return f"{cls}({', '.join(args)})"


# --------------------------------------------------------------------------------------------------
# model.py: the blocks and the model


def _docstring(text: str, indent: int) -> list[str]:
    pad = " " * indent
    one = f'{pad}"""{text}"""'
    if len(one) <= WIDTH:
        return [one]
    body = textwrap.wrap(text, WIDTH - indent - 3, break_long_words=False, break_on_hyphens=False)
    return [f'{pad}"""{body[0]}', *(pad + line for line in body[1:]), f'{pad}"""']


def _comment(text: str, indent: int) -> list[str]:
    width = WIDTH - indent - 2
    return [" " * indent + "# " + line for line in textwrap.wrap(text, width, break_long_words=False)]


def _site_dim(site: str, spec: NormSpec) -> str:
    if site in QKV_SITES:
        return "HEAD_DIM" if spec.granularity == "head" else "D_MODEL"
    return "FFN_DIM" if site == "ffn_mid" else "D_MODEL"


def _layers_text(layers: list[int]) -> str:
    return ("Layer " if len(layers) == 1 else "Layers ") + _span_text(layers)


def _span_text(layers: list[int]) -> str:
    """[0, 2, 3, 4] -> '0, 2-4'"""
    runs: list[list[int]] = []
    for i in layers:
        if runs and runs[-1][-1] == i - 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


def _notes(spec: NormSpec, with_kind: bool) -> list[str]:
    notes = [spec.kind] if with_kind else []
    if spec.granularity:
        notes.append("per head" if spec.granularity == "head" else "full width")
    defaults = NORM_KINDS[spec.kind].options
    return notes + [f"{k}={v!r}" for k, v in spec.opts.items() if v != defaults[k]]


def _site_text(site: str, spec: NormSpec, with_kind: bool) -> str:
    notes = _notes(spec, with_kind)
    return f"{site} ({', '.join(notes)})" if notes else site


def _spec_text(spec: NormSpec | None) -> str:
    return "-" if spec is None else ", ".join(_notes(spec, True))


def _block_class(name: str, block: tuple, layers: list[int], config: ModelConfig,
                 modes: dict[str, dict[str, str]]) -> list[str]:
    mixed = len(modes) > 1
    sites = dict(block)
    rope = ", rope" if config.rope else ""
    doc = f"{_layers_text(layers)}: norms at " + ", ".join(_site_text(s, n, mixed) for s, n in block) + "."
    if not block:
        doc = f"{_layers_text(layers)}: no norms."
    lines = [f"class {name}(nn.Module):", *_docstring(doc, 4), "", "    def __init__(self):",
             "        super().__init__()"]
    if block:
        lines.append("        self.norms = nn.ModuleDict({")
        for site, spec in block:
            lines.append(f'            "{site}": {_norm_call(spec, _site_dim(site, spec), modes[spec.kind])},')
        lines.append("        })")
    lines += ["        self.attn = Attention()", "        self.ffn = FFN()", ""]
    sig = "x: Tensor, rope: tuple[Tensor, Tensor]" if config.rope else "x: Tensor"
    lines.append(f"    def forward(self, {sig}) -> Tensor:")

    body: list[str] = []

    def say(line: str) -> None:
        body.append("        " + line)

    say("# attention")
    src = "x"
    if "attn_in" in sites:
        say('h = self.norms["attn_in"](x)')
        src = "h"
    say(f"q, k, v = self.attn.qkv({src}).split(D_MODEL, dim=-1)")
    qkv = [s for s in QKV_SITES if s in sites]
    if qkv:
        runs: list[list[str]] = []  # consecutive sites of one granularity
        for s in qkv:
            if runs and sites[runs[-1][0]].granularity == sites[s].granularity:
                runs[-1].append(s)
            else:
                runs.append([s])
        how = "; ".join(f"{', '.join(r)} " + ("per head (over HEAD_DIM, shared by the heads)"
                                              if sites[r[0]].granularity == "head" else "over the full width")
                        for r in runs)
        body += _comment(f"norms on {', '.join(qkv)}, before RoPE: {how}", 8)
        for s in qkv:
            if sites[s].granularity == "head":
                say(f'{s} = self.norms["{s}"]({s}.unflatten(-1, (N_HEADS, HEAD_DIM))).flatten(-2)')
            else:
                say(f'{s} = self.norms["{s}"]({s})')
    say(f"h = self.attn(q, k, v{rope})")
    if "attn_out" in sites:
        say('h = self.norms["attn_out"](h)')
    if "attn_post" in sites:
        say('x = self.norms["attn_post"](x + h)  # replaces the stream')
    else:
        say("x = x + h")
    say("# feed-forward")
    src = "x"
    if "ffn_in" in sites:
        say('h = self.norms["ffn_in"](x)')
        src = "h"
    if config.ffn == "swiglu":
        say(f"h = F.silu(self.ffn.gate({src})) * self.ffn.up({src})")
    else:
        say(f"h = F.gelu(self.ffn.up({src}))")
    if "ffn_mid" in sites:
        say('h = self.norms["ffn_mid"](h)')
    if config.dropout:
        say("h = F.dropout(self.ffn.down(h), DROPOUT, self.training)")
    else:
        say("h = self.ffn.down(h)")
    if "ffn_out" in sites:
        say('h = self.norms["ffn_out"](h)')
    if "ffn_post" in sites:
        say('return self.norms["ffn_post"](x + h)  # replaces the stream')
    else:
        say("return x + h")
    return lines + body


def _attention_class(config: ModelConfig) -> list[str]:
    rope = config.rope
    lines = [
        "class Attention(nn.Module):",
        *_docstring(
            "Causal self-attention. The block computes q, k, v with `qkv` (and normalises them "
            "where its layout has norms there); this " + ("rotates q and k, " if rope else "")
            + "attends and projects out.", 4),
        "",
        "    def __init__(self):",
        "        super().__init__()",
        "        self.qkv = nn.Linear(D_MODEL, 3 * D_MODEL, bias=False)",
        "        self.out = nn.Linear(D_MODEL, D_MODEL, bias=False)",
        "",
    ]
    if rope:
        lines += ["    def forward(",
                  "        self, q: Tensor, k: Tensor, v: Tensor, rope: tuple[Tensor, Tensor]",
                  "    ) -> Tensor:"]
    else:
        lines.append("    def forward(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:")
    lines += [
        "        B, T, _ = q.shape",
        "        q, k, v = (t.view(B, T, N_HEADS, HEAD_DIM).transpose(1, 2) for t in (q, k, v))",
    ]
    if rope:
        lines.append("        q, k = apply_rope(q, *rope), apply_rope(k, *rope)")
    if config.dropout:
        lines += [
            "        drop = DROPOUT if self.training else 0.0",
            "        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=drop)",
            "        y = self.out(y.transpose(1, 2).reshape(B, T, D_MODEL))",
            "        return F.dropout(y, DROPOUT, self.training)",
        ]
    else:
        lines += [
            "        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)",
            "        return self.out(y.transpose(1, 2).reshape(B, T, D_MODEL))",
        ]
    return lines


def _ffn_class(config: ModelConfig) -> list[str]:
    formula = "down(silu(gate(x)) * up(x))" if config.ffn == "swiglu" else "down(gelu(up(x)))"
    lines = [
        "class FFN(nn.Module):",
        *_docstring(f"The feed-forward weights, {formula}. The block runs them, so that its "
                    "norm sites read in place.", 4),
        "",
        "    def __init__(self):",
        "        super().__init__()",
        "        self.up = nn.Linear(D_MODEL, FFN_DIM, bias=False)",
    ]
    if config.ffn == "swiglu":
        lines.append("        self.gate = nn.Linear(D_MODEL, FFN_DIM, bias=False)")
    lines.append("        self.down = nn.Linear(FFN_DIM, D_MODEL, bias=False)")
    return lines


_ROPE = '''\
def rope_tables(
    T: int, device: torch.device, dtype: torch.dtype
) -> tuple[Tensor, Tensor]:
    """cos and sin of the rotary angles, (T, HEAD_DIM / 2), computed in float64 and
    returned in dtype promoted to at least float32."""
    exponent = torch.arange(0, HEAD_DIM, 2, dtype=torch.float64) / HEAD_DIM
    inv = 1.0 / ROPE_THETA ** exponent
    ang = torch.outer(torch.arange(T, dtype=torch.float64), inv)
    dtype = torch.promote_types(dtype, torch.float32)
    return ang.cos().to(device, dtype), ang.sin().to(device, dtype)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate pairs (x[..., :d/2], x[..., d/2:]) of x (B, H, T, d) by position."""
    x1, x2 = x.to(cos.dtype).chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).type_as(x)'''

_LOAD = '''\
DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
}


def load(path: str | Path) -> dict[str, Tensor]:
    """The tensors of a .safetensors file: an 8-byte little-endian header length, a JSON
    header (name -> dtype, shape, data_offsets), then the raw little-endian bytes."""
    raw = Path(path).read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    state = {}
    for name, info in header.items():
        begin, end = (8 + n + offset for offset in info["data_offsets"])
        data = torch.frombuffer(bytearray(raw[begin:end]), dtype=DTYPES[info["dtype"]])
        state[name] = data.reshape(info["shape"])
    return state


def from_pretrained(directory: str | Path | None = None) -> Transformer:
    """The model with the weights in `directory`/model.safetensors (default: the
    folder of this file), loaded strictly (every name and shape must match), in eval
    mode."""
    directory = Path(__file__).parent if directory is None else Path(directory)
    state = load(directory / "model.safetensors")'''


def _model_class(resolved: ResolvedPlacement, config: ModelConfig, names: dict[tuple, str],
                 modes: dict[str, dict[str, str]]) -> list[str]:
    lines = [
        "class Transformer(nn.Module):",
        '    """Token ids (B, T) -> logits (B, T, VOCAB_SIZE)."""',
        "",
        "    def __init__(self):",
        "        super().__init__()",
        "        self.wte = nn.Embedding(VOCAB_SIZE, D_MODEL)",
    ]
    if not config.rope:
        lines.append("        self.wpe = nn.Embedding(CONTEXT_LENGTH, D_MODEL)  # learned positions")
    model_norms = [(s, n) for s, n in (("embed", resolved.embed), ("final", resolved.final)) if n]
    if model_norms:
        lines.append("        self.norms = nn.ModuleDict({")
        for site, spec in model_norms:
            lines.append(f'            "{site}": {_norm_call(spec, "D_MODEL", modes[spec.kind])},')
        lines.append("        })")
    if len(names) == 1:
        (cls,) = names.values()
        lines.append(f"        self.blocks = nn.ModuleList({cls}() for _ in range(N_LAYERS))")
    else:
        lines.append("        self.blocks = nn.ModuleList([")
        for layers, block in resolved.groups():
            call = f"{names[block]}()"
            item = call if len(layers) == 1 else f"*({call} for _ in range({len(layers)}))"
            lines.append(f"            {item},  # {_layers_text(layers).lower()}")
        lines.append("        ])")
    lines.append("        self.lm_head = nn.Linear(D_MODEL, VOCAB_SIZE, bias=False)")
    if config.tie_embeddings:
        lines.append("        self.lm_head.weight = self.wte.weight  # tied to the token embedding")
    lines += ["        self.reset_parameters()", "", "    def reset_parameters(self):"]
    if config.init == "gpt":
        lines += [*_docstring("N(0, INIT_STD), the residual projections N(0, RESID_STD); the "
                              "norms keep their initial values.", 8),
                  "        for name, p in self.named_parameters():",
                  '            if ".norms." not in f".{name}":',
                  '                resid = name.endswith(("attn.out.weight", "ffn.down.weight"))',
                  "                nn.init.normal_(p, 0.0, RESID_STD if resid else INIT_STD)"]
    else:
        lines += ['        """N(0, INIT_STD); the norms keep their initial values."""',
                  "        for name, p in self.named_parameters():",
                  '            if ".norms." not in f".{name}":',
                  "                nn.init.normal_(p, 0.0, INIT_STD)"]
    lines += [
        "",
        "    def forward(self, idx: Tensor) -> Tensor:",
        "        T = idx.shape[1]",
        "        if T > CONTEXT_LENGTH:",
        '            raise ValueError(f"{T} tokens exceed the context length {CONTEXT_LENGTH}")',
        "        x = self.wte(idx)",
    ]
    if not config.rope:
        lines.append("        x = x + self.wpe(torch.arange(T, device=idx.device))")
    if resolved.embed:
        lines.append('        x = self.norms["embed"](x)')
    if config.dropout:
        lines.append("        x = F.dropout(x, DROPOUT, self.training)")
    if config.rope:
        lines += ["        rope = rope_tables(T, idx.device, self.wte.weight.dtype)",
                  "        for block in self.blocks:",
                  "            x = block(x, rope)"]
    else:
        lines += ["        for block in self.blocks:", "            x = block(x)"]
    if resolved.final:
        lines.append('        x = self.norms["final"](x)')
    lines.append("        return self.lm_head(x)")
    return lines


def _constants(config: ModelConfig) -> list[tuple[str, str]]:
    """(name, value expression) in order; only the ones the code uses are written."""
    small = "math.sqrt(2.0 / (5.0 * D_MODEL))  # init: small"
    return [
        ("VOCAB_SIZE", repr(config.vocab_size)),
        ("N_LAYERS", repr(config.n_layers)),
        ("D_MODEL", repr(config.d_model)),
        ("N_HEADS", repr(config.n_heads)),
        ("HEAD_DIM", repr(config.head_dim)),
        ("FFN_DIM", repr(config.ffn_dim) + f"  # {config.ffn}"),
        ("CONTEXT_LENGTH", repr(config.context_length)),
        ("ROPE_THETA", repr(config.rope_theta)),
        ("DROPOUT", repr(config.dropout)),
        ("INIT_STD", repr(config.init_std) if config.init == "gpt" else small),
        ("RESID_STD", "INIT_STD / math.sqrt(2 * N_LAYERS)  # residual projections"),
    ]


def _uses(text: str, name: str) -> bool:
    import re

    return re.search(rf"(?<![\w.]){re.escape(name)}\b", text) is not None


def _check_exportable(resolved: ResolvedPlacement) -> None:
    specs = [s for b in resolved.blocks for _, s in b] + [s for s in (resolved.embed, resolved.final) if s]
    for kind in sorted({s.kind for s in specs}):
        if kind not in _NORM_CLASSES:
            raise NormsearchError(
                f"norm kind {kind!r} has no export template (the exporter writes "
                f"{', '.join(_NORM_CLASSES)}); add one in normsearch/exporter.py"
            )


def _coerce(placement: Any, config: Any) -> tuple[Placement, ModelConfig]:
    if isinstance(placement, str):
        from .baselines import baseline

        placement = baseline(placement)
    elif not isinstance(placement, Placement):
        placement = Placement.from_dict(placement)
    if not isinstance(config, ModelConfig):
        config = ModelConfig.from_dict(config)
    return placement, config


def model_source(placement: Placement | str | Mapping, config: ModelConfig | Mapping) -> str:
    """The text of a standalone ``model.py`` for ``placement`` at ``config``: torch only, the same
    maths and parameter names as :func:`normsearch.model.build_model`, with ``from_pretrained`` and
    ``load`` (a pure-torch safetensors reader)."""
    from ._version import __version__

    placement, config = _coerce(placement, config)
    resolved = placement.resolve(config.n_layers)
    _check_exportable(resolved)

    specs = [s for b in resolved.blocks for _, s in b] + [s for s in (resolved.embed, resolved.final) if s]
    kinds = [k for k in _NORM_CLASSES if any(s.kind == k for s in specs)]
    modes = {k: _modes(k, [s for s in specs if s.kind == k]) for k in kinds}

    layouts: dict[tuple, list[int]] = {}
    for i, block in enumerate(resolved.blocks):
        layouts.setdefault(block, []).append(i)
    names = {b: "Block" if len(layouts) == 1 else f"Block{j}" for j, b in enumerate(layouts)}

    sections: list[list[str]] = [_norm_class(k, modes[k]) for k in kinds]
    if config.rope:
        sections.append(_ROPE.splitlines())
    sections += [_attention_class(config), _ffn_class(config)]
    sections += [_block_class(names[b], b, layers, config, modes) for b, layers in layouts.items()]
    sections.append(_model_class(resolved, config, names, modes))
    load = _LOAD.splitlines()
    if config.tie_embeddings:
        load.append('    state["lm_head.weight"] = state["wte.weight"]  # tied: stored once')
    load += ["    model = Transformer()", "    model.load_state_dict(state, strict=True)",
             "    return model.eval()"]
    sections.append(load)
    body = "\n\n\n".join("\n".join(s) for s in sections)

    consts = _constants(config)
    used: set[str] = set()
    text = body
    for _ in consts:  # a constant may be used only by another constant
        used = {name for name, _ in consts if _uses(text, name)}
        text = body + "\n".join(value for name, value in consts if name in used)
    const_lines = [f"{name} = {value}" for name, value in consts if name in used]

    title = placement.name or "A custom placement"
    doc = [
        *textwrap.wrap(f"{title}: a decoder-only Transformer with its norms where normsearch put them.",
                       WIDTH - 3),
        "",
        *textwrap.wrap(f"Architecture {resolved.arch_id}: {resolved.describe()}", WIDTH,
                       break_long_words=False, break_on_hyphens=False),
        "",
        f"Generated by normsearch {__version__} from spec.yaml; needs torch (>= 2.4) alone.",
        "Parameter names match normsearch's, so its weights load with strict=True:",
        "",
        "    from model import from_pretrained",
        "    model = from_pretrained()  # model.safetensors next to this file",
    ]
    imports = ["json"]
    if _uses(body + "\n".join(const_lines), "math"):
        imports.append("math")
    head = ['"""' + doc[0], *doc[1:], '"""', "", "from __future__ import annotations", ""]
    head += [f"import {m}" for m in imports]
    head += ["from pathlib import Path", "", "import torch", "import torch.nn.functional as F",
             "from torch import Tensor, nn", "", "# The model configuration (normsearch ModelConfig)."]
    source = "\n".join(head + const_lines) + "\n\n\n" + body + "\n"
    compile(source, "model.py", "exec")  # an exporter bug must not reach a user's folder
    return source


# --------------------------------------------------------------------------------------------------
# The folder


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def _readme(placement: Placement, config: ModelConfig, resolved: ResolvedPlacement,
            summary: Mapping[str, Any] | None, folder: str, untrained_seed: int | None) -> str:
    from ._version import __version__
    from .show import norm_param_count

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
        "from normsearch.exporter import load_exported",
        f'model = load_exported("{folder}")',
        "```",
        "",
        "## The placement",
        "",
        "| layers | norms in the block |",
        "|---|---|",
        *(f"| {_span_text(ix)} | {', '.join(_site_text(s, n, True) for s, n in b) or '-'} |"
          for ix, b in resolved.groups()),
        "",
        f"Model level: embed {_spec_text(resolved.embed)}; final {_spec_text(resolved.final)}. "
        f"`normsearch show spec.yaml --layers {config.n_layers} --d-model {config.d_model} "
        f"--n-heads {config.n_heads}` draws the data flow of each block.",
        "",
        "## Files",
        "",
        "- `spec.yaml`: the placement (canonical form), the model config and the arch_id",
        "- `model.py`: the model written out for this placement, generated from `spec.yaml`",
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


def _write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _is_export(folder: Path) -> str | None:
    """The arch_id of an export folder, or None when it is not one."""
    from ._yaml import load

    spec = folder / "spec.yaml"
    if not spec.is_file():
        return None
    try:
        data = load(spec)
    except NormsearchError:
        return None
    arch_id = data.get("arch_id") if isinstance(data, Mapping) else None
    return str(arch_id) if arch_id else None


def _fit_problems(state: Mapping[str, Any], model) -> str | None:
    """One line saying how a state dict does not fit ``model`` (names, shapes), or None."""
    want = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    have = {k: tuple(v.shape) for k, v in state.items()}
    missing = [k for k in want if k not in have]
    unexpected = [k for k in have if k not in want]
    shapes = [f"{k} {list(have[k])} != {list(want[k])}" for k in want if k in have and have[k] != want[k]]

    def few(items):
        return ", ".join(items[:3]) + (f", ... ({len(items)} in all)" if len(items) > 3 else "")

    problems = []
    if missing:
        problems.append(f"missing {few(missing)}")
    if unexpected:
        problems.append(f"unexpected {few(unexpected)}")
    if shapes:
        problems.append(f"wrong shape {few(shapes)}")
    return "; ".join(problems) or None


def export_architecture(placement: Placement | str | Mapping, config: ModelConfig | Mapping,
                        out_dir: str | os.PathLike, *, state_dict: Any = None,
                        weights_path: str | os.PathLike | None = None, arch_id: str | None = None,
                        summary: Mapping[str, Any] | None = None, seed: int = 0,
                        overwrite: bool = False) -> Path:
    """Write the export folder of ``placement`` at ``config`` to ``out_dir``; returns its path.

    The weights come from ``state_dict`` (a state dict or a module), or ``weights_path`` (a
    safetensors file, copied), or else are the untrained initialisation of
    ``build_model(placement, config)`` under ``seed`` (the README says so). The weights must fit
    (names and shapes), and where they record an arch_id (a normsearch model, a file written by
    :func:`~normsearch.checkpoint.save_weights`) it must be this one. ``arch_id``, when given (a
    study's record), must be the placement's. ``summary`` (``score_mean``, ``ci_low``,
    ``ci_high``, ``metric``, ``comparisons``: [{against, diff, ci_low, ci_high, p_value}], ...) is
    rendered in the README as given.

    ``out_dir`` may be new, empty, or an earlier export of the same architecture; anything else
    needs ``overwrite=True`` (which replaces the export's four files and touches nothing else).
    """
    import torch

    from ._yaml import dumps, flow_leaves
    from .checkpoint import ARCH_ID_KEY, load_state_dict, read_metadata, save_weights
    from .model import build_model

    placement, config = _coerce(placement, config)
    resolved = placement.resolve(config.n_layers)
    if arch_id is not None and arch_id != resolved.arch_id:
        raise NormsearchError(
            f"arch_id {arch_id} was given, but this placement at {config.n_layers} layers is "
            f"{resolved.arch_id}; export the placement that arch_id was recorded with"
        )
    if state_dict is not None and weights_path is not None:
        raise NormsearchError("give the weights as state_dict or as weights_path, not both")
    if summary is not None and not isinstance(summary, Mapping):
        raise NormsearchError(f"summary must be a mapping, not {type(summary).__name__}")
    source = model_source(placement, config)

    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise NormsearchError(f"{out}: exists and is not a folder; choose another --out")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        found = _is_export(out)
        if found is None:
            raise NormsearchError(
                f"{out}: the folder is not empty and holds no export; choose a new folder or overwrite it"
            )
        if found != resolved.arch_id:
            raise NormsearchError(
                f"{out}: holds the export of {found}, not {resolved.arch_id}; choose a new folder or overwrite it"
            )

    with torch.random.fork_rng(devices=[]):  # the caller's random state stays as it was
        torch.manual_seed(seed)
        model = build_model(placement, config)
    untrained = None
    if weights_path is not None:
        weights_path = Path(weights_path)
        state, what = load_state_dict(weights_path), str(weights_path)
        source_id = read_metadata(weights_path).get(ARCH_ID_KEY)
    elif state_dict is not None:
        source_id = getattr(state_dict, "arch_id", None) if isinstance(state_dict, torch.nn.Module) else None
        state = state_dict.state_dict() if isinstance(state_dict, torch.nn.Module) else state_dict
        if not isinstance(state, Mapping):
            raise NormsearchError(f"state_dict must be a mapping of name -> tensor, not {type(state).__name__}")
        state, what = dict(state), "the state dict"
    else:
        state, what, untrained, source_id = model.state_dict(), "", seed, None
    if source_id is not None and source_id != resolved.arch_id:
        raise NormsearchError(
            f"{what}: the weights are of architecture {source_id}, not {resolved.arch_id}; "
            "export the placement they were trained with"
        )
    if config.tie_embeddings and "wte.weight" in state:
        head, wte = state.get("lm_head.weight"), state["wte.weight"]
        if head is not None and head is not wte and not (head.shape == wte.shape and torch.equal(head, wte)):
            raise NormsearchError(
                f"{what}: lm_head.weight differs from wte.weight, but the config ties them "
                "(tie_embeddings: true); the weights come from another model config"
            )
        state["lm_head.weight"] = wte  # tied: one tensor, stored once
    problem = _fit_problems(state, model)
    if problem:
        raise NormsearchError(f"{what} does not fit the architecture {resolved.arch_id}: {problem}")

    out.mkdir(parents=True, exist_ok=True)
    target = out / "model.safetensors"
    if weights_path is not None:
        if not (target.exists() and target.samefile(weights_path)):
            tmp = target.with_name(".model.safetensors.tmp")
            shutil.copyfile(weights_path, tmp)
            os.replace(tmp, target)
    else:
        save_weights(state, target, metadata={ARCH_ID_KEY: resolved.arch_id})
    _write_text(out / "model.py", source)
    _write_text(out / "README.md", _readme(placement, config, resolved, summary, out.name, untrained))
    spec = {
        "arch_id": resolved.arch_id,
        "placement": flow_leaves(placement.to_dict()),
        "model": config.to_dict(),
    }
    header = "# normsearch export: the architecture of model.py and model.safetensors\n"
    _write_text(out / "spec.yaml", header + dumps(spec))  # last: its presence marks a whole export
    return out


def export(study, out_dir: str | os.PathLike, *, rank: int | None = None, trial: int | None = None,
           baseline: str | None = None, retrain: bool = False, steps: int | None = None,
           storage: str | None = None, study_name: str | None = None, overwrite: bool = False,
           progress=None) -> Path:
    """Export one architecture of a study: the ``rank``-th of its ranking, the one ``trial`` N
    evaluated, or ``baseline`` NAME. The weights are the kept checkpoint of its best seed at its
    best learning rate; ``retrain`` trains it again (at the recipe's budget, or ``steps``) instead.
    ``study``: a results folder or a recipe file (or None with ``storage`` and ``study_name``)."""
    from dataclasses import replace

    from .ranking import rank as rank_study
    from .search import open_results

    if sum(x is not None for x in (rank, trial, baseline)) != 1:
        raise NormsearchError("choose the architecture with exactly one of --rank K, --trial N or --baseline NAME")
    handle = open_results(study, storage, study_name)
    ranking = rank_study(handle)
    row = _select(ranking, rank, trial, baseline)
    placement = Placement.from_dict(row.placement).with_name(row.label)
    config = handle.recipe.model
    summary: dict[str, Any] = {"metric": f"validation bits per byte ({ranking.objective} objective)",
                               "score_mean": row.score_mean, "ci_low": row.ci_low, "ci_high": row.ci_high,
                               "ci_level": 0.95, "study": ranking.study, "rank": row.rank,
                               "seeds": len(row.seeds), "best_lr": row.best_lr}
    summary["comparisons"] = [{"against": c.against, "diff": c.diff, "ci_low": c.ci_low, "ci_high": c.ci_high,
                               "p_value": c.p_value, "verdict": c.verdict} for c in row.comparisons]
    if retrain or steps is not None:
        from .train import train_run as run_trial

        seed = min(row.seeds, key=row.seeds.__getitem__) if row.seeds else handle.recipe.train.seeds[0]
        lr = row.best_lr if row.best_lr is not None else handle.recipe.train.lr[0]
        train = handle.recipe.train if steps is None else replace(handle.recipe.train, steps=steps,
                                                                  warmup=min(handle.recipe.train.warmup, steps))
        with tempfile.TemporaryDirectory(prefix="normsearch-retrain-") as tmp:
            weights = Path(tmp) / "model.safetensors"
            result = run_trial(placement, config, handle.recipe.data, train, seed=seed, lr=lr, checkpoint=weights,
                               progress=progress, label=row.label)
            if result.diverged:
                raise NormsearchError(f"retraining {row.label} diverged at step {result.diverged_step}; "
                                      f"nothing exported")
            summary.update({"retrained": f"seed {seed}, lr {lr:g}, {train.steps} steps",
                            "retrained_value": result.value})
            return export_architecture(placement, config, out_dir, weights_path=weights, arch_id=row.arch_id,
                                       summary=summary, overwrite=overwrite)
    weights = handle.folder / "checkpoints" / f"{row.arch_id}.safetensors"
    if not weights.is_file():
        raise NormsearchError(
            f"no kept weights for {row.label} [{row.arch_id}] in {weights.parent} (trained on another machine, or "
            f"pruned); add --retrain to train it again"
        )
    meta = weights.with_suffix(".json")
    if meta.is_file():
        kept = json.loads(meta.read_text())
        summary["weights"] = f"seed {kept['seed']}, lr {kept['lr']:g}: {kept['value']:.4f} bits/byte"
    return export_architecture(placement, config, out_dir, weights_path=weights, arch_id=row.arch_id,
                               summary=summary, overwrite=overwrite)


def _select(ranking, rank: int | None, trial: int | None, baseline: str | None):
    if rank is not None:
        ranked = [r for r in ranking.rows if r.rank is not None]
        if not 1 <= rank <= len(ranked):
            raise NormsearchError(f"--rank {rank}: the study ranks {len(ranked)} architectures (1..{len(ranked)})")
        return ranked[rank - 1]
    if trial is not None:
        row = next((r for r in ranking.rows if trial in r.trials), None)
        if row is None:
            raise NormsearchError(f"--trial {trial}: no finished trial {trial} in study {ranking.study!r}")
        return row
    row = next((r for r in ranking.rows if r.is_baseline and r.label == baseline), None)
    if row is None:
        known = [r.label for r in ranking.rows if r.is_baseline]
        raise NormsearchError(f"--baseline {baseline}: not a finished baseline of study {ranking.study!r}; "
                              f"its baselines: {', '.join(known) or 'none'}")
    return row


def load_exported(directory: str | os.PathLike, *, kernels: str = "torch"):
    """normsearch's own ``Transformer`` for an export folder, its weights loaded strictly, in eval
    mode. The arch_id in ``spec.yaml`` (and in the weights' metadata, where present) must be the
    one its placement builds."""
    from ._yaml import load
    from .checkpoint import ARCH_ID_KEY, load_state_dict, read_metadata
    from .model import build_model

    folder = Path(directory)
    spec_path = folder / "spec.yaml"
    if not folder.is_dir():
        raise NormsearchError(f"{folder}: no such folder")
    if not spec_path.is_file():
        raise NormsearchError(f"{folder}: no spec.yaml, so not a normsearch export")
    data = load(spec_path)
    if not isinstance(data, Mapping) or not all(k in data for k in ("arch_id", "placement", "model")):
        raise NormsearchError(f"{spec_path}: expected the keys arch_id, placement and model")
    model = build_model(Placement.from_dict(data["placement"]), ModelConfig.from_dict(data["model"]), kernels)
    stored = str(data["arch_id"])
    if stored != model.arch_id:
        raise NormsearchError(
            f"{spec_path}: arch_id {stored}, but its placement builds {model.arch_id}; "
            "the file was edited, or written by a normsearch with other defaults"
        )
    weights = folder / "model.safetensors"
    state = load_state_dict(weights)
    file_id = read_metadata(weights).get(ARCH_ID_KEY)
    if file_id is not None and file_id != stored:
        raise NormsearchError(f"{weights}: the weights are of {file_id}, but spec.yaml is {stored}")
    if model.config.tie_embeddings and "wte.weight" in state:
        state.setdefault("lm_head.weight", state["wte.weight"])
    problem = _fit_problems(state, model)
    if problem:
        raise NormsearchError(f"{weights}: does not fit the architecture in spec.yaml: {problem}")
    model.load_state_dict(state, strict=True)
    return model.eval()
