"""The design of an ablation between two architectures (``normsearch ablate``): where A and B differ,
A's placement with some of those sites taken from B's, and the combinations of a factorial (or of
leave-one-out) with their labels. Torch-free; no storage here.

A site differs when its norm differs at any layer (or, for ``embed`` and ``final``, at all); the block
options ``residual``, ``gate``, ``x0``, ``sinks`` and ``gain_decay`` are factors too when A and B differ in
them. A combination takes each factor's site at every layer from A or from B as resolved at the study's
depth, so per-layer overrides carry over; the mixed network is written back as a placement (the most common block, the
others as per-layer overrides) whose ``arch_id`` is A's when nothing is taken from B and B's when
everything is.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from ..spec import BLOCK_SITES, SITE_ABBREV, SITES, Placement
from ..stats.ablate import FULL, HALF, design_points

OPTIONS = ("residual", "gate", "x0", "sinks", "gain_decay")  # block options: factors like sites where A and B differ
FACTORS = (*SITES, *OPTIONS)
INIT = "init"
ABBREV = {**SITE_ABBREV, "residual": "res", "gate": "gate", "x0": "x0", "sinks": "sinks", "gain_decay": "gd",
          INIT: "init"}


@dataclass
class Side:
    """A or B: its label, placement and where its chosen cell came from (the study's ranking row)."""

    label: str
    placement: Placement
    arch_id: str
    lr: float | None = None  # the chosen learning rate (None: the study never trained it, or nothing succeeded)
    variant: dict = field(default_factory=dict)  # the chosen cell's variant (init, warmup)
    init: str | None = None  # the chosen init (the variant's, else the recipe's model.init)
    wall_time: float = 0.0  # the study's runs of it: seconds in all
    n_runs: int = 0


def differing(a: Placement, b: Placement, n_layers: int) -> list[str]:
    """The factors where ``a`` and ``b`` differ at ``n_layers`` layers, in data-flow order."""
    ra, rb = a.resolve(n_layers), b.resolve(n_layers)
    out = []
    for s in SITES:
        if s in ("embed", "final"):
            same = getattr(ra, s) == getattr(rb, s)
        else:
            same = all(dict(x).get(s) == dict(y).get(s) for x, y in zip(ra.blocks, rb.blocks))
        if not same:
            out.append(s)
    out += [o for o in OPTIONS if getattr(ra, o) != getattr(rb, o)]
    return out


def mix(a: Placement, b: Placement, from_b, n_layers: int) -> Placement:
    """``a`` with the factors ``from_b`` (sites, block options) taken from ``b``, layer by layer."""
    from_b = set(from_b)
    ra, rb = a.resolve(n_layers), b.resolve(n_layers)
    blocks = []
    for x, y in zip(ra.blocks, rb.blocks):
        bx, by = dict(x), dict(y)
        pick = {s: (by if s in from_b else bx).get(s) for s in BLOCK_SITES}
        blocks.append(tuple((s, v) for s, v in pick.items() if v is not None))
    base = Counter(blocks).most_common(1)[0][0]
    overrides = [{"layers": {"index": [i for i, x in enumerate(blocks) if x == blk]},
                  "block": {s: spec.to_dict() for s, spec in blk}}
                 for blk in dict.fromkeys(blocks) if blk != base]
    side = lambda f: b if f in from_b else a  # noqa: E731
    return Placement(block=dict(base), embed=(rb if "embed" in from_b else ra).embed,
                     final=(rb if "final" in from_b else ra).final, overrides=tuple(overrides),
                     residual=side("residual").residual, gate=side("gate").gate, x0=side("x0").x0,
                     sinks=side("sinks").sinks, gain_decay=side("gain_decay").gain_decay)


def fraction_of(design: str, k: int) -> str:
    """``auto``: the full design up to 5 factors, the half fraction (resolution k >= VI) above."""
    if design == "auto":
        return FULL if k <= 5 else HALF
    return design


def label_of(a: Side, b: Side, from_b: list[str], placement_id: str, init: str | None) -> str:
    """A's label, B's, or A's with the short names of the factors taken from B (``t6+ai+fin``); with an
    init factor, ``@<init>`` where the combination's init is not its base's own."""
    if placement_id == a.arch_id:
        base, own = a.label, a.init
    elif placement_id == b.arch_id:
        base, own = b.label, b.init
    else:
        base, own = a.label + "".join(f"+{ABBREV[f]}" for f in from_b if f != INIT), a.init
    return base + (f"@{init}" if init is not None and init != own else "")


def _combo(a: Side, b: Side, label: str, placement: Placement, init: str | None, n_layers: int, **more) -> dict:
    arch_id = placement.arch_id(n_layers)
    name = a.placement.name if arch_id == a.arch_id else b.placement.name if arch_id == b.arch_id else None
    variant = dict(a.variant)
    if init is not None:
        variant["init"] = init
    return {"label": label, **more, "placement": placement.with_name(name).to_dict(), "arch_id": arch_id,
            "init": init, "variant": variant, "sites": placement.resolve(n_layers).describe()}


def combinations(a: Side, b: Side, factors: list[str], fraction: str, n_layers: int,
                 inits: list[str] | None = None) -> list[dict]:
    """The factorial: one dict per combination, A's corner first: its label, the factors at B's level
    (``from_b``), ``codes`` (-1 A, +1 B per factor), placement (dict), arch_id, init, variant and
    ``in_design`` (False for a corner trained beside a half fraction that lacks it). ``inits``: the init
    factor's levels [A's, B's] (its factor is ``init``, last in ``factors``)."""
    k = len(factors)
    points = design_points(k, fraction)
    inside = set(points)
    for corner in (tuple(-1 for _ in factors), tuple(1 for _ in factors)):
        if corner not in inside:  # a half fraction of an odd number of factors lacks A's corner
            points.insert(0, corner)
    out = []
    for p in points:
        from_b = [f for f, c in zip(factors, p) if c > 0]
        placement = mix(a.placement, b.placement, [f for f in from_b if f != INIT], n_layers)
        init = None if inits is None else inits[1 if INIT in from_b else 0]
        label = label_of(a, b, from_b, placement.arch_id(n_layers), init)
        out.append(_combo(a, b, label, placement, init, n_layers, from_b=from_b, codes=list(p),
                          in_design=p in inside))
    return out


def changes(a: Side, b: Side, n_layers: int, sites: list[str] | None = None) -> list[tuple[str, str]]:
    """Leave-one-out's single changes of A, in data-flow order: ``(site, "from_b")`` where A and B differ
    (a norm of A's removed, an empty site filled, or a norm replaced by B's), ``(site, "remove")`` for each
    norm of A's that B has too; only the ``sites`` named, when given."""
    differ = differing(a.placement, b.placement, n_layers)
    present = a.placement.resolve(n_layers).present_sites()
    out = []
    for f in FACTORS:
        if sites is not None and f not in sites:
            continue
        if f in differ:
            out.append((f, "from_b"))
        elif f in present:
            out.append((f, "remove"))
    return out


def single_changes(a: Side, b: Side, n_layers: int, sites: list[str] | None = None,
                   inits: list[str] | None = None) -> list[dict]:
    """Leave-one-out: A, A with each single change (:func:`changes`; with ``inits``, B's init too), and B
    (trained for the gap, not compared): one dict per combination, as :func:`combinations` gives."""
    ra, rb = a.placement.resolve(n_layers), b.placement.resolve(n_layers)
    p = a.placement
    empty = Placement(residual=p.residual, gate=p.gate, x0=p.x0, sinks=p.sinks, gain_decay=p.gain_decay)
    a_init = None if inits is None else inits[0]
    out = [_combo(a, b, a.label, a.placement, a_init, n_layers, change=None, in_design=True)]
    for f, how in changes(a, b, n_layers, sites):
        had, has = f in ra.present_sites(), f in rb.present_sites()
        if f in OPTIONS:
            mark, what = "+", f"{b.label}'s {f}"
        elif how == "remove" or (had and not has):
            mark, what = "-", f"without {f}"
        else:
            mark, what = ("+", f"{b.label}'s {f} added") if not had else ("~", f"{b.label}'s {f} instead")
        placement = mix(a.placement, b.placement if how == "from_b" else empty, [f], n_layers)
        out.append(_combo(a, b, f"{a.label}{mark}{ABBREV[f]}", placement, a_init, n_layers, change=what,
                          in_design=True))
    if inits is not None:
        out.append(_combo(a, b, f"{a.label}@{inits[1]}", a.placement, inits[1], n_layers, change=f"init {inits[1]}",
                          in_design=True))
    out.append(_combo(a, b, b.label if inits is None or inits[1] == b.init else f"{b.label}@{inits[1]}",
                      b.placement, None if inits is None else inits[1], n_layers, change=None, in_design=False))
    return out


def defining_relation(factors: list[str], fraction: str) -> str | None:
    """``I = +ai*k*fin`` for the half fraction, None for the full design."""
    return None if fraction != HALF else "I = +" + "*".join(ABBREV.get(f, f) for f in factors)
