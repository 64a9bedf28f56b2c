"""The placement spec: where the norms of a Transformer sit and which norms they are.

One object, five readers (search space, model builder, study records, report, exporter); see
``shared/design/norm-sites.md``. Torch-free.

A :class:`Placement` is depth-agnostic: a base block, the model-level ``embed`` and ``final`` norms,
and per-layer overrides as data. :meth:`Placement.resolve` turns it into one block per layer for a
concrete depth; the :attr:`ResolvedPlacement.arch_id` hashes that resolved canonical form, so two
specs that build the same network share an id however they were written.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ._layers import LayerSelector, fraction_layers, layer_span
from ._yaml import where
from .block_options import PLAIN, Residual, describe_options, parse_gate
from .errors import SpecError, unknown
from .norms import NORM_KINDS

__all__ = ["LayerSelector", "fraction_layers", "layer_span"]  # re-exported from ._layers

D_MODEL, FFN_DIM, PROJECTION = "d_model", "ffn_dim", "head_dim or d_model"  # the width rules
RESIDUAL_ADD = "(+)"


@dataclass(frozen=True)
class Site:
    """One norm site. ``width`` is the rule for how many features its norm normalises: ``d_model``,
    ``ffn_dim``, or for the q/k/v projections ``head_dim or d_model`` (``head_dim`` at ``head``
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


#: Every site in data-flow order: ``embed``, the block's ten, ``final``. The one table of sites;
#: the model, ``show``, the exporter, the search space and the report read it.
SITE_TABLE = (
    Site("embed", D_MODEL, "model", "emb"),
    Site("attn_in", D_MODEL, "attention", "ai"),
    Site("q", PROJECTION, "attention", "q", "W_q W_k W_v ->"),
    Site("k", PROJECTION, "attention", "k"),
    Site("v", PROJECTION, "attention", "v"),
    Site("attn_out", D_MODEL, "attention", "ao", "RoPE, softmax(qk^T/sqrt(d)) v, W_o"),
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
QKV_SITES = tuple(s.name for s in SITE_TABLE if s.width == PROJECTION)
GRANULARITIES = ("head", "full")

# Short names for compact summaries (report tables, logs): the block's sites, then the model's.
SITE_ABBREV = {name: SITE[name].abbrev for name in (*BLOCK_SITES, *MODEL_SITES)}


# --------------------------------------------------------------------------------------------------
# One norm


@dataclass(frozen=True)
class NormSpec:
    """A norm at one site: its kind (a key of ``NORM_KINDS``), the kind's options with defaults
    filled in, and for q/k/v sites the granularity (``head``: over head_dim, shared by the heads;
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
            if isinstance(default, bool):
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

    def scale(self, layer: int) -> float:
        """The factor on this norm's output in layer ``layer`` (0-based): 1 / sqrt(layer + 1) with
        ``depth_scale``, else 1."""
        return 1.0 / math.sqrt(layer + 1) if self.depth_scale else 1.0

    def at(self, site: str) -> NormSpec:
        """This spec placed at ``site``: q/k/v get a granularity (``head`` unless set); any other
        site must not have one; embed and final have no layer, so no depth_scale."""
        if self.depth_scale and site in MODEL_SITES:
            raise SpecError(f"depth_scale is for the block's sites, not {site!r} (it has no layer index)")
        if site in QKV_SITES:
            if self.granularity is None:
                return NormSpec(self.kind, "head", depth_scale=self.depth_scale, **self.opts)
            return self
        if self.granularity is not None:
            raise SpecError(
                f"granularity is only for the q, k and v sites, not {site!r}; remove it there"
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


Block = tuple  # tuple[tuple[str, NormSpec], ...] in data-flow order: the present sites of one block


def _block(value: Any, default: NormSpec | None, ctx_src: Any = None, what: str = "block") -> Block:
    if value is None:
        return ()
    if not isinstance(value, Mapping):
        raise SpecError(f"{where(ctx_src)}{what} must be a mapping of site -> norm, not {value!r}")
    out = {}
    for site, v in value.items():
        if site not in BLOCK_SITES:
            hint = " (embed and final are model-level: put them at the top of the spec)" if site in MODEL_SITES else ""
            raise SpecError(f"{where(value, site)}{what}: {unknown('site', site, BLOCK_SITES)}{hint}")
        spec = NormSpec.parse(v, site, default, ctx=where(value, site))
        if spec is not None:
            out[site] = spec
    return tuple((s, out[s]) for s in BLOCK_SITES if s in out)


def _block_dict(block: Block) -> dict[str, Any]:
    return {site: spec.to_dict() for site, spec in block}


# --------------------------------------------------------------------------------------------------
# Per-layer overrides


@dataclass(frozen=True)
class Override:
    """Change the block for some layers: ``set`` edits sites (``null`` removes one), ``block``
    replaces the whole block. Overrides apply in order; a later one wins."""

    layers: LayerSelector
    sites: Block  # sites to set (replace=True: the whole new block)
    removed: tuple[str, ...] = ()  # sites set to null (edit mode only)
    replace: bool = False

    @classmethod
    def parse(cls, value: Any, default: NormSpec | None, ctx: str = "") -> Override:
        if isinstance(value, Override):
            return value
        if not isinstance(value, Mapping):
            raise SpecError(f"{ctx}an override must be a mapping with `layers` and `set` or `block`")
        ctx = where(value) or ctx
        extra = set(value) - {"layers", "set", "block"}
        if extra:
            raise SpecError(f"{ctx}override: {unknown('key', sorted(extra)[0], ['layers', 'set', 'block'])}")
        if "layers" not in value:
            raise SpecError(f"{ctx}override needs `layers` (an index, a list, or first/last/fraction/every)")
        if ("set" in value) == ("block" in value):
            raise SpecError(f"{ctx}override needs exactly one of `set` (edit sites) or `block` (replace the block)")
        layers = LayerSelector.parse(value["layers"], ctx)
        if "block" in value:
            return cls(layers, _block(value["block"], default, value, "override block"), (), True)
        edits = value["set"]
        if not isinstance(edits, Mapping) or not edits:
            raise SpecError(f"{ctx}override set: expected a mapping of site -> norm or null")
        removed = tuple(s for s in BLOCK_SITES if s in edits and NormSpec.parse(edits[s], s, default) is None)
        sites = _block({s: v for s, v in edits.items() if s not in removed}, default, edits, "override set")
        return cls(layers, sites, removed, False)

    def apply(self, block: dict[str, NormSpec]) -> dict[str, NormSpec]:
        if self.replace:
            return dict(self.sites)
        out = {s: v for s, v in block.items() if s not in self.removed}
        out.update(self.sites)
        return out

    def to_dict(self) -> dict[str, Any]:
        if self.replace:
            return {"layers": self.layers.to_dict(), "block": _block_dict(self.sites)}
        edits: dict[str, Any] = {s: None for s in self.removed}
        edits.update(_block_dict(self.sites))
        return {"layers": self.layers.to_dict(), "set": {s: edits[s] for s in BLOCK_SITES if s in edits}}


# --------------------------------------------------------------------------------------------------
# The placement


_TOP_KEYS = ("name", "norm", "embed", "block", "final", "overrides", "residual", "gate")


@dataclass(frozen=True)
class Placement:
    """Where the norms go, independent of depth.

    >>> Placement(block={"attn_in": "rmsnorm", "ffn_in": "rmsnorm"}, final="rmsnorm")  # pre-LN

    ``name`` is a label (a baseline's name); it is not part of the architecture. ``residual`` and
    ``gate`` are the block options of :mod:`normsearch.block_options` (model-wide).
    """

    block: Block = ()
    embed: NormSpec | None = None
    final: NormSpec | None = None
    overrides: tuple[Override, ...] = ()
    name: str | None = field(default=None, compare=False)
    residual: Residual = Residual()
    gate: str = "none"

    def __post_init__(self):
        set_ = lambda k, v: object.__setattr__(self, k, v)
        set_("block", _block(dict(self.block or ()), None))
        set_("embed", NormSpec.parse(self.embed, "embed"))
        set_("final", NormSpec.parse(self.final, "final"))
        set_("overrides", tuple(Override.parse(o, None) for o in self.overrides))
        set_("residual", Residual.parse(self.residual))
        set_("gate", parse_gate(self.gate))

    # -- canonical form ----------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {}
        if self.name is not None:
            d["name"] = self.name
        d["embed"] = self.embed.to_dict() if self.embed else None
        d["block"] = _block_dict(self.block)
        d["final"] = self.final.to_dict() if self.final else None
        if self.overrides:
            d["overrides"] = [o.to_dict() for o in self.overrides]
        if self.residual.to_dict():
            d["residual"] = self.residual.to_dict()
        if self.gate != "none":
            d["gate"] = self.gate
        return d

    @classmethod
    def from_dict(cls, d: Any, name: str | None = None) -> Placement:
        """Read a spec as written in YAML. Besides the canonical form this accepts shorthands: a
        site given as a kind name, ``true`` for the spec's default ``norm``, and layer selectors
        given as an index or a list."""
        if isinstance(d, Placement):
            return d
        if not isinstance(d, Mapping):
            raise SpecError(f"a placement must be a mapping with keys {', '.join(_TOP_KEYS)}; got {type(d).__name__}")
        for key in d:
            if key not in _TOP_KEYS:
                hint = " (block sites go under `block:`)" if key in BLOCK_SITES else ""
                raise SpecError(f"{where(d, key)}placement: {unknown('key', key, _TOP_KEYS)}{hint}")
        default = None
        if d.get("norm") is not None:
            default = NormSpec.parse(d["norm"], "norm", ctx=where(d, "norm"))
        overrides = d.get("overrides") or []
        if not isinstance(overrides, list):
            raise SpecError(f"{where(d, 'overrides')}overrides must be a list")
        label = d.get("name", name)
        return cls(
            block=_block(d.get("block"), default, d, "block"),
            embed=NormSpec.parse(d.get("embed"), "embed", default, ctx=where(d, "embed")),
            final=NormSpec.parse(d.get("final"), "final", default, ctx=where(d, "final")),
            overrides=tuple(Override.parse(o, default, where(d, "overrides")) for o in overrides),
            name=None if label is None else str(label),
            residual=Residual.parse(d.get("residual"), where(d, "residual")),
            gate=parse_gate(d.get("gate"), where(d, "gate")),
        )

    def to_yaml(self) -> str:
        from ._yaml import dumps, flow_leaves

        return dumps(flow_leaves(self.to_dict()))

    @classmethod
    def from_yaml(cls, text: str, source: str = "<string>") -> Placement:
        from ._yaml import loads

        return cls.from_dict(loads(text, source))

    @classmethod
    def load(cls, path) -> Placement:
        """A spec file (``.yaml``). A file that holds a whole exported ``spec.yaml`` (with
        ``placement:`` inside) works too."""
        from ._yaml import load

        data = load(path)
        if isinstance(data, Mapping) and "placement" in data:
            data = data["placement"]
        return cls.from_dict(data)

    def with_name(self, name: str | None) -> Placement:
        return Placement(self.block, self.embed, self.final, self.overrides, name, self.residual, self.gate)

    # -- resolution ----------------------------------------------------------------------------------

    def resolve(self, n_layers: int) -> ResolvedPlacement:
        if isinstance(n_layers, bool) or not isinstance(n_layers, int) or n_layers < 1:
            raise SpecError(f"a model needs at least one layer, not {n_layers!r}")
        blocks = [dict(self.block) for _ in range(n_layers)]
        for ov in self.overrides:
            for i in ov.layers.layers(n_layers):
                blocks[i] = ov.apply(blocks[i])
        return ResolvedPlacement(
            embed=self.embed,
            blocks=tuple(tuple((s, b[s]) for s in BLOCK_SITES if s in b) for b in blocks),
            final=self.final,
            residual=self.residual.resolve(n_layers),
            gate=self.gate,
        )

    def arch_id(self, n_layers: int) -> str:
        return self.resolve(n_layers).arch_id

    def kinds(self) -> set[str]:
        specs = [s for _, s in self.block] + [s for o in self.overrides for _, s in o.sites]
        specs += [s for s in (self.embed, self.final) if s is not None]
        return {s.kind for s in specs}


@dataclass(frozen=True)
class ResolvedPlacement:
    """A placement at a concrete depth: exactly which norm sits at which site of which layer."""

    embed: NormSpec | None
    blocks: tuple[Block, ...]
    final: NormSpec | None
    residual: dict[str, Any] = field(default_factory=lambda: dict(PLAIN))  # Residual.resolve's numbers
    gate: str = "none"

    @property
    def n_layers(self) -> int:
        return len(self.blocks)

    def block(self, i: int) -> dict[str, NormSpec]:
        return dict(self.blocks[i])

    def to_dict(self) -> dict[str, Any]:
        d = {
            "embed": self.embed.to_dict() if self.embed else None,
            "blocks": [_block_dict(b) for b in self.blocks],
            "final": self.final.to_dict() if self.final else None,
        }
        if self.residual != PLAIN:  # block options only where set: older ids stay as they were
            d["residual"] = dict(self.residual)
        if self.gate != "none":
            d["gate"] = self.gate
        return d

    @property
    def arch_id(self) -> str:
        """12 hex digits of the SHA-256 of the canonical resolved form (kernel backend excluded)."""
        text = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    def groups(self) -> list[tuple[list[int], Block]]:
        """Runs of consecutive layers with the same block: [(layer indices, block), ...]."""
        out: list[tuple[list[int], Block]] = []
        for i, b in enumerate(self.blocks):
            if out and out[-1][1] == b:
                out[-1][0].append(i)
            else:
                out.append(([i], b))
        return out

    def present_sites(self) -> set[str]:
        sites = {s for b in self.blocks for s, _ in b}
        sites |= {s for s, n in (("embed", self.embed), ("final", self.final)) if n is not None}
        return sites

    def describe(self) -> str:
        """Compact one-line summary, e.g. ``ai ao fi fo | fin  [rmsnorm]`` or, with per-layer
        blocks, ``L0: ai q k v fi; L1-3: q k v ap | fin  [rmsnorm]``. A site's tag ends in ``F`` at
        ``full`` granularity and ``D`` with ``depth_scale``; block options follow, e.g.
        ``ai fi | fin  [rmsnorm]  +gate:elementwise  +residual(alpha=2.21, beta=0.452)``."""
        specs = [s for b in self.blocks for _, s in b] + [n for n in (self.embed, self.final) if n]
        kinds = sorted({s.kind for s in specs})
        common = kinds[0] if len(kinds) == 1 else None

        def site(name, spec):
            tag = SITE_ABBREV[name]
            if spec.granularity == "full":
                tag += "F"
            if spec.depth_scale:
                tag += "D"
            if common is None:
                tag += ":" + spec.kind
            return tag

        def block(b):
            return " ".join(site(n, s) for n, s in b) or "-"

        groups = self.groups()
        if len(groups) == 1:
            body = block(groups[0][1])
        else:
            body = "; ".join(f"L{layer_span(ix)}: {block(b)}" for ix, b in groups)
        model = [site(n, s) for n, s in (("embed", self.embed), ("final", self.final)) if s]
        text = body + (" | " + " ".join(model) if model else "")
        return text + (f"  [{common}]" if common else "") + describe_options(self.residual, self.gate)


def parse_sites(names: Iterable[str]) -> list[str]:
    """Validate a list of site names (for command-line options)."""
    out = []
    for n in names:
        if n not in SITES:
            raise SpecError(unknown("site", n, SITES))
        out.append(n)
    return out
