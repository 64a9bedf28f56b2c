"""Typed configuration: dataclasses read from YAML mappings with every key checked.

Unknown keys are rejected with the list of known ones (and the file and line, where the mapping came
from a file); values are checked against the field's type and choices. Torch-free.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Union

from ._yaml import where
from .errors import NormsearchError, unknown


def _describe(tp) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return " | ".join(map(str, typing.get_args(tp)))
    if origin in (Union, types.UnionType):
        return " or ".join(_describe(a) for a in typing.get_args(tp))
    if origin in (list, tuple):
        return f"a list of {_describe(typing.get_args(tp)[0])}"
    if tp is type(None):
        return "null"
    names = {int: "an integer", float: "a number", bool: "true/false", str: "a string"}
    return names.get(tp, getattr(tp, "__name__", str(tp)))


class _Mismatch(Exception):
    pass


#: a scalar field's type -> (the YAML values it takes, how they are converted)
_SCALARS = {bool: (bool, bool), int: (int, int), float: ((int, float), float), str: (str, str)}


def _coerce(tp, value, path: str):
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin in (Union, types.UnionType):
        for arg in typing.get_args(tp):
            try:
                return _coerce(arg, value, path)
            except _Mismatch:
                continue
        raise _Mismatch
    if tp is type(None):
        if value is None:
            return None
        raise _Mismatch
    if origin is Literal:
        if value in typing.get_args(tp) and not isinstance(value, bool):
            return value
        raise _Mismatch
    if origin in (list, tuple):
        (arg, *_) = typing.get_args(tp)
        items = value if isinstance(value, (list, tuple)) else [value]
        out = [_coerce(arg, v, path) for v in items]
        return tuple(out) if origin is tuple else out
    if origin in (dict, Mapping) or tp is dict:
        if isinstance(value, Mapping):
            return dict(value)
        raise _Mismatch
    if tp in _SCALARS:  # a bool is no number here: YAML's `true` is not 1
        accepts, convert = _SCALARS[tp]
        if isinstance(value, accepts) and (tp is bool or not isinstance(value, bool)):
            return convert(value)
        raise _Mismatch
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if isinstance(value, Mapping):
            return from_mapping(tp, value, path)
        raise _Mismatch
    raise TypeError(f"unsupported config type {tp!r}")


def from_mapping(cls, data: Any, section: str):
    """Build dataclass ``cls`` from ``data`` (a mapping), rejecting unknown keys and bad values."""
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise NormsearchError(f"{where(data)}{section}: expected a mapping of settings, not {data!r}")
    hints = typing.get_type_hints(cls)
    fields = [f.name for f in dataclasses.fields(cls) if f.init]
    kwargs = {}
    for key, value in data.items():
        if key not in fields:
            raise NormsearchError(f"{where(data, key)}{section}: {unknown('key', key, fields)}")
        path = f"{section}.{key}"
        try:
            kwargs[key] = _coerce(hints[key], value, path)
        except _Mismatch:
            raise NormsearchError(
                f"{where(data, key)}{path} must be {_describe(hints[key])}, not {value!r}"
            ) from None
    try:
        obj = cls(**kwargs)
    except NormsearchError as e:  # point at the key the message names (its line, or its override)
        named = [k for k in kwargs if f"{section}.{k} " in f"{e} " or f"{section}.{k}:" in str(e)]
        raise NormsearchError(f"{where(data, named[0] if named else None)}{e}") from None
    return obj


def to_mapping(obj) -> dict[str, Any]:
    """The plain-data form of a config dataclass (for YAML, JSON and study attributes)."""
    out = {}
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        if dataclasses.is_dataclass(v):
            v = to_mapping(v)
        elif isinstance(v, tuple):
            v = list(v)
        out[f.name] = v
    return out


def _check(cond: bool, msg: str):
    if not cond:
        raise NormsearchError(msg)


#: model.init's values (one word each: a grid variant's tag is ``init-<name>``), and each one's rule:
#: d is d_model, L n_layers, fan_in a matrix's input width; W_o, W_down: the residual projections
#: (attn.out, ffn.down); "(scaled)": unless the placement's residual has scaled_init off. Norm
#: parameters and branch gains keep their own initial values; DeepNorm's beta multiplies afterwards.
#: Which baseline uses which, and where it was read: normsearch.baselines (Baseline.init).
InitName = Literal["gpt", "small", "normal", "truncnormal", "smallmegatron", "fairseq", "mixln", "modded", "nanochat"]
INITS: dict[str, str] = {
    "gpt": "N(0, init_std) everywhere; W_o, W_down / sqrt(2L) (scaled)",
    "small": "N(0, sqrt(2/(5d))) everywhere (Nguyen & Salazar 2019)",
    "normal": "N(0, init_std) everywhere, no depth scaling",
    "truncnormal": "N(0, init_std) truncated at 3 std everywhere, no depth scaling",
    "smallmegatron": "N(0, s) truncated at 3 std, s = sqrt(2/(5d)); W_o, W_down s / sqrt(2L) (scaled); an "
                     "untied head N(0, 1/sqrt(d)), truncated",
    "fairseq": "embeddings and an untied head N(0, 1/sqrt(d)); uniform with std 1/sqrt(2d) for q, k, v, "
               "1/sqrt(d) for W_o, 1/sqrt(3 fan_in) for the FFN and gate matrices (torch's nn.Linear default)",
    "mixln": "embeddings N(0, sqrt(2/5)); every matrix N(0, init_std), no depth scaling",
    "modded": "embeddings and head N(0, 0.005); uniform with std 0.5/sqrt(d) for q, k, v, W_o and the FFN's "
              "up and gate matrices; W_down zero (modded-nanogpt)",
    "nanochat": "embeddings N(0, 0.8), an untied head N(0, 0.001); uniform with std 1/sqrt(d) for q, k, v and "
                "0.4/sqrt(d) for the FFN's up and gate matrices; W_o and W_down zero (nanochat)",
}


def init_std(init: str, kind: str, fan_in: float, d: float, n_layers: int, std0: float,
             scaled: bool = True) -> tuple[str, float]:
    """(distribution, std) of one tensor under init rule ``init`` (:data:`INITS`): ``normal``,
    ``trunc`` (truncated at 3 std) or ``uniform``. ``kind``: ``embed``, ``head``, ``qkv``, ``out``,
    ``down`` or ``matrix`` (any other: FFN up and gate, the attention gate); ``fan_in`` its input
    width, ``d`` the model width (both at the base width under mup), ``std0`` model.init_std,
    ``scaled`` the residual's scaled_init. The model and the standalone export both follow it."""
    depth = math.sqrt(2 * n_layers) if scaled and kind in ("out", "down") else 1.0
    if init == "gpt":
        return "normal", (std0 / math.sqrt(2 * n_layers) if depth != 1.0 else std0)
    if init == "small":
        return "normal", math.sqrt(2.0 / (5.0 * d))
    if init == "normal":
        return "normal", std0
    if init == "truncnormal":
        return "trunc", std0
    if init == "mixln":
        return "normal", (math.sqrt(2.0 / 5.0) if kind == "embed" else std0)
    if init == "smallmegatron":
        return "trunc", (1.0 / math.sqrt(d) if kind == "head" else math.sqrt(2.0 / (5.0 * d)) / depth)
    if init == "fairseq":
        if kind in ("embed", "head"):
            return "normal", 1.0 / math.sqrt(d)
        if kind in ("qkv", "out"):
            return "uniform", 1.0 / math.sqrt(2.0 * d if kind == "qkv" else d)
        return "uniform", 1.0 / math.sqrt(3.0 * fan_in)
    if init == "modded":  # train_gpt.py @f411b3d: GPT.__init__, init_attn, init_mlp
        if kind in ("embed", "head"):
            return "normal", 0.005
        return "uniform", (0.0 if kind == "down" else 0.5 / math.sqrt(d))
    if init == "nanochat":  # nanochat/gpt.py @92d63d4: GPT.init_weights
        if kind in ("embed", "head"):
            return "normal", (0.8 if kind == "embed" else 0.001)
        if kind in ("out", "down"):
            return "uniform", 0.0
        return "uniform", (1.0 if kind == "qkv" else 0.4) / math.sqrt(d)
    raise NormsearchError(unknown("model.init", init, INITS))


@dataclass(frozen=True)
class ModelConfig:
    """A decoder-only language model; the placement decides where its norms go."""

    vocab_size: int = 256
    n_layers: int = 4
    d_model: int = 128
    n_heads: int = 4
    ffn: Literal["gelu", "swiglu"] = "gelu"
    ffn_hidden: int | None = None  # default: 4 d (gelu), 8/3 d rounded up to a multiple of 16 (swiglu)
    context_length: int = 128
    rope: bool = True  # rotary positions; false: learned absolute position embeddings
    rope_theta: float = 10000.0
    # untied by default: with the GPT init, a tied head stalls Post-LN at the unigram loss at every
    # learning rate we tried (results/repro), which would make it an unfair baseline
    tie_embeddings: bool = False
    dropout: float = 0.0
    init: InitName = "gpt"  # the rule for every matrix and embedding: INITS below (gpt: GPT-2's)
    init_std: float = 0.02  # the std of gpt, normal, truncnormal and mixln
    # standard: the init above, one learning rate. mup: Maximal Update Parametrization for Adam
    # (normsearch.parametrization; docs/parametrization.md): equal to standard at d_model ==
    # mup_base_width, and the best learning rate found there carries to wider models
    parametrization: Literal["standard", "mup"] = "standard"
    mup_base_width: int = 64  # the d_model at which mup equals standard (the smallest rung's)

    def __post_init__(self):
        for name in ("vocab_size", "n_layers", "d_model", "n_heads", "context_length"):
            _check(getattr(self, name) >= 1, f"model.{name} must be >= 1, not {getattr(self, name)}")
        _check(self.d_model % self.n_heads == 0,
               f"model.d_model ({self.d_model}) must be divisible by model.n_heads ({self.n_heads})")
        _check(not self.rope or self.head_dim % 2 == 0,
               f"RoPE needs an even head dimension; d_model/n_heads = {self.head_dim}")
        _check(0.0 <= self.dropout < 1.0, f"model.dropout must be in [0, 1), not {self.dropout}")
        _check(self.ffn_hidden is None or self.ffn_hidden >= 1, "model.ffn_hidden must be >= 1")
        _check(self.init_std > 0, "model.init_std must be > 0")
        _check(self.mup_base_width >= 1, f"model.mup_base_width must be >= 1, not {self.mup_base_width}")

    @property
    def width_mult(self) -> float:
        """d_model / mup_base_width under mup (every hidden dimension grows with it); 1 under standard."""
        return self.d_model / self.mup_base_width if self.parametrization == "mup" else 1.0

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def ffn_dim(self) -> int:
        if self.ffn_hidden is not None:
            return self.ffn_hidden
        if self.ffn == "swiglu":
            return -(-(8 * self.d_model // 3) // 16) * 16
        return 4 * self.d_model

    @classmethod
    def from_dict(cls, d: Any) -> ModelConfig:
        return from_mapping(cls, d, "model")

    def to_dict(self) -> dict[str, Any]:
        """The plain-data form. The parametrization's keys are written only under mup, so a recipe
        saved before they existed (and every study fingerprint made from one) compares equal."""
        out = to_mapping(self)
        if self.parametrization == "standard":
            del out["parametrization"], out["mup_base_width"]
        return out
