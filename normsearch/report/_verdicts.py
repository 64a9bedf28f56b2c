"""The report's verdicts in words: what beats what under Holm, what is equivalent, what is undecided
and how many seeds would decide it, how sure the order is, how the architectures fail by learning
rate, and whether the search beat random order. Every sentence here is built from the ranking's
numbers (:mod:`normsearch.ranking`, :mod:`normsearch.stats`); nothing is computed here."""

from __future__ import annotations

from ..ranking import Ranking, Row, format_p
from ..records import is_control_label
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
    if c.se is None:
        return (f"{c.arch} vs {c.against}: untested, difference {c.diff:+.3f} {unit} ({c.n_arch} and {c.n_against} "
                f"successful seeds: a side with one run, or no spread at all, has no variance to test against).")
    eq = f"; equivalent within ±{c.margin_equivalent:.3f} {unit} at best" if c.margin_equivalent is not None else ""
    need = (f"about {c.seeds_needed} more seeds per architecture would decide it (80% power if the true difference "
            f"were {c.diff_planned:+.3f}, the observed one shrunk toward 0)" if c.seeds_needed is not None
            else "more than 1000 more seeds per architecture would be needed to decide it")
    return (f"{c.arch} vs {c.against}: undecided, difference {c.diff:+.3f} {unit} ({ci}, {holm}{p_imp}){eq}; "
            f"{need}.")


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
    # a control (a uniform draw from the space, trained beside the search) was not found by the search:
    # counted apart, in the same Holm family
    controls = [(r, c) for r, c in comps if is_control_label(r.label, r.is_baseline)]
    comps = [(r, c) for r, c in comps if not is_control_label(r.label, r.is_baseline)]
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
    if controls:
        beat = [r.label for r, c in controls if c.verdict == "better"]
        parts.append(f"of the {len(controls)} control(s) (uniform draws), "
                     + (f"{len(beat)} beat it: {', '.join(beat)}" if beat else "none beats it"))
    return "; ".join(parts) + "."


def summary_lines(ranking: Ranking) -> list[str]:
    ranked = ranking.ranked
    if not ranked:
        return []
    best = ranked[0]
    lines = ["## In short", ""]
    kind = ("a baseline" if best.is_baseline else "a control: a uniform draw from the space"
            if is_control_label(best.label) else "found by the search")
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


def unigram_words(tokenizer: str = "bytes") -> str:
    """What the stall reference learned: the training bytes' frequencies, or its tokens' under BPE (scored per
    byte)."""
    return ("the training bytes' frequencies" if tokenizer == "bytes" else
            f"the training {tokenizer.upper()} tokens' frequencies (scored per byte)")


def score_definition(test: bool = False, tokenizer: str = "bytes") -> str:
    split = "test" if test else "validation"
    return (f"the {split} loss in {UNIT} at the end of training, averaged over the successful runs at the "
            f"architecture's chosen learning rate (the one where it failed least, then had the lowest mean). A "
            f"run **fails** if it diverged (NaN, or a loss far above its start) or **stalled** (it ended near the "
            f"loss of a model that learned only {unigram_words(tokenizer)}, or never improved on its loss "
            f"at initialisation); failures are counted apart, never averaged in. The ranking is a hurdle: by "
            f"failure rate at the chosen learning rate, then by loss")


def judgement_lines(ranking: Ranking) -> list[str]:
    """How sure: the variance model, the family of claims, the rank posterior."""
    j = ranking.judgement
    lines = ["## How sure", ""]
    if j.seed_sd:
        (lo, a), (hi, b) = min((v, k) for k, v in j.seed_sd.items()), max((v, k) for k, v in j.seed_sd.items())
        lines.append(f"- **Noise**: every interval and comparison uses each architecture's own seed-to-seed SD (from "
                     f"{lo:.4f} {UNIT} for {a} to {hi:.4f} for {b}); no SD is pooled and no test of equal variances "
                     f"decides anything: **{j.variance_method}**. Runs are treated as independent: a seed effect "
                     f"that architectures share is not removed, which can only widen the intervals.")
    else:
        lines.append("- **Noise**: no architecture has two successful runs at its chosen learning rate: no variance, "
                     "so no interval and no test.")
    lines.append(f"- **Claims**: the {j.n_comparisons} comparisons with the baselines are one family. \"Beats\" and "
                 f"\"worse\" need a Holm-adjusted p < {j.alpha:g}; \"equivalent\" needs both one-sided tests (TOST) "
                 f"within ±{j.margin:g} {UNIT} to pass under Holm; everything else is \"undecided\", with the "
                 f"smallest margin the data show equivalence within (the reach of the 90% interval of the "
                 f"difference) and the seeds to add to each architecture that would decide it (80% power, planned "
                 f"for the observed difference shrunk toward 0). Benjamini-Hochberg q-values are given for "
                 f"screening.")
    lines.append("- **Order**: P(best) and the 95% rank intervals come from independent draws of each "
                 "architecture's mean (a t with its own SD and n - 1 df; one with a single successful run borrows "
                 "the pooled within-architecture SD), with the failure hurdle applied in every draw.")
    if j.unigram_bpb is not None:
        tokenizer = ranking.recipe.data.tokenizer if ranking.recipe is not None else "bytes"
        lines.append(f"- **Stalls**: a model that learned only {unigram_words(tokenizer)} scores "
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
        lines += ["", "| label | seeds | difference | 95% CI | p | p (Holm) | q (BH) | P(better) | equivalent within | "
                  "verdict | more seeds to decide (each) |", "|---|---|---|---|---|---|---|---|---|---|---|"]
        for c in comps:
            ci = f"[{c.ci_low:+.4f}, {c.ci_high:+.4f}]" if c.ci_low is not None else "-"
            diff = f"{c.diff:+.4f}" if c.diff is not None else "-"
            need = ("-" if c.verdict != "undecided" or c.se is None
                    else str(c.seeds_needed) if c.seeds_needed else "> 1000")
            eq = f"±{c.margin_equivalent:.4f}" if c.margin_equivalent is not None else "-"
            lines.append(f"| {_md(c.arch)} | {c.n} | {diff} | {ci} | {num(c.p_value, '{:.3g}')} | "
                         f"{num(c.p_holm, '{:.3g}')} | {num(c.q_bh, '{:.3g}')} | {num(c.p_improve, '{:.2f}')} | "
                         f"{eq} | {c.verdict} | {need} |")
        lines.append("")
    return lines


def _lr_cell(p) -> str:
    fail = f"{p.n_failed}/{p.n_runs} failed" if p.n_failed else f"0/{p.n_runs}"
    return f"{p.lr:g}: {num(p.mean)} ({fail})"


def _by_cell(r: Row) -> str:
    """The sweep, one group per variant of the grid: ``init small: 0.001: 3.1 (0/3); ...``."""
    from ..grid import describe, parse_tag

    tags = list(dict.fromkeys(p.variant for p in r.lr_points))
    groups = []
    for tag in tags:
        cells = "; ".join(_lr_cell(p) for p in sorted(r.lr_points, key=lambda p: p.lr) if p.variant == tag)
        groups.append(f"{describe(parse_tag(tag))}: {cells}" if tag else cells)
    return "<br>".join(groups)


def chosen_cell(r: Row) -> str:
    """``0.003162, init small`` (the learning rate alone without a grid)."""
    from ..grid import describe

    return num(r.best_lr, "{:g}") + (f", {describe(r.variant)}" if r.variant else "")


def learning_rate_lines(ranking: Ranking) -> list[str]:
    rows: list[Row] = [r for r in ranking.ranked if r.lr_points]
    if not rows:
        return []
    if all(len(r.lr_points) == 1 for r in rows):  # a confirmation: each at the one cell its search chose
        lines = ["## Failures at the chosen cells", "",
                 "Each architecture was trained at one cell (learning rate, and init or warmup where the recipe "
                 "tunes them): the one its search chose. Whether that learning rate was bracketed, and the sweep "
                 "around it, are the search's report's (*Failures and learning rates*).", "",
                 "| label | cell | failed there [95% CI] | mean over successful runs |", "|---|---|---|---|"]
        for r in rows:
            (p,) = r.lr_points
            lines.append(f"| {_md(r.label)} | {chosen_cell(r)} | {r.n_failed}/{r.n_failed + r.n_seeds} "
                         f"[{r.failure_ci_low:.2f}, {r.failure_ci_high:.2f}] | {num(p.mean, '{:.4f}')} |")
        return lines + [""] + cell_gap_lines(ranking)
    res = ranking.recipe.train.lr_resolution if ranking.recipe is not None else None
    lines = ["## Failures and learning rates", "",
             "Per architecture and cell of the tuned grid (learning rate, and init or warmup where the recipe tunes "
             "them): the mean loss over the successful runs and the failures (diverged or stalled) out of the runs. "
             "The **chosen cell** is the one rule's (docs/statistics.md): the lowest failure rate, then the lowest "
             "mean. **Bracketed**: a trained neighbour with a successful run on each side of the chosen learning "
             "rate" + (f", each within {res:g} decades" if res else "") + ". **Vertex**: where a quadratic in log "
             "learning rate through the chosen cell and up to two neighbours on each side is lowest (`-`: fewer than "
             "3 points, not convex, or outside them). **Basin**: the width, in decades, over which a quadratic fit "
             "stays within the tolerance of the architecture's own best.", "",
             "| label | chosen cell | bracketed | vertex | failed there [95% CI] | by cell | basin (decades) |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        fail = f"{r.n_failed}/{r.n_failed + r.n_seeds} [{r.failure_ci_low:.2f}, {r.failure_ci_high:.2f}]"
        basin = num(r.lr_basin, "{:.2f}") + (f" ({r.lr_basin_low:.2g} to {r.lr_basin_high:.2g})"
                                             if r.lr_basin is not None else "")
        bracketed = "-" if r.lr_bracketed is None else "yes" if r.lr_bracketed else "**no**"
        lines.append(f"| {_md(r.label)} | {chosen_cell(r)} | {bracketed} | {num(r.lr_vertex, '{:.3g}')} | {fail} | "
                     f"{_by_cell(r)} | {basin} |")
    edge = [r for r in rows if at_sweep_edge(r)]
    if edge:
        lines += ["", "**At the edge of the sweep**: " + ", ".join(
            f"`{r.label}` ({r.best_lr:g}, the {'highest' if r.best_lr == max(_lrs(r)) else 'lowest'}"
            f" of {len(_lrs(r))} learning rates)" for r in edge)
            + ": the best learning rate of these was the last one tried in its direction, so their optimum was not "
              "bracketed: it may lie beyond the trained range, where a wider sweep could find a lower loss "
              "(`train.lr: {low, high, points, extend, resolution}` extends a sweep past an end that holds the "
              "best and refines it around the chosen cell)."]
    return lines + [""] + cell_gap_lines(ranking)


def _lrs(row: Row) -> list[float]:
    """The learning rates of the chosen cell's variant."""
    from ..grid import variant_tag

    tag = variant_tag(row.variant)
    return [p.lr for p in row.lr_points if p.variant == tag]


def at_sweep_edge(row: Row) -> bool:
    """Whether the row's chosen learning rate is an end of the ones its variant trained (:func:`unbracketed`)."""
    from ..stats.outcomes import unbracketed

    return unbracketed(row.best_lr, _lrs(row))


def cell_gap_lines(ranking: Ranking) -> list[str]:
    """Every compared pair's gap at each architecture's loss-optimal cell (over successful runs, whatever
    failed there) and at its failure-free cell, with the failure rates beside: the verdicts are at the
    chosen cells, and a gap that only one of these shows is the choice of cell's, not the architecture's."""
    rows = {r.label: r for r in ranking.ranked}
    pairs = [(r, rows[c.against]) for r in ranking.ranked for c in r.comparisons if c.against in rows]
    if not pairs:
        return []

    def at(cell):
        return (f"{cell['mean']:.4f} ({cell['n_failed']}/{cell['n_failed'] + cell['n_ok']} failed, lr "
                f"{cell['lr']:g})" if cell else "-")

    def gap(a, b):
        return f"{a['mean'] - b['mean']:+.4f}" if a and b else "-"

    lines = ["### Gaps at the loss-optimal and the failure-free cells", "",
             "Each architecture's **loss-optimal** cell has the lowest mean over its successful runs whatever "
             "failed there; its **failure-free** cell, the lowest mean where no run failed (`-`: every cell had a "
             "failure). Means of successful runs; no failed run enters them. The verdicts above are at the chosen "
             "cells; these are point estimates beside them.", "",
             f"| architecture | against | gap, loss-optimal ({UNIT}) | architecture there | baseline there | "
             f"gap, failure-free | architecture there | baseline there |", "|---|---|---|---|---|---|---|---|"]
    for a, b in pairs:
        lines.append(f"| {_md(a.label)} | {_md(b.label)} | {gap(a.loss_optimal, b.loss_optimal)} | "
                     f"{at(a.loss_optimal)} | {at(b.loss_optimal)} | {gap(a.failure_free, b.failure_free)} | "
                     f"{at(a.failure_free)} | {at(b.failure_free)} |")
    return lines + [""]


def search_lines(ranking: Ranking) -> list[str]:
    """"Did the search help?": the trend over proposal order and the sampler's proposals against
    uniform draws, each with its p-value and what it supports (:mod:`normsearch.stats.search_value`)."""
    sv = ranking.judgement.search
    if sv is None:
        return []
    lines = ["## Did the search help?", "", "- " + _trend_sentence(sv.trend, len(sv.scores))]
    n_model = sv.n_model
    if sv.vs_control is not None:
        lines.append("- " + _shift_sentence(sv.vs_control, "the control proposals (uniform draws from the space, "
                                                          "trained beside them)"))
    elif sv.n_controls:
        lines.append(f"- Too few to compare with the {sv.n_controls} control proposal(s): the test needs 2 or more "
                     f"model-based proposals ({n_model} here) and 2 or more controls.")
    else:
        lines.append("- No control proposals (`search.control: 0`): `search.control: K` trains K uniform draws from "
                     "the space beside the sampler's proposals, the comparison this section is built for.")
    if sv.vs_startup is not None:
        lines.append("- " + _shift_sentence(sv.vs_startup, "its own random start-up proposals (uniform draws too, "
                                                          "made before its model took over)")
                     + (" Which proposals were start-up draws was not recorded by the version that made this study: "
                        "it is worked out from the trials each one saw under today's start-up rule, which a study "
                        "made under an older rule (where the baselines used up the start-up) did not follow; and the "
                        "start-up proposals all came first, so the comparison also mixes in any drift over time."
                        if sv.startup_inferred else " The start-up proposals all came first, so this comparison "
                        "also mixes in any drift over time; the controls' does not."))
    failed = sum(1 for v in sv.scores if v == float("inf")) + sum(1 for v in sv.control_scores if v == float("inf"))
    counted = (f"{len(sv.scores)} proposals of the sampler ({sv.n_startup} start-up, {n_model} model-based) and "
               f"{sv.n_controls} control proposal(s), each scored by its architecture's mean; a repeat of an "
               f"evaluated architecture counts (it was proposed), baselines do not.")
    if failed:
        counted += (f" {failed} of them failed (every run diverged or stalled, or pruned): they rank as the worst, "
                    f"tied, and a median or shift over them may be infinite.")
    lines += ["", "Counted: " + counted]
    f = sv.front_loading
    if f is not None:
        n = len(f.best_so_far)
        lines += ["", f"Front-loading, which is not a measure of help: the sampler's best-so-far was ahead of the "
                      f"expected best of as many draws in random order from its own proposals at {f.n_ahead} of {n} "
                      f"counts and behind at {f.n_behind} (mean gap {f.mean_gap:+.4f} {UNIT}). A sampler that "
                      f"learns finds its best late, and is behind there."]
    return lines + [""]


def _score(v) -> str:
    return "∞ (a failure)" if v is None or v == float("inf") else f"{v:.4f}"


def _trend_sentence(t, n: int) -> str:
    if t is None:
        return f"**No trend to test**: {n} proposal(s) of the sampler, 3 or more with different scores needed."
    stats = (f"Spearman's ρ of proposal number against score {t.rho:+.2f} over {t.n} proposals "
             f"({format_p(t.p)}{', exact' if t.exact else ''}; Kendall's τ {num(t.tau, '{:+.2f}')}, "
             f"{format_p(t.tau_p)})")
    if t.verdict == "improving":
        return f"**The sampler's proposals scored lower as the search went on**: {stats}."
    if t.verdict == "worsening":
        return f"**The sampler's proposals scored higher (worse) as the search went on**: {stats}."
    return f"**No evidence of a trend** either way over proposal order: {stats}."


def _shift_sentence(c, against: str) -> str:
    stats = (f"median {_score(c.median)} vs {_score(c.median_against)} {UNIT} (difference "
             f"{num(c.median_diff, '{:+.4f}')}), Hodges-Lehmann shift {num(c.shift, '{:+.4f}')}"
             + (f" [{c.shift_low:+.4f}, {c.shift_high:+.4f}]" if c.shift_low is not None else " (too few pairs for "
                "an interval)") + f"; {c.n} against {c.n_against}")
    if c.verdict == "lower":
        return (f"**The sampler's model-based proposals scored lower than {against}**: one-sided Mann-Whitney "
                f"{format_p(c.p)}; {stats}.")
    if c.verdict == "higher":
        return (f"**The sampler's model-based proposals scored higher (worse) than {against}**: one-sided "
                f"Mann-Whitney {format_p(c.p_higher)} for higher ({format_p(c.p)} for lower); {stats}.")
    return (f"**No evidence either way** that the sampler's model-based proposals scored lower than {against}: "
            f"one-sided Mann-Whitney {format_p(c.p)}; {stats}.")
