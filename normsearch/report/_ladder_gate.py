"""The ladder's promotion gate and its failures by learning rate, in words and tables (issue 26): for
each found placement against each baseline, promoted or not with every reason, and per architecture
and rung the failed runs at each learning rate trained; and whether the smallest rung's learning rate
transfers to the larger ones. Built from a
:class:`~normsearch.stats.ladder.LadderStats` (its ``promotion`` and its points' ``by_lr``); nothing is
computed here."""

from __future__ import annotations

from ..stats.gate import HOLD_FACTOR
from ..stats.rung import LR_WINDOW
from ._columns import UNIT


def _md(text) -> str:
    return str(text).replace("|", "\\|")


def _slope(g) -> str:
    if g.slope is None:
        return f"- ({_md(g.slope_note)})" if g.slope_note else "-"
    ci = f" [{g.slope_ci[0]:+.4f}, {g.slope_ci[1]:+.4f}]" if g.slope_ci is not None else ""
    return f"{g.slope:+.4f}{ci}"


def _hold(g) -> str:
    if getattr(g, "hold_gap", None) is None:
        return "-"
    ci = f" [{g.hold_ci[0]:+.4f}, {g.hold_ci[1]:+.4f}]" if g.hold_ci is not None else ""
    return f"{g.hold_gap:+.4f}{ci} (N = {g.hold_size:.3g})"


def _gaps(g) -> str:
    return ", ".join(f"{r.gap:+.4f}" if r.gap is not None else "-" for r in g.rungs)


def _windows(g) -> str:
    return ", ".join(f"{r.found_failed}/{r.found_runs} v {r.base_failed}/{r.base_runs}" if r.diff is not None else "-"
                     for r in g.rungs)


def gate_lines(stats, labels: dict[str, str] | None = None, unit: str = UNIT) -> list[str]:
    """The promotion gate: one verdict per (found placement, baseline) over the whole ladder."""
    gates = getattr(stats, "promotion", None) or []
    lab = labels or {}
    name = lambda a: _md(lab.get(a, a))
    lines = ["### Promotion gate", ""]
    if not gates:
        return lines + ["No gate: the ladder names no found placement and baseline run side by side.", ""]
    w = f"{getattr(gates[0], 'window', LR_WINDOW):g}"
    lines += [f"A found placement is promoted over a baseline only when (a) it is better at every rung: the ladder's "
              f"comparison at each rung (the failure hurdle by Fisher's exact test when the failure rates at the "
              f"chosen learning rates differ, else mean loss by Welch's test), one-sided; the largest of the rungs' "
              f"p-values (an intersection-union test) must pass Holm over the {len(gates)} pairs below at "
              f"{stats.alpha:g}; (b) its failure rate over the runs within {w}x of its own chosen learning rate, "
              f"and at least at the nearest learning rate trained on each side of it, is no higher than the "
              f"baseline's over the same neighbourhood of its own, at every rung; and (c) the gain holds with "
              f"size: the per-rung gap (found - baseline, {unit}; negative: found better) regressed on log10 N "
              f"weighted by each gap's inverse variance, and the fitted line at {HOLD_FACTOR:g}x the largest rung "
              f"(the ladder's extrapolation limit) wholly a gain over its 95% interval (over the draws of the rung "
              f"means): the burden is on the found placement, so a gain whose shrinking toward zero the ladder "
              f"cannot exclude is not promoted. Rungs small to large: {', '.join(map(_md, stats.rungs))}.", "",
              f"| found | baseline | verdict | gap per rung ({unit}) | failed near its lr (found v baseline) "
              f"| gap's slope per decade [95%] | gap at {HOLD_FACTOR:g}x the largest rung [95%] | (a) Holm p |",
              "|---|---|---|---|---|---|---|---|"]
    for g in gates:
        verdict = "**promoted**" if g.promoted else "not promoted"
        p = f"{g.p_holm:.3g}" if g.p_holm is not None else "-"
        lines.append(f"| {name(g.found)} | {name(g.baseline)} | {verdict} | {_gaps(g)} | {_windows(g)} | {_slope(g)} "
                     f"| {_hold(g)} | {p} |")
    lines.append("")
    for g in gates:
        head = f"`{name(g.found)}` over `{name(g.baseline)}`"
        lines.append(f"- **{head}: promoted**: {_md(g.reason)}." if g.promoted else
                     f"- {head}: not promoted: {_md(g.reason)}.")
    lone = all(len(r.found_lrs) <= 1 and len(r.base_lrs) <= 1 for g in gates for r in g.rungs if r.diff is not None)
    if lone:
        lines += ["", f"No other learning rate trained lies within {w}x of a chosen one (the sweep's points are "
                      f"further apart): (b) compares the failures at the chosen learning rates and their nearest "
                      f"trained neighbours."]
    return lines + [""]


def _lr_key(lr: float) -> str:
    return f"{lr:.4g}"


def stability_lines(stats, labels: dict[str, str] | None = None) -> list[str]:
    """Failed runs (diverged or stalled) over runs, at each learning rate trained, per architecture and
    rung; the chosen learning rate in bold. Empty when the ladder does not know its runs by learning
    rate."""
    lab = labels or {}
    rows = [(a, p) for a, ps in stats.points.items() for p in ps if getattr(p, "by_lr", None)]
    if not rows:
        return []
    lrs = sorted({_lr_key(x.lr): x.lr for _, p in rows for x in p.by_lr}.items(), key=lambda kv: kv[1])
    lines = ["### Failures by learning rate", "",
             "Failed runs (diverged or stalled) of all runs, at each learning rate a rung trained (every variant "
             "of it together), per architecture and rung; the chosen learning rate in bold, - where none was "
             "trained. The stability a chosen learning rate hides: a failure one step away is a narrow basin.", "",
             "| architecture | rung | " + " | ".join(k for k, _ in lrs) + " |", "|---|---|" + "---|" * len(lrs)]
    for a, p in rows:
        cells = {_lr_key(x.lr): (f"**{x.n_failed}/{x.n_runs}**" if x.chosen else f"{x.n_failed}/{x.n_runs}")
                 for x in p.by_lr}
        lines.append(f"| {_md(lab.get(a, a))} | {_md(p.rung)} | " + " | ".join(cells.get(k, "-") for k, _ in lrs)
                     + " |")
    return lines + [""]


def _lr(lr) -> str:
    return "-" if lr is None else f"{lr:g}"


def _transfer_cell(c) -> str:
    if not c.trained:
        return "not trained"
    fails = f"failed {c.failed[0]}/{c.failed[1]} v {c.failed_chosen[0]}/{c.failed_chosen[1]}" if (
        c.failed[0] or c.failed_chosen[0]) else ""
    if c.diff is None:
        text = fails or "-"
    else:
        ci = f" [{c.ci[0]:+.4f}, {c.ci[1]:+.4f}]" if c.ci is not None else ""
        text = f"{c.diff:+.4f}{ci}" + (f", {fails}" if fails else "")
    return f"**{text}**" if c.significant else text


def transfer_lines(stats, labels: dict[str, str] | None = None, unit: str = UNIT) -> list[str]:
    """Per architecture, the learning rate chosen at each rung and what the smallest rung's would cost at
    each larger one (:mod:`normsearch.stats.lr_transfer`). Empty when the ladder has no check (learning
    rates transferred, not swept)."""
    checks = [t for t in getattr(stats, "lr_transfer", []) or [] if t.costs or t.lrs[0] is None]
    if not checks:
        return []
    lab = labels or {}
    larger = stats.rungs[1:]
    lines = ["### Does the learning rate transfer?", "",
             f"The learning rate each architecture chose at each rung, and what training every larger rung at the "
             f"smallest rung's choice instead would cost there: mean {unit} at the transferred learning rate minus "
             f"at the rung's own choice, with Welch's 95% interval (unadjusted, one architecture at one rung), and "
             f"the failed runs at each when either failed; in bold where the transferred learning rate is "
             f"significantly worse or fails more often. Verdict: *same* (one learning rate at every rung), *no "
             f"detectable cost* (it moved, but no rung shows a cost; not an equivalence test: the interval shows "
             f"what cost it leaves possible), *does not transfer*, or *not checked* (the smallest rung chose nothing, "
             f"or a larger rung did not train its choice).", "",
             "| architecture | chosen lr per rung | shift (decades) | "
             + " | ".join(f"cost at {_md(r)}" for r in larger) + " | verdict |",
             "|---|---|---|" + "---|" * len(larger) + "---|"]
    for t in checks:
        by = {c.rung: c for c in t.costs}
        shift = f"{t.shift_decades:+.2f}" if t.shift_decades is not None else "-"
        cells = [_transfer_cell(by[r]) if r in by else "-" for r in larger]
        lines.append(f"| {_md(lab.get(t.arch, t.arch))} | {', '.join(_lr(x) for x in t.lrs)} | {shift} | "
                     + " | ".join(cells) + f" | {t.verdict} |")
    return lines + [""]
