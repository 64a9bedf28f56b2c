"""Where a norm can sit in a Transformer, and which norm sits there: the one table of sites
(:data:`SITE_TABLE`, in data-flow order, with each site's width rule and short name) and
:class:`NormSpec`, the norm at one site. :mod:`normsearch.spec` places them in a network. Torch-free.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import SpecError, unknown
from .norms import NORM_KINDS

D_MODEL, FFN_DIM, PROJECTION = "d_model", "ffn_dim", "head_dim or d_model"  # the width rules
RESIDUAL_ADD = "(+)"


@dataclass(frozen=True)
class Site:
    """One norm site. ``width`` is the rule for how many features its norm normalises: ``d_model``,
    ``ffn_dim``, or for the q/k/v projections and the context ``head_dim or d_model`` (``head_dim`` at ``head``
    granularity, one norm shared by the heads; else ``d_model``). ``stage`` is where it sits
    (``model``, ``attention``, ``ffn``), ``abbrev`` its short name in summaries, and ``step`` the
    computation just before it in the block's data flow (``(+)``: the residual add), as
    ``normsearch show`` draws it."""

    name: str
    width: str
    stage: str
    abbrev: str
    step: str = ""

    def per_head(self, spec: NormSpec) -> bool:
        """Whether the norm here normalises each head's slice, with parameters shared by the heads."""
        return self.width == PROJECTION and spec.granularity == "head"

    def features(self, spec: NormSpec, config: Any) -> int:
        """The length of the norm's per-feature parameters at ``config`` (a ModelConfig)."""
        if self.per_head(spec):
            return config.head_dim
        return config.ffn_dim if self.width == FFN_DIM else config.d_model


#: Every site in data-flow order: ``embed``, the block's eleven, ``final``. ``ctx`` (the context
#: norm) sits on the attention's output before W_o, after the heads' softmax-weighted sum. The one table of sites;
#: the model, ``show``, the exporter, the search space and the report read it.
SITE_TABLE = (
    Site("embed", D_MODEL, "model", "emb"),
    Site("attn_in", D_MODEL, "attention", "ai"),
    Site("q", PROJECTION, "attention", "q", "W_q W_k W_v ->"),
    Site("k", PROJECTION, "attention", "k"),
    Site("v", PROJECTION, "attention", "v"),
    Site("ctx", PROJECTION, "attention", "ctx", "RoPE, softmax(qk^T/sqrt(d)) v"),
    Site("attn_out", D_MODEL, "attention", "ao", "W_o"),
    Site("attn_post", D_MODEL, "attention", "ap", RESIDUAL_ADD),
    Site("ffn_in", D_MODEL, "ffn", "fi"),
    Site("ffn_mid", FFN_DIM, "ffn", "fm", "W_up, activation"),
    Site("ffn_out", D_MODEL, "ffn", "fo", "W_down"),
    Site("ffn_post", D_MODEL, "ffn", "fp", RESIDUAL_ADD),
    Site("final", D_MODEL, "model", "fin"),
)
SITE = {s.name: s for s in SITE_TABLE}
SITES = tuple(SITE)
BLOCK_SITES = tuple(s.name for s in SITE_TABLE if s.stage != "model")
MODEL_SITES = tuple(s.name for s in SITE_TABLE if s.stage == "model")
#: The sites whose norm may act per head (``granularity``): the q, k, v projections and the context.
HEAD_SITES = tuple(s.name for s in SITE_TABLE if s.width == PROJECTION)
QKV_SITES = ("q", "k", "v")
GRANULARITIES = ("head", "full")

# Short names for compact summaries (report tables, logs): the block's sites, then the model's.
SITE_ABBREV = {name: SITE[name].abbrev for name in (*BLOCK_SITES, *MODEL_SITES)}


def parse_sites(names: Iterable[str]) -> list[str]:
    """Validate a list of site names (for command-line options)."""
    out = []
    for n in names:
        if n not in SITES:
            raise SpecError(unknown("site", n, SITES))
        out.append(n)
    return out


# --------------------------------------------------------------------------------------------------
# One norm

#: A norm's gain parametrization, as written -> as stored. ``vector``: y = x_hat * w, w from 1 (the
#: kinds' ``gain: true``); ``none``: weightless (``gain: false``); ``one_plus``: y = x_hat * (1 + w),
#: w from 0 (Qwen3-Next's zero-centred gain: weight decay then pulls the gain toward 1, not 0). The
#: booleans stay the stored form of the first two, so every arch_id written before ``one_plus``
#: existed is unchanged.
GAINS = {"vector": True, "none": False, "one_plus": "one_plus", True: True, False: False}
GAIN_NAMES = {True: "vector", False: "none", "one_plus": "one_plus"}


def _gain(kind: str, value: Any) -> bool | str:
    if value is None:
        value = False
    if isinstance(value, (bool, str)) and value in GAINS:
        return GAINS[value]
    raise SpecError(f"{kind}.gain must be vector (or true), none (or false) or one_plus, not {value!r}")



@dataclass(frozen=True)
class NormSpec:
    """A norm at one site: its kind (a key of ``NORM_KINDS``), the kind's options with defaults
    filled in, and for q/k/v/ctx sites the granularity (``head``: over head_dim, shared by the heads;
    ``full``: over the whole projection width). ``depth_scale`` (block sites only) multiplies the
    norm's output in layer l (0-based) by 1 / sqrt(l + 1): LayerNorm Scaling (Sun et al., arXiv
    2502.05795, whose code scales by 1 / sqrt(layer_index + 1)); written only when true, so specs
    without it keep their arch_id.

    ``NormSpec("rmsnorm", eps=1e-6)``; options a kind does not have are rejected.
    """

    kind: str
    options: tuple[tuple[str, Any], ...] = ()
    granularity: str | None = None
    depth_scale: bool = False

    def __init__(self, kind: str, granularity: str | None = None, *, depth_scale: bool = False, **options: Any):
        if kind not in NORM_KINDS:
            raise SpecError(unknown("norm kind", kind, NORM_KINDS))
        defaults = NORM_KINDS[kind].options
        for key in options:
            if key not in defaults:
                raise SpecError(
                    f"norm kind {kind!r} has no option {key!r}; its options: "
                    f"{', '.join(['granularity', *defaults])}"
                )
        canon = []
        for key, default in defaults.items():
            value = options.get(key, default)
            if key == "gain":
                value = _gain(kind, value)
            elif isinstance(default, bool):
                if not isinstance(value, bool):
                    raise SpecError(f"{kind}.{key} must be true or false, not {value!r}")
            else:
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    raise SpecError(f"{kind}.{key} must be a number, not {value!r}")
                value = float(value)
                if not math.isfinite(value) or (key == "eps" and value <= 0):
                    raise SpecError(f"{kind}.{key} must be a finite number > 0, not {value!r}")
            canon.append((key, value))
        if granularity is not None and granularity not in GRANULARITIES:
            raise SpecError(unknown("granularity", granularity, GRANULARITIES))
        if not isinstance(depth_scale, bool):
            raise SpecError(f"depth_scale must be true or false, not {depth_scale!r}")
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "options", tuple(canon))
        object.__setattr__(self, "granularity", granularity)
        object.__setattr__(self, "depth_scale", depth_scale)

    @property
    def opts(self) -> dict[str, Any]:
        return dict(self.options)

    @property
    def gain(self) -> str | None:
        """The gain's parametrization (``vector``, ``none``, ``one_plus``); None for a kind without
        a ``gain`` option."""
        if "gain" not in NORM_KINDS[self.kind].options:
            return None
        return GAIN_NAMES[self.opts["gain"]]

    def scale(self, layer: int) -> float:
        """The factor on this norm's output in layer ``layer`` (0-based): 1 / sqrt(layer + 1) with
        ``depth_scale``, else 1."""
        return 1.0 / math.sqrt(layer + 1) if self.depth_scale else 1.0

    def at(self, site: str) -> NormSpec:
        """This spec placed at ``site``: q/k/v/ctx get a granularity (``head`` unless set); any other
        site must not have one; embed and final have no layer, so no depth_scale."""
        if self.depth_scale and site in MODEL_SITES:
            raise SpecError(f"depth_scale is for the block's sites, not {site!r} (it has no layer index)")
        if site in HEAD_SITES:
            if self.granularity is None:
                return NormSpec(self.kind, "head", depth_scale=self.depth_scale, **self.opts)
            return self
        if self.granularity is not None:
            raise SpecError(
                f"granularity is only for the q, k, v and ctx sites, not {site!r}; remove it there"
            )
        return self

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"kind": self.kind, **self.opts}
        if self.granularity is not None:
            d["granularity"] = self.granularity
        if self.depth_scale:
            d["depth_scale"] = True
        return d

    @classmethod
    def parse(cls, value: Any, site: str, default: NormSpec | None = None, ctx: str = "") -> NormSpec | None:
        """A site's value as written in YAML: ``null``/``false`` (no norm), a kind name, ``true``
        (the placement's default ``norm``), or a mapping ``{kind: ..., eps: ..., granularity: ...}``
        (``kind`` may be left out when there is a default)."""
        try:
            if value is None or value is False or value == "none":
                return None
            if value is True:
                if default is None:
                    raise SpecError(f"site {site!r} is `true` but the placement has no default `norm`")
                if site in MODEL_SITES and default.depth_scale:
                    default = NormSpec(default.kind, default.granularity, **default.opts)
                return default.at(site)
            if isinstance(value, str):
                return cls(value).at(site)
            if isinstance(value, NormSpec):
                return value.at(site)
            if isinstance(value, Mapping):
                d = dict(value)
                kind = d.pop("kind", None)
                depth = False
                if kind is None:
                    if default is None:
                        raise SpecError(f"site {site!r} needs a `kind` ({', '.join(NORM_KINDS)})")
                    kind, base, depth = default.kind, default.opts, default.depth_scale
                    d = {**base, **d}
                gran = d.pop("granularity", None)
                depth = d.pop("depth_scale", depth)
                return cls(kind, gran, depth_scale=depth, **d).at(site)
            raise SpecError(
                f"site {site!r}: expected a norm kind, a mapping or null, not {value!r}"
            )
        except SpecError as e:
            msg = str(e)
            if not msg.startswith(f"site {site!r}"):
                msg = f"site {site!r}: {msg}"
            raise SpecError(ctx + msg) from None
