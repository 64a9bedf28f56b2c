"""The placement spec: where the norms of a Transformer sit and which norms they are.

One object, five readers (search space, model builder, study records, report, exporter); see
``shared/design/norm-sites.md``. Torch-free. The sites and the norm at one site (:class:`NormSpec`)
are :mod:`normsearch.sites`'; this module places them.

A :class:`Placement` is depth-agnostic: a base block, the model-level ``embed`` and ``final`` norms,
and per-layer overrides as data. :meth:`Placement.resolve` turns it into one block per layer for a
concrete depth; the :attr:`ResolvedPlacement.arch_id` hashes that resolved canonical form, so two
specs that build the same network share an id however they were written.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ._layers import LayerSelector, fraction_layers, layer_span
from ._yaml import where
from .block_options import PLAIN, X0, Residual, describe_options, parse_flag, parse_gate
from .errors import SpecError, unknown
from .sites import (BLOCK_SITES, D_MODEL, FFN_DIM, GRANULARITIES, HEAD_SITES, MODEL_SITES, PROJECTION, QKV_SITES,
                    RESIDUAL_ADD, SITE, SITE_ABBREV, SITE_TABLE, SITES, NormSpec, Site, parse_sites)

__all__ = [
    "Block", "Override", "Placement", "ResolvedPlacement",
    # re-exported from .sites (the table of sites and the norm at one site)
    "BLOCK_SITES", "D_MODEL", "FFN_DIM", "GRANULARITIES", "HEAD_SITES", "MODEL_SITES", "PROJECTION", "QKV_SITES",
    "RESIDUAL_ADD", "SITE", "SITE_ABBREV", "SITE_TABLE", "SITES", "NormSpec", "Site", "parse_sites",
    # re-exported from ._layers
    "LayerSelector", "fraction_layers", "layer_span",
]

#: How a site's tag in a summary shows its gain: ``0`` weightless, ``+`` a 1 + w gain; nothing for a
#: vector gain (the kinds' default) or a kind without a gain option.
GAIN_TAGS = {"none": "0", "one_plus": "+"}

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


_TOP_KEYS = ("name", "norm", "embed", "block", "final", "overrides", "residual", "gate", "x0", "sinks", "gain_decay")


@dataclass(frozen=True)
class Placement:
    """Where the norms go, independent of depth.

    >>> Placement(block={"attn_in": "rmsnorm", "ffn_in": "rmsnorm"}, final="rmsnorm")  # pre-LN

    ``name`` is a label (a baseline's name); it is not part of the architecture. ``residual``,
    ``gate``, ``x0``, ``sinks`` and ``gain_decay`` are the block options of
    :mod:`normsearch.block_options` (model-wide).
    """

    block: Block = ()
    embed: NormSpec | None = None
    final: NormSpec | None = None
    overrides: tuple[Override, ...] = ()
    name: str | None = field(default=None, compare=False)
    residual: Residual = Residual()
    gate: str = "none"
    x0: X0 = X0()
    sinks: bool = False
    gain_decay: bool = False

    def __post_init__(self):
        set_ = lambda k, v: object.__setattr__(self, k, v)
        set_("block", _block(dict(self.block or ()), None))
        set_("embed", NormSpec.parse(self.embed, "embed"))
        set_("final", NormSpec.parse(self.final, "final"))
        set_("overrides", tuple(Override.parse(o, None) for o in self.overrides))
        set_("residual", Residual.parse(self.residual))
        set_("gate", parse_gate(self.gate))
        set_("x0", X0.parse(self.x0))
        set_("sinks", parse_flag("sinks", self.sinks))
        set_("gain_decay", parse_flag("gain_decay", self.gain_decay))

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
        d.update(self._new_options())
        return d

    def _new_options(self) -> dict[str, Any]:
        """x0, sinks and gain_decay, where set (so that ids from before them stay)."""
        d: dict[str, Any] = {}
        if self.x0.at is not None:
            d["x0"] = self.x0.to_dict()
        if self.sinks:
            d["sinks"] = True
        if self.gain_decay:
            d["gain_decay"] = True
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
            x0=X0.parse(d.get("x0"), where(d, "x0")),
            sinks=parse_flag("sinks", d.get("sinks"), where(d, "sinks")),
            gain_decay=parse_flag("gain_decay", d.get("gain_decay"), where(d, "gain_decay")),
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
        return Placement(self.block, self.embed, self.final, self.overrides, name, self.residual, self.gate,
                         self.x0, self.sinks, self.gain_decay)

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
            options=self._new_options(),
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
    options: dict[str, Any] = field(default_factory=dict)  # x0, sinks, gain_decay where set

    @property
    def x0(self) -> dict[str, Any] | None:
        return self.options.get("x0")

    @property
    def sinks(self) -> bool:
        return bool(self.options.get("sinks"))

    @property
    def gain_decay(self) -> bool:
        return bool(self.options.get("gain_decay"))

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
        d.update(self.options)
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
        ``full`` granularity, ``D`` with ``depth_scale``, ``0`` when weightless and ``+`` with a 1 + w
        gain; block options follow, e.g.
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
            tag += GAIN_TAGS.get(spec.gain, "")
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
        return text + (f"  [{common}]" if common else "") + describe_options(
            self.residual, self.gate, self.x0, self.sinks, self.gain_decay)
