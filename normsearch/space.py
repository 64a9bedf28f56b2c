"""Search spaces: which placements a study may propose.

A space says, per site, which choices are allowed: ``none`` (no norm), ``norm`` (the space's shared
kind) or a kind name. It can tie sites to one choice (``tie: [[q, k]]``), share one kind across all
sites or search it (``kind: [layernorm, rmsnorm]``), choose q/k/v granularity, and make chosen
sites depth-dependent (``depth: {ranges: [[0, 0.25], [0.25, 1]], sites: [...]}``). Torch-free.

Block options are searched too (``options:``): ``depth_scale: [off, on]`` (LayerNorm Scaling's
1/sqrt(l) on the input norms ``attn_in`` and ``ffn_in`` where they are present, and, as its authors
recommend, no scaled init of the residual projections), ``residual:`` a list
of presets (``plain``, ``deepnorm``, ``rezero``, ``layerscale``, ``scalars``, ``lambdas``), ``gate: [none,
head, elementwise]``, ``x0: [none, input, attn]``, ``sinks: [off, on]``, ``gain: [vector, none,
one_plus]`` (the gain of every norm whose kind has one: a vector, weightless (and then without a bias
too, as the baselines' weightless norms), or 1 + w) and
``gain_decay: [off, on]``; see normsearch.block_options and normsearch.sites.

Each choice becomes one Optuna categorical parameter with a stable name (``site.attn_in``,
``site.q+k``, ``site.ffn_post@1`` for depth range 1, ``kind``, ``gran.q``, ``opt.gate``), so
importance is per site and per option.

    kind: rmsnorm
    sites:
      attn_in: [none, norm]
      q: [none, norm]
      ...
    tie: [[q, k]]
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from . import _yaml
from .block_options import GATES, RESIDUAL_PRESETS, X0_PRESETS, X0, Residual
from .errors import NormsearchError, unknown
from .norms import NORM_KINDS
from .spec import BLOCK_SITES, GRANULARITIES, HEAD_SITES, MODEL_SITES, SITES, NormSpec, Placement, fraction_layers

SPACES_DIR = Path(__file__).resolve().parent.parent / "search_spaces"
_KEYS = ("description", "kind", "sites", "tie", "granularity", "depth", "options")
#: The searchable block options and their allowed choices (the first listed in a space is its default).
OPTIONS = {"depth_scale": ("off", "on"), "residual": tuple(RESIDUAL_PRESETS), "gate": GATES,
           "x0": tuple(X0_PRESETS), "sinks": ("off", "on"), "gain": ("vector", "none", "one_plus"),
           "gain_decay": ("off", "on")}
#: The sites LayerNorm Scaling scales (its paper's pre-norms).
DEPTH_SCALE_SITES = ("attn_in", "ffn_in")


@dataclass(frozen=True)
class Param:
    """One categorical choice of the space."""

    name: str
    sites: tuple[str, ...]  # the sites it decides (several when tied)
    choices: tuple[str, ...]
    depth_range: int | None = None  # index into the space's ranges, for depth-dependent sites


@dataclass(frozen=True)
class SearchSpace:
    params: tuple[Param, ...]
    kinds: tuple[str, ...]  # the shared kind's choices ("norm" resolves to it)
    granularity: tuple[tuple[str, tuple[str, ...]], ...]  # q/k/v site -> allowed granularities
    ranges: tuple[tuple[float, float], ...] = ()
    description: str = ""
    source: str | None = None
    options: tuple[tuple[str, tuple[str, ...]], ...] = ()  # block option -> its choices

    def _option(self, values: Mapping[str, str], name: str) -> str:
        choices = dict(self.options).get(name, OPTIONS[name][:1])
        return values.get(f"opt.{name}", choices[0])

    # -- the choices -------------------------------------------------------------------------------

    def distributions(self) -> dict[str, tuple[str, ...]]:
        """Every parameter a trial may have and its choices (conditional ones included)."""
        out = {p.name: p.choices for p in self.params}
        if len(self.kinds) > 1:
            out["kind"] = self.kinds
        for site, grans in self.granularity:
            if len(grans) > 1:
                out[f"gran.{site}"] = grans
        for name, choices in self.options:
            if len(choices) > 1:
                out[f"opt.{name}"] = choices
        return out

    def size(self) -> int:
        """The number of distinct parameter combinations (an upper bound on distinct networks)."""
        n = math.prod(len(p.choices) for p in self.params) * len(self.kinds)
        n *= math.prod(len(c) for _, c in self.options)
        # granularity only matters where its site has a norm; count it as a full factor (upper bound)
        return n * math.prod(len(g) for _, g in self.granularity)

    def suggest(self, trial) -> Placement:
        """Ask an Optuna trial for every choice; granularity only where its site has a norm."""
        values = {p.name: trial.suggest_categorical(p.name, list(p.choices)) for p in self.params}
        if len(self.kinds) > 1:
            values["kind"] = trial.suggest_categorical("kind", list(self.kinds))
        for site, grans in self.granularity:
            if len(grans) > 1 and self._site_used(site, values):
                values[f"gran.{site}"] = trial.suggest_categorical(f"gran.{site}", list(grans))
        for name, choices in self.options:
            if len(choices) > 1:
                values[f"opt.{name}"] = trial.suggest_categorical(f"opt.{name}", list(choices))
        return self.placement(values)

    def _site_used(self, site: str, values: Mapping[str, str]) -> bool:
        return any(site in p.sites and values[p.name] != "none" for p in self.params)

    def placement(self, values: Mapping[str, str]) -> Placement:
        """The placement that a set of parameter values stands for."""
        kind = values.get("kind", self.kinds[0])
        grans = dict(self.granularity)
        depth = self._option(values, "depth_scale") == "on"
        gain = self._option(values, "gain")

        def spec(site: str, choice: str) -> NormSpec | None:
            if choice == "none":
                return None
            g = values.get(f"gran.{site}", grans[site][0]) if site in HEAD_SITES else None
            k = kind if choice == "norm" else choice
            opts = {"gain": gain} if "gain" in NORM_KINDS[k].options else {}
            if gain == "none" and "bias" in NORM_KINDS[k].options:  # weightless: no affine at all, as the baselines'
                opts["bias"] = False
            return NormSpec(k, g, depth_scale=depth and site in DEPTH_SCALE_SITES, **opts)

        block: dict[str, NormSpec] = {}
        model: dict[str, NormSpec | None] = {"embed": None, "final": None}
        per_range: list[dict[str, NormSpec | None]] = [{} for _ in self.ranges]
        for p in self.params:
            for site in p.sites:
                s = spec(site, values[p.name])
                if site in MODEL_SITES:
                    model[site] = s
                elif p.depth_range is not None:
                    per_range[p.depth_range][site] = s
                elif s is not None:
                    block[site] = s
        overrides = [
            {"layers": {"fraction": list(r)}, "set": {k: v for k, v in sites.items()}}
            for r, sites in zip(self.ranges, per_range)
            if sites
        ]
        residual = _residual(self._option(values, "residual"), depth)
        return Placement(block, embed=model["embed"], final=model["final"], overrides=overrides,
                         residual=residual, gate=self._option(values, "gate"), x0=self._option(values, "x0"),
                         sinks=self._option(values, "sinks") == "on",
                         gain_decay=self._option(values, "gain_decay") == "on")

    def params_of(self, placement: Placement, n_layers: int) -> dict[str, str] | None:
        """Parameter values that give ``placement``'s network, or None if the space cannot express
        it (so a baseline can be enqueued as an ordinary point of the space)."""
        r = placement.resolve(n_layers)
        layers_of = [self._range_layers(i, n_layers) for i in range(len(self.ranges))]
        specs = [s for b in r.blocks for _, s in b] + [s for s in (r.embed, r.final) if s]
        kinds = {s.kind for s in specs}
        shared = next((k for k in self.kinds if k in kinds), self.kinds[0])
        values: dict[str, str] = {}
        if len(self.kinds) > 1:
            values["kind"] = shared
        if not self._options_of(r, n_layers, values):
            return None
        for p in self.params:
            site = p.sites[0]
            if site in MODEL_SITES:
                s = r.embed if site == "embed" else r.final
            else:
                layers = layers_of[p.depth_range] if p.depth_range is not None else range(n_layers)
                found = {r.block(i).get(site) for i in layers}
                if len(found) != 1:
                    return None
                (s,) = found
            if s is None:
                choice = "none"
            elif s.kind == shared and "norm" in p.choices:
                choice = "norm"
            elif s.kind in p.choices:
                choice = s.kind
            else:
                return None
            if choice not in p.choices:
                return None
            values[p.name] = choice
            for site in p.sites:
                if s is not None and site in HEAD_SITES and len(dict(self.granularity)[site]) > 1:
                    layers = layers_of[p.depth_range] if p.depth_range is not None else range(n_layers)
                    g = {r.block(i)[site].granularity for i in layers if site in r.block(i)}
                    if len(g) == 1:
                        values[f"gran.{site}"] = g.pop()
        try:
            ok = self.placement(values).arch_id(n_layers) == r.arch_id
        except NormsearchError:
            return None
        return values if ok else None

    def _options_of(self, r, n_layers: int, values: dict[str, str]) -> bool:
        """Fill ``values`` with the block options of the resolved placement ``r``; False when the
        space cannot express them."""
        opts = dict(self.options)
        scaled = any(s.depth_scale for b in r.blocks for _, s in b)
        # depth_scale on also drops the scaled init, so without a scaled norm the residual tells
        pairs = [(d, c) for d in (("on",) if scaled else ("off", "on")) for c in opts.get("residual", ("plain",))
                 if _residual(c, d == "on").resolve(n_layers) == r.residual]
        depth, preset = pairs[0] if pairs else (None, None)
        x0 = next((name for name in opts.get("x0", ("none",)) if X0.parse(name).to_dict() == r.x0), None)
        gains = {s.gain for b in r.blocks for _, s in b} | {s.gain for s in (r.embed, r.final) if s is not None}
        gains.discard(None)  # kinds without a gain option
        gain = gains.pop() if len(gains) == 1 else (opts.get("gain", ("vector",))[0] if not gains else None)
        found = {"depth_scale": depth, "residual": preset, "gate": r.gate, "x0": x0,
                 "sinks": "on" if r.sinks else "off", "gain": gain, "gain_decay": "on" if r.gain_decay else "off"}
        for name, value in found.items():
            choices = dict(self.options).get(name, OPTIONS[name][:1])
            if value not in choices:
                return False
            if len(choices) > 1:
                values[f"opt.{name}"] = value
        return True

    def _range_layers(self, i: int, n_layers: int) -> list[int]:
        return fraction_layers(*self.ranges[i], n_layers)

    def architectures(self, n_layers: int, enough: int | None = None, limit: int = 100_000) -> int:
        """How many distinct networks (arch ids at ``n_layers``) the space holds; counting stops at
        ``enough`` (it is at least that many) and after ``limit`` points (a lower bound then)."""
        seen: set[str] = set()
        for i, values in enumerate(self.grid()):
            if i >= limit or (enough is not None and len(seen) >= enough):
                break
            try:
                seen.add(self.placement(values).arch_id(n_layers))
            except NormsearchError:  # a point that is no network (none at all, say) is never proposed
                continue
        return len(seen)

    def check_depth(self, n_layers: int):
        for i, r in enumerate(self.ranges):
            if not self._range_layers(i, n_layers):
                raise NormsearchError(
                    f"depth range {list(r)} holds no layer of a {n_layers}-layer model; use fewer ranges or more layers"
                )

    def grid(self):
        """Every parameter combination (for exhaustive search), conditional granularity included."""
        axes = [(p.name, p.choices) for p in self.params] + ([("kind", self.kinds)] if len(self.kinds) > 1 else [])
        axes += [(f"opt.{n}", c) for n, c in self.options if len(c) > 1]
        names, choices = [n for n, _ in axes], [c for _, c in axes]
        for combo in itertools.product(*choices):
            values = dict(zip(names, combo))
            open_grans = [(s, g) for s, g in self.granularity if len(g) > 1 and self._site_used(s, values)]
            for gs in itertools.product(*[g for _, g in open_grans]):
                yield {**values, **{f"gran.{s}": g for (s, _), g in zip(open_grans, gs)}}

    def to_dict(self) -> dict[str, Any]:
        tied = [list(p.sites) for p in self.params if len(p.sites) > 1 and p.depth_range in (None, 0)]
        sites: dict[str, list[str]] = {}
        for p in self.params:
            for s in p.sites:
                sites.setdefault(s, list(p.choices))
        d: dict[str, Any] = {"description": self.description,
                             "kind": self.kinds[0] if len(self.kinds) == 1 else list(self.kinds),
                             "sites": sites}
        if tied:
            d["tie"] = tied
        d["granularity"] = {s: (g[0] if len(g) == 1 else list(g)) for s, g in self.granularity}
        if self.options:
            d["options"] = {n: list(c) for n, c in self.options}
        if self.ranges:
            d["depth"] = {"ranges": [list(r) for r in self.ranges],
                          "sites": sorted({s for p in self.params if p.depth_range is not None for s in p.sites},
                                          key=SITES.index)}
        return d


def _choices(value: Any, ctx: str) -> tuple[str, ...]:
    items = value if isinstance(value, list) else [value]
    out = []
    for c in items:
        c = "none" if c is None or c is False else c
        if c not in ("none", "norm", *NORM_KINDS):
            raise NormsearchError(f"{ctx}{unknown('choice', c, ['none', 'norm', *NORM_KINDS])}")
        if c not in out:
            out.append(c)
    if not out:
        raise NormsearchError(f"{ctx}a site needs at least one choice")
    return tuple(out)


def parse_space(d: Any, default_kind: str = "rmsnorm", source: str | None = None) -> SearchSpace:
    if not isinstance(d, Mapping):
        raise NormsearchError(f"{source or 'space'}: a search space is a mapping with keys {', '.join(_KEYS)}")
    for key in d:
        if key not in _KEYS:
            raise NormsearchError(f"{_yaml.where(d, key)}space: {unknown('key', key, _KEYS)}")
    kinds = d.get("kind", default_kind)
    kinds = tuple(kinds if isinstance(kinds, list) else [kinds])
    if not kinds:
        raise NormsearchError(f"{_yaml.where(d, 'kind')}space kind: give one norm kind or a list of them, not []")
    for k in kinds:
        if k not in NORM_KINDS:
            raise NormsearchError(f"{_yaml.where(d, 'kind')}space kind: {unknown('norm kind', k, NORM_KINDS)}")
    sites_raw = d.get("sites")
    if not isinstance(sites_raw, Mapping) or not sites_raw:
        raise NormsearchError(f"{_yaml.where(d, 'sites')}space needs `sites`: site -> list of choices")
    sites: dict[str, tuple[str, ...]] = {}
    for site, value in sites_raw.items():
        if site not in SITES:
            raise NormsearchError(f"{_yaml.where(sites_raw, site)}space sites: {unknown('site', site, SITES)}")
        sites[site] = _choices(value, _yaml.where(sites_raw, site) + f"site {site}: ")
    ties = d.get("tie") or []
    if not isinstance(ties, list) or not all(isinstance(t, list) and len(t) >= 2 for t in ties):
        raise NormsearchError(f"{_yaml.where(d, 'tie')}space tie: a list of lists of sites, e.g. [[q, k]]")
    tied_of: dict[str, tuple[str, ...]] = {}
    for group in ties:
        for s in group:
            if s not in sites:
                raise NormsearchError(f"{_yaml.where(d, 'tie')}space tie: site {s!r} is not in `sites`")
            if s in tied_of:
                raise NormsearchError(f"{_yaml.where(d, 'tie')}space tie: site {s!r} is tied twice")
            tied_of[s] = tuple(sorted(group, key=SITES.index))
        if len({sites[s] for s in group}) != 1:
            raise NormsearchError(f"{_yaml.where(d, 'tie')}space tie {group}: tied sites need the same choices")

    gran_raw = d.get("granularity") or {}
    if not isinstance(gran_raw, Mapping):
        raise NormsearchError(f"{_yaml.where(d, 'granularity')}space granularity: site -> head | full | [head, full]")
    granularity = []
    for site in HEAD_SITES:
        if site not in sites:
            continue
        g = gran_raw.get(site, "head")
        g = tuple(g if isinstance(g, list) else [g])
        for x in g:
            if x not in GRANULARITIES:
                raise NormsearchError(f"space granularity {site}: {unknown('granularity', x, GRANULARITIES)}")
        granularity.append((site, g))
    for site in gran_raw:
        if site not in HEAD_SITES:
            raise NormsearchError(f"space granularity: only q, k, v and ctx have one, not {site!r}")

    ranges: tuple[tuple[float, float], ...] = ()
    depth_sites: set[str] = set()
    if d.get("depth") is not None:
        depth, at = d["depth"], _yaml.where(d, "depth")
        if not isinstance(depth, Mapping) or set(depth) - {"ranges", "sites"} or "ranges" not in depth:
            raise NormsearchError(f"{at}space depth: {{ranges: [[0, 0.25], [0.25, 1]], sites: [...]}}")
        try:
            ranges = tuple((float(a), float(b)) for a, b in depth["ranges"])
        except (TypeError, ValueError):
            raise NormsearchError(f"{at}space depth.ranges: a list of [start, end] fractions") from None
        contiguous = all(a == prev_b for (a, _), (_, prev_b) in zip(ranges[1:], ranges))
        if not ranges or ranges[0][0] != 0 or ranges[-1][1] != 1 or not contiguous or any(a >= b for a, b in ranges):
            raise NormsearchError(f"{at}space depth.ranges must cover [0, 1] in order without gaps, "
                                  f"e.g. [[0, 0.25], [0.25, 1]]")
        depth_sites = set(depth.get("sites") or [s for s in sites if s in BLOCK_SITES])
        for s in depth_sites:
            if s not in BLOCK_SITES or s not in sites:
                raise NormsearchError(f"space depth.sites: {s!r} must be a block site listed in `sites`")

    params: list[Param] = []
    done: set[str] = set()
    for site in SITES:
        if site not in sites or site in done:
            continue
        group = tied_of.get(site, (site,))
        done.update(group)
        name = "site." + "+".join(group)
        if any(s in depth_sites for s in group):
            if not all(s in depth_sites for s in group):
                raise NormsearchError(f"space: tied sites {list(group)} must all be depth-dependent or none")
            for i in range(len(ranges)):
                params.append(Param(f"{name}@{i}", group, sites[site], i))
        else:
            params.append(Param(name, group, sites[site]))
    description = str(d.get("description") or "")
    options = _options(d.get("options"), _yaml.where(d, "options"))
    return SearchSpace(tuple(params), kinds, tuple(granularity), ranges, description, source, options)


def _residual(preset: str, depth_scale: bool) -> Residual:
    """A residual preset; with LayerNorm Scaling, without the scaled init (as its authors advise)."""
    options = dict(RESIDUAL_PRESETS[preset])
    if depth_scale:
        options["scaled_init"] = False
    return Residual.parse(options)


def _options(raw: Any, at: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """``options: {depth_scale: [off, on], residual: [plain, deepnorm], gate: [none, head]}``."""
    if raw is None:
        return ()
    if not isinstance(raw, Mapping):
        raise NormsearchError(f"{at}space options: a mapping of option -> list of choices ({', '.join(OPTIONS)})")
    out = []
    for name, value in raw.items():
        if name not in OPTIONS:
            raise NormsearchError(f"{_yaml.where(raw, name) or at}space options: {unknown('option', name, OPTIONS)}")
        items = value if isinstance(value, list) else [value]
        choices = []
        for c in items:
            if c is True or c is False or c is None:  # YAML reads on/off/true/false as booleans
                c = {True: "on", False: "off", None: "none"}[c]
            if c not in OPTIONS[name]:
                raise NormsearchError(f"{_yaml.where(raw, name) or at}space options.{name}: "
                                      f"{unknown('choice', c, OPTIONS[name])}")
            if c not in choices:
                choices.append(c)
        if not choices:
            raise NormsearchError(f"{at}space options.{name}: at least one choice")
        out.append((name, tuple(choices)))
    return tuple(sorted(out, key=lambda o: list(OPTIONS).index(o[0])))


def load_space(value: Any, base: Path | None = None, default_kind: str = "rmsnorm") -> SearchSpace:
    """A space from a recipe's ``space``: a file name (looked up beside the recipe, in the
    working directory, then in ``search_spaces/``) or an inline mapping."""
    if value is None:
        raise NormsearchError("the recipe has no `space`; name a file in search_spaces/ (e.g. space: sites.yaml)")
    if isinstance(value, str):
        candidates = [Path(value)]
        if base is not None:
            candidates.insert(0, base / value)
        candidates += [Path("search_spaces") / value, SPACES_DIR / value]
        for c in candidates:
            if c.is_file():
                return parse_space(_yaml.load(c), default_kind, str(c))
        known = sorted(p.name for p in SPACES_DIR.glob("*.yaml")) if SPACES_DIR.is_dir() else []
        raise NormsearchError(f"space file {value!r} not found; shipped spaces: {', '.join(known) or 'none'}")
    return parse_space(value, default_kind)
