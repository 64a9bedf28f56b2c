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

Presets: ``residual: deepnorm`` (alpha and beta ``deepnorm``, no scaled init), ``rezero``,
``layerscale``; ``plain`` is the default.

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
}

_KEYS = ("alpha", "beta", "gain", "gain_init", "scaled_init")


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
    gain_init: float | None = None
    scaled_init: bool = True

    @classmethod
    def parse(cls, value: Any, ctx: str = "") -> Residual:
        if isinstance(value, Residual):
            return value
        if value is None:
            return cls()
        if isinstance(value, str):
            if value not in RESIDUAL_PRESETS:
                raise SpecError(f"{ctx}residual: {unknown('preset', value, RESIDUAL_PRESETS)}")
            value = RESIDUAL_PRESETS[value]
        if not isinstance(value, Mapping):
            raise SpecError(f"{ctx}residual: a preset ({', '.join(RESIDUAL_PRESETS)}) or a mapping "
                            f"with keys {', '.join(_KEYS)}, not {value!r}")
        for key in value:
            if key not in _KEYS:
                raise SpecError(f"{where(value, key) or ctx}residual: {unknown('key', key, _KEYS)}")
        d = dict(value)
        gain = "none" if d.get("gain") in (None, False) else d["gain"]
        if gain not in GAINS:
            raise SpecError(f"{ctx}residual.gain: {unknown('gain', gain, GAINS)}")
        gain_init = d.get("gain_init")
        if gain_init is not None:
            if gain == "none":
                raise SpecError(f"{ctx}residual.gain_init needs a gain (scalar or vector)")
            if isinstance(gain_init, bool) or not isinstance(gain_init, (int, float)) or not math.isfinite(gain_init):
                raise SpecError(f"{ctx}residual.gain_init must be a number, not {gain_init!r}")
            gain_init = float(gain_init)
        scaled = d.get("scaled_init", True)
        if not isinstance(scaled, bool):
            raise SpecError(f"{ctx}residual.scaled_init must be true or false, not {scaled!r}")
        return cls(_number_or_rule("alpha", d.get("alpha", 1.0), ctx), _number_or_rule("beta", d.get("beta", 1.0), ctx),
                   gain, gain_init, scaled)

    def to_dict(self) -> dict[str, Any]:
        """The options that differ from the plain residual (as written: rules stay rules)."""
        d = {"alpha": self.alpha, "beta": self.beta, "gain": self.gain, "gain_init": self.gain_init,
             "scaled_init": self.scaled_init}
        default = Residual()
        return {k: v for k, v in d.items() if v != getattr(default, k)}

    def resolve(self, n_layers: int) -> dict[str, Any]:
        """The numbers at depth ``n_layers``: alpha, beta, gain, gain_init (None without a gain),
        scaled_init."""
        value = lambda key, v: DEPTH_RULES[key][v](n_layers) if isinstance(v, str) else v
        gain_init = None if self.gain == "none" else (
            GAIN_INIT[self.gain] if self.gain_init is None else self.gain_init)
        return {"alpha": value("alpha", self.alpha), "beta": value("beta", self.beta), "gain": self.gain,
                "gain_init": gain_init, "scaled_init": self.scaled_init}


PLAIN = Residual().resolve(1)


def parse_gate(value: Any, ctx: str = "") -> str:
    value = "none" if value in (None, False) else value
    if value not in GATES:
        raise SpecError(f"{ctx}gate: {unknown('gate', value, GATES)}")
    return value


def describe_options(residual: Mapping[str, Any] | None, gate: str) -> str:
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
            items.append(f"gain={residual['gain']}:{residual['gain_init']:g}")
        if not residual["scaled_init"]:
            items.append("no scaled init")
        parts.append(f"+residual({', '.join(items)})")
    return "".join("  " + p for p in parts)
