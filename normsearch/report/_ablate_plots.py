"""The ablation's plots (``normsearch ablate``): the main effects and two-way interactions with their 95%
intervals (``ablate_effects.png``), and the interactions as a matrix, the main effects on its diagonal
(``ablate_interactions.png``). matplotlib with the Agg canvas, imported inside the functions (as in
:mod:`._plots`), so importing this module never loads it."""

from __future__ import annotations

from typing import Any

from ._plots import UNIT, _figure


def effects_plot(data: dict) -> Any:
    """Each effect (B's level minus A's) with its 95% interval, significant ones (Holm) filled; the A-B
    gap as a dotted line. None when no effect has an estimate."""
    effects = [e for e in data["effects"] + data["interactions"] if e["estimate"] is not None]
    if not effects:
        return None
    fig, (ax,) = _figure(width=7.5, height=max(3.0, 0.32 * len(effects) + 1.5))
    ys = list(range(len(effects)))[::-1]
    for y, e in zip(ys, effects):
        lo = e["estimate"] - e["ci_low"] if e["ci_low"] is not None else 0.0
        hi = e["ci_high"] - e["estimate"] if e["ci_high"] is not None else 0.0
        color = "C0" if len(e["factors"]) == 1 else "C1"
        ax.errorbar([e["estimate"]], [y], xerr=[[lo], [hi]], color=color, marker="o", capsize=3,
                    markerfacecolor=color if e["significant"] else "white", linestyle="none")
    ax.axvline(0.0, color="black", linewidth=0.8)
    gap = (data.get("gap") or {}).get("estimate")
    if gap is not None:
        ax.axvline(gap, color="grey", linewidth=0.8, linestyle=":", label=f"gap B - A = {gap:+.3f}")
        ax.legend(loc="best", fontsize=8)
    ax.set_yticks(ys)
    ax.set_yticklabels([e["name"] for e in effects], fontsize=8)
    a, b = data["between"]["a"]["label"], data["between"]["b"]["label"]
    ax.set_xlabel(f"effect: B's level minus A's ({UNIT}); filled: significant under Holm")
    ax.set_title(f"{b} vs {a}: main effects (blue) and interactions (orange), 95% intervals", fontsize=10)
    return fig


def interactions_plot(data: dict) -> Any:
    """The two-way interactions as a symmetric matrix (the main effects on the diagonal), each cell's
    estimate written in it, '*' where significant under Holm. None without interactions."""
    import numpy as np

    factors = data["factors"]
    if len(factors) < 2 or not data["interactions"]:
        return None
    k = len(factors)
    m = np.full((k, k), np.nan)
    star = np.zeros((k, k), bool)
    index = {f: i for i, f in enumerate(factors)}
    for e in data["effects"] + data["interactions"]:
        if e["estimate"] is None:
            continue
        i = index[e["factors"][0]]
        j = index[e["factors"][-1]]
        m[i, j] = m[j, i] = e["estimate"]
        star[i, j] = star[j, i] = e["significant"]
    fig, (ax,) = _figure(width=max(5.5, 2.5 + 0.8 * k), height=max(4.0, 1.5 + 0.7 * k))
    bound = float(np.nanmax(np.abs(m))) if np.isfinite(m).any() else 1.0
    im = ax.imshow(m, cmap="RdBu_r", vmin=-bound, vmax=bound)
    for i in range(k):
        for j in range(k):
            if np.isfinite(m[i, j]):
                dark = abs(m[i, j]) > 0.6 * bound
                ax.text(j, i, f"{m[i, j]:+.3f}" + ("*" if star[i, j] else ""), ha="center", va="center", fontsize=7,
                        color="white" if dark else "black")
    ax.set_xticks(range(k))
    ax.set_yticks(range(k))
    ax.set_xticklabels(factors, rotation=45, ha="right", fontsize=8)
    ax.set_yticklabels(factors, fontsize=8)
    fig.colorbar(im, ax=ax, label=UNIT)
    ax.set_title("B's level minus A's: main effects on the diagonal,\ninteractions off it; * significant (Holm)",
                 fontsize=9)
    return fig
