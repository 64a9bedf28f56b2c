"""The ladder's report: ``ladder.md`` (what each rung trained, its ranking, and the ladder's statistics
in words; the sentences themselves are :mod:`._ladder_verdicts` and :mod:`._ladder_gate`),
``ladder.json``, ``ladder.png`` and ``ladder_failures.png``, and each rung's own report
(:func:`write_ladder_report`)."""

from __future__ import annotations

import os
from pathlib import Path

from ._columns import num
from ._ladder_verdicts import ladder_lines
from ._verdicts import at_sweep_edge


def _count(n: float) -> str:
    for unit, size in (("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return f"{n:.0f}"


def _lrs(lrs) -> str:
    return ", ".join(f"{x:g}" for x in lrs)


def lr_cells(row) -> tuple[str, str, str, bool]:
    """A ranked row's failures at its chosen learning rate and over every run of the rung, the
    learning rates trained (the sweep with its extension, the chosen one in bold), and whether the
    chosen one is at an end of two or more (an unbracketed optimum)."""
    points = sorted(row.lr_points, key=lambda p: p.lr)
    all_failed, all_runs = sum(p.n_failed for p in points), sum(p.n_runs for p in points)
    chosen = next((p for p in points if p.lr == row.best_lr), None)
    at_lr = f"{chosen.n_failed}/{chosen.n_runs}" if chosen is not None else f"{all_failed}/{all_runs}"
    lrs = ", ".join(f"**{p.lr:g}**" if p is chosen else f"{p.lr:g}" for p in points) or "-"
    return at_lr, f"{all_failed}/{all_runs}", lrs, at_sweep_edge(row)


def _trained(r0, cfg, rungs, mode: str) -> str:
    """The learning rates in words: transferred, or the sweep with the ladder's own extension."""
    param = getattr(r0.model, "parametrization", "standard")
    if mode == "transfer":
        return (f"each architecture at the learning rate the search chose for it ({param} parametrisation and rungs "
                f"that vary the width alone: transferred, not swept; not checked at the rungs)")
    extend = rungs[0].recipe.train.lr_extend if rungs else r0.train.lr_extend
    model = rungs[0].recipe.model if rungs else r0.model
    under = ("the standard parametrisation" if model.parametrization == "standard" else
             f"the {model.parametrization} parametrisation (base width {model.mup_base_width})")
    text = f"under {under}, a sweep at every rung over {_lrs(r0.train.lr)}"
    if extend:
        text += (f", extended by up to {extend} point(s) past an end that holds the best (the learning rates each "
                 f"architecture trained are in the rung's table)")
    return text + ", each architecture scored at its best"


def _precisions(rk) -> list[str]:
    """Every precision the rung's runs recorded (none for runs stored before it was recorded)."""
    return sorted({str(x.precision) for r in rk.rows for x in r.runs if getattr(x, "precision", "")})


def ladder_markdown(parent, cfg, rungs, rankings, stats, plot: str | None, n_planned: int, out_dir=None,
                    mode: str = "sweep", folders=None, chosen_by: str = "the top of the search's ranking",
                    failures_plot: str | None = None, found_order: list[str] | None = None) -> str:
    """The whole ``ladder.md``. ``folders``: where each rung's own report was written (linked
    relative to ``out_dir``); default the rungs' results folders."""
    r0 = parent.recipe
    out_dir = Path(out_dir) if out_dir is not None else parent.folder / "ladder"
    folders = folders or [parent.folder / rung.recipe.folder.name for rung in rungs]
    lines = [f"# normsearch ladder: `{r0.name}`", ""]
    if len(rungs) < n_planned or any(not rk.finished for rk in rankings):
        lines += [f"> **The ladder is not finished**: {len(rungs)} of {n_planned} rungs started; a rung still "
                  f"running is ranked on what has finished. Run `normsearch ladder` again to finish it.", ""]
    tokens_rule = (f"{cfg.tokens_per_param:g} training tokens per parameter of the rung's first baseline"
                   if cfg.tokens_per_param is not None else f"the search's {r0.train.steps} steps at every rung")
    cap = f", capped at {cfg.max_steps} steps" if cfg.max_steps is not None else ""
    bases = cfg.baselines if cfg.baselines is not None else r0.search.baselines
    found = found_order or ([r.label for r in rankings[0].rows if not r.is_baseline] if rankings else [])
    lines += ["## What was trained", "",
              f"The top {cfg.top} found placement(s) ({', '.join(found) or 'none'}; {chosen_by}) "
              f"and the baselines "
              f"{', '.join(bases) or '(none)'}, retrained at {n_planned} sizes on fresh seeds "
              f"{cfg.first_seed} to {cfg.first_seed + cfg.seeds - 1}; tokens: {tokens_rule}{cap}; learning rate: "
              f"{_trained(r0, cfg, rungs, mode)}. Same data, tokenizer, vocabulary and context at every rung; scored "
              f"on the validation windows. Runs: every run of the rung, at every learning rate; training time: the "
              f"sum of those runs' times, not wall clock (workers train side by side).",
              "", "| rung | model | parameters | steps | tokens per run | tokens per parameter | precision | runs | "
              "training time (sum of runs) |", "|---|---|---|---|---|---|---|---|---|"]
    mixed = []
    for rung, rk in zip(rungs, rankings):
        m = rung.recipe.model
        prec = _precisions(rk)
        unknown = "not recorded" if rk.rows else "none finished yet"  # a rung's first architecture still training
        if len(prec) > 1:
            mixed.append(f"rung {rung.index} ({', '.join(prec)})")
        lines.append(f"| {rung.index} | {m.n_layers} layers, width {m.d_model}, {m.n_heads} heads | "
                     f"{rung.n_params:,} | {rung.steps} | {_count(rung.tokens)} | {rung.tokens / rung.n_params:.3g} | "
                     f"{', '.join(prec) or unknown} | {rk.cost.runs} | {rk.cost.wall_time_s / 60:.1f} min |")
    lines.append("")
    if mixed:
        lines += [f"> **Mixed precision**: the runs of {'; '.join(mixed)} recorded more than one numeric precision; "
                  f"their losses are not all measured alike.", ""]
    lines += ["## Each rung", "",
              "Failed: diverged or stalled runs, at the architecture's chosen learning rate (what the hurdle ranks "
              "by) and over all its runs at the rung (every learning rate trained). Learning rates: those trained, "
              "the chosen one in bold; *edge* marks a chosen learning rate at an end of those trained, an optimum "
              "the sweep did not bracket: the optimum may lie beyond the trained range, where a wider sweep could "
              "find a lower loss.", ""]
    for rung, rk, folder in zip(rungs, rankings, folders):
        link = os.path.relpath(Path(folder) / "report.md", out_dir)
        lines += [f"### Rung {rung.index} ({rung.n_params:,} parameters) ([full report]({link}))", "",
                  "| rank | architecture | loss [95% CI] | failed at its lr | failed, all lrs | P(best) | "
                  "learning rates trained | note |", "|---|---|---|---|---|---|---|---|"]
        for r in rk.ranked:
            ci = f" [{r.ci_low:.4f}, {r.ci_high:.4f}]" if r.ci_low is not None else ""
            p = f"{r.p_best:.2f}" if r.p_best is not None else "-"
            at_lr, every, lrs, edge = lr_cells(r)
            note = "edge: not bracketed" if edge else "-"
            lines.append(f"| {r.rank} | {r.label}{' (baseline)' if r.is_baseline else ''} | {num(r.score_mean)}{ci} | "
                         f"{at_lr} | {every} | {p} | {lrs} | {note} |")
        lines.append("")
    if stats is not None:
        lines += ladder_lines(stats)
    if plot:
        lines += ["## Loss against parameters", "", f"![loss against parameters]({plot})", "",
                  "Points: mean loss over successful seeds with 95% intervals; lines: the fitted power laws (over five "
                  "or more rungs; dotted where a fit fails or lacks its lack-of-fit test), dashed beyond the largest "
                  "rung. Right: the share of failed runs per rung over every learning rate "
                  "(filled) and at the chosen one (hollow).", ""]
    if failures_plot:
        lines += ["## Failures by learning rate and rung", "",
                  f"![failed runs by learning rate and rung]({failures_plot})", "",
                  "One panel per architecture: the share of failed runs at each learning rate trained, one line per "
                  "rung (darker: larger), Wilson 95% intervals; the chosen learning rate ringed.", ""]
    return "\n".join(lines).rstrip() + "\n"


def write_ladder_report(parent, cfg, out_dir: Path, against,
                        rungs_dir: Path | None = None) -> Path:
    """``ladder.md`` (and ``ladder.json``, ``ladder.png``, ``ladder_failures.png``) in ``out_dir``, and
    every rung's own report in ``<rungs_dir>/ladder-<i>/``; ``rungs_dir`` None: in the rung's results folder
    (``results/<study>/ladder-<i>/``). The command line passes its ``--out`` here, so that a report
    written elsewhere never rewrites the rungs' reports in the results folder."""
    import json

    from ..errors import NormsearchError
    from ..ranking import stat_runs
    from ..stages.ladder import (chosen_by, first_rung_entries, found_labels, kind_of, ladder_handles, lr_mode,
                                  stored_mode, stored_rungs)
    from ..stats.ladder import analyse_ladder, rung_from_runs
    from ._files import write_report
    from ._ladder_plots import failures_plot, ladder_plot
    from ..stats.rung import RungInfo
    from ._plots import save

    rungs = ladder_handles(parent, cfg)
    if not rungs:
        raise NormsearchError(f"study {parent.recipe.name!r} has no ladder yet; run `normsearch ladder` on it first")
    stats_rungs, rankings, folders, bases = [], [], [], {}
    for rung, handle in rungs:
        folder = handle.folder if rungs_dir is None else Path(rungs_dir) / kind_of(rung.index, cfg.name)
        ranking = write_report(handle, folder, against=against, overwrite=True)
        rankings.append(ranking)
        folders.append(folder)
        rows = [r for r in ranking.rows if r.runs]
        sizes = {r.label: float(r.n_params) for r in rows if r.n_params}
        bases.update(dict.fromkeys(r.label for r in rows if r.is_baseline))
        one = rung_from_runs(rung.name, stat_runs(rows, ranking.judgement.unigram_bpb), sizes)
        one.info = RungInfo.of(rung.name, rung.n_params, rung.tokens, rung.steps, _precisions(ranking))
        stats_rungs.append(one)
    stats = analyse_ladder(stats_rungs, target=cfg.target, baselines=list(bases)) if len(stats_rungs) >= 2 else None
    out_dir.mkdir(parents=True, exist_ok=True)
    plot = fails = None
    if stats is not None:
        named = cfg.baselines if cfg.baselines is not None else parent.recipe.search.baselines
        fig = ladder_plot(stats, baselines=named)
        if fig is not None:
            save(fig, out_dir / "ladder.png")
            plot = "ladder.png"
        fig = failures_plot(stats, baselines=named)
        if fig is not None:
            save(fig, out_dir / "ladder_failures.png")
            fails = "ladder_failures.png"
        (out_dir / "ladder.json").write_text(json.dumps(stats.to_dict(), indent=1) + "\n")
    entries = first_rung_entries(parent, cfg.name)
    text = ladder_markdown(parent, cfg, [r for r, _ in rungs], rankings, stats, plot, len(cfg.rungs), out_dir,
                           lr_mode(parent.recipe, cfg, stored=stored_mode(stored_rungs(parent, cfg.name))), folders,
                           chosen_by(entries), fails, found_labels(entries))
    path = out_dir / "ladder.md"
    path.write_text(text)
    return path
