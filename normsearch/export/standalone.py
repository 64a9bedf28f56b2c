"""A decoder-only Transformer with its norms where normsearch put them; needs torch alone.

normsearch writes this file, unchanged, as ``model.py`` into every export folder. The
architecture is data beside it: ``config.json`` holds the sizes and, for every layer, which
norm sits at which site; ``norms.py`` holds the norm kinds, copied from normsearch's
registry. Parameter names are normsearch's (``blocks.{i}.norms.{site}.weight`` ...), so its
weights load with strict=True:

    from model import from_pretrained
    model = from_pretrained()  # the files next to this one

``Block.forward`` is normsearch's own, site for site (normsearch/model.py; a test keeps the
two the same); a site without a norm is an identity. config.json's ``residual`` (the weight
alpha of the stream, the branch gains, the learned stream multipliers, the init's beta),
``gate`` (a sigmoid gate on the attention output), ``x0`` (the embedding's output re-injected
into every block) and ``sinks`` (a learned per-head attention-sink logit) are the block options;
a norm entry's ``scale`` is a fixed factor on its output (LayerNorm Scaling's 1 / sqrt(layer +
1)), and a norm whose options say ``gain: one_plus`` multiplies by 1 + weight.
"""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

HERE = Path(__file__).parent


def read_config(directory: str | Path) -> dict:
    """The architecture in ``directory``/config.json."""
    return json.loads((Path(directory) / "config.json").read_text())


def norm_kinds(directory: str | Path) -> dict[str, type]:
    """The norm kinds in ``directory``/norms.py: name -> class with ``parameters(options)``
    (name -> (shape, initial value)) and ``forward(x, parameters, options)``."""
    path = Path(directory) / "norms.py"
    spec = importlib.util.spec_from_file_location(f"{__name__}_norms", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.NORM_KINDS


# ------------------------------------------------------------------------------------------
# Norm sites


class NoNorm(nn.Module):
    """An empty site: the identity."""

    present = False

    def forward(self, x: Tensor) -> Tensor:
        return x

    def add(self, x: Tensor, h: Tensor) -> tuple[Tensor, Tensor]:
        s = x + h
        return s, s


class Norm(nn.Module):
    """A norm of some kind at one site, over ``width`` features; ``per_head`` (q/k/v at head
    granularity) normalises each head's slice with one set of parameters shared by the heads."""

    present = True

    def __init__(self, kind: type, options: dict, width: int, per_head: bool, scale: float = 1.0):
        super().__init__()
        self.kind, self.opts, self.scale = kind, options, scale
        self.group = width if per_head else None
        self.one_plus = options.get("gain") == "one_plus"  # the gain is 1 + weight
        for name, (shape, init) in kind.parameters(options).items():
            init = float(init) - (1.0 if self.one_plus and name == "weight" else 0.0)
            value = torch.full((width,) if shape == "dim" else (), init)
            self.register_parameter(name, nn.Parameter(value))

    def params(self) -> dict:
        if not self.one_plus:
            return self._parameters
        return {**self._parameters, "weight": 1.0 + self._parameters["weight"]}

    def forward(self, x: Tensor) -> Tensor:
        if self.group:
            x = x.unflatten(-1, (-1, self.group))
            y = self.kind.forward(x, self.params(), self.opts).flatten(-2)
        else:
            y = self.kind.forward(x, self.params(), self.opts)
        return y if self.scale == 1.0 else y * self.scale

    def add(self, x: Tensor, h: Tensor) -> tuple[Tensor, Tensor]:
        s = x + h
        return s, self(s)


IDENTITY = NoNorm()


def site_norm(entry: dict | None, kinds: dict[str, type]) -> nn.Module:
    """The module at a site from its entry in config.json (None: no norm)."""
    if entry is None:
        return NoNorm()
    kind = kinds[entry["kind"]]
    return Norm(kind, entry["options"], entry["width"], entry["per_head"], entry.get("scale", 1.0))


PLAIN = {"alpha": 1.0, "beta": 1.0, "gain": "none", "gain_init": None, "scaled_init": True}


def layer_value(init, layer: int, n_layers: int) -> float:
    """An init at layer ``layer``: a number, or [first, last] spread linearly over the layers."""
    if isinstance(init, (list, tuple)):
        return init[0] + (init[1] - init[0]) * layer / max(n_layers - 1, 1)
    return float(init)


class Residual(nn.Module):
    """``enter(x)``: the block's learned stream multiplier times x (``stream: block``);
    ``stream(x, sublayer)`` = alpha (times the sublayer's learned multiplier under ``stream:
    sublayer``) times x; ``attn(h)`` / ``ffn(h)`` = the branch's learnable gain (``scalar`` or
    ``vector``) times h, the identity without one."""

    def __init__(self, options: dict, dim: int, layer: int = 0, n_layers: int = 1):
        super().__init__()
        self.alpha = float(options["alpha"])
        self.gain = options["gain"]
        self.stream_kind = options.get("stream", "none")
        if self.gain != "none":
            shape = (dim,) if self.gain == "vector" else ()
            for name in ("attn_gain", "ffn_gain"):
                init = torch.full(shape, layer_value(options["gain_init"], layer, n_layers))
                self.register_parameter(name, nn.Parameter(init))
        if self.stream_kind != "none":
            init = layer_value(options.get("stream_init", 1.0), layer, n_layers)
            names = ("attn_stream", "ffn_stream") if self.stream_kind == "sublayer" else ("block_stream",)
            for name in names:
                self.register_parameter(name, nn.Parameter(torch.tensor(init)))

    def enter(self, x: Tensor) -> Tensor:
        return self.block_stream * x if self.stream_kind == "block" else x

    def stream(self, x: Tensor, sublayer: str = "attn") -> Tensor:
        if self.stream_kind == "sublayer":
            s = getattr(self, f"{sublayer}_stream")
            return (self.alpha * s) * x if self.alpha != 1.0 else s * x
        return x if self.alpha == 1.0 else self.alpha * x

    def attn(self, h: Tensor) -> Tensor:
        return h if self.gain == "none" else self.attn_gain * h

    def ffn(self, h: Tensor) -> Tensor:
        return h if self.gain == "none" else self.ffn_gain * h


class X0(nn.Module):
    """x0 re-injected into a block: lambda * x0, lambda one learned scalar (``gate: scalar``)
    or per token x0 . w + b (``gate: linear``); ``at`` says where (``input``: the block's
    input; ``attn``: with the attention branch)."""

    def __init__(self, options: dict, dim: int, layer: int = 0, n_layers: int = 1):
        super().__init__()
        self.at, self.kind = options["at"], options["gate"]
        init = layer_value(options["init"], layer, n_layers)
        if self.kind == "scalar":
            self.lam = nn.Parameter(torch.tensor(init))
        else:
            self.gate = nn.Linear(dim, 1, bias=True)
            nn.init.zeros_(self.gate.weight)
            nn.init.constant_(self.gate.bias, init)

    def forward(self, x0: Tensor) -> Tensor:
        return (self.lam if self.kind == "scalar" else self.gate(x0)) * x0


def sink_attention(q: Tensor, k: Tensor, v: Tensor, sinks: Tensor, scale: float | None,
                   dropout: float, training: bool) -> Tensor:
    """Causal attention where head h's softmax has one more logit, sinks[h], with no value."""
    B, H, T, D = q.shape
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    logits = (q @ k.transpose(-2, -1)) * scale
    mask = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    logits = logits.masked_fill(~mask, float("-inf"))
    sink = sinks.to(logits.dtype).view(1, H, 1, 1).expand(B, H, T, 1)
    p = torch.softmax(torch.cat([logits, sink], dim=-1), dim=-1)[..., :T]
    return F.dropout(p, dropout, training) @ v


def add_norm(
    x: Tensor, h: Tensor, post: nn.Module, nxt: nn.Module = IDENTITY
) -> tuple[Tensor, Tensor]:
    """The residual add and what follows it: ``x = post(x + h)`` (a post norm replaces the
    stream), then ``nxt(x)``, the next sublayer's input norm."""
    if post.present:
        _, x = post.add(x, h)
        return x, nxt(x)
    return nxt.add(x, h)


# ------------------------------------------------------------------------------------------
# Sublayers


def rope_tables(
    T: int, c: dict, device: torch.device, dtype: torch.dtype
) -> tuple[Tensor, Tensor]:
    """cos and sin of the rotary angles, (T, head_dim / 2), computed in float64 and
    returned in ``dtype`` promoted to at least float32."""
    d = c["head_dim"]
    inv = 1.0 / c["rope_theta"] ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    ang = torch.outer(torch.arange(T, dtype=torch.float64), inv)
    dtype = torch.promote_types(dtype, torch.float32)
    return ang.cos().to(device, dtype), ang.sin().to(device, dtype)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate pairs (x[..., :d/2], x[..., d/2:]) of x (B, H, T, d) by position."""
    x1, x2 = x.to(cos.dtype).chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).type_as(x)


class Attention(nn.Module):
    """Causal self-attention; the q, k, v and ctx norms are the block's, passed in. With a gate
    (``head`` or ``elementwise``), the output is multiplied by sigmoid(x W_g) before W_o; with
    sinks, each head's softmax has one more learned logit that takes no value."""

    def __init__(self, c: dict):
        super().__init__()
        C = c["d_model"]
        self.n_heads, self.head_dim, self.dropout = c["n_heads"], c["head_dim"], c["dropout"]
        self.qkv = nn.Linear(C, 3 * C, bias=False)
        self.out = nn.Linear(C, C, bias=False)
        gate = c.get("gate", "none")
        width = C if gate == "elementwise" else self.n_heads
        self.gate = None if gate == "none" else nn.Linear(C, width, bias=False)
        self.sinks = nn.Parameter(torch.zeros(self.n_heads)) if c.get("sinks") else None
        m = width_mult(c)  # muP's 1/d attention: 1/sqrt(head_dim), times m^-1/2
        self.scale = None if m == 1.0 else 1.0 / math.sqrt(self.head_dim * m)

    def forward(
        self, x: Tensor, nq: nn.Module, nk: nn.Module, nv: nn.Module, rope,
        nctx: nn.Module = IDENTITY,
    ) -> Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=-1)
        q, k, v = nq(q), nk(k), nv(v)  # [q] [k] [v]: on the projections, before RoPE
        q, k, v = (t.view(B, T, self.n_heads, self.head_dim).transpose(1, 2) for t in (q, k, v))
        if rope is not None:
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        drop = self.dropout if self.training else 0.0
        if self.sinks is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=drop, scale=self.scale)
        else:
            y = sink_attention(q, k, v, self.sinks, self.scale, drop, self.training)
        y = nctx(y.transpose(1, 2).reshape(B, T, C))  # [ctx] on the heads' output, before W_o
        if self.gate is not None:  # [gate] on the attention's output, before W_o
            g = torch.sigmoid(self.gate(x)).view(B, T, self.n_heads, -1)
            y = (y.view(B, T, self.n_heads, -1) * g).flatten(-2)
        return F.dropout(self.out(y), drop, self.training)


class FFN(nn.Module):
    """down(gelu(up(x))), or down(silu(gate(x)) * up(x)) for swiglu; ffn_mid after the
    activation."""

    def __init__(self, c: dict):
        super().__init__()
        C, H = c["d_model"], c["ffn_dim"]
        self.swiglu, self.dropout = c["ffn"] == "swiglu", c["dropout"]
        self.up = nn.Linear(C, H, bias=False)
        self.gate = nn.Linear(C, H, bias=False) if self.swiglu else None
        self.down = nn.Linear(H, C, bias=False)

    def forward(self, x: Tensor, mid: nn.Module) -> Tensor:
        if self.swiglu:
            h = F.silu(self.gate(x)) * self.up(x)
        else:
            h = F.gelu(self.up(x))
        h = mid(h)  # [ffn_mid]: after the activation
        return F.dropout(self.down(h), self.dropout, self.training)


# ------------------------------------------------------------------------------------------
# The block and the model


class Block(nn.Module):
    """One layer; ``sites`` maps the sites that have a norm to their entries in config.json."""

    def __init__(self, sites: dict, c: dict, kinds: dict[str, type], layer: int = 0):
        super().__init__()
        names = dict.fromkeys([*c["sites"], "ctx"])  # config.json files from before the ctx site lack it
        self.norms = nn.ModuleDict({name: site_norm(sites.get(name), kinds) for name in names})
        self.attn = Attention(c)
        self.ffn = FFN(c)
        L = c["n_layers"]
        self.residual = Residual(c.get("residual") or PLAIN, c["d_model"], layer, L)
        self.x0 = X0(c["x0"], c["d_model"], layer, L) if c.get("x0") else None

    def forward(self, x: Tensor, rope=None, x0: Tensor | None = None) -> Tensor:
        n, r, j = self.norms, self.residual, self.x0
        x = r.enter(x)                                    # the block's stream multiplier (stream: block)
        if j is not None and j.at == "input":
            x = x + j(x0)                                 # x0 into the block's input (nanochat)
        h = n.attn_in(x)                                  # [attn_in]
        h = self.attn(h, n.q, n.k, n.v, rope, n.ctx)      # [q] [k] [v] before RoPE; [ctx], the gate on its output
        h = r.attn(n.attn_out(h))                         # [attn_out], then the branch gain
        if j is not None and j.at == "attn":
            h = h + j(x0)                                 # x0 with the attention branch (modded-nanogpt)
        x, h = add_norm(r.stream(x, "attn"), h, n.attn_post, n.ffn_in)  # x = [attn_post](s x + h); h = [ffn_in](x)
        h = self.ffn(h, n.ffn_mid)                        # [ffn_mid] after the activation
        h = r.ffn(n.ffn_out(h))                           # [ffn_out], then the branch gain
        x, _ = add_norm(r.stream(x, "ffn"), h, n.ffn_post)  # x = [ffn_post](s x + h)
        return x


class Transformer(nn.Module):
    """Token ids (B, T) -> logits (B, T, vocab_size). ``config`` is config.json's content and
    ``kinds`` the norm kinds of norms.py; both default to the files next to this one."""

    def __init__(self, config: dict | None = None, kinds: dict[str, type] | None = None):
        super().__init__()
        self.config = c = read_config(HERE) if config is None else config
        kinds = norm_kinds(HERE) if kinds is None else kinds
        C = c["d_model"]
        self.wte = nn.Embedding(c["vocab_size"], C)
        self.wpe = None if c["rope"] else nn.Embedding(c["context_length"], C)
        self.norms = nn.ModuleDict(
            {site: site_norm(c["norms"][site], kinds) for site in ("embed", "final")}
        )
        self.blocks = nn.ModuleList(Block(b, c, kinds, i) for i, b in enumerate(c["norms"]["blocks"]))
        self.lm_head = nn.Linear(C, c["vocab_size"], bias=False)
        if c["tie_embeddings"]:
            self.lm_head.weight = self.wte.weight
        self.reset_parameters()

    def reset_parameters(self):
        """Every matrix and embedding by the rule of config.json's ``init`` (init_std below; gpt:
        N(0, init_std), W_o and W_down N(0, init_std / sqrt(2 n_layers)) unless the residual's
        scaled_init is off); then the value projection, W_o and the FFN's weights times the
        residual's beta. Norms and branch gains keep their initial values."""
        c = self.config
        res = c.get("residual") or PLAIN
        beta, C = res["beta"], c["d_model"]
        branch = ("attn.out.weight", "ffn.down.weight", "ffn.up.weight", "ffn.gate.weight")
        for name, p in self.named_parameters():
            if any(f".{part}." in f".{name}" for part in ("norms", "residual", "x0")) or name.endswith(".attn.sinks"):
                continue  # norm gains start at 1, biases at 0, DyT alpha at its init; x0 and sinks as built
            dist, std = init_std(c, name, p.shape[-1], res["scaled_init"])
            if dist == "trunc":
                nn.init.trunc_normal_(p, 0.0, std, -3.0 * std, 3.0 * std)
            elif dist == "uniform":
                nn.init.uniform_(p, -math.sqrt(3.0) * std, math.sqrt(3.0) * std)
            else:
                nn.init.normal_(p, 0.0, std)
            if beta != 1.0 and name.endswith(branch):
                p.data.mul_(beta)
            elif beta != 1.0 and name.endswith("attn.qkv.weight"):
                p.data[2 * C:].mul_(beta)  # the value projection's rows

    def forward(self, idx: Tensor) -> Tensor:
        B, T = idx.shape
        c = self.config
        if T > c["context_length"]:
            raise ValueError(
                f"sequence of {T} tokens is longer than the context length "
                f"{c['context_length']}"
            )
        x = self.wte(idx)
        if self.wpe is not None:
            x = x + self.wpe(torch.arange(T, device=idx.device))
        x = F.dropout(self.norms.embed(x), c["dropout"], self.training)  # [embed]
        rope = None
        if c["rope"]:
            rope = rope_tables(T, c, idx.device, self.wte.weight.dtype)
        x0 = x  # the stream entering block 0, re-injected where config.json's x0 says
        for block in self.blocks:
            x = block(x, rope, x0)
        logits = self.lm_head(self.norms.final(x))  # [final]
        m = width_mult(c)
        return logits if m == 1.0 else logits * (1.0 / m)  # muP's output multiplier


def init_std(c: dict, name: str, fan_in: int, scaled: bool) -> tuple[str, float]:
    """(distribution, std) of parameter ``name`` under config.json's ``init``: ``normal``,
    ``trunc`` (truncated at 3 std) or ``uniform`` with that std; d is d_model, L n_layers. gpt:
    N(0, init_std), W_o and W_down / sqrt(2L) (scaled); small: N(0, sqrt(2/(5d))); normal:
    N(0, init_std); truncnormal: that, trunc; mixln: embeddings N(0, sqrt(2/5)), the rest
    N(0, init_std); smallmegatron: trunc N(0, s), s = sqrt(2/(5d)), W_o and W_down s / sqrt(2L)
    (scaled), an untied head 1/sqrt(d); fairseq: embeddings and head N(0, 1/sqrt(d)), q, k, v
    U(1/sqrt(2d)), W_o U(1/sqrt(d)), other matrices U(1/sqrt(3 fan_in)); modded: embeddings
    and head N(0, 0.005), W_down 0, other matrices U(0.5/sqrt(d)); nanochat: embeddings N(0,
    0.8), head N(0, 0.001), q, k, v U(1/sqrt(d)), W_o and W_down 0, other matrices U(0.4/sqrt(d)).
    The init is normsearch's
    at mup_base_width == d_model (its mup factors are left out)."""
    init, d, std0, L = c["init"], c["d_model"], c["init_std"], c["n_layers"]
    kinds = {"wte.weight": "embed", "wpe.weight": "embed", "lm_head.weight": "head",
             "attn.qkv.weight": "qkv", "attn.out.weight": "out", "ffn.down.weight": "down"}
    kind = next((k for s, k in kinds.items() if name == s or name.endswith("." + s)), "matrix")
    depth = math.sqrt(2 * L) if scaled and kind in ("out", "down") else 1.0
    if init == "gpt":
        return "normal", (std0 / math.sqrt(2 * L) if depth != 1.0 else std0)
    if init == "small":
        return "normal", math.sqrt(2.0 / (5.0 * d))
    if init in ("normal", "truncnormal"):
        return ("normal" if init == "normal" else "trunc"), std0
    if init == "mixln":
        return "normal", (math.sqrt(2.0 / 5.0) if kind == "embed" else std0)
    if init == "smallmegatron":
        small = math.sqrt(2.0 / (5.0 * d)) / depth
        return "trunc", (1.0 / math.sqrt(d) if kind == "head" else small)
    if init == "fairseq":
        if kind in ("embed", "head"):
            return "normal", 1.0 / math.sqrt(d)
        if kind in ("qkv", "out"):
            return "uniform", 1.0 / math.sqrt(2.0 * d if kind == "qkv" else d)
        return "uniform", 1.0 / math.sqrt(3.0 * fan_in)
    if init == "modded":
        if kind in ("embed", "head"):
            return "normal", 0.005
        return "uniform", (0.0 if kind == "down" else 0.5 / math.sqrt(d))
    if init == "nanochat":
        if kind in ("embed", "head"):
            return "normal", (0.8 if kind == "embed" else 0.001)
        if kind in ("out", "down"):
            return "uniform", 0.0
        return "uniform", (1.0 if kind == "qkv" else 0.4) / math.sqrt(d)
    raise ValueError(f"unknown init {init!r}")


def width_mult(c: dict) -> float:
    """d_model / mup_base_width under ``parametrization: mup`` (muP's attention scale and output
    multiplier; its init is normsearch's), else 1."""
    return c["d_model"] / c["mup_base_width"] if c.get("parametrization") == "mup" else 1.0


# ------------------------------------------------------------------------------------------
# Weights


DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
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
    """The model in ``directory`` (default: the folder of this file) with the weights of its
    model.safetensors, loaded strictly (every name and shape must match), in eval mode."""
    directory = HERE if directory is None else Path(directory)
    config = read_config(directory)
    model = Transformer(config, norm_kinds(directory))
    state = load(directory / "model.safetensors")
    if config["tie_embeddings"]:
        state["lm_head.weight"] = state["wte.weight"]  # tied: stored once
    model.load_state_dict(state, strict=True)
    return model.eval()
