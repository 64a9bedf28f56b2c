"""``ladder.md``: what each rung trained, its ranking, and the ladder's statistics in words (the
sentences themselves are :mod:`normsearch.report._ladder_verdicts`)."""

from __future__ import annotations

import os

from ..report._columns import num
from ..report._ladder_verdicts import ladder_lines


def _count(n: float) -> str:
    for unit, size in (("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return f"{n:.0f}"


def ladder_markdown(parent, cfg, rungs, rankings, stats, plot: str | None, n_planned: int, out_dir=None,
                    mode: str = "sweep") -> str:

    r0 = parent.recipe
    lines = [f"# normsearch ladder: `{r0.name}`", ""]
    if len(rungs) < n_planned or any(not rk.finished for rk in rankings):
        lines += [f"> **The ladder is not finished**: {len(rungs)} of {n_planned} rungs started; a rung still "
                  f"running is ranked on what has finished. Run `normsearch ladder` again to finish it.", ""]
    tokens_rule = (f"{cfg.tokens_per_param:g} training tokens per parameter of the rung's first baseline"
                   if cfg.tokens_per_param is not None else f"the search's {r0.train.steps} steps at every rung")
    cap = f", capped at {cfg.max_steps} steps" if cfg.max_steps is not None else ""
    param = getattr(r0.model, "parametrization", "standard")
    lrs = (f"each architecture at the learning rate the search chose for it ({param} parametrisation: "
           f"transferred, not swept)" if mode == "transfer" else
           f"a sweep at every rung over {', '.join(f'{x:g}' for x in r0.train.lr)}"
           + (f", extended by up to {r0.train.lr_extend} point(s) past an end that holds the best" if r0.train.lr_extend
              else "") + ", each architecture scored at its best")
    lines += ["## What was trained", "",
              f"The search's top {cfg.top} found placement(s) and the baselines "
              f"{', '.join(cfg.baselines or r0.search.baselines)}, retrained at {n_planned} sizes on fresh seeds "
              f"{cfg.first_seed} to {cfg.first_seed + cfg.seeds - 1}; tokens: {tokens_rule}{cap}; learning rate: "
              f"{lrs}. Same data, tokenizer, vocabulary and context at every rung; scored on the validation windows.",
              "", "| rung | model | parameters | steps | tokens per run | runs | training time |",
              "|---|---|---|---|---|---|---|"]
    for rung, rk in zip(rungs, rankings):
        m = rung.recipe.model
        lines.append(f"| {rung.index} | {m.n_layers} layers, width {m.d_model}, {m.n_heads} heads | "
                     f"{rung.n_params:,} | {rung.steps} | {_count(rung.tokens)} | {rk.cost.runs} | "
                     f"{rk.cost.wall_time_s / 60:.1f} min |")
    lines.append("")
    lines += ["## Each rung", ""]
    for rung, rk in zip(rungs, rankings):
        link = os.path.relpath(parent.folder / rung.recipe.folder.name / "report.md", out_dir or parent.folder / "x")
        lines += [f"### Rung {rung.index} ({rung.n_params:,} parameters) ([full report]({link}))", "",
                  "| rank | architecture | loss [95% CI] | failed | P(best) | best lr |", "|---|---|---|---|---|---|"]
        for r in rk.ranked:
            ci = f" [{r.ci_low:.4f}, {r.ci_high:.4f}]" if r.ci_low is not None else ""
            p = f"{r.p_best:.2f}" if r.p_best is not None else "-"
            lines.append(f"| {r.rank} | {r.label}{' (baseline)' if r.is_baseline else ''} | {num(r.score_mean)}{ci} | "
                         f"{r.n_failed}/{r.n_runs} | {p} | {num(r.best_lr, '{:g}')} |")
        lines.append("")
    if stats is not None:
        lines += ladder_lines(stats)
    if plot:
        lines += ["## Loss against parameters", "", f"![loss against parameters]({plot})", "",
                  "Points: mean loss over successful seeds with 95% intervals; lines: the fitted power laws, dashed "
                  "beyond the largest rung.", ""]
    return "\n".join(lines).rstrip() + "\n"
