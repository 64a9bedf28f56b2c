"""Block options: what a block does besides its norms. Part of the placement and of its arch_id;
model-wide (every layer the same). Torch-free.

``residual`` sets the residual connection of both sublayers::

    x_next = [post](alpha * x + g * f(x))        f: the sublayer with its norms, g: the branch gain

- ``alpha``: the weight of the stream (1: the plain residual). ``deepnorm``: (2N)^(1/4) for a
  decoder-only model of N layers (Wang et al. 2022, arXiv 2203.00555, and torchscale).
- ``beta``: the scale of the initial weights of the value projection, W_o and the FFN's weights
  (1: unchanged). ``deepnorm``: (8N)^(-1/4), as torchscale divides those weights by (8N)^(1/4).
- ``gain``: a learnable branch gain g: ``none``, ``scalar`` (one per branch: ReZero, Bachlechner et
  al. 2020, arXiv 2003.04887; SkipInit) or ``vector`` (one per channel: LayerScale, Touvron et al.
  2021, arXiv 2103.17239), starting at ``gain_init`` (default 0 for ``scalar``, as ReZero; 0.1 for
  ``vector``, LayerScale's value for up to 18 layers).
- ``scaled_init``: the GPT-2 scaled init of the residual projections (W_o, W_down at
  N(0, std / sqrt(2N)) under ``init: gpt``). LayerNorm Scaling (arXiv 2502.05795) drops it, and so
  does DeepNorm, whose beta takes its place.

- ``stream``: learned multipliers on the stream (2026's speedruns): ``none``, ``sublayer`` (one scalar per
  sublayer, x_next = s * alpha * x + g * f(x): modded-nanogpt's ``resid_lambdas``) or ``block`` (one
  scalar per block on the block's input, x <- s * x before the block: nanochat's ``resid_lambdas``),
  starting at ``stream_init``: a number, or ``[first, last]`` spread linearly over the layers (nanochat:
  ``[1.15, 1.05]``).
- ``stream_lr`` and ``gain_lr``: the learning rate of the stream multipliers and of the branch gains,
  as a multiple of the recipe's (nanochat's resid lambdas learn at 1/100 of its scalar lr; modded-nanogpt's
  at 5x its Adam lr). Branch gain inits accept ``[first, last]`` too.

Presets: ``residual: deepnorm`` (alpha and beta ``deepnorm``, no scaled init), ``rezero``,
``layerscale``, ``scalars`` (modded-nanogpt's learned stream and branch multiplier per sublayer: the stream's
from sqrt(1.1) at 5x the lr, the branch's from 1), ``lambdas`` (nanochat's stream multiplier per block, from
1.15 at layer 0 to 1.05 at the last, at 1/100 of the lr); ``plain`` is the default.

``x0`` re-injects the embedding's output (after the ``embed`` norm: the stream entering block 0) into
every block, as in 2026's speedruns: ``none``, or ``{at, gate, init, lr}``: ``at: input`` adds
lambda_l * x0 to the block's input before its first norm (nanochat, autoresearch); ``at: attn`` adds it
with the attention branch, x <- s x + g attn(..) + lambda_l x0 (modded-nanogpt). ``gate: scalar`` is one
learned lambda per layer (nanochat's ``x0_lambdas``); ``gate: linear`` makes lambda a per-token linear
function of x0, x0 . w_l + b_l, w_l from 0 (modded-nanogpt computes its x0 gates with a small GELU
network of x0 shared by the layers; a linear map per layer is the part a model of this kind keeps).
``init`` (a number or ``[first, last]``) is lambda's (or b's) start; ``lr`` a multiple of the recipe's
learning rate. Presets: ``input`` (``{at: input, gate: scalar, init: [0.20, 0.05]}``, nanochat's
x0_lambdas), ``attn`` (``{at: attn, gate: linear, init: 0}``, modded-nanogpt's).

``sinks: true`` gives every head a learned attention-sink logit (gpt-oss, DeepSeek-V4): one more logit in
each query's softmax, with no value, so a head can attend to nothing; it starts at 0.

``gain_decay: true`` puts weight decay on this architecture's norm gains and biases (as Qwen3-Next, whose
``1 + w`` gains decay toward 1); ``train.gain_decay`` does it for every architecture of a recipe.

``gate`` puts a sigmoid gate on the attention output (Qiu et al. 2025, arXiv 2505.06708; Qwen3-Next):
o = SDPA(q, k, v) * sigmoid(x W_g), x the attention's input (after ``attn_in``), before W_o.
``head``: one gate per head (W_g: d_model -> n_heads); ``elementwise``: one per channel (W_g:
d_model -> d_model, as Qwen3-Next). ``none`` by default.

Options at their defaults are left out of the canonical form, so a placement without them keeps the
arch_id it had before they existed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ._yaml import where
from .errors import SpecError, unknown

GATES = ("none", "head", "elementwise")
GAINS = ("none", "scalar", "vector")
STREAMS = ("none", "sublayer", "block")
GAIN_INIT = {"scalar": 0.0, "vector": 0.1}

#: Depth rules: name -> (what it sets, n_layers -> value).
DEPTH_RULES = {
    "alpha": {"deepnorm": lambda n: (2.0 * n) ** 0.25},
    "beta": {"deepnorm": lambda n: (8.0 * n) ** -0.25},
}

RESIDUAL_PRESETS: dict[str, dict[str, Any]] = {
    "plain": {},
    "deepnorm": {"alpha": "deepnorm", "beta": "deepnorm", "scaled_init": False},
    "rezero": {"gain": "scalar"},
    "layerscale": {"gain": "vector"},
    # modded-nanogpt (train_gpt.py @f411b3d): resid_lambdas from sqrt(1.1) at 5x the lr, post_lambdas from 1
    "scalars": {"stream": "sublayer", "stream_init": 1.1 ** 0.5, "stream_lr": 5.0, "gain": "scalar", "gain_init": 1.0},
    # nanochat (gpt.py @92d63d4): resid_lambdas from 1.15 (layer 0) to 1.05 (last) at 1/100 of x0's lr
    "lambdas": {"stream": "block", "stream_init": (1.15, 1.05), "stream_lr": 0.01},
}

_KEYS = ("alpha", "beta", "gain", "gain_init", "scaled_init", "stream", "stream_init", "stream_lr", "gain_lr")
#: The residual's options that came with the 2026 speedruns: in its resolved form (and so in the
#: arch_id) only where set, so the ids of every residual written before them stay.
_NEW = {"stream": "none", "stream_init": 1.0, "stream_lr": 1.0, "gain_lr": 1.0}


def preset_or_mapping(what: str, value: Any, presets: Mapping[str, Mapping], keys, ctx: str = "") -> Mapping:
    """A block option written as a preset's name or as a mapping of its keys: the preset's mapping, or the
    one given once every key in it is known; else one line naming the presets and the keys."""
    if isinstance(value, str):
        if value not in presets:
            raise SpecError(f"{ctx}{what}: {unknown('preset', value, presets)}")
        return presets[value]
    if not isinstance(value, Mapping):
        raise SpecError(f"{ctx}{what}: a preset ({', '.join(presets)}) or a mapping with keys "
                        f"{', '.join(keys)}, not {value!r}")
    for key in value:
        if key not in keys:
            raise SpecError(f"{where(value, key) or ctx}{what}: {unknown('key', key, keys)}")
    return value


def _init(value: Any, what: str) -> float | tuple[float, float]:
    """A number, or [first, last]: spread linearly over the layers."""
    if isinstance(value, (list, tuple)) and len(value) == 2:
        return (_number(value[0], what), _number(value[1], what))
    return _number(value, what)


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise SpecError(f"{what} must be a number or [first, last], not {value!r}")
    return float(value)


def _positive(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise SpecError(f"{what} must be a number > 0, not {value!r}")
    return float(value)


def layer_value(init: float | tuple | list, layer: int, n_layers: int) -> float:
    """An init at layer ``layer`` (0-based): the number, or first + (last - first) * l / (L - 1)."""
    if isinstance(init, (list, tuple)):
        return init[0] + (init[1] - init[0]) * layer / max(n_layers - 1, 1)
    return float(init)


def _flow(v):
    return list(v) if isinstance(v, tuple) else v


def _number_or_rule(key: str, value: Any, ctx: str) -> float | str:
    if isinstance(value, str):
        if value not in DEPTH_RULES[key]:
            raise SpecError(f"{ctx}residual.{key}: {unknown('rule', value, DEPTH_RULES[key])}; or give a number")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise SpecError(f"{ctx}residual.{key} must be a number > 0 or a rule "
                        f"({', '.join(DEPTH_RULES[key])}), not {value!r}")
    return float(value)


@dataclass(frozen=True)
class Residual:
    """The residual connection of every block (see the module's docstring)."""

    alpha: float | str = 1.0
    beta: float | str = 1.0
    gain: str = "none"
    gain_init: float | tuple[float, float] | None = None
    scaled_init: bool = True
    stream: str = "none"
    stream_init: float | tuple[float, float] = 1.0
    stream_lr: float = 1.0
    gain_lr: float = 1.0

    @classmethod
    def parse(cls, value: Any, ctx: str = "") -> Residual:
        if isinstance(value, Residual):
            return value
        if value is None:
            return cls()
        d = dict(preset_or_mapping("residual", value, RESIDUAL_PRESETS, _KEYS, ctx))
        gain = "none" if d.get("gain") in (None, False) else d["gain"]
        if gain not in GAINS:
            raise SpecError(f"{ctx}residual.gain: {unknown('gain', gain, GAINS)}")
        gain_init = d.get("gain_init")
        if gain_init is not None:
            if gain == "none":
                raise SpecError(f"{ctx}residual.gain_init needs a gain (scalar or vector)")
            gain_init = _init(gain_init, f"{ctx}residual.gain_init")
        scaled = d.get("scaled_init", True)
        if not isinstance(scaled, bool):
            raise SpecError(f"{ctx}residual.scaled_init must be true or false, not {scaled!r}")
        stream = "none" if d.get("stream") in (None, False) else d["stream"]
        if stream not in STREAMS:
            raise SpecError(f"{ctx}residual.stream: {unknown('stream', stream, STREAMS)}")
        if stream == "none" and ("stream_init" in d or "stream_lr" in d):
            raise SpecError(f"{ctx}residual.stream_init and stream_lr need a stream multiplier "
                            "(stream: sublayer or block)")
        if gain == "none" and "gain_lr" in d:
            raise SpecError(f"{ctx}residual.gain_lr needs a gain (scalar or vector)")
        return cls(_number_or_rule("alpha", d.get("alpha", 1.0), ctx), _number_or_rule("beta", d.get("beta", 1.0), ctx),
                   gain, gain_init, scaled, stream, _init(d.get("stream_init", 1.0), f"{ctx}residual.stream_init"),
                   _positive(d.get("stream_lr", 1.0), f"{ctx}residual.stream_lr"),
                   _positive(d.get("gain_lr", 1.0), f"{ctx}residual.gain_lr"))

    def to_dict(self) -> dict[str, Any]:
        """The options that differ from the plain residual (as written: rules stay rules)."""
        default = Residual()
        return {k: _flow(getattr(self, k)) for k in _KEYS if getattr(self, k) != getattr(default, k)}

    def resolve(self, n_layers: int) -> dict[str, Any]:
        """The numbers at depth ``n_layers``: alpha, beta, gain, gain_init (None without a gain),
        scaled_init."""
        value = lambda key, v: DEPTH_RULES[key][v](n_layers) if isinstance(v, str) else v
        gain_init = None if self.gain == "none" else (
            GAIN_INIT[self.gain] if self.gain_init is None else self.gain_init)
        out = {"alpha": value("alpha", self.alpha), "beta": value("beta", self.beta), "gain": self.gain,
               "gain_init": _flow(gain_init), "scaled_init": self.scaled_init}
        out.update({k: _flow(getattr(self, k)) for k, default in _NEW.items() if getattr(self, k) != default})
        return out


PLAIN = Residual().resolve(1)


# --------------------------------------------------------------------------------------------------
# x0: the embedding's output re-injected into every block

X0_AT = ("input", "attn")
X0_GATES = ("scalar", "linear")
X0_PRESETS: dict[str, dict[str, Any]] = {
    "none": {},
    "input": {"at": "input", "gate": "scalar", "init": (0.20, 0.05)},  # nanochat's x0_lambdas
    "attn": {"at": "attn", "gate": "linear", "init": 0.0},
}
_X0_KEYS = ("at", "gate", "init", "lr")


@dataclass(frozen=True)
class X0:
    """Where and how x0 re-enters each block (see the module's docstring); ``at`` None: it does not."""

    at: str | None = None
    gate: str = "scalar"
    init: float | tuple[float, float] = 0.0
    lr: float = 1.0

    @classmethod
    def parse(cls, value: Any, ctx: str = "") -> X0:
        if isinstance(value, X0):
            return value
        if value is None or value is False:
            return cls()
        value = preset_or_mapping("x0", value, X0_PRESETS, _X0_KEYS, ctx)
        if not value:  # the preset none
            return cls()
        at = value.get("at")
        if at not in X0_AT:
            raise SpecError(f"{ctx}x0.at: {unknown('place', at, X0_AT)}")
        gate = value.get("gate", "scalar")
        if gate not in X0_GATES:
            raise SpecError(f"{ctx}x0.gate: {unknown('gate', gate, X0_GATES)}")
        return cls(at, gate, _init(value.get("init", 0.0), f"{ctx}x0.init"),
                   _positive(value.get("lr", 1.0), f"{ctx}x0.lr"))

    def to_dict(self) -> dict[str, Any] | None:
        """The canonical form; None where x0 does not re-enter."""
        if self.at is None:
            return None
        return {"at": self.at, "gate": self.gate, "init": _flow(self.init), "lr": self.lr}


def parse_flag(name: str, value: Any, ctx: str = "") -> bool:
    """A block option that is on or off (``sinks``, ``gain_decay``)."""
    value = False if value is None else value
    if not isinstance(value, bool):
        raise SpecError(f"{ctx}{name} must be true or false, not {value!r}")
    return value


def parse_gate(value: Any, ctx: str = "") -> str:
    value = "none" if value in (None, False) else value
    if value not in GATES:
        raise SpecError(f"{ctx}gate: {unknown('gate', value, GATES)}")
    return value


def describe_options(residual: Mapping[str, Any] | None, gate: str, x0: Mapping[str, Any] | None = None,
                     sinks: bool = False, gain_decay: bool = False) -> str:
    """The block options in a summary: ``  +gate:head  +residual(alpha=2.21, beta=0.452)``; empty
    when there are none."""
    parts = []
    if gate != "none":
        parts.append(f"+gate:{gate}")
    if residual and residual != PLAIN:
        items = []
        for key in ("alpha", "beta"):
            if residual[key] != 1.0:
                items.append(f"{key}={residual[key]:.3g}")
        if residual["gain"] != "none":
            items.append(f"gain={residual['gain']}:{_init_text(residual['gain_init'])}"
                         + (f"@{residual['gain_lr']:g}lr" if residual.get("gain_lr", 1.0) != 1.0 else ""))
        if residual.get("stream", "none") != "none":
            items.append(f"stream={residual['stream']}:{_init_text(residual.get('stream_init', 1.0))}"
                         + (f"@{residual['stream_lr']:g}lr" if residual.get("stream_lr", 1.0) != 1.0 else ""))
        if not residual["scaled_init"]:
            items.append("no scaled init")
        parts.append(f"+residual({', '.join(items)})")
    if x0:
        lr = f"@{x0['lr']:g}lr" if x0["lr"] != 1.0 else ""
        parts.append(f"+x0({x0['at']}, {x0['gate']}:{_init_text(x0['init'])}{lr})")
    if sinks:
        parts.append("+sinks")
    if gain_decay:
        parts.append("+gain_decay")
    return "".join("  " + p for p in parts)


def _init_text(init) -> str:
    if isinstance(init, (list, tuple)):
        return f"{init[0]:g}..{init[1]:g}"
    return f"{init:g}"
