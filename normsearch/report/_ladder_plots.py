"""The ladder's plot (issue 17): loss against model size per placement, with the fitted power laws, and
the failure rate per rung. matplotlib with the Agg canvas, imported inside the function (as in
:mod:`._plots`), so importing this module never loads it."""

from __future__ import annotations

from typing import Any

from ._plots import UNIT, _figure, _finish


def ladder_plot(stats, labels: dict[str, str] | None = None, baselines=()) -> Any:
    """Left: the mean final loss over successful runs against N (log x) per architecture, with 95%
    intervals over seeds, the fitted power law solid over the rungs and dashed out to the target size;
    right: the failure rate (diverged or stalled) per rung over every run the rung trained, at every
    learning rate (filled, with its Wilson interval), and at the chosen learning rate alone (hollow,
    what the hurdle ranks by). A sweep's failures at learning rates that were not chosen are failures
    all the same; plotting only the chosen one's would hide them. ``stats``: a
    :class:`~normsearch.stats.ladder.LadderStats`; ``labels``: arch -> legend label; ``baselines``:
    the architectures to mark as baselines. None when no rung has a size."""
    import numpy as np

    labels = labels or {}
    pts = {a: [p for p in ps if p.size is not None] for a, ps in stats.points.items()}
    pts = {a: ps for a, ps in pts.items() if ps}
    if not pts:
        return None
    fig, (ax, af) = _figure(width=11.0, ncols=2)
    target = stats.extrapolation.target if stats.extrapolation is not None else None
    for i, (a, ps) in enumerate(pts.items()):
        color = f"C{i % 10}"
        label = labels.get(a, a) + (" (baseline)" if a in baselines else "")
        marker = "s" if a in baselines else "o"
        ok = [p for p in ps if p.mean is not None]
        if ok:
            lo = [p.mean - p.ci_low if p.ci_low is not None else 0.0 for p in ok]
            hi = [p.ci_high - p.mean if p.ci_high is not None else 0.0 for p in ok]
            ax.errorbar([p.size for p in ok], [p.mean for p in ok], yerr=[lo, hi], color=color, marker=marker,
                        markersize=5, linestyle="none", capsize=3, label=label)
        fit = stats.fits.get(a)
        if fit is not None and fit.ok:
            n_lo, n_hi = min(fit.sizes), max(fit.sizes)
            grid = np.geomspace(n_lo, n_hi, 100)
            ax.plot(grid, fit.predict(grid), color=color, linestyle="-", linewidth=1.2)
            if target is not None and target != n_hi and a not in stats.extrapolation.left_out:
                ext = np.geomspace(n_hi, target, 100)
                ax.plot(ext, fit.predict(ext), color=color, linestyle="--", linewidth=1.2)
        err = [[p.failure_rate_all - p.failure_ci_all[0] for p in ps],
               [p.failure_ci_all[1] - p.failure_rate_all for p in ps]]
        af.errorbar([p.size for p in ps], [p.failure_rate_all for p in ps], yerr=err,
                    color=color, marker=marker, markersize=5, capsize=3, label=label, ecolor=color, elinewidth=0.8,
                    alpha=0.8)
        af.plot([p.size for p in ps], [p.failure_rate for p in ps], color=color, marker=marker, markersize=8,
                markerfacecolor="none", linestyle="none")
    if target is not None:
        ax.axvline(target, color="black", linewidth=0.8, linestyle=":", label=f"N* = {target:.3g}")
    for a in (ax, af):
        a.set_xscale("log")
    af.set_ylim(-0.05, 1.05)
    unit = stats.size_unit
    _finish(ax, "Final validation loss against model size\n(mean over successful runs, 95% CI;\n"
            "lines: L = E + A N^-alpha, dashed: extrapolated)", f"{unit} N (log)", f"final validation loss ({UNIT})")
    _finish(af, "Failed runs (diverged or stalled) per rung\nfilled: every run of the rung, all lrs (Wilson 95% CI);\n"
            "hollow: at the chosen lr", f"{unit} N (log)", "fraction of runs that failed")
    return fig
