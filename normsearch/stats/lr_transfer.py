"""Does the learning rate chosen at a ladder's smallest rung carry to the larger ones? (issue 26)

muP promises that the best learning rate stays put as the width grows; under standard parametrisation
it moves (``results/mup``). A ladder that sweeps at every rung can check either claim for its own
architectures, at no extra training: for each architecture, the learning rate chosen at the first
rung (the one a transfer would use) is looked up among the runs of every larger rung and compared
with that rung's own choice. The cost of transferring at a rung is the mean loss at the transferred
learning rate minus the mean at the rung's chosen one (Welch's interval, unadjusted: it describes one
architecture at one rung and decides nothing else), or its failures there. Pure functions over
:class:`~normsearch.stats.rung.Rung` s.

Verdicts, per architecture over the whole ladder:

- ``same``: the same learning rate chosen at every rung;
- ``no detectable cost``: it moved, but at no larger rung is the transferred learning rate
  significantly worse (95% interval wholly above 0) or failing more often. Not an equivalence test: with
  few seeds a real cost can hide in the interval, which the report prints;
- ``does not transfer``: at some rung the transferred learning rate is significantly worse or fails
  more often than the rung's choice;
- ``not checked``: the first rung chose nothing (every run failed), or a larger rung did not train the
  transferred learning rate (its sweep moved away from it), so the cost there is unknown.

Rules: ``docs/statistics.md`` (section "Across model sizes").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from .inference import compare
from .outcomes import LrCell
from .rung import Rung

VERDICTS = ("same", "no detectable cost", "does not transfer", "not checked")


@dataclass
class TransferCost:
    """At one larger rung: the transferred learning rate's runs against the rung's chosen one's."""

    rung: str
    lr: float | None  # the rung's own choice (None: nothing succeeded there)
    trained: bool  # the transferred learning rate was trained at this rung
    diff: float | None = None  # mean loss at the transferred lr - at the chosen (0 when they are one)
    ci: tuple[float, float] | None = None  # Welch 95%, unadjusted; None with fewer than 2 runs a side
    failed: tuple[int, int] = (0, 0)  # (failed, runs) at the transferred learning rate
    failed_chosen: tuple[int, int] = (0, 0)  # (failed, runs) at the rung's chosen one
    significant: bool = False  # worse: interval wholly above 0, or a higher failure rate


@dataclass
class LrTransfer:
    """One architecture: its chosen learning rate at every rung and what the first rung's would cost."""

    arch: str
    rungs: list[str]
    lrs: list[float | None]  # the chosen learning rate at each rung (None: not run there, or nothing succeeded)
    shift_decades: float | None  # log10(last chosen / first chosen)
    costs: list[TransferCost] = field(default_factory=list)  # at each larger rung where it ran
    verdict: str = "not checked"


def _cell(cells: Sequence[LrCell], lr: float, variant: str) -> LrCell | None:
    return next((c for c in cells if c.variant == variant and math.isclose(c.lr, lr, rel_tol=1e-6)), None)


def _rate(k: int, n: int) -> float:
    return k / n if n else 0.0


def _cost(rung: Rung, arch: str, lr: float, variant: str) -> TransferCost:
    ra = rung.archs[arch]
    chosen = _cell(ra.cells, ra.lr, ra.variant) if ra.lr is not None else None
    at = _cell(ra.cells, lr, variant)
    out = TransferCost(rung.name, None if ra.lr is None else float(ra.lr), at is not None)
    if at is None:
        return out
    out.failed = (at.n_failed, at.n_runs)
    if chosen is None:  # nothing succeeded at this rung: the transferred lr is no worse than the rest
        return out
    out.failed_chosen = (chosen.n_failed, chosen.n_runs)
    worse_failing = _rate(at.n_failed, at.n_runs) > _rate(chosen.n_failed, chosen.n_runs) or not at.n_ok
    if at is chosen:
        out.diff = 0.0
    elif at.n_ok:
        c = compare({"at": at.losses, "chosen": chosen.losses}, "at", "chosen")
        out.diff = c.diff
        out.ci = (c.ci_low, c.ci_high) if c.ci_low is not None else None
    out.significant = bool(worse_failing or (out.ci is not None and out.ci[0] > 0))
    return out


def lr_transfer(rungs: Sequence[Rung]) -> list[LrTransfer]:
    """Per architecture run at the first rung (in its order of appearance there), the transfer check
    over the rungs ordered small to large (see the module's verdicts)."""
    if not rungs:
        return []
    first, out = rungs[0], []
    names = [r.name for r in rungs]
    for arch, ra0 in first.archs.items():
        lrs = [None if arch not in r.archs or r.archs[arch].lr is None else float(r.archs[arch].lr) for r in rungs]
        ran = [lr for lr in lrs if lr is not None]
        t = LrTransfer(arch, names, lrs, math.log10(ran[-1] / ran[0]) if lrs[0] is not None and len(ran) > 1 else None)
        if ra0.lr is None:
            out.append(t)
            continue
        t.costs = [_cost(r, arch, float(ra0.lr), ra0.variant) for r in rungs[1:] if arch in r.archs]
        if any(c.significant for c in t.costs):  # a cost where it was trained decides, whatever is unknown elsewhere
            t.verdict = "does not transfer"
        elif not t.costs or any(not c.trained for c in t.costs):
            t.verdict = "not checked"
        elif all(c.lr is not None and math.isclose(c.lr, ra0.lr, rel_tol=1e-6) for c in t.costs):
            t.verdict = "same"
        else:
            t.verdict = "no detectable cost"
        out.append(t)
    return out
