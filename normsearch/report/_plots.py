"""The report's plots (PNG, matplotlib with the Agg canvas; no pyplot, so no global figure state).

Every function takes ranking rows (or the numbers it draws) and returns a
:class:`matplotlib.figure.Figure` with a title, labelled axes and a legend; :func:`save` writes it.
matplotlib is imported inside the functions, so importing this module (and ``normsearch --help``)
never loads it.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ._analysis import best_runs, mean_curve, mean_diagnostic

UNIT = "bits/byte"
FOUND_STYLE = {"linestyle": "-", "linewidth": 2.0}
BASE_STYLE = {"linestyle": "--", "linewidth": 1.5}
PLOT_NAMES = ("loss_curves", "residual_rms", "grad_norm", "attention_logits", "loss_vs_lr", "search_value",
              "importance", "site_effects", "history")
#: the plots of a search's sampler and space: a stage (a fixed list of architectures retrained after
#: the search) has none of them
SEARCH_PLOTS = ("search_value", "importance", "site_effects", "history")


def searched(ranking) -> bool:
    """Whether the ranked study is a search (of a space, or of baselines alone), not one of its stages
    (named ``<study>/<stage>``, a name no recipe can take), which retrain a fixed list: no sampler to
    judge, no trial order to plot."""
    from ..records import STAGE_SEP

    return STAGE_SEP not in ranking.study


def _figure(width: float = 7.5, height: float = 4.8, ncols: int = 1):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    axes = [fig.add_subplot(1, ncols, i + 1) for i in range(ncols)]
    return fig, axes


def save(fig, path: str | Path, dpi: int = 110) -> Path:
    """Write ``fig`` as PNG and release its memory."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    fig.clear()
    return path


# --------------------------------------------------------------------------------------------------
# What the plots read from a row


def plot_rows(ranking, top: int = 3) -> list:
    """The rows worth drawing: the ``top`` best found placements and every ranked baseline."""
    ranked = ranking.ranked
    return [r for r in ranked if not r.is_baseline][:top] + [r for r in ranked if r.is_baseline]


def legend_label(row) -> str:
    return f"{row.label} (baseline)" if row.is_baseline else row.label


def _style(rows) -> dict[str, dict[str, Any]]:
    """One colour per row (found placements first), solid for found ones, dashed for baselines."""
    out = {}
    for i, r in enumerate(rows):
        out[r.arch_id] = {"color": f"C{i % 10}", **(BASE_STYLE if r.is_baseline else FOUND_STYLE)}
    return out


def _integer_x(ax):
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _finish(ax, title: str, xlabel: str, ylabel: str, **legend):
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8, **legend)


# --------------------------------------------------------------------------------------------------
# The plots


def loss_curves(rows) -> Any:
    """Validation loss against training step: the best found placements against the baselines."""
    fig, (ax,) = _figure()
    style = _style(rows)
    tops = []
    for r in rows:
        steps, values = mean_curve(best_runs(r))
        if len(steps) > 1 and steps[0] == 0:  # the loss at initialisation would flatten the rest
            steps, values = steps[1:], values[1:]
        if steps:
            ax.plot(steps, values, marker="o", markersize=3, label=legend_label(r), **style[r.arch_id])
            tops.append(values[0])
    if not tops:
        return None
    ax.set_ylim(top=max(tops) + 0.02 * abs(max(tops)))
    _finish(ax, "Validation loss during training\n(mean over seeds at each architecture's best learning rate)",
            "training step", f"validation loss ({UNIT})")
    return fig


def _by_layer(rows, key: str, title: str, xlabel: str, ylabel: str) -> Any:
    """A per-layer diagnostic at initialisation (left) and at the end of training (right)."""
    data = {at: [(r, mean_diagnostic(best_runs(r), key, at)) for r in rows] for at in ("first", "last")}
    if not any(g for pairs in data.values() for _, g in pairs):
        return None
    fig, axes = _figure(width=11, ncols=2)
    style = _style(rows)
    for ax, at, when in zip(axes, ("first", "last"), ("at initialisation", "at the end of training")):
        for r, g in data[at]:
            if g:
                ax.plot(range(len(g)), g, marker="o", markersize=4, label=legend_label(r), **style[r.arch_id])
        ax.set_yscale("log")
        _integer_x(ax)
        _finish(ax, title.format(when=when), xlabel, ylabel)
    return fig


def residual_rms(rows) -> Any:
    """Residual-stream RMS at every depth, at initialisation and at the end of training (the Peri-LN
    paper's picture)."""
    return _by_layer(rows, "resid_rms", "Residual-stream RMS by depth {when}\n(mean over seeds; cf. Kim et al. 2025)",
                     "position in the stream (0: after the embedding, i: after block i)",
                     "RMS of the residual stream (log)")


def grad_norm(rows) -> Any:
    """Gradient norm of each layer's FFN weights, at initialisation and at the end of training."""
    return _by_layer(rows, "grad_norm", "Gradient norm by layer {when}\n(FFN weights, mean over seeds; "
                     "cf. Xiong et al. 2020)", "layer", "gradient norm (log)")


def attention_logits(rows) -> Any:
    """The largest attention logit (over layers) at every evaluation during training (Wortsman et al.
    2023: it grows without bound at high learning rates unless q and k are normalised)."""
    fig, (ax,) = _figure()
    style = _style(rows)
    drawn = False
    for r in rows:
        by_step: dict[int, list[float]] = {}
        for run in best_runs(r):
            for d in run.diagnostics:
                if d.get("max_logit") and all(math.isfinite(x) for x in d["max_logit"]):
                    by_step.setdefault(int(d["step"]), []).append(max(d["max_logit"]))
        if len(by_step) > 1:
            steps = sorted(by_step)
            ax.plot(steps, [sum(by_step[s]) / len(by_step[s]) for s in steps], marker="o", markersize=3,
                    label=legend_label(r), **style[r.arch_id])
            drawn = True
    if not drawn:
        return None
    ax.set_yscale("log")
    _finish(ax, "Largest attention logit during training\n(max over layers, mean over seeds at the best learning "
            "rate; cf. Wortsman et al. 2023)", "training step", "largest attention logit (log)")
    return fig


def loss_vs_lr(rows) -> Any:
    """Side by side, per architecture: the mean loss over the successful runs against the learning
    rate (the basin, shaded where one was fitted), and the failure rate (diverged or stalled) there."""
    from ..grid import variant_tag

    rows = [r for r in rows if r.lr_points]
    if not rows:
        return None
    fig, (ax, af) = _figure(width=11.0, ncols=2)
    # the chosen cell's variant of the grid only (init, warmup): one curve per architecture
    chosen = {r.arch_id: sorted((p for p in r.lr_points if p.variant == variant_tag(r.variant)), key=lambda p: p.lr)
              for r in rows}
    style = _style(rows)
    for r in rows:
        pts = [p for p in chosen[r.arch_id] if p.mean is not None]
        if pts:
            ax.plot([p.lr for p in pts], [p.mean for p in pts], marker="o", markersize=5, label=legend_label(r),
                    **style[r.arch_id])
        if r.lr_basin is not None:
            ax.axvspan(r.lr_basin_low, r.lr_basin_high, color=style[r.arch_id]["color"], alpha=0.08)
        af.plot([p.lr for p in chosen[r.arch_id]],
                [p.n_failed / p.n_runs if p.n_runs else 0.0 for p in chosen[r.arch_id]],
                marker="o", markersize=5, label=legend_label(r), **style[r.arch_id])
    n_lr = len({p.lr for r in rows for p in r.lr_points})
    sub = "successful runs only; shaded: the basin" if n_lr > 1 else "one learning rate only: no sweep"
    for a in (ax, af):
        a.set_xscale("log")
    af.set_ylim(-0.05, 1.05)
    _finish(ax, f"Final validation loss against learning rate\n({sub})", "peak learning rate (log)",
            f"mean final validation loss ({UNIT})")
    _finish(af, "Failure rate against learning rate\n(diverged or stalled runs)", "peak learning rate (log)",
            "fraction of runs that failed")
    return fig


def search_value(sv) -> Any:
    """Did the search help: every proposal's score by proposal number (start-up, model-based, controls
    where they came, failures on the top edge), the best so far, and in the title the trend and the test
    against uniform draws (:mod:`normsearch.stats.search_value`)."""
    if sv is None:
        return None
    import numpy as np

    from ..ranking import format_p

    scores = np.asarray(sv.scores, float)
    controls = np.asarray(sv.control_scores, float)
    x = np.asarray(sv.orders, float)
    xc = np.asarray(sv.control_at, float) - 0.5 if len(sv.control_at) == len(controls) else np.full(len(controls), -1.0)
    finite = np.concatenate([scores[np.isfinite(scores)], controls[np.isfinite(controls)]])
    if finite.size == 0:
        return None
    top = finite.max() + 0.08 * max(finite.max() - finite.min(), 1e-3)  # where failures are drawn
    fig, (ax,) = _figure()
    best = np.minimum.accumulate(scores) if scores.size else scores
    ax.step(x, np.where(np.isfinite(best), best, np.nan), where="post", color="C0", alpha=0.6,
            label="the sampler's best so far")
    kinds = np.asarray(sv.kinds)
    for kind, style in (("startup", dict(facecolors="none", edgecolors="C7", label="start-up proposal (uniform draw)")),
                        ("model", dict(color="C0", label="model-based proposal"))):
        sel = kinds == kind if scores.size else np.zeros(0, bool)
        if sel.any():
            ax.scatter(x[sel], np.where(np.isfinite(scores[sel]), scores[sel], top), zorder=3, **style)
    if controls.size:
        ax.scatter(xc, np.where(np.isfinite(controls), controls, top), marker="D", color="C1", zorder=3,
                   label="control proposal (uniform draw)")
        ax.axhline(float(np.median(controls)), color="C1", linestyle="--", linewidth=1, label="median of the controls")
    if not np.all(np.isfinite(scores)) or not np.all(np.isfinite(controls)):
        ax.axhline(top, color="C3", linestyle=":", linewidth=1, label="failed or pruned (ranked worst)")
    t, h = sv.trend, sv.headline
    trend = (f"trend: Spearman ρ {t.rho:+.2f}, {format_p(t.p)}" if t is not None and t.rho is not None
             else "trend: too few proposals")
    test = (f"model-based vs {'controls' if h.against == 'control' else 'start-up'}: one-sided Mann-Whitney "
            f"{format_p(h.p)}" if h is not None else "no test against uniform draws (too few)")
    _integer_x(ax)
    _finish(ax, f"Did the search help? (lower is better)\n{trend}; {test}", "proposal number",
            f"architecture's score ({UNIT})")
    return fig


def importance(importances: dict[str, float], evaluator: str) -> Any:
    """Optuna's parameter importance of the search-space choices, as horizontal bars."""
    if not importances:
        return None
    fig, (ax,) = _figure(height=max(3.0, 0.45 * len(importances) + 1.8))
    names = list(importances)[::-1]
    ax.barh(names, [importances[n] for n in names], color="C0", label=evaluator)
    ax.set_xlim(0, max(1.0, max(importances.values()) * 1.05))
    _finish(ax, "Which site choices matter: Optuna parameter importance", "importance (normalised to sum to 1)",
            "search-space parameter", loc="lower right")
    return fig


def site_effects(effects) -> Any:
    """Per site, the mean score of architectures with a norm there (in every layer) minus without."""
    effects = [e for e in effects if e.diff is not None]
    if not effects:
        return None
    fig, (ax,) = _figure(height=max(3.0, 0.45 * len(effects) + 1.8))
    names = [f"{e.site} ({e.n_with} vs {e.n_without})" for e in effects][::-1]
    diffs = [e.diff for e in effects][::-1]
    colors = ["C2" if d < 0 else "C3" for d in diffs]
    ax.barh(names, diffs, color=colors)
    ax.axvline(0.0, color="black", linewidth=0.8)
    from matplotlib.patches import Patch

    ax.legend(handles=[Patch(color="C2", label="norm there: lower loss"),
                       Patch(color="C3", label="norm there: higher loss")], fontsize=8)
    ax.set_title("Mean score with a norm at the site minus without\n(raw means over the architectures evaluated; "
                 "not controlled for the other sites)", fontsize=10)
    ax.set_xlabel(f"difference of mean scores ({UNIT}; negative: better with the norm)")
    ax.set_ylabel("site (architectures with vs without)")
    ax.grid(True, alpha=0.3)
    return fig


def history(points: list) -> Any:
    """Optimisation history: each finished trial's score by trial number, the best found so far, and
    the best baseline."""
    pts = [p for p in points if p.value is not None and math.isfinite(p.value)]
    if not pts:
        return None
    fig, (ax,) = _figure()
    found = [p for p in pts if not p.is_baseline and not p.reused]
    repeats = [p for p in pts if not p.is_baseline and p.reused]
    base = [p for p in pts if p.is_baseline]
    if found:
        ax.scatter([p.number for p in found], [p.value for p in found], color="C0", zorder=3,
                   label="searched placement (one trial)")
    if repeats:
        ax.scatter([p.number for p in repeats], [p.value for p in repeats], facecolors="none",
                   edgecolors="C0", zorder=3, label="repeat of an evaluated network (result reused)")
    if found or repeats:
        best, xs, ys = math.inf, [], []
        for p in sorted(found + repeats, key=lambda p: p.number):
            best = min(best, p.value)
            xs.append(p.number)
            ys.append(best)
        ax.step(xs, ys, where="post", color="C0", alpha=0.7, label="best searched so far")
    if base:
        ax.scatter([p.number for p in base], [p.value for p in base], color="C1", marker="s", zorder=3,
                   label="baseline")
        b = min(base, key=lambda p: p.value)
        ax.axhline(b.value, color="C1", linestyle="--", linewidth=1, label=f"best baseline ({b.label})")
    _integer_x(ax)
    _finish(ax, "Optimisation history (lower is better)", "trial number", f"score ({UNIT})")
    return fig


def all_figures(ranking, effects=(), importances: dict[str, float] | None = None, evaluator: str = "",
                top: int = 3) -> dict[str, Any]:
    """Every plot of the report that has data: file stem -> Figure."""
    rows = plot_rows(ranking, top)
    draw = {
        "loss_curves": lambda: loss_curves(rows),
        "residual_rms": lambda: residual_rms(rows),
        "grad_norm": lambda: grad_norm(rows),
        "attention_logits": lambda: attention_logits(rows),
        "loss_vs_lr": lambda: loss_vs_lr(rows),
        "importance": lambda: importance(importances or {}, evaluator),
        "site_effects": lambda: site_effects(effects),
        "history": lambda: history(ranking.history),
        "search_value": lambda: search_value(ranking.judgement.search),
    }
    names = [k for k in draw if searched(ranking) or k not in SEARCH_PLOTS]
    figs = {k: draw[k]() for k in names}
    return {k: v for k, v in figs.items() if v is not None}
