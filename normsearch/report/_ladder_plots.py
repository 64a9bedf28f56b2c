"""The ladder's plots (issues 17 and 26): loss against model size per placement, with the fitted power
laws, and the failure rate per rung (``ladder.png``); the failure rate by learning rate and rung per
placement (``ladder_failures.png``). matplotlib with the Agg canvas, imported inside the function (as in
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
            tested = getattr(fit, "extrapolable", True)  # a fit that fails (or lacks) its lack-of-fit test: dotted
            ax.plot(grid, fit.predict(grid), color=color, linestyle="-" if tested else ":", linewidth=1.2)
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
    _finish(ax, "Final validation loss against model size\n(mean over successful runs, 95% CI; "
            "lines: L = E + A N^-alpha,\n"
            "dotted: fails or lacks its lack-of-fit test; dashed: extrapolated)", f"{unit} N (log)",
            f"final validation loss ({UNIT})")
    _finish(af, "Failed runs (diverged or stalled) per rung\nfilled: every run of the rung, all lrs (Wilson 95% CI);\n"
            "hollow: at the chosen lr", f"{unit} N (log)", "fraction of runs that failed")
    return fig


def failures_plot(stats, labels: dict[str, str] | None = None, baselines=()) -> Any:
    """``ladder_failures.png``: per architecture (one panel each), the share of failed runs (diverged or
    stalled) at each learning rate trained, one line per rung (small to large: light to dark, nudged
    apart along x so their intervals do not hide each other), with Wilson 95% intervals; the chosen
    learning rate ringed. None when the ladder does not know its runs by learning rate."""
    import math

    from matplotlib import colormaps
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import NullFormatter

    labels = labels or {}
    archs = [a for a, ps in stats.points.items() if any(getattr(p, "by_lr", None) for p in ps)]
    if not archs:
        return None
    ncols = min(3, len(archs))
    nrows = math.ceil(len(archs) / ncols)
    fig = Figure(figsize=(4.2 * ncols, 3.3 * nrows + 0.4), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False, sharex=True, sharey=True)
    n = len(stats.rungs)
    cmap = colormaps["viridis"]
    where = {r: i for i, r in enumerate(stats.rungs)}
    for k, a in enumerate(archs):
        ax = axes[k // ncols][k % ncols]
        for p in stats.points[a]:
            xs = getattr(p, "by_lr", None)
            if not xs:
                continue
            i = where.get(p.rung, 0)
            color = cmap(0.8 - 0.7 * i / max(n - 1, 1))
            nudge = 10 ** (0.025 * (i - (n - 1) / 2))
            rates = [x.failure_rate for x in xs]
            err = [[x.failure_rate - x.failure_ci[0] for x in xs], [x.failure_ci[1] - x.failure_rate for x in xs]]
            ax.errorbar([x.lr * nudge for x in xs], rates, yerr=err, color=color, marker="o", markersize=4, capsize=2,
                        elinewidth=0.7, label=p.rung)
            chosen = [x for x in xs if x.chosen]
            ax.plot([x.lr * nudge for x in chosen], [x.failure_rate for x in chosen], linestyle="none", marker="o",
                    markersize=11, markerfacecolor="none", markeredgecolor=color)
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_ylim(-0.05, 1.05)
        title = labels.get(a, a) + (" (baseline)" if a in baselines else "")
        _finish(ax, title, "learning rate (log)", "fraction of runs that failed" if k % ncols == 0 else "")
    for k in range(len(archs), nrows * ncols):
        axes[k // ncols][k % ncols].set_visible(False)
    fig.suptitle("Failed runs (diverged or stalled) by learning rate and rung (Wilson 95% CI; ringed: the chosen lr)",
                 fontsize=10)
    return fig
