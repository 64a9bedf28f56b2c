"""The ladder's section of a report in words (issues 17 and 26): per-rung orders, what they rest on
(rungs where an architecture failed every run, means on few seeds, unbracketed learning rates), rank
agreement and decision accuracy, every reversal with whether its differences are significant, the
promotion gate and the failures by learning rate (:mod:`._ladder_gate`), the power-law fits with their
lack-of-fit tests, and the extrapolation with its warnings. Every sentence is built from a
:class:`~normsearch.stats.ladder.LadderStats`; nothing is computed here."""

from __future__ import annotations

from ..ranking import format_p
from ..stats.ladder import FEW_SEEDS, P_CROSS_WARN
from ..stats.powerlaw import LOF_ALPHA, MIN_RESID_DF, MIN_RUNGS
from ._columns import UNIT, num
from ._ladder_gate import gate_lines, stability_lines, transfer_lines


def _md(text) -> str:
    return str(text).replace("|", "\\|")


def _ci(ci, fmt="{:.3f}") -> str:
    return f"[{fmt.format(ci[0])}, {fmt.format(ci[1])}]" if ci is not None else "-"


def _point(stats, arch: str, rung: str):
    return next((p for p in stats.points.get(arch, []) if p.rung == rung), None)


def _holm(p) -> str:
    return format_p(p).replace("p ", "Holm p ", 1)


def _side(stats, arch: str, other: str, d, ahead: bool, unit: str) -> str:
    """How ``arch`` stands against ``other`` at one rung, e.g. 'ahead at r0 by 0.014 bits/byte (Welch
    t-test, Holm p = 0.002)'."""
    where = "ahead" if ahead else "behind"
    if d.by == "failures":
        pa, pb = _point(stats, arch, d.rung), _point(stats, other, d.rung)
        return (f"{where} at {d.rung} on the failure hurdle ({pa.n_failed}/{pa.n_runs} against {pb.n_failed}/"
                f"{pb.n_runs} runs failed; Fisher's exact test, {_holm(d.p_holm)})")
    if d.diff is None or d.p_value is None:
        return f"{where} at {d.rung} by mean loss, untested (too few successful runs)"
    test = {"welch": "Welch t-test"}.get(d.method, d.method)
    return f"{where} at {d.rung} by {abs(d.diff):.4f} {unit} ({test}, {_holm(d.p_holm)})"


def reversal_sentence(stats, r, labels: dict[str, str] | None = None, unit: str = UNIT) -> str:
    """One reversal in words; 'reverses within noise' unless a difference is significant under Holm."""
    lab = labels or {}
    a, b = f"`{lab.get(r.a, r.a)}`", f"`{lab.get(r.b, r.b)}`"
    sides = f"{a} is {_side(stats, r.a, r.b, r.at_a, True, unit)}, {_side(stats, r.a, r.b, r.at_b, False, unit)}"
    span = f"from {r.rung_a} to {r.rung_b}"
    if r.verdict == "both significant":
        return f"**{a} and {b} reverse {span}**: {sides}; both differences are significant."
    if r.verdict == "one significant":
        sig = r.rung_a if r.at_a.significant else r.rung_b
        return (f"{a} and {b} change places {span}, but only the difference at {sig} is significant: {sides}. "
                f"The reversal is not established.")
    return f"{a} and {b} reverse within noise {span}: {sides}; neither difference is significant."


def _cell(p) -> str:
    """One architecture at one rung: place, mean [95%], failures at its lr and over every lr."""
    failed = f"failed {p.n_failed}/{p.n_runs} at its lr, {p.n_failed_all}/{p.n_runs_all} over all lrs"
    if p.mean is None:
        return f"{p.rank}. every run failed ({p.n_failed_all}/{p.n_runs_all})"
    ci = f" [{p.ci_low:.4f}, {p.ci_high:.4f}]" if p.ci_low is not None else ""
    edge = "; lr at an edge" if p.at_edge else ""
    return f"{p.rank}. {p.mean:.4f}{ci} ({failed}{edge})"


def caveat_lines(stats, labels: dict[str, str] | None = None) -> list[str]:
    """What the per-rung numbers rest on, one bullet per kind: rungs where an architecture failed
    every run, means over fewer than 3 successful seeds, chosen learning rates at an end of what
    was trained. Empty when there is nothing to say."""
    lab = labels or {}
    name = lambda a: f"`{_md(lab.get(a, a))}`"
    out = []
    for a, rungs in stats.all_failed.items():
        out.append(f"- **Every run of {name(a)} failed at {', '.join(map(_md, rungs))}.** It has no loss there "
                   f"and ranks last; a pair of rungs where it failed at both leaves it out of the rank agreement, "
                   f"a pair where it failed at one counts its fall (or rise) as the reversal it is, and its power "
                   f"law (if any) is fitted without them.")
    if stats.few_seeds:
        trained = sum(1 for ps in stats.points.values() for p in ps if p.mean is not None)
        counts = sorted({n for _, _, n in stats.few_seeds})
        if len(stats.few_seeds) == trained:
            cells = f"every mean ({' or '.join(map(str, counts))} each)"
        else:
            cells = ", ".join(f"{name(a)} at {_md(r)} ({n})" for a, r, n in stats.few_seeds)
        out.append(f"- **Fewer than {FEW_SEEDS} successful seeds** behind {cells}. Such a mean's interval rests on "
                   f"an SD estimated from so few runs (with one, its draws borrow the rung's pool) that it is wide and "
                   f"itself uncertain, and the intervals of tau, rho and the fits inherit it; more seeds would narrow "
                   f"them.")
    if stats.at_edge:
        cells = ", ".join(f"{name(a)} at {_md(r)} (lr {lr:g})" for a, r, lr in stats.at_edge)
        out.append(f"- **Chosen learning rate at an end of those trained** (the sweep with its extension): {cells}. "
                   f"The optimum is not bracketed: it may lie beyond the trained range, where a wider sweep could "
                   f"find a lower loss.")
    return out


def ladder_lines(stats, labels: dict[str, str] | None = None, unit: str = UNIT) -> list[str]:
    """The report's section on the ladder, as Markdown lines."""
    lab = labels or {}
    name = lambda a: _md(lab.get(a, a))
    sizes = {r: sorted({p.size for ps in stats.points.values() for p in ps if p.rung == r and p.size is not None})
             for r in stats.rungs}

    planned = {i.name: i.n_params for i in stats.rung_info if i.n_params}

    def size_text(r: str) -> str:
        s = sizes[r]
        if not s:  # nothing ranked at this rung yet: no point gives its size, the plan may
            return (f"{planned[r]:.3g} {stats.size_unit} planned, none ranked there yet" if r in planned
                    else "none ranked there yet")
        n = f"{s[0]:.3g}" if f"{s[0]:.3g}" == f"{s[-1]:.3g}" else f"{s[0]:.3g} to {s[-1]:.3g}"
        return f"{n} {stats.size_unit}"

    lines = ["## Across model sizes", "",
             f"Rungs, small to large: {', '.join(f'{r} ({size_text(r)})' for r in stats.rungs)}. "
             f"Each cell: the hurdle place at that rung, the mean loss over successful runs at the chosen learning "
             f"rate with its 95% interval, and the failed runs (diverged or stalled) at that learning rate (what the "
             f"hurdle ranks by) and at any learning rate the rung trained.", "",
             "| label | " + " | ".join(_md(r) for r in stats.rungs) + " |", "|---|" + "---|" * len(stats.rungs)]
    for a in stats.points:
        cells = [_cell(p) if (p := _point(stats, a, r)) is not None else "-" for r in stats.rungs]
        lines.append(f"| {name(a)} | " + " | ".join(cells) + " |")
    caveats = caveat_lines(stats, lab)
    if caveats:
        lines += [""] + caveats
    lines += ["", "### Does the order hold?", "",
              f"Rank agreement between rungs over the architectures ranked at both (hurdle order: failure rate "
              f"first, then mean loss). An architecture that failed every run at both rungs of a pair is left out "
              f"of that pair: tied last at both, it would count as agreement; one that failed every run at one of "
              f"them stays, ranked last there. Kendall's tau-b and "
              f"Spearman's rho, 1 for the same order and -1 for the reverse. 95% percentile intervals from "
              f"{stats.n_draws} draws in which each architecture's mean at each rung is drawn from its own per-rung "
              f"uncertainty, mean + SE x t with the SD and degrees of freedom of its interval in the table above "
              f"(its own SD, never pooled; a mean of one successful run, which has no interval there, borrows the "
              f"rung's pooled within-architecture SD and its degrees of freedom), failure rates held fixed; seed "
              f"{stats.seed}. Adjacent rungs in bold. Decision accuracy, from the smallest rung to each larger one: "
              f"the share of the pairs of architectures that the smallest rung orders (not tied) which the larger "
              f"rung orders the same way (a tie there counts as not the same), with its 95% interval from the same "
              f"draws: how often a decision taken at the smallest size holds. Both rungs are redrawn, so the "
              f"interval is for the agreement of the true orders: where a rung's means lie closer than their noise "
              f"the observed share can sit above it (docs/statistics.md).", "",
              "| rungs | architectures | left out (every run failed at both) | Kendall's tau [95%] | "
              "Spearman's rho [95%] | decision accuracy [95%] (pairs) |", "|---|---|---|---|---|---|"]
    for g in stats.agreements:
        pair = f"{g.rung_a} → {g.rung_b}"
        pair = f"**{pair}**" if g.adjacent else pair
        tau = f"{g.tau:+.2f} {_ci(g.tau_ci, '{:+.2f}')}" if g.tau is not None else "-"
        rho = f"{g.rho:+.2f} {_ci(g.rho_ci, '{:+.2f}')}" if g.rho is not None else "-"
        left = ", ".join(name(a) for a in g.left_out) or "-"
        lines.append(f"| {_md(pair)} | {len(g.archs)} | {left} | {tau} | {rho} | {_accuracy(g)} |")
    lines += ["", "### Reversals", ""]
    if not stats.reversals:
        lines.append("No pair of architectures changes order between any two rungs.")
    else:
        lines.append(f"Every pair that changes order between any two rungs (each reversal names its rungs). A "
                     f"difference is significant when its Holm-adjusted p < {stats.alpha:g}, over the family of the "
                     f"differences these reversals rest on; a loss difference uses the ranking's test at that rung, "
                     f"a failure-rate difference Fisher's exact test.")
        lines.append("")
        lines += ["- " + reversal_sentence(stats, r, lab, unit) for r in stats.reversals]
    return (lines + [""] + gate_lines(stats, lab, unit) + stability_lines(stats, lab)
            + transfer_lines(stats, lab, unit) + fit_lines(stats, lab, unit))


def _accuracy(g) -> str:
    a = getattr(g, "decision_accuracy", None)
    if a is None:
        return "-"
    if a.value is None:
        return f"- ({a.n_pairs})"
    ci = f" [{a.low:.2f}, {a.high:.2f}]" if a.low is not None else ""
    return f"{a.value:.2f}{ci} ({a.n_pairs})"


def _lof(f) -> str:
    lof = f.lack_of_fit
    if lof is None or lof.F is None:
        return f"untested: {_md(lof.reason)}" if lof is not None else "untested"
    return f"F = {lof.F:.3g} ({lof.df_lof}, {lof.df_pe} df), p = {lof.p_value:.3g}"


def fit_lines(stats, labels: dict[str, str] | None = None, unit: str = UNIT) -> list[str]:
    """The power-law fits with their lack-of-fit tests, and the extrapolation to the target size, with
    its warnings."""
    lab = labels or {}
    name = lambda a: _md(lab.get(a, a))
    lines = ["### Power laws", "",
             f"L(N) = E + A N^-alpha, least squares on each rung's mean loss weighted by its successful seeds, with "
             f"E ≥ 0, A > 0, 0 < alpha < 2, fitted only over {MIN_RUNGS} or more rungs so that {MIN_RESID_DF} "
             f"residual degrees of freedom test the form. Lack of fit: the means' misfit to the curve (their "
             f"residual mean square) against the seeds' own scatter about their rung means (the pure-error "
             f"variance), an F test; "
             f"a fit with p < {LOF_ALPHA:g} fails and is not extrapolated, nor is one that cannot be tested. 95% "
             f"intervals by refitting the {stats.n_draws} draws of the rung means above (a parametric bootstrap "
             f"over the seeds).", ""]
    fits = stats.fits.items()
    if fits and not any(f.ok for _, f in fits):
        n = max(len(f.sizes) for _, f in fits)
        if n < MIN_RUNGS:
            lines += [f"**No power law is fitted**: no architecture has a successful run at {MIN_RUNGS} rungs (at "
                      f"most {n}). A curve of 3 parameters through {n} points has {max(n - 3, 0)} residual "
                      f"degree(s) of freedom: nothing would test that the loss follows it, and its extrapolation "
                      f"would be the form's, not the data's.", ""]
    lines += ["| label | rungs | E [95%] | A [95%] | alpha [95%] | RMSE | lack of fit | verdict | note |",
              "|---|---|---|---|---|---|---|---|---|"]
    for a, f in fits:
        if not f.ok:
            lines.append(f"| {name(a)} | {len(f.sizes)} | - | - | - | - | - | no fit | {_md(f.reason)} |")
            continue
        note = "; ".join(f.notes) or "-"
        verdict = {"passes": "passes", "fails": "**fails**: not extrapolated", "untested": "untested: not extrapolated"}
        lines.append(f"| {name(a)} | {len(f.sizes)} | {f.E:.4f} {_ci(f.E_ci, '{:.4f}')} | {f.A:.4g} "
                     f"{_ci(f.A_ci, '{:.4g}')} | {f.alpha:.3f} {_ci(f.alpha_ci)} | {num(f.rmse)} | {_lof(f)} | "
                     f"{verdict[f.verdict]} | {_md(note)} |")
    x = stats.extrapolation
    if x is None:
        return lines + [""]
    lines += ["", f"### Extrapolated to N* = {x.target:.3g} {stats.size_unit}", ""]
    refused = getattr(x, "refused", None)
    if refused:
        return lines + [f"**{refused[0].upper()}{refused[1:]}**: N* is {x.target / x.largest:.3g} times the largest "
                        f"rung, and the ladder gives a number no further than {x.max_factor:g} times it (a fit that "
                        f"passes its lack-of-fit test vouches for its form over the rungs, not far beyond them).", ""]
    if not x.projections:
        lines.append("No architecture has a fit that passes its lack-of-fit test: nothing is extrapolated.")
        lines += [f"- `{name(a)}` is not extrapolated: {_md(why)}." for a, why in x.left_out.items()]
        return lines + [""]
    lines.append(f"N* is {x.target / x.largest:.3g} times the largest rung ({x.largest:.3g}; at most "
                 f"{getattr(x, 'max_factor', 4.0):g} is extrapolated). Only fits that pass their lack-of-fit test are "
                 f"carried to N*. The fitted losses assume the power law holds out to N*; their intervals cover the "
                 f"noise of the seeds, not the choice of the curve. Failures are not extrapolated.")
    lines += ["", f"| place at N* | label | loss at N* ({unit}) [95%] | P(lowest) |", "|---|---|---|---|"]
    for p in x.projections:
        lines.append(f"| {p.rank} | {name(p.arch)} | {p.loss:.4f} {_ci(p.ci, '{:.4f}')} | {num(p.p_best, '{:.2f}')} |")
    top = x.projections[0]
    lines.append("")
    sure = f" in {top.p_best:.0%} of the draws" if top.p_best is not None else ""
    whole = (f"; the whole order recurs in {x.p_order:.0%} of them" if x.p_order is not None and len(x.projections) > 1
             else "")
    lines.append(f"- Lowest at N*: `{name(top.arch)}`{sure}{whole}.")
    for c in x.crossings:
        if c.at is not None:
            share = f" (they cross in {c.p_cross:.0%} of the draws)" if c.p_cross is not None else ""
            lines.append(f"- **Warning**: the fitted curves of `{name(c.a)}` and `{name(c.b)}` cross at N ≈ "
                         f"{c.at:.3g}, between the largest rung and N*{share}. Their order at N* is the fit's, not the "
                         f"data's.")
        else:
            lines.append(f"- **Warning**: the fitted curves of `{name(c.a)}` and `{name(c.b)}` do not cross before N*, "
                         f"but the curves of {c.p_cross:.1%} of the draws do (more than {P_CROSS_WARN:.0%}). Their "
                         f"order at N* is not settled by these rungs.")
    for a in x.failing:
        p = _point(stats, a, stats.rungs[-1])
        lines.append(f"- `{name(a)}` failed {p.n_failed}/{p.n_runs} runs at the largest rung; its extrapolated "
                     f"loss speaks only for the runs that trained.")
    for a in x.order:
        if a in stats.all_failed:
            lines.append(f"- `{name(a)}` is extrapolated from the rungs where it trained; every run failed at "
                         f"{', '.join(map(_md, stats.all_failed[a]))}.")
    for a, why in x.left_out.items():
        lines.append(f"- `{name(a)}` is not extrapolated: {_md(why)}.")
    return lines + [""]
