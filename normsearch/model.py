"""The decoder-only language model that obeys a placement.

One generic block; its forward lists every site in data-flow order, and a site without a norm is an
identity (:class:`NoNorm`). Norm parameters live at ``blocks.{i}.norms.{site}.*`` and
``norms.{embed,final}.*``, so loading the weights of one placement into another fails loudly.
"""

from __future__ import annotations

import logging
import math
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .config import ModelConfig, init_std
from .kernels import get_kernel, resolve_backend
from .norms import NORM_KINDS
from . import parametrization as P
from .block_options import PLAIN, layer_value
from .spec import BLOCK_SITES, SITE, NormSpec, Placement

log = logging.getLogger("normsearch")


# --------------------------------------------------------------------------------------------------
# Norm sites


def is_norm_parameter(name: str) -> bool:
    """Whether the parameter ``name`` (as ``named_parameters`` gives it) belongs to a norm: norms
    live in the ``norms`` dicts, at ``blocks.{i}.norms.{site}.*`` and ``norms.{embed,final}.*``."""
    return ".norms." in f".{name}"


class NoNorm(nn.Module):
    """An empty site: the identity."""

    present = False

    def forward(self, x: Tensor) -> Tensor:
        return x

    def add(self, x: Tensor, h: Tensor) -> tuple[Tensor, Tensor]:
        s = x + h
        return s, s


class Norm(nn.Module):
    """A norm of some kind at one site. ``group`` (q/k/v at ``head`` granularity) normalises each
    head's slice of ``group`` features with one set of parameters shared by the heads. The maths is
    the kind's; ``kernels`` picks the code that runs it."""

    present = True

    def __init__(self, spec: NormSpec, dim: int, group: int | None = None, kernels: str = "torch",
                 scale: float = 1.0):
        super().__init__()
        self.spec, self.opts, self.group, self.kernels = spec, spec.opts, group, kernels
        self.scale = scale  # a fixed factor on the output (depth_scale: 1 / sqrt(layer + 1))
        self.one_plus = spec.gain == "one_plus"  # the gain is 1 + weight, weight from 0
        size = group or dim
        for name, (shape, init) in NORM_KINDS[spec.kind].parameters(self.opts).items():
            init = float(init) - (1.0 if self.one_plus and name == "weight" else 0.0)
            self.register_parameter(name, nn.Parameter(torch.full((size,) if shape == "dim" else (), init)))
        self.kernel = get_kernel(spec.kind, kernels)

    def params(self) -> dict:
        """The parameters the kind's maths sees: under a 1 + w gain, its weight is 1 + w."""
        if not self.one_plus:
            return self._parameters
        return {**self._parameters, "weight": 1.0 + self._parameters["weight"]}

    def forward(self, x: Tensor) -> Tensor:
        if self.group:
            y = self.kernel.forward(x.unflatten(-1, (-1, self.group)), self.params(), self.opts)
            y = y.flatten(-2)
        else:
            y = self.kernel.forward(x, self.params(), self.opts)
        return y if self.scale == 1.0 else y * self.scale

    def add(self, x: Tensor, h: Tensor) -> tuple[Tensor, Tensor]:
        """(x + h, norm(x + h)), fused where the kernel can."""
        s, y = self.kernel.add(x, h, self.params(), self.opts)
        return s, (y if self.scale == 1.0 else y * self.scale)

    def extra_repr(self) -> str:
        scale = f", scale={self.scale:.4g}" if self.scale != 1.0 else ""
        return ", ".join(f"{k}={v}" for k, v in self.spec.to_dict().items()) + f", kernels={self.kernels}{scale}"


IDENTITY = NoNorm()  # stateless: one instance serves every call site that needs "no norm here"


def make_norm(spec: NormSpec | None, dim: int, group: int | None = None, kernels: str = "torch") -> nn.Module:
    return NoNorm() if spec is None else Norm(spec, dim, group, kernels)


def site_norm(site: str, spec: NormSpec | None, config: ModelConfig, kernels: str = "torch",
              layer: int = 0) -> nn.Module:
    """The norm at ``site`` of layer ``layer`` (an identity where ``spec`` is None), as wide as the
    site table says."""
    if spec is None:
        return NoNorm()
    width = SITE[site].features(spec, config)
    return Norm(spec, width, group=width if SITE[site].per_head(spec) else None, kernels=kernels,
                scale=spec.scale(layer))


class Residual(nn.Module):
    """The residual connection's options (normsearch.block_options): ``enter(x)`` = the block's stream
    multiplier times x (``stream: block``), ``stream(x, sublayer)`` = alpha (times the sublayer's
    multiplier under ``stream: sublayer``) times x, and ``attn(h)`` / ``ffn(h)`` = the branch's learnable
    gain times h (the identity without one). Parameters: ``attn_gain``, ``ffn_gain`` (branch gains),
    ``attn_stream``, ``ffn_stream`` (per sublayer) or ``block_stream`` (per block)."""

    def __init__(self, options: dict, dim: int, layer: int = 0, n_layers: int = 1):
        super().__init__()
        self.alpha = float(options["alpha"])
        self.gain = options["gain"]
        self.stream_kind = options.get("stream", "none")
        if self.gain != "none":
            shape = (dim,) if self.gain == "vector" else ()
            init = layer_value(options["gain_init"], layer, n_layers)
            for name in ("attn_gain", "ffn_gain"):
                self.register_parameter(name, nn.Parameter(torch.full(shape, init)))
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
    """x0 re-injected into a block (normsearch.block_options ``x0``): ``forward(x0)`` = lambda * x0,
    lambda one learned scalar (``gate: scalar``, parameter ``lam``) or per token x0 . w + b (``gate:
    linear``, parameters ``gate.weight`` from 0 and ``gate.bias``)."""

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


def is_x0(name: str) -> bool:
    """Whether the parameter ``name`` belongs to an x0 re-injection (kept at its init)."""
    return ".x0." in f".{name}"


#: DeepNorm's beta scales these (with the value projection's rows of attn.qkv); W_q, W_k do not.
BETA_SCALED = ("attn.out.weight", "ffn.down.weight", "ffn.up.weight", "ffn.gate.weight")


def is_residual_gain(name: str) -> bool:
    """Whether the parameter ``name`` is a branch gain of :class:`Residual` (kept at its init)."""
    return ".residual." in f".{name}"


def init_kind(name: str) -> str:
    """A parameter's kind in normsearch.config.init_std: embed, head, qkv, out, down or matrix."""
    kinds = {"wte.weight": "embed", "wpe.weight": "embed", "lm_head.weight": "head", "attn.qkv.weight": "qkv",
             "attn.out.weight": "out", "ffn.down.weight": "down"}
    return next((k for suffix, k in kinds.items() if name == suffix or name.endswith("." + suffix)), "matrix")


def fill_init(p: Tensor, dist: str, std: float):
    """Fill ``p`` in place: N(0, std), that truncated at 3 std (``trunc``) or uniform with that std."""
    if dist == "trunc":
        nn.init.trunc_normal_(p, 0.0, std, -3.0 * std, 3.0 * std)
    elif dist == "uniform":
        nn.init.uniform_(p, -math.sqrt(3.0) * std, math.sqrt(3.0) * std)
    else:
        nn.init.normal_(p, 0.0, std)


def add_norm(x: Tensor, h: Tensor, post: nn.Module, nxt: nn.Module = IDENTITY) -> tuple[Tensor, Tensor]:
    """The residual add and what follows it: ``x = post(x + h)`` (a post norm replaces the stream),
    then ``nxt(x)``, the next sublayer's input norm. Whichever norm directly follows the add runs
    fused with it."""
    if post.present:
        _, x = post.add(x, h)
        return x, nxt(x)
    return nxt.add(x, h)


# --------------------------------------------------------------------------------------------------
# Sublayers


def rope_cache(T: int, head_dim: int, theta: float, device=None, dtype=torch.float32) -> tuple[Tensor, Tensor]:
    """cos and sin of the rotary angles, (T, head_dim / 2), computed in float64."""
    inv = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    ang = torch.outer(torch.arange(T, dtype=torch.float64), inv)
    return ang.cos().to(device, dtype), ang.sin().to(device, dtype)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate pairs (x[..., :d/2], x[..., d/2:]) by position, in at least float32; x is
    (B, H, T, head_dim)."""
    x1, x2 = x.to(cos.dtype).chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).type_as(x)


class Attention(nn.Module):
    """Causal self-attention; ``gate`` (``head`` or ``elementwise``) multiplies SDPA's output by
    sigmoid(x W_g), x the attention's input, one gate per head or per channel (Qiu et al.); ``sinks``
    gives each head a learned logit ``sinks[h]`` (from 0) that joins every query's softmax and takes no
    value (gpt-oss, DeepSeek-V4)."""

    def __init__(self, config: ModelConfig, gate: str = "none", sinks: bool = False):
        super().__init__()
        C = config.d_model
        self.n_heads, self.head_dim, self.dropout = config.n_heads, config.head_dim, config.dropout
        self.qkv = nn.Linear(C, 3 * C, bias=False)
        self.out = nn.Linear(C, C, bias=False)
        self.gate = None if gate == "none" else nn.Linear(C, C if gate == "elementwise" else self.n_heads, bias=False)
        self.sinks = nn.Parameter(torch.zeros(self.n_heads)) if sinks else None
        self.scale = P.attention_scale(config.head_dim, config.width_mult)  # None: 1/sqrt(head_dim)
        self.max_logit: Tensor | None = None  # set during probe_attention()
        self.probe = False

    def forward(self, x: Tensor, nq: nn.Module, nk: nn.Module, nv: nn.Module, rope,
                nctx: nn.Module = IDENTITY) -> Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=-1)
        q, k, v = nq(q), nk(k), nv(v)  # [q] [k] [v]: on the projections, before RoPE
        q, k, v = (t.view(B, T, self.n_heads, self.head_dim).transpose(1, 2) for t in (q, k, v))
        if rope is not None:
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        if self.probe:
            self.max_logit = max_attention_logit(q, k, self.scale)
        drop = self.dropout if self.training else 0.0
        if self.sinks is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=drop, scale=self.scale)
        else:
            y = sink_attention(q, k, v, self.sinks, self.scale, drop, self.training)
        y = nctx(y.transpose(1, 2).reshape(B, T, C))  # [ctx] on the heads' output, before the gate and W_o
        if self.gate is not None:  # [gate] on the attention's output, before W_o
            y = (y.view(B, T, self.n_heads, -1) * torch.sigmoid(self.gate(x)).view(B, T, self.n_heads, -1)).flatten(-2)
        return F.dropout(self.out(y), drop, self.training)


def sink_attention(q: Tensor, k: Tensor, v: Tensor, sinks: Tensor, scale: float | None = None, dropout: float = 0.0,
                   training: bool = False) -> Tensor:
    """Causal attention where head h's softmax has one more logit, ``sinks[h]``, that takes no value:
    softmax([q.k * scale, sink])[:T] @ v (gpt-oss's ``sdpa``). q, k, v: (B, H, T, head_dim)."""
    B, H, T, D = q.shape
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    logits = (q @ k.transpose(-2, -1)) * scale
    mask = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    logits = logits.masked_fill(~mask, float("-inf"))
    sink = sinks.to(logits.dtype).view(1, H, 1, 1).expand(B, H, T, 1)
    p = torch.softmax(torch.cat([logits, sink], dim=-1), dim=-1)[..., :T]
    return F.dropout(p, dropout, training) @ v


def max_attention_logit(q: Tensor, k: Tensor, scale: float | None = None) -> Tensor:
    """The largest pre-softmax logit q.k/sqrt(d) (q.k x ``scale``, where given) over the causal
    positions (Wortsman et al.)."""
    T = q.shape[-2]
    qk = q.float() @ k.float().transpose(-2, -1)
    logits = qk / math.sqrt(q.shape[-1]) if scale is None else qk * scale
    mask = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    return logits.masked_fill(~mask, float("-inf")).amax().detach()


class FFN(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        C, H = config.d_model, config.ffn_dim
        self.swiglu, self.dropout = config.ffn == "swiglu", config.dropout
        self.up = nn.Linear(C, H, bias=False)
        self.gate = nn.Linear(C, H, bias=False) if self.swiglu else None
        self.down = nn.Linear(H, C, bias=False)

    def forward(self, x: Tensor, mid: nn.Module) -> Tensor:
        h = F.silu(self.gate(x)) * self.up(x) if self.swiglu else F.gelu(self.up(x))
        h = mid(h)  # [ffn_mid]: after the activation
        return F.dropout(self.down(h), self.dropout, self.training)


# --------------------------------------------------------------------------------------------------
# The block and the model


class Block(nn.Module):
    """Layer ``layer`` (0-based) of the model: its sites' norms, the residual options and the gate
    (model-wide; see normsearch.block_options)."""

    def __init__(self, sites: dict[str, NormSpec], config: ModelConfig, kernels: str = "torch", layer: int = 0,
                 residual: dict | None = None, gate: str = "none", x0: dict | None = None, sinks: bool = False):
        super().__init__()
        self.norms = nn.ModuleDict({name: site_norm(name, sites.get(name), config, kernels, layer)
                                    for name in BLOCK_SITES})
        self.attn = Attention(config, gate, sinks)
        self.ffn = FFN(config)
        L = config.n_layers
        self.residual = Residual(PLAIN if residual is None else residual, config.d_model, layer, L)
        self.x0 = None if x0 is None else X0(x0, config.d_model, layer, L)

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
    """``model(idx)`` -> logits (B, T, vocab); ``model(idx, return_hidden=True)`` ->
    ``(logits, hidden)`` with the residual stream entering block 0 and leaving every block."""

    def __init__(self, placement: Placement, config: ModelConfig, kernels: str = "torch"):
        super().__init__()
        self.config, self.placement, self.kernels = config, placement, kernels
        self.resolved = placement.resolve(config.n_layers)
        self.arch_id = self.resolved.arch_id
        C = config.d_model
        self.wte = nn.Embedding(config.vocab_size, C)
        self.wpe = None if config.rope else nn.Embedding(config.context_length, C)
        self.norms = nn.ModuleDict({
            "embed": site_norm("embed", self.resolved.embed, config, kernels),
            "final": site_norm("final", self.resolved.final, config, kernels),
        })  # fmt: skip
        r = self.resolved
        self.blocks = nn.ModuleList(
            Block(r.block(i), config, kernels, i, r.residual, r.gate, r.x0, r.sinks) for i in range(config.n_layers)
        )
        self.lm_head = nn.Linear(C, config.vocab_size, bias=False)
        if config.tie_embeddings:
            self.lm_head.weight = self.wte.weight
        self._rope: tuple[Tensor, Tensor] | None = None
        self.output_mult = P.output_mult(config.width_mult)  # 1 under standard
        self.reset_parameters()

    def reset_parameters(self):
        """Every matrix and embedding by the rule of ``model.init`` (normsearch.config.INITS: gpt is
        N(0, std) with W_o, W_down N(0, std / sqrt(2 n_layers)) unless the residual's scaled_init is
        off); then the value projection, W_o and the FFN's weights times the residual's beta
        (DeepNorm). Norms and branch gains keep their initial values. Under mup every width in a rule
        (d, a fan-in) is the base width's and each std is times its role's factor
        (normsearch.parametrization)."""
        cfg, res = self.config, self.resolved.residual
        m = cfg.width_mult
        width = cfg.d_model if cfg.parametrization == "standard" else cfg.mup_base_width
        beta, C = res["beta"], cfg.d_model
        for name, p in self.named_parameters():
            if is_norm_parameter(name) or is_residual_gain(name) or is_x0(name) or name.endswith(".attn.sinks"):
                continue  # norm gains start at 1, biases at 0, DyT alpha at its init (set by Norm); x0, sinks as built
            dist, std = init_std(cfg.init, init_kind(name), p.shape[-1] / m, width, cfg.n_layers, cfg.init_std,
                                 res["scaled_init"])
            fill_init(p, dist, std * P.init_mult(self.param_role(name, p), m))
            if beta != 1.0 and name.endswith(BETA_SCALED):
                p.data.mul_(beta)
            elif beta != 1.0 and name.endswith("attn.qkv.weight"):
                p.data[2 * C:].mul_(beta)  # the value projection's rows

    def param_role(self, name: str, p: Tensor) -> str:
        """The parameter's role in normsearch.parametrization: input, hidden, readout, output or
        vector. A matrix this does not know is an error, so that a new layer gets a rule."""
        if is_norm_parameter(name) or is_residual_gain(name) or p.ndim < 2:
            return "vector"
        if is_x0(name):
            return "readout"  # x0's linear gate: from the width to one number
        if name in ("wte.weight", "wpe.weight"):
            return "input"
        if name == "lm_head.weight":
            return "output"
        if name.startswith("blocks.") and name.endswith(".attn.gate.weight") and p.shape[0] != self.config.d_model:
            return "readout"  # one gate per head: from the width to n_heads
        if name.startswith("blocks."):
            return "hidden"
        raise ValueError(f"no parametrization role for parameter {name!r}")

    def param_groups(self, lr: float, weight_decay: float, gain_decay: bool = False) -> list[dict]:
        """AdamW's groups: weight decay on matrices and embeddings, none on norm parameters and
        other vectors (on norm gains and biases too with ``gain_decay`` or the placement's
        ``gain_decay``); lr and decay times the parametrization's factors, and the residual's and
        x0's own lr multipliers on theirs."""
        gain_decay = gain_decay or self.resolved.gain_decay
        named = [(n, p, self.param_role(n, p), self._decays(n, p, gain_decay), self.lr_factor(n))
                 for n, p in self.named_parameters()]
        return P.param_groups(named, lr, weight_decay, self.config.width_mult)

    def _decays(self, name: str, p: Tensor, gain_decay: bool) -> bool:
        if is_norm_parameter(name):
            return gain_decay and name.rsplit(".", 1)[-1] in ("weight", "bias")
        return p.ndim >= 2 and not is_x0(name)

    def lr_factor(self, name: str) -> float:
        """The parameter's own multiple of the learning rate: the residual's ``stream_lr`` and
        ``gain_lr``, x0's ``lr``; 1 elsewhere."""
        res, x0 = self.resolved.residual, self.resolved.x0
        if is_residual_gain(name):
            return res.get("stream_lr", 1.0) if name.endswith("_stream") else res.get("gain_lr", 1.0)
        if is_x0(name):
            return x0["lr"]
        return 1.0

    def rope(self, T: int, device, dtype=torch.float32) -> tuple[Tensor, Tensor] | None:
        """The rotary tables for T positions in ``dtype`` promoted to at least float32 (cached;
        not parameters nor buffers, so never in a checkpoint)."""
        if not self.config.rope:
            return None
        dtype = torch.promote_types(dtype, torch.float32)
        if self._rope is None or self._rope[0].device != device or self._rope[0].dtype != dtype:
            self._rope = rope_cache(self.config.context_length, self.config.head_dim,
                                    self.config.rope_theta, device, dtype)
        return self._rope[0][:T], self._rope[1][:T]

    def forward(self, idx: Tensor, return_hidden: bool = False):
        B, T = idx.shape
        if T > self.config.context_length:
            raise ValueError(f"sequence of {T} tokens is longer than the context length {self.config.context_length}")
        x = self.wte(idx)
        if self.wpe is not None:
            x = x + self.wpe(torch.arange(T, device=idx.device))
        x = F.dropout(self.norms.embed(x), self.config.dropout, self.training)  # [embed]
        rope = self.rope(T, idx.device, self.wte.weight.dtype)
        hidden, x0 = [x], x  # x0: the stream entering block 0, re-injected where the placement says
        for block in self.blocks:
            x = block(x, rope, x0)
            hidden.append(x)
        logits = self.lm_head(self.norms.final(x))  # [final]
        if self.output_mult != 1.0:
            logits = logits * self.output_mult  # mup's output multiplier
        return (logits, hidden) if return_hidden else logits

    @contextmanager
    def probe_attention(self):
        """Within the block, forward passes record each layer's largest attention logit;
        yields the list that is filled (one tensor per layer) once the forward has run."""
        attns = [b.attn for b in self.blocks]
        out: list[Tensor] = []
        for a in attns:
            a.probe, a.max_logit = True, None
        try:
            yield out
            out.extend(a.max_logit for a in attns)
        finally:
            for a in attns:
                a.probe, a.max_logit = False, None

    def num_parameters(self, norms_only: bool = False) -> int:
        params = {id(p): p for n, p in self.named_parameters() if not norms_only or is_norm_parameter(n)}
        return sum(p.numel() for p in params.values())


def build_model(placement: Placement | str | dict, config: ModelConfig | dict | None = None,
                kernels: str = "torch", norm_kind: str = "rmsnorm") -> Transformer:
    """The model of ``placement`` (a Placement, a baseline name, or a spec mapping) with
    ``config``. ``kernels`` is ``torch``, ``triton`` or ``auto``; the choice is logged and kept as
    ``model.kernels``."""
    if isinstance(placement, str):
        from .baselines import baseline

        placement = baseline(placement, norm_kind)
    elif not isinstance(placement, Placement):
        placement = Placement.from_dict(placement)
    if config is None:
        config = ModelConfig()
    elif not isinstance(config, ModelConfig):
        config = ModelConfig.from_dict(config)
    backend = resolve_backend(kernels, placement.kinds())
    log.info("norm kernels: %s (requested %s)", backend, kernels)
    return Transformer(placement, config, kernels=backend)
