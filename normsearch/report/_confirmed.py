"""The confirmed verdicts: the confirmation stage's ranking (fresh seeds, test split) beside the
search's (the seeds and validation windows that chose), in words for ``report.md``."""

from __future__ import annotations

import statistics
from typing import Any

from ..ranking import Ranking
from ._columns import num
from ._verdicts import UNIT, chosen_cell, verdict_line


def _ci(low, high) -> str:
    return f"[{low:.4f}, {high:.4f}]" if low is not None and high is not None else "-"


def racing_summary(stage_attrs: dict[str, Any], confirmed: Ranking, seeds: int) -> dict[str, Any] | None:
    """What racing did: rounds, extra runs, why it stopped, and the compute of the fixed-seed design it
    replaced (every architecture at the most seeds any of them reached)."""
    rounds = [v for k, v in sorted(stage_attrs.items()) if k.startswith("racing_round_")]
    end = stage_attrs.get("racing_end")
    if not rounds and not end:
        return None
    rows = [r for r in confirmed.rows if r.runs]
    runs = sum(len(r.runs) for r in rows)
    most = max((len({x.seed for x in r.runs}) for r in rows), default=seeds)
    fixed = len(rows) * most
    return {"rounds": len(rounds), "extra_runs": sum(len(r.get("added", [])) for r in rounds),
            "stop": (end or {}).get("stop"), "reason": _reason(end or {}), "runs": runs, "fixed_design_runs": fixed,
            "max_seeds": most}


def _reason(end: dict) -> str | None:
    """Why racing stopped, as a word (stages stored before the word was recorded have the sentence)."""
    if end.get("reason") or not end.get("stop"):
        return end.get("reason")
    return "budget" if str(end["stop"]).startswith("budget") else None


def primary_results(confirmed: Ranking, design: dict | None) -> list:
    """The declared contrasts of the confirmation, tested on its runs as one family of their own (Holm
    among them, at the report's alpha): its confirmatory verdicts. Empty without a design (a stage
    stored before designs existed)."""
    from ..stats import adjust, compare

    if not design:
        return []
    j = confirmed.judgement
    samples = {r.label: dict(r.seeds) for r in confirmed.ranked}
    pairs = [tuple(p) for p in design.get("primary", []) if p[0] in samples and p[1] in samples]
    comps = [compare(samples, a, b, margin=j.margin, alpha=j.alpha) for a, b in pairs]
    adjust(comps, j.alpha)
    raced = any(c.exploratory for r in confirmed.ranked for c in r.comparisons)
    for c in comps:
        c.exploratory = raced
    return comps


def primary_lines(confirmed: Ranking, design: dict | None) -> list[str]:
    """The primary contrasts: what the confirmation was designed to decide, and its verdict."""
    if design is not None and not design.get("primary"):
        return ["**No primary contrast**: the default one (the search's first found placement against its best "
                "baseline) needs both among the confirmed architectures with successful runs, and they are not; "
                "every comparison below is secondary.", ""]
    comps = primary_results(confirmed, design)
    if not comps:
        return []
    by = {tuple(p["contrast"]): p for p in design.get("contrasts", [])}
    k = len(comps)
    n = design.get("seeds")
    lines = [f"**Primary contrast{'s' if k > 1 else ''}** (declared before the runs; "
             f"{'Holm among the ' + str(k) + ', ' if k > 1 else ''}alpha {design.get('alpha', 0.05):g}; the other "
             f"comparisons below are secondary):", ""]
    for c in comps:
        plan = by.get((c.arch, c.against), {})
        if plan.get("effect") is not None:
            why = (f"designed for {n} seeds each: the search's difference {plan['search_diff']:+.4f} {UNIT}, shrunk to "
                   f"{plan['effect']:+.4f}, at the search's SDs {plan['sd'][0]:.4f} and {plan['sd'][1]:.4f}, gives "
                   f"Welch's test at alpha {design.get('alpha_each', 0.05):g} a power of {plan['power']:.2f}"
                   + (f" (the target {design['target_power']:g} would need more than the {n} allowed)"
                      if design.get("auto") and plan["power"] < design["target_power"] else ""))
        else:
            why = f"{n} seeds each (the search had too few successful runs to plan from)"
        if c.p_value is None:
            result = "no test (too few successful runs)"
        elif c.verdict in ("better", "worse"):
            result = (f"**{c.arch} is {c.verdict} than {c.against}** by {abs(c.diff):.4f} {UNIT} "
                      f"[{c.ci_low:+.4f}, {c.ci_high:+.4f}], p = {c.p_holm:.3g}")
        elif c.verdict == "equivalent":
            result = f"**equivalent** within ±{c.margin:g} {UNIT} (TOST p = {c.p_tost_holm:.3g})"
        else:
            result = (f"**undecided**: {c.diff:+.4f} {UNIT} [{c.ci_low:+.4f}, {c.ci_high:+.4f}], p = {c.p_holm:.3g}; "
                      f"the data show equivalence within ±{c.margin_equivalent:.3f} at most")
        lines.append(f"- `{c.arch}` vs `{c.against}`: {result}. ({why}.)"
                     + (" **Exploratory**: racing added seeds from the results, so this is not the fixed design's "
                        "verdict." if c.exploratory else ""))
    return lines + [""]


def confirmed_lines(search: Ranking, confirmed: Ranking, stage_attrs: dict[str, Any], report_path: str) -> list[str]:
    """The headline section when a confirmation exists."""
    lines = ["## Confirmed verdicts (fresh seeds, test split)", ""]
    info = stage_attrs.get("stage") or {}
    settings = info.get("settings") or {}
    seeds = info.get("seeds") or []
    runs = [x for r in confirmed.rows for x in r.runs]
    windows = max((x.test_windows for x in runs), default=0)
    lines.append(f"The search's top {settings.get('top', '?')} found placement(s) and the baselines were trained again "
                 f"on seeds that chose nothing ({', '.join(map(str, seeds))}"
                 f"{' and those racing added' if stage_attrs.get('racing_round_0') else ''}), each at the cell "
                 f"(learning rate, and init where the recipe tunes it) the search chose for it on its own "
                 f"seeds, and scored on a test split of {windows} windows "
                 f"({settings.get('test_bytes', 0):,}+ bytes) that no validation window touches. These are the "
                 f"verdicts; the search's numbers, from the seeds and windows that chose, are beside them "
                 f"(full confirmation report: [{report_path}]({report_path})).")
    lines.append("")
    if not confirmed.ranked:
        return lines + ["The confirmation has no finished architecture yet.", ""]
    lines.append("| confirmed rank | architecture | test loss [95% CI] | seeds | failed | P(best) | rank interval "
                 "| cell | search rank | search loss [95% CI] |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|")
    by_label = {r.label: r for r in search.rows}
    for r in confirmed.ranked:
        s = by_label.get(r.label)
        p = f"{r.p_best:.2f}" if r.p_best is not None else "-"
        lines.append(f"| {r.rank} | {r.label}{' (baseline)' if r.is_baseline else ''} | {num(r.score_mean)} "
                     f"{_ci(r.ci_low, r.ci_high)} | {r.n_seeds} | {r.n_failed} | {p} | [{r.rank_low}, {r.rank_high}] "
                     f"| {chosen_cell(r)} | {s.rank if s else '-'} | "
                     f"{num(s.score_mean) if s else '-'} {_ci(s.ci_low, s.ci_high) if s else ''} |")
    lines.append("")
    lines += primary_lines(confirmed, info.get("design"))
    for a in confirmed.against:
        if a not in confirmed.missing_against:
            lines.append(f"- {'Exploratory (racing)' if race_dependent(confirmed) else 'Confirmed'}, against `{a}`: "
                         + verdict_line(confirmed, a))
    lines += _first_lines(search, confirmed, info)
    se = [x.test_se for x in runs if x.test_se is not None]
    sds = [statistics.stdev(r.seeds.values()) for r in confirmed.ranked if len(r.seeds) > 1]
    if se:
        med = statistics.median(se)
        vs = ""
        if sds:
            sd = statistics.median(sds)
            vs = (f", against a seed-to-seed SD of {sd:.4f} {UNIT} (the median over the architectures of each one's "
                  f"own SD: the evaluation is {'small' if med < sd / 2 else 'not small'} against seed noise)")
        lines.append(f"- **Evaluation noise**: the test split's own standard error (a bootstrap over its windows) is "
                     f"{med:.4f} {UNIT} per run (median){vs}.")
    race = racing_summary(stage_attrs, confirmed, len(seeds))
    if race:
        stopped = race["stop"] or "it has not finished"
        base = race["runs"] - race["extra_runs"]
        unsettled = race["reason"] == "budget"
        lines.append(f"- **Racing** added {race['extra_runs']} run(s) over {race['rounds']} round(s) to the "
                     f"architectures whose rank interval reached the leader's; it stopped: {stopped}. Against the "
                     f"fixed design it replaced ({len(seeds)} seeds each, {base} runs) it spent "
                     f"{race['extra_runs'] / base if base else float('nan'):.0%} more; giving every architecture the "
                     f"{race['max_seeds']} seeds the most-raced one got would have taken {race['fixed_design_runs']} "
                     f"runs in all, against the {race['runs']} trained"
                     + (", though racing ended on its budget with the contenders still overlapping, so that is not "
                        "a saving at equal certainty." if unsettled else "."))
        lines.append("- Racing chose where to add seeds from the results so far, so the seed counts above depend on "
                     "the data; the intervals and p-values are not adjusted for that (docs/statistics.md, racing).")
    return lines + [""]


def race_dependent(confirmed: Ranking) -> bool:
    return any(c.exploratory for r in confirmed.ranked for c in r.comparisons)


def _first_lines(search: Ranking, confirmed: Ranking, info: dict[str, Any]) -> list[str]:
    """What became of the search's first, and whether the confirmation is of the search as it stands."""
    out = []
    best, first = confirmed.ranked[0], search.ranked[0] if search.ranked else None
    labels = {r.label for r in confirmed.rows}
    if first is not None and first.label not in labels:
        out.append(f"- The search's first, **{first.label}**, was not confirmed (it is not among the architectures "
                   f"this confirmation trained).")
    elif first is not None and best.label == first.label:
        out.append(f"- The search's first, **{first.label}**, is also first on fresh seeds and the test split.")
    elif first is not None:
        out.append(f"- The search's first, **{first.label}**, is not first on fresh seeds and the test split: "
                   f"**{best.label}** is (P(best) {num(best.p_best, '{:.2f}')}). A search winner that does not "
                   f"confirm was partly chosen by the noise of the seeds that chose it.")
    top = (info.get("settings") or {}).get("top")
    trained = [e["arch_id"] for e in info.get("entries") or [] if not e.get("baseline")]
    now = [r.arch_id for r in search.ranked if not r.is_baseline][:top] if top is not None else trained
    if set(now) != set(trained):  # another order of the same top K changes nothing the confirmation trained
        by_arch = {r.arch_id: r.label for r in search.rows}
        out.append(f"- **The search has changed since this confirmation was made**: its top {top} found placements "
                   f"are now {', '.join(by_arch.get(a, a) for a in now) or 'none'}, the confirmation trained "
                   f"{', '.join(by_arch.get(a, a) for a in trained) or 'none'}. These verdicts are of the search as it "
                   f"stood then.")
    return out
