"""The report's verdicts in words: what beats what under Holm, what is equivalent, what is undecided
and how many seeds would decide it, how sure the order is, how the architectures fail by learning
rate, and whether the search beat random order. Every sentence here is built from the ranking's
numbers (:mod:`normsearch.ranking`, :mod:`normsearch.stats`); nothing is computed here."""

from __future__ import annotations

from ..ranking import Ranking, Row, format_p
from ._columns import UNIT, num

#: verdict -> how a sentence says it
SAYS = {"better": "beats", "worse": "is worse than", "equivalent": "is equivalent to",
        "undecided": "is undecided against"}


def _md(text) -> str:
    return str(text).replace("|", "\\|")


def comparison_sentence(c, unit: str = UNIT) -> str:
    """One comparison in words, e.g. ``t5 beats peri_ln by 0.031 bits/byte (95% CI [0.010, 0.052],
    Holm p = 0.004, P(better) 0.99)``."""
    if c.diff is None:
        return f"{c.arch} vs {c.against}: not compared ({c.n_arch} and {c.n_against} successful seeds)."
    holm = format_p(c.p_holm).replace("p ", "Holm p ", 1)
    p_imp = f", P(better) {c.p_improve:.2f}" if c.p_improve is not None else ""
    ci = f"95% CI of the difference [{c.ci_low:+.3f}, {c.ci_high:+.3f}]"
    if c.verdict in ("better", "worse"):
        return (f"{c.arch} {SAYS[c.verdict]} {c.against} by {abs(c.diff):.3f} {unit} ({ci}, {holm}{p_imp}).")
    if c.verdict == "equivalent":
        return (f"{c.arch} is equivalent to {c.against} within ±{c.margin:g} {unit}: difference {c.diff:+.3f} "
                f"({ci}; both one-sided tests pass, Holm p = {c.p_tost_holm:.3g}).")
    need = (f"about {c.seeds_needed} seeds per architecture would decide it at this variance"
            if c.seeds_needed is not None else "more than 1000 seeds per architecture would be needed to decide it")
    return (f"{c.arch} vs {c.against}: undecided, difference {c.diff:+.3f} {unit} ({ci}, {holm}{p_imp}); {need}.")


def verdict_line(ranking: Ranking, a: str) -> str:
    """One sentence: which found placements beat, lose to, or are equivalent to baseline ``a``."""
    comps = [(r, r.comparison(a)) for r in ranking.ranked if not r.is_baseline and r.comparison(a) is not None]
    if not comps:
        others = [(r, r.comparison(a)) for r in ranking.ranked if r.comparison(a) is not None]
        if not others:
            return f"nothing has finished yet to compare with `{a}`."
        by = {v: [r.label for r, c in others if c.verdict == v] for v in ("better", "worse", "equivalent", "undecided")}
        words = {"better": "better", "worse": "worse", "equivalent": f"equivalent within ±{ranking.judgement.margin:g}",
                 "undecided": "undecided"}
        return ("no searched placement; among the other baselines, under Holm: "
                + "; ".join(f"{words[v]}: {', '.join(names)}" for v, names in by.items() if names) + ".")
    by = {v: [r.label for r, c in comps if c.verdict == v] for v in ("better", "worse", "equivalent", "undecided")}
    parts = []
    if by["better"]:
        parts.append(f"**{len(by['better'])} of {len(comps)} found placement(s) beat `{a}`** under Holm: "
                     f"{', '.join(by['better'])}")
    else:
        parts.append(f"**no found placement beats `{a}`** under Holm ({len(comps)} compared)")
    for v, what in (("equivalent", f"equivalent to it within ±{ranking.judgement.margin:g} {UNIT}"),
                    ("worse", "worse"), ("undecided", "undecided")):
        if by[v]:
            parts.append(f"{len(by[v])} {what}")
    return "; ".join(parts) + "."


def summary_lines(ranking: Ranking) -> list[str]:
    ranked = ranking.ranked
    if not ranked:
        return []
    best = ranked[0]
    lines = ["## In short", ""]
    kind = "a baseline" if best.is_baseline else "found by the search"
    ci = f" (95% CI [{best.ci_low:.4f}, {best.ci_high:.4f}])" if best.ci_low is not None else ""
    score = f"{best.score_mean:.4f} {UNIT}{ci}" if best.score_mean is not None else "no successful run"
    sure = (f"; P(best) {best.p_best:.2f}, rank interval [{best.rank_low}, {best.rank_high}]"
            if best.p_best is not None else "")
    lines.append(f"- First in the ranking: **{best.label}** ({kind}, sites `{best.sites}`), {score}{sure}.")
    bases = [r for r in ranked if r.is_baseline]
    if bases and not best.is_baseline:
        b = bases[0]
        lines.append(f"- Best baseline: **{b.label}**, {num(b.score_mean)} {UNIT} (rank {b.rank}).")
    for a in ranking.against:
        if a not in ranking.missing_against:
            lines.append(f"- Against `{a}`: " + verdict_line(ranking, a))
    failing = [r.label for r in ranked if r.fails_at_best_lr]
    if failing:
        lines.append(f"- Failing even at their best learning rate (diverged or stalled runs; ranked after every "
                     f"architecture that did not fail): {', '.join(failing)}.")
    if best.n_seeds == 0:
        lines.append("- No architecture has a successful run: every run diverged or stalled, so there is no loss to "
                     "compare; the order is by failure rate only.")
    elif best.n_seeds < 2:
        lines.append("- One successful seed per architecture: no intervals and no comparisons; the order of the "
                     "rows may be noise.")
    return lines + [""]


def score_definition(test: bool = False) -> str:
    split = "test" if test else "validation"
    return (f"the {split} loss in {UNIT} at the end of training, averaged over the successful runs at the "
            f"architecture's chosen learning rate (the one where it failed least, then had the lowest mean). A "
            f"run **fails** if it diverged (NaN, or a loss far above its start) or **stalled** (it ended near the "
            f"loss of a model that learned only the training bytes' frequencies, or never improved on its loss "
            f"at initialisation); failures are counted apart, never averaged in. The ranking is a hurdle: by "
            f"failure rate at the chosen learning rate, then by loss")


def judgement_lines(ranking: Ranking) -> list[str]:
    """How sure: the variance model, the family of claims, the rank posterior."""
    j = ranking.judgement
    lines = ["## How sure", ""]
    if j.sigma is not None:
        test = (f"{j.variance_test}'s test of equal variances, p = {j.variance_p:.3g}"
                if j.variance_p is not None else "no test of equal variances (too few runs)")
        lines.append(f"- **Noise**: the two-way model loss ~ architecture + seed over the successful runs at each "
                     f"architecture's chosen learning rate leaves a residual SD of {j.sigma:.4f} {UNIT} with {j.df} "
                     f"degrees of freedom ({test}). Intervals and comparisons use **{j.variance_method}** estimates.")
    else:
        lines.append(f"- **Noise**: too few successful runs to pool a variance; intervals and comparisons are "
                     f"{j.variance_method or 'not computed'}.")
    lines.append(f"- **Claims**: the {j.n_comparisons} comparisons with the baselines are one family. \"Beats\" and "
                 f"\"worse\" need a Holm-adjusted p < {j.alpha:g}; \"equivalent\" needs both one-sided tests (TOST) "
                 f"within ±{j.margin:g} {UNIT} to pass under Holm; everything else is \"undecided\", with the seeds "
                 f"per architecture that would decide it at this variance (80% power). Benjamini-Hochberg q-values "
                 f"are given for screening.")
    lines.append("- **Order**: P(best) and the 95% rank intervals come from draws of the pooled model's posterior, "
                 "with the failure hurdle applied in every draw.")
    if j.unigram_bpb is not None:
        lines.append(f"- **Stalls**: a model that learned only the training bytes' frequencies scores "
                     f"{j.unigram_bpb:.3f} {UNIT} on the windows the runs are scored on; a run that ends within "
                     f"the stall "
                     f"margin of that (or never improves on its loss at initialisation) stalled.")
    else:
        lines.append("- **Stalls**: the study's data could not be read here, so stalls are judged by the loss at "
                     "initialisation only.")
    if any(x.metric == "test_bpb" for r in ranking.rows for x in r.runs):
        lines.append("- Each architecture's learning rate was chosen by the search on other seeds and the validation "
                     "windows; these runs, on fresh seeds scored on the test split, did not choose it, so the "
                     "intervals are not biased by that choice; rules and references: `docs/statistics.md`.")
    else:
        lines.append("- The learning rate is chosen on the same seeds that score it, so the intervals are slightly "
                     "optimistic (`normsearch confirm` scores on seeds that did not choose); rules and references: "
                     "`docs/statistics.md`.")
    return lines + [""]


def comparisons_section(ranking: Ranking) -> list[str]:
    lines = ["## Against the baselines", ""]
    for a in ranking.missing_against:
        lines += [f"- `{a}` is not a finished architecture of this study: nothing is compared with it.", ""]
    for a in ranking.against:
        if a in ranking.missing_against:
            continue
        comps = [c for r in ranking.ranked for c in r.comparisons if c.against == a]
        lines += [f"### Against `{a}`", "", verdict_line(ranking, a), ""]
        lines += ["- " + comparison_sentence(c) for c in comps if c.verdict != "undecided"]
        lines += ["", "| label | seeds | difference | 95% CI | p | p (Holm) | q (BH) | P(better) | verdict | seeds to "
                  "decide |", "|---|---|---|---|---|---|---|---|---|---|"]
        for c in comps:
            ci = f"[{c.ci_low:+.4f}, {c.ci_high:+.4f}]" if c.ci_low is not None else "-"
            diff = f"{c.diff:+.4f}" if c.diff is not None else "-"
            need = ("-" if c.verdict != "undecided" or c.diff is None
                    else str(c.seeds_needed) if c.seeds_needed else "> 1000")
            lines.append(f"| {_md(c.arch)} | {c.n} | {diff} | {ci} | {num(c.p_value, '{:.3g}')} | "
                         f"{num(c.p_holm, '{:.3g}')} | {num(c.q_bh, '{:.3g}')} | {num(c.p_improve, '{:.2f}')} | "
                         f"{c.verdict} | {need} |")
        lines.append("")
    return lines


def _lr_cell(p) -> str:
    fail = f"{p.n_failed}/{p.n_runs} failed" if p.n_failed else f"0/{p.n_runs}"
    return f"{p.lr:g}: {num(p.mean)} ({fail})"


def learning_rate_lines(ranking: Ranking) -> list[str]:
    rows: list[Row] = [r for r in ranking.ranked if r.lr_points]
    if not rows:
        return []
    lines = ["## Failures and learning rates", "",
             "Per architecture and learning rate: the mean loss over the successful runs and the failures (diverged "
             "or stalled) out of the runs. **Basin**: the width, in decades of learning rate, over which a quadratic "
             "fit in log learning rate stays within the tolerance of the architecture's own best (`-` with fewer "
             "than three learning rates that had a successful run); it replaces the learning-rate sensitivity of "
             "earlier reports, which mostly counted divergences.", "",
             "| label | chosen lr | failed there [95% CI] | by learning rate | basin (decades) |",
             "|---|---|---|---|---|"]
    for r in rows:
        fail = f"{r.n_failed}/{r.n_failed + r.n_seeds} [{r.failure_ci_low:.2f}, {r.failure_ci_high:.2f}]"
        basin = num(r.lr_basin, "{:.2f}") + (f" ({r.lr_basin_low:.2g} to {r.lr_basin_high:.2g})"
                                             if r.lr_basin is not None else "")
        lines.append(f"| {_md(r.label)} | {num(r.best_lr, '{:g}')} | {fail} | "
                     f"{'; '.join(_lr_cell(p) for p in r.lr_points)} | {basin} |")
    edge = [r for r in rows if at_sweep_edge(r)]
    if edge:
        lines += ["", "**At the edge of the sweep**: " + ", ".join(
            f"`{r.label}` ({r.best_lr:g}, the {'highest' if r.best_lr == max(p.lr for p in r.lr_points) else 'lowest'}"
            f" of {len(r.lr_points)} learning rates)" for r in edge)
            + ": the best learning rate of these was the last one tried in its direction, so their optimum was not "
              "bracketed: it may lie beyond the trained range, where a wider sweep could find a lower loss "
              "(`train.lr: {low, high, points, extend}` extends a sweep past an end that holds the best)."]
    return lines + [""]


def at_sweep_edge(row: Row) -> bool:
    """Whether the row's chosen learning rate is an end of the ones it trained (:func:`unbracketed`)."""
    from ..stats.outcomes import unbracketed

    return unbracketed(row.best_lr, [p.lr for p in row.lr_points])


def search_lines(ranking: Ranking) -> list[str]:
    sv = ranking.judgement.search
    if sv is None:
        return []
    n = len(sv.best_so_far)
    ahead = {"ahead": "ahead of", "behind": "behind", "even": "level with"}[sv.verdict]
    reached = (f" It reached the best of its pool after {sv.k_reached_best} trial(s); random order would have by then "
               f"with probability {sv.p_random_by_then:.2f}." if sv.k_reached_best else "")
    return ["## Did the search help?", "",
            f"Over its {n} searched trials the sampler's best-so-far was **{ahead}** the expected best of as many "
            f"random draws from the same evaluated placements (better at {sv.n_ahead} of {n} trial counts, worse at "
            f"{sv.n_behind}; mean gap {sv.mean_gap:+.4f} {UNIT}, negative is better).{reached} This compares the "
            f"order of the search with random order over what it evaluated; it says nothing of placements it "
            f"never proposed.", ""]
