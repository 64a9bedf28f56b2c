"""The confirmed verdicts: the confirmation stage's ranking (fresh seeds, test split) beside the
search's (the seeds and validation windows that chose), in words for ``report.md``."""

from __future__ import annotations

import statistics
from typing import Any

from ..ranking import Ranking
from ._columns import num
from ._verdicts import UNIT, verdict_line


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
            "stop": (end or {}).get("stop"), "runs": runs, "fixed_design_runs": fixed, "max_seeds": most}


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
                 f"{' and those racing added' if stage_attrs.get('racing_round_0') else ''}), each at the learning "
                 f"rate the search chose for it on its own seeds, and scored on a test split of {windows} windows "
                 f"({settings.get('test_bytes', 0):,}+ bytes) that no validation window touches. These are the "
                 f"verdicts; the search's numbers, from the seeds and windows that chose, are beside them "
                 f"(full confirmation report: [{report_path}]({report_path})).")
    lines.append("")
    if not confirmed.ranked:
        return lines + ["The confirmation has no finished architecture yet.", ""]
    lines.append("| confirmed rank | architecture | test loss [95% CI] | seeds | failed | P(best) | rank interval "
                 "| lr | search rank | search loss [95% CI] |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|")
    by_label = {r.label: r for r in search.rows}
    for r in confirmed.ranked:
        s = by_label.get(r.label)
        p = f"{r.p_best:.2f}" if r.p_best is not None else "-"
        lines.append(f"| {r.rank} | {r.label}{' (baseline)' if r.is_baseline else ''} | {num(r.score_mean)} "
                     f"{_ci(r.ci_low, r.ci_high)} | {r.n_seeds} | {r.n_failed} | {p} | [{r.rank_low}, {r.rank_high}] "
                     f"| {num(r.best_lr, '{:g}')} | {s.rank if s else '-'} | "
                     f"{num(s.score_mean) if s else '-'} {_ci(s.ci_low, s.ci_high) if s else ''} |")
    lines.append("")
    for a in confirmed.against:
        if a not in confirmed.missing_against:
            lines.append(f"- Confirmed, against `{a}`: " + verdict_line(confirmed, a))
    best, first = confirmed.ranked[0], search.ranked[0] if search.ranked else None
    if first is not None:
        if best.label == first.label:
            lines.append(f"- The search's first, **{first.label}**, is also first on fresh seeds and the test split.")
        else:
            lines.append(f"- The search's first, **{first.label}**, is not first on fresh seeds and the test split: "
                         f"**{best.label}** is (P(best) {num(best.p_best, '{:.2f}')}). A search winner that does not "
                         f"confirm was partly chosen by the noise of the seeds that chose it.")
    se = [x.test_se for x in runs if x.test_se is not None]
    sigma = confirmed.judgement.sigma
    if se:
        med = statistics.median(se)
        vs = (f", against a seed-to-seed SD of {sigma:.4f} {UNIT} (the evaluation is "
              f"{'small' if med < sigma / 2 else 'not small'} against seed noise)" if sigma else "")
        lines.append(f"- **Evaluation noise**: the test split's own standard error (a bootstrap over its windows) is "
                     f"{med:.4f} {UNIT} per run (median){vs}.")
    race = racing_summary(stage_attrs, confirmed, len(seeds))
    if race:
        ratio = race["runs"] / race["fixed_design_runs"] if race["fixed_design_runs"] else float("nan")
        lines.append(f"- **Racing** added {race['extra_runs']} run(s) over {race['rounds']} round(s) to the "
                     f"architectures whose rank interval reached the leader's; it stopped because "
                     f"{race['stop'] or 'it has not finished'}. It spent {race['runs']} runs where giving every "
                     f"architecture the {race['max_seeds']} seeds the most-raced one got would have spent "
                     f"{race['fixed_design_runs']} ({ratio:.2f} of that).")
    return lines + [""]
