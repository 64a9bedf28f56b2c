"""``report.md``: the ranking, the comparisons with the baselines, which sites matter, the
diagnostics and the plots, in Markdown. It reads the ranking and the analysis; it computes nothing
of its own."""

from __future__ import annotations

from typing import Any

from ..ranking import Ranking
from ..records import is_control_label
from ._analysis import Importance, SiteEffect, diagnostics_summary
from ._columns import TABLE, kernels_text, num
from ._plots import SEARCH_PLOTS, searched
from ._verdicts import (comparisons_section, judgement_lines, learning_rate_lines, score_definition, search_lines,
                        summary_lines)

SMALL_PARAMS = 10_000_000  # below these a ranking is a demonstration, not a result
SMALL_TOKENS = 100_000_000
SMALL_SEEDS = 3

PLOT_CAPTIONS = {
    "loss_curves": ("Validation loss curves",
                    "Validation loss against training step for the best found placements (solid) and the baselines "
                    "(dashed), averaged over seeds at each architecture's best learning rate."),
    "residual_rms": ("Residual-stream RMS by depth",
                     "How large the residual stream is after the embedding and after every block, at initialisation "
                     "and at the end of training (log scale). Pre-LN lets it grow with depth; Peri-LN keeps it "
                     "bounded (Kim et al. 2025)."),
    "grad_norm": ("Gradient norm by layer",
                  "Gradient norm of each layer's FFN weights at initialisation and at the end of training (log "
                  "scale). Post-LN concentrates gradient in the last layers at initialisation (Xiong et al. 2020)."),
    "attention_logits": ("Largest attention logit during training",
                         "The largest pre-softmax attention logit (over layers) at every evaluation. Without q/k "
                         "norms it can grow without bound at high learning rates (Wortsman et al. 2023)."),
    "loss_vs_lr": ("Loss and failures against learning rate",
                   "Left: each architecture's mean final loss (the ranking's score: validation, or test for a "
                   "confirmation) over its successful runs at every learning rate it trained, its basin shaded "
                   "where it has one. Right: the fraction of its runs that diverged or stalled there."),
    "search_value": ("Did the search help?",
                     "Every proposal's score by proposal number: the sampler's random start-up and model-based "
                     "proposals, the control proposals (uniform draws) where they came, failures on the top edge; "
                     "the title gives the trend and the test against uniform draws."),
    "importance": ("Site importance",
                   "Optuna's parameter importance of the search-space choices (see Which sites matter)."),
    "site_effects": ("Mean score with minus without a norm, per site",
                     "Raw difference of mean scores between architectures with a norm at the site in every layer and "
                     "those with none there (see Which sites matter)."),
    "history": ("Optimisation history",
                "Every finished trial's score by trial number, the best searched placement so far, and the best "
                "baseline."),
}


def _md(text: Any) -> str:
    return str(text).replace("|", "\\|")


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _count(n: float) -> str:
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= div:
            return f"{n / div:.1f}{suffix}"
    return f"{n:.0f}"


def _training_line(train, ranked, tokens_run) -> str:
    """What every architecture trained: the same budget, or, where the sweep extends or refines itself
    around each architecture's best or a grid multiplies it, the same rule, with the runs it gave. A
    stage trains each architecture in the one variant of the grid its search chose: told from the runs."""
    from ..grid import grid_text, variant_tag

    lrs = ", ".join(f"{x:g}" for x in train.lr)
    n_seeds, n_lr = len(train.seeds), len(train.lr)
    each = (f"each run {train.steps} steps of {train.batch_size} sequences"
            f"{f' ({_count(tokens_run)} tokens)' if tokens_run else ''}. Seeds: {', '.join(map(str, train.seeds))}.")
    adaptive = []
    if train.lr_extend:
        adaptive.append(f"extended by up to {train.lr_extend} point(s) past an end that holds the best")
    if train.lr_resolution:
        adaptive.append(f"refined around the chosen one until a neighbour on each side is within "
                        f"{train.lr_resolution:g} decades")
    if not adaptive and not train.grid:
        return (f"- **Training**: every architecture, baselines included, gets the same budget: {n_seeds} seed(s) x "
                f"{n_lr} learning rate(s) ({lrs}) = {n_seeds * n_lr} runs, {each}")
    n_variants = [len({variant_tag(x.variant or {}) for x in r.runs}) for r in ranked if getattr(r, "runs", None)]
    sweep = " and ".join(adaptive)
    if train.grid and n_variants and max(n_variants) > 1:
        rule = (f" in each variant of the tuned grid ({grid_text(train.grid)}; a found placement has no paper init, "
                f"and a baseline's paper init that is another init of the grid is trained once)"
                + (f", then, around its best cell and its lowest-loss cell only, {sweep}" if sweep else ""))
    elif train.grid:
        rule = (" in the one variant of the tuned grid its search chose for it (the init beside its best lr)"
                + (f", {sweep}" if sweep else ""))
    else:
        rule = f", {sweep}"
    counts = sorted(r.n_runs for r in ranked)
    runs = (f"{counts[0]} runs per architecture" if counts and counts[0] == counts[-1] else
            f"{counts[0]} to {counts[-1]} runs per architecture (median {counts[len(counts) // 2]})" if counts else
            "no architecture finished yet")
    return (f"- **Training**: every architecture, baselines included, under the same rule: {n_seeds} seed(s) at each "
            f"learning rate of the grid ({lrs}){rule}, each architecture scored at its best cell; that gave {runs}; "
            f"{each}")


def _header(ranking: Ranking, files: dict[str, str]) -> list[str]:
    rec = ranking.recipe
    model, data, train, search = rec.model, rec.data, rec.train, rec.search
    ranked = ranking.ranked
    n_base = sum(r.is_baseline for r in ranked)
    n_pruned = sum(r.state == "PRUNED" for r in ranking.rows)
    lines = [f"# normsearch report: `{ranking.study}`", ""]

    # the two notices that change how everything below should be read
    if not ranking.finished:
        waiting = ranking.n_trials.get("WAITING", 0)
        state = "still running" if ranking.running else "not finished"
        lines += [f"> **The study is {state}** ({ranking.running} trial(s) running, {waiting} waiting to start). "
                  f"This report ranks the {len(ranked)} architecture(s) that have finished; run `normsearch report` "
                  f"again when the study ends.", ""]
    j = ranking.judgement
    if len(j.precisions) > 1:
        counts = ", ".join(f"{n} at {p or 'an unrecorded precision'}" for p, n in j.precisions.items())
        lines += [f"> **Runs of more than one precision** ({counts}). Runs of different precisions are never pooled: "
                  f"this ranking compares the runs at {j.precision}, the precision most runs used, and leaves the "
                  f"other {j.precision_excluded} out (`train.precision: auto` measures which is faster per machine; "
                  f"name the precision in the recipe to have one).", ""]
    reasons = []
    max_params = max((r.n_params for r in ranked), default=0)
    tokens_run = ranking.cost.tokens_per_run
    seeds = train.seeds
    if ranked and max_params < SMALL_PARAMS:
        reasons.append(f"the models have at most {_count(max_params)} parameters")
    if tokens_run is not None and tokens_run < SMALL_TOKENS:
        reasons.append(f"each run trains on {_count(tokens_run)} tokens")
    if len(seeds) < SMALL_SEEDS:
        reasons.append(f"each architecture has {len(seeds)} seed(s)")
    if reasons:
        lines += ["> **A demonstration, not a scientific result.** At this size (" + "; ".join(reasons) + ") the "
                  "ranking shows how the tool works. Which placement wins in a small, briefly trained model often "
                  "changes at scale.", ""]

    lines += ["## What was measured", ""]
    n_ctrl = sum(is_control_label(r.label, r.is_baseline) for r in ranked)
    lines.append(f"- **Study** `{ranking.study}`: {len(ranked)} architecture(s) ranked ({n_base} baseline(s) from "
                 f"the papers, {len(ranked) - n_base - n_ctrl} found by the search"
                 + (f", {n_ctrl} control(s): uniform draws from the space" if n_ctrl else "") + ")"
                 + (f", {n_pruned} pruned before the end" if n_pruned else "")
                 + ". Trials by state: " + ", ".join(f"{n} {s.lower()}" for s, n in sorted(ranking.n_trials.items()))
                 + ". Several trials that proposed the same network are one row.")
    param = getattr(model, "parametrization", "standard")
    lines.append(f"- **Model**: {model.n_layers} layers, width {model.d_model}, {model.n_heads} heads, context "
                 f"{model.context_length} tokens, vocabulary {model.vocab_size}"
                 + (f", {param} parametrisation (base width {model.mup_base_width})" if param != "standard" else "")
                 + f". **Data**: {data.corpus or data.path}, {data.tokenizer} tokens.")
    confirmation = any(x.metric == "test_bpb" for r in ranking.rows for x in r.runs)
    if confirmation:
        lines.append(f"- **Training** (a confirmation): each architecture on the fresh seeds "
                     f"{', '.join(map(str, train.seeds))} (and any racing added) at the one learning rate the search "
                     f"chose for it, each run {train.steps} steps of {train.batch_size} sequences"
                     f"{f' ({_count(tokens_run)} tokens)' if tokens_run else ''}; scored on the test split, not the "
                     f"validation windows.")
    else:
        lines.append(_training_line(train, ranked, tokens_run))
    stage = "/" in ranking.study  # a stage of a search (confirmation, ladder rung): no search of its own
    lines.append(f"- **Score** (lower is better): {score_definition(confirmation, data.tokenizer)}. "
                 + ("The architectures are the search's: no sampler here." if stage else
                    f"Search: {search.sampler} sampler, {search.trials} architectures to find besides the baselines, "
                    f"optimising the `{ranking.objective}` objective."))
    second = search.second_objective
    if second and second != "none":
        lines.append(f"- This study also optimised {second} (a Pareto search); this ranking orders by the loss only.")
    c = ranking.cost
    if c.runs:
        tps = f", {c.tokens_per_s:,.0f} tokens/s on average" if c.tokens_per_s else ""
        tokens = f", {_count(c.tokens)} tokens" if c.tokens else ""
        lines.append(f"- **Cost**: {c.runs} training runs, {_duration(c.wall_time_s)} of training in total "
                     f"(the sum of the runs' wall-clock times){tokens}{tps}.")
    envs = sorted({(r.device or "?", r.precision or "?", kernels_text(r)) for r in ranking.rows if r.runs})
    if envs:
        lines.append("- **Hardware and kernels**: " + "; ".join(f"{d}, precision {p}, norm kernels {k}"
                                                                for d, p, k in envs) + ".")
    if files.get("csv"):
        lines.append(f"- The same rows as data: [{files['csv']}]({files['csv']}), [{files['json']}]({files['json']}).")
    lines.append("")
    return lines


def _table(ranking: Ranking) -> list[str]:
    from ..spec import SITE_ABBREV

    lines = ["## Ranking", "", "| " + " | ".join(c.title for c in TABLE) + " |",
             "|" + "|".join("---" for _ in TABLE) + "|"]
    for r in ranking.rows:
        lines.append("| " + " | ".join(_md(c.cell(r, markdown=True)) for c in TABLE) + " |")
    tags = {t.split(":")[0].rstrip("F") for r in ranking.rows for t in r.sites.replace("|", " ").split()}
    used = [a for s, a in SITE_ABBREV.items() if a in tags and a != s]
    names = {v: k for k, v in SITE_ABBREV.items()}
    lines += ["", "How to read it:", "",
              "- **label**: a baseline's name, or `t<N>` for a placement the search found: its proposal number after "
              "the baselines (under `search.reproducible`), else its trial number.",
              "- **sites**: where the norms are, per block then after `|` the model-level ones, and the norm kind in "
              "brackets; `L0: ...; L1-3: ...` when layers differ, `F` after q/k/v: normalised over the full width "
              "instead of per head. "
              + (", ".join(f"`{t}` = {names[t]}" for t in used) + "." if used else ""),
              "- **score**: see *Score* above, with its 95% interval (see *How sure*); **failed**: runs that diverged "
              "or stalled at the chosen learning rate, out of the runs there; **P(best)** and **ranks**: the "
              "probability of being first and the 95% interval of the rank; **seeds**: successful seeds behind the "
              "score.",
              "- **best lr**: the chosen learning rate; **basin**: see *Failures and learning rates*.",
              "- **params**: parameters of the model; **tokens/s**: training throughput (mean over runs that did not "
              "diverge); **kernels**: the norm implementation (torch, or fused Triton kernels with their version); "
              "**arch_id**: the network's identity (a hash of where every norm sits).",
              "- **tokens/s vs best baseline**: the row's training tokens/s over the best baseline's, measured with "
              "every architecture interleaved in one process where the study has a `throughput.json` (`normsearch "
              "report --measure-throughput`: the median of the per-round ratios, with its distribution-free 95% "
              "interval), else the median of the runs at the chosen cell; **effective "
              "speed-up**: how much more compute the best baseline needs to reach this row's final validation loss "
              "(steps read off its mean validation curve, over this row's steps, times the tokens/s ratio; in "
              "brackets the ratio's interval carried over, the measurement's uncertainty alone); `>=` "
              "marks a lower bound, where the baseline never reached that loss; a trailing `~`: read from runs whose "
              "recorded tokens/s (this row's or the baseline's) vary by more than 10% (coefficient of variation), "
              "a shared machine's noise rather than what the norms cost (`docs/statistics.md` §13).", ""]
    return lines + _cost_lines(ranking)


def _cost_lines(ranking: Ranking) -> list[str]:
    """Where a placement's verdict per step and per second differ (what its norms cost in throughput)."""
    from .._throughput import noisy_notice, per_second_sentences

    base = next((r.speedup_against for r in ranking.rows if r.speedup_against), "")
    sentences = per_second_sentences(ranking.rows) if base else []
    m = ranking.judgement.throughput
    lines = []
    if m:
        lo, hi = m.get("spread_range") or (0.0, 0.0)
        lines += [f"Tokens/s measured by `normsearch report --measure-throughput` on {m.get('date', '?')[:10]} "
                  f"({m.get('device') if m.get('device') != 'cpu' else m.get('cpu')}, {m.get('threads')} thread(s), "
                  f"torch {m.get('torch')}, {m.get('precision')}): every architecture's training step in one process, "
                  f"interleaved, {m.get('rounds')} rounds of {m.get('steps')} steps (`throughput.json`); the "
                  f"interquartile range of an architecture's rounds is {lo:.0%} to {hi:.0%} of its median. A ratio is "
                  f"the median of the per-round ratios (each round times every architecture within seconds); a "
                  f"per-second verdict is drawn only where its 95% interval puts the speed-up wholly on one side of 1.",
                  ""]
    if sentences:
        lines += [f"Per step and per second against {base}, the best baseline: " + "; ".join(sentences) + ".", ""]
    notice = noisy_notice(ranking.rows)
    return lines + ([notice, ""] if notice else [])


def _param_text(name: str) -> str:
    if name.startswith("site."):
        body, _, rng = name[5:].partition("@")
        text = body.replace("+", " + ") + (" (tied)" if "+" in body else "")
        return text + (f", depth range {rng}" if rng else "")
    if name.startswith("gran."):
        return f"granularity of {name[5:]}"
    if name == "kind":
        return "norm kind"
    return name


def _sites_section(ranking: Ranking, effects: list[SiteEffect], imp: Importance) -> list[str]:
    lines = ["## Which sites matter", "", "### Parameter importance (Optuna)", ""]
    if imp.ok:
        q = (f" with `target_quantile={imp.target_quantile:g}`: how much each choice matters for an architecture to "
             f"be among the best {imp.target_quantile:.0%}") if imp.target_quantile else ""
        lines.append(f"Evaluator: `{imp.evaluator}`{q}. Computed over the {imp.n_architectures} ranked "
                     f"architectures of the search space (one trial each; baselines outside the space have no "
                     f"choices and are left out). Importances sum to 1; with few architectures they are rough.")
        lines += ["", "| choice | options | importance |", "|---|---|---|"]
        for k, v in imp.importances.items():
            lines.append(f"| {_md(_param_text(k))} (`{k}`) | {', '.join(ranking.param_choices.get(k, []))} "
                         f"| {v:.3f} |")
    else:
        lines.append(f"Evaluator: `{imp.evaluator}`: {imp.note}.")
    if imp.constant:
        lines.append("")
        lines.append("Same choice in every architecture (no importance to measure): "
                     + ", ".join(f"`{k}`" for k in imp.constant) + ".")
    lines += ["", "### Mean score with and without a norm at each site", ""]
    if not effects:
        lines.append("No ranked architecture to compare.")
        return lines + [""]
    lines.append("Over all ranked architectures (baselines included, each once): **with** = a norm at the site in "
                 "every layer (for `embed`/`final`: present), **some layers** = in some layers only, **without** = "
                 "in none. The difference is mean with minus mean without (negative: architectures with the norm "
                 "there have lower loss). These are raw means, not controlled for the other sites, and the sampler "
                 "proposes more of what worked, so read them as hints.")
    lines += ["", "| site | with: n | with: mean | some layers: n | some layers: mean | without: n | without: mean "
              "| with - without |", "|---|---|---|---|---|---|---|---|"]
    for e in effects:
        diff = f"{e.diff:+.4f}" if e.diff is not None else "-"
        lines.append(f"| {e.site} | {e.n_with} | {num(e.mean_with)} | {e.n_some} | {num(e.mean_some)} | "
                     f"{e.n_without} | {num(e.mean_without)} | {diff} |")
    return lines + [""]


def _diagnostics_section(ranking: Ranking) -> list[str]:
    rows = diagnostics_summary(ranking)
    if not rows:
        return []
    lines = ["## Diagnostics at a glance", "",
             "From the runs at each architecture's best learning rate, mean over seeds: the RMS of the residual "
             "stream after the last block at initialisation and at the end, and its growth from the first block's "
             "output to the last's at the end (Kim et al. 2025); the largest attention logit at the end and at its "
             "peak during training (Wortsman et al. 2023); the last layer's FFN gradient norm over the first's at "
             "initialisation (> 1: gradient largest near the output, as Xiong et al. 2020 find for Post-LN); and "
             "the loss spikes of those runs. The plots below show the full curves.", "",
             "| label | stream RMS, init | stream RMS, end | growth over depth, end | max logit, end | "
             "max logit, peak | grad last/first, init | spikes |",
             "|---|---|---|---|---|---|---|---|"]
    for d in rows:
        lines.append("| " + " | ".join([_md(d["label"]), num(d["resid_rms_last_init"], "{:.3g}"),
                                        num(d["resid_rms_last_end"], "{:.3g}"), num(d["resid_growth_end"], "{:.2f}x"),
                                        num(d["max_logit_end"], "{:.3g}"), num(d["max_logit_peak"], "{:.3g}"),
                                        num(d["grad_last_over_first_init"], "{:.3g}"), str(d["spikes"])]) + " |")
    return lines + [""]


def _plots_section(plots: dict[str, str], top: int, search_plots: bool = True) -> list[str]:
    lines = ["## Plots", ""]
    if not plots:
        return lines + ["No plot could be drawn (no finished runs).", ""]
    lines.append(f"The curve plots show the {top} best found placement(s) and every baseline.")
    lines.append("")
    for name, (title, caption) in PLOT_CAPTIONS.items():
        if name in plots:
            lines += [f"### {title}", "", caption, "", f"![{title}]({plots[name]})", ""]
    missing = [PLOT_CAPTIONS[n][0] for n in PLOT_CAPTIONS
               if n not in plots and (search_plots or n not in SEARCH_PLOTS)]
    if missing:
        lines += ["Not drawn (no data for them): " + ", ".join(missing) + ".", ""]
    return lines


def _problems(ranking: Ranking) -> list[str]:
    from ..grid import describe  # a diverged run's variant: one of another variant is not the chosen cell's failure

    lines = []
    div = [r for r in ranking.rows if r.n_diverged]
    if div:
        lines += ["### Diverged runs", ""]
        for r in div:
            where = ", ".join(f"seed {x.seed} at lr {float(x.lr):g}"
                              + (f", {describe(x.variant)}" if x.variant else "")
                              + (f" (step {x.diverged_step})" if x.diverged_step is not None else "")
                              for x in r.runs if x.diverged)
            lines.append(f"- {r.label}: {r.n_diverged} of {r.n_runs} runs diverged: {where}.")
        lines.append("")
    if ranking.running_trials:
        lines += ["### Still running", ""]
        for t in ranking.running_trials:
            total = f"/{t.runs_total}" if t.runs_total else ""
            lines.append(f"- trial {t.number} ({t.label}, `{t.arch_id or '?'}`): {t.runs_done}{total} "
                         f"runs done.")
        lines.append("")
    if ranking.failures:
        lines += ["### Failed trials", "", "Failed trials are not ranked; a dead worker's trial is retried.", ""]
        for f in ranking.failures:
            lines.append(f"- trial {f.number} ({f.label}): {_md(f.failure)}")
        lines.append("")
    return (["## Failures, divergences, unfinished work", ""] + lines) if lines else []


def report_markdown(ranking: Ranking, effects: list[SiteEffect], importance: Importance,
                    plots: dict[str, str] | None = None, files: dict[str, str] | None = None, top: int = 3,
                    confirmed: list[str] | None = None, stages: list[str] | None = None) -> str:
    """``report.md``'s text. ``plots``: name -> file name (relative to the report). ``confirmed``: the
    confirmation stage's headline lines, which then come first, the search's summary after them.
    ``stages``: lines naming the study's other stages (its ablations), at the end of *What was measured*."""
    lines = _header(ranking, files or {})
    lines[-1:-1] = stages or []
    at = lines.index("## What was measured")
    summary = summary_lines(ranking)
    if confirmed and summary:
        summary[0] = "## In short, from the search (the seeds and validation windows that chose)"
    lines[at:at] = (confirmed or []) + summary
    if not ranking.rows:
        lines += ["No architecture has finished yet: nothing to rank.", ""]
    else:
        lines += _table(ranking) + judgement_lines(ranking) + comparisons_section(ranking)
        lines += learning_rate_lines(ranking)
        if searched(ranking):  # a stage retrains a fixed list: no sampler to judge, no space to read
            lines += search_lines(ranking) + _sites_section(ranking, effects, importance)
        lines += _diagnostics_section(ranking)
        n_found = sum(not r.is_baseline for r in ranking.ranked)
        lines += _plots_section(plots or {}, min(top, n_found), searched(ranking))
    lines += _problems(ranking)
    return "\n".join(lines).rstrip() + "\n"


