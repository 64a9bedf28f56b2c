"""The report of a study: a ranked table in the terminal, with the same rows in Markdown, CSV and
JSON, paired comparisons with the baselines, which sites matter, and plots.

    ranking = write_report(handle, Path("results/quickstart"))   # report.md, ranking.csv/.json, *.png
    console.print(ranking_table(ranking))
"""

from __future__ import annotations

import csv
import json
import math
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.table import Table

from .ranking import DEFAULT_AGAINST, RANKED, Ranking, Row, format_p, rank

UNIT = "bits/byte"
MIN_IMPORTANCE = 6  # architectures of the space needed before Optuna's importance means anything
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
    "loss_vs_lr": ("Final loss against learning rate",
                   "Each architecture's final validation loss at every learning rate of the sweep; a red cross marks "
                   "a learning rate where a seed diverged. A flat curve means low learning-rate sensitivity."),
    "importance": ("Site importance",
                   "Optuna's parameter importance of the search-space choices (see Which sites matter)."),
    "site_effects": ("Mean score with minus without a norm, per site",
                     "Raw difference of mean scores between architectures with a norm at the site in every layer and "
                     "those with none there (see Which sites matter)."),
    "history": ("Optimisation history",
                "Every finished trial's score by trial number, the best searched placement so far, and the best "
                "baseline."),
}


def _num(v, fmt="{:.4f}") -> str:
    return "-" if v is None else fmt.format(v)


def _score_text(r: Row) -> str:
    if r.state != RANKED:
        return "pruned" if r.state == "PRUNED" else "no score"
    ci = f" [{_num(r.ci_low)}, {_num(r.ci_high)}]" if r.ci_low is not None else ""
    return _num(r.score_mean) + ci


def _kernels_text(r: Row) -> str:
    if not r.kernels:
        return "-"
    return r.kernels + (f" (Triton {r.triton_version})" if r.triton_version else "")


def ranking_table(ranking: Ranking) -> Table:
    """The ranked rows as a rich table (baselines marked with *)."""
    from rich.markup import escape

    title = f"{ranking.study}: {ranking.objective} validation {UNIT} (lower is better)"
    if not ranking.finished:
        title += (f" - study not finished ({ranking.running} running, {ranking.n_trials.get('WAITING', 0)} waiting), "
                  f"ranking what is finished")
    table = Table(title=escape(title), title_justify="left")
    for col in ("rank", "label", "sites", "score [95% CI]", "seeds", "runs", "div", "best lr", "lr sens.",
                "params", "tok/s", "kernels", "arch_id"):
        table.add_column(col, justify="right" if col in ("rank", "seeds", "runs", "div", "params", "tok/s") else "left")
    for r in ranking.rows:
        cells = ("-" if r.rank is None else str(r.rank), r.label + (" *" if r.is_baseline else ""), r.sites,
                 _score_text(r), str(r.n_seeds), str(r.n_runs), str(r.n_diverged), _num(r.best_lr, "{:g}"),
                 _num(r.lr_sensitivity), f"{r.n_params:,}", f"{r.tokens_per_s:,.0f}", _kernels_text(r), r.arch_id)
        table.add_row(*map(escape, cells))  # sites hold "[rmsnorm]", which rich would read as markup
    return table


# --------------------------------------------------------------------------------------------------
# Which sites matter


@dataclass
class SiteEffect:
    """Mean score of the ranked architectures by whether they have a norm at ``site``: in every
    layer (``with``; for embed/final: present), in some layers only (``some``), in none
    (``without``). ``diff`` = mean with - mean without (negative: the norm goes with a lower loss)."""

    site: str
    n_with: int
    mean_with: float | None
    n_some: int
    mean_some: float | None
    n_without: int
    mean_without: float | None
    diff: float | None


def _presence(placement: dict, n_layers: int) -> dict[str, str]:
    """site -> all | some | none for one placement at ``n_layers``."""
    from .spec import BLOCK_SITES, Placement

    r = Placement.from_dict(placement).resolve(n_layers)
    out = {"embed": "all" if r.embed else "none", "final": "all" if r.final else "none"}
    for site in BLOCK_SITES:
        k = sum(1 for i in range(n_layers) if site in r.block(i))
        out[site] = "all" if k == n_layers else "some" if k else "none"
    return out


def site_effects(ranking: Ranking) -> list[SiteEffect]:
    """For every site used by at least one ranked architecture: the mean score with a norm there in
    every layer, in some layers, and in none (see :class:`SiteEffect`). Baselines count as
    architectures like any other; each architecture counts once."""
    from .spec import SITES

    rows = [r for r in ranking.ranked if r.placement]
    n_layers = ranking.n_layers
    if not rows or not n_layers:
        return []
    pres = [(r, _presence(r.placement, int(n_layers))) for r in rows]
    out = []
    for site in SITES:
        groups: dict[str, list[float]] = {"all": [], "some": [], "none": []}
        for r, p in pres:
            groups[p[site]].append(r.score_mean)
        if not groups["all"] and not groups["some"]:
            continue
        mean = {k: (sum(v) / len(v) if v else None) for k, v in groups.items()}
        diff = mean["all"] - mean["none"] if mean["all"] is not None and mean["none"] is not None else None
        out.append(SiteEffect(site, len(groups["all"]), mean["all"], len(groups["some"]), mean["some"],
                              len(groups["none"]), mean["none"], diff))
    return out


@dataclass
class Importance:
    """Optuna's parameter importance over the search-space choices, or why it was not computed."""

    evaluator: str  # the evaluator's class name
    importances: dict[str, float] = field(default_factory=dict)  # parameter -> importance, largest first
    n_architectures: int = 0  # ranked architectures of the space it was computed on
    constant: list[str] = field(default_factory=list)  # parameters with one value in every architecture
    target_quantile: float | None = None  # PED-ANOVA: importance of reaching the best this fraction
    note: str | None = None  # why there are no importances, when there are none

    @property
    def ok(self) -> bool:
        return bool(self.importances)


def site_importance(ranking: Ranking, evaluator=None, min_architectures: int = MIN_IMPORTANCE) -> Importance:
    """``optuna.importance.get_param_importances`` over the search-space parameters (``site.*``,
    ``kind``, ``gran.*`` where every architecture has them), one trial per ranked architecture of
    the space, valued by the ranking's score. The default evaluator is Optuna's own default,
    PED-ANOVA (``PedAnovaImportanceEvaluator``), with ``target_quantile`` raised from 0.1 to
    ``min(0.5, 5 / n)`` so that at least about five architectures make the top group (the
    evaluator's own advice). Never raises: a study with too few architectures gets a ``note``."""
    import optuna
    from optuna.distributions import CategoricalDistribution

    rows = [r for r in ranking.ranked if r.params]
    names = [n for n in ranking.param_choices if rows and all(n in r.params for r in rows)]
    constant = [n for n in names if len({r.params[n] for r in rows}) < 2]
    varying = [n for n in names if n not in constant]
    name = type(evaluator).__name__ if evaluator is not None else "PedAnovaImportanceEvaluator"
    imp = Importance(name, n_architectures=len(rows), constant=constant)
    if len(rows) < min_architectures:
        imp.note = (f"not computed: {len(rows)} ranked architecture(s) of the search space, fewer than the "
                    f"{min_architectures} it needs to say anything")
        return imp
    if not varying:
        imp.note = "not computed: every architecture of the space made the same choices"
        return imp
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            study = optuna.create_study(storage=optuna.storages.InMemoryStorage(), direction="minimize")
            for r in rows:
                study.add_trial(optuna.trial.create_trial(
                    params={n: r.params[n] for n in varying},
                    distributions={n: CategoricalDistribution(ranking.param_choices[n]) for n in varying},
                    value=r.score_mean,
                ))
            if evaluator is None:
                imp.target_quantile = min(0.5, max(0.1, 5 / len(rows)))
                evaluator = optuna.importance.PedAnovaImportanceEvaluator(target_quantile=imp.target_quantile)
            result = optuna.importance.get_param_importances(study, evaluator=evaluator, params=varying)
    except Exception as e:  # an evaluator's missing dependency (fANOVA needs scikit-learn) or a degenerate case
        imp.note = f"not computed: {name} failed ({type(e).__name__}: {e})"
        return imp
    finally:
        optuna.logging.set_verbosity(verbosity)
    imp.importances = {k: float(v) for k, v in sorted(result.items(), key=lambda kv: -kv[1])}
    return imp


# --------------------------------------------------------------------------------------------------
# Files


CSV_COLUMNS = ("rank", "label", "is_baseline", "state", "sites", "score_mean", "ci_low", "ci_high", "n_seeds",
               "n_runs", "n_diverged", "best_lr", "lr_sensitivity", "n_params", "n_norm_params", "tokens_per_s",
               "wall_time", "kernels", "triton_version", "precision", "device", "arch_id", "trials", "placement")
COMPARISON_COLUMNS = ("n", "diff", "ci_low", "ci_high", "p_value", "verdict")


def _clean(x: Any) -> Any:
    """JSON-safe: non-finite floats become null."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    return x


def diagnostics_summary(ranking: Ranking) -> list[dict[str, Any]]:
    """A few numbers per ranked architecture from the runs at its best learning rate (mean over
    seeds): the residual-stream RMS after the last block at initialisation and at the end, its growth
    from the first block's output to the last's at the end (Kim et al. 2025), the largest attention
    logit at the end and at its peak (Wortsman et al. 2023), the last layer's FFN gradient norm over
    the first's at initialisation (Xiong et al. 2020), and the loss spikes."""
    from . import plots as P

    out = []
    for r in ranking.ranked:
        runs = P.best_runs(r)
        rms0, rms1 = P.mean_diagnostic(runs, "resid_rms", "first"), P.mean_diagnostic(runs, "resid_rms", "last")
        g0 = P.mean_diagnostic(runs, "grad_norm", "first")
        logit1 = P.mean_diagnostic(runs, "max_logit", "last")
        peaks = [max(max(d["max_logit"]) for d in run.get("diagnostics") or [] if d.get("max_logit"))
                 for run in runs if any(d.get("max_logit") for d in run.get("diagnostics") or [])]
        out.append({
            "label": r.label,
            "resid_rms_last_init": rms0[-1] if rms0 else None,
            "resid_rms_last_end": rms1[-1] if rms1 else None,
            "resid_growth_end": rms1[-1] / rms1[1] if rms1 and len(rms1) > 1 and rms1[1] else None,
            "max_logit_end": max(logit1) if logit1 else None,
            "max_logit_peak": sum(peaks) / len(peaks) if peaks else None,
            "grad_last_over_first_init": g0[-1] / g0[0] if g0 and g0[0] else None,
            "spikes": sum(int(run.get("spikes") or 0) for run in runs),
        })
    return out


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
        lines.append("| " + " | ".join([_md(d["label"]), _num(d["resid_rms_last_init"], "{:.3g}"),
                                        _num(d["resid_rms_last_end"], "{:.3g}"), _num(d["resid_growth_end"], "{:.2f}x"),
                                        _num(d["max_logit_end"], "{:.3g}"), _num(d["max_logit_peak"], "{:.3g}"),
                                        _num(d["grad_last_over_first_init"], "{:.3g}"), str(d["spikes"])]) + " |")
    return lines + [""]


def ranking_json(ranking: Ranking, effects: list[SiteEffect] | None = None,
                 importance: Importance | None = None, plots: dict[str, str] | None = None) -> dict[str, Any]:
    """Everything in the report as plain data; ``rows`` carry the ranked table and the comparisons."""
    return _clean({
        "study": ranking.study,
        "objective": ranking.objective,
        "unit": UNIT,
        "finished": ranking.finished,
        "trials": ranking.n_trials,
        "running": ranking.running_trials,
        "failures": ranking.failures,
        "against": ranking.against,
        "missing_against": ranking.missing_against,
        "n_layers": ranking.n_layers,
        "cost": ranking.cost,
        "rows": [r.to_dict() for r in ranking.rows],
        "diagnostics": diagnostics_summary(ranking),
        "site_effects": [asdict(e) for e in effects or []],
        "importance": asdict(importance) if importance is not None else None,
        "plots": plots or {},
        "recipe": ranking.recipe,
    })


def write_csv(ranking: Ranking, path: Path) -> Path:
    """One line per architecture; each comparison as ``vs_<baseline>_<field>`` columns."""
    header = list(CSV_COLUMNS) + [f"vs_{a}_{c}" for a in ranking.against for c in COMPARISON_COLUMNS]
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        for r in ranking.rows:
            d = r.to_dict()
            d["trials"] = " ".join(map(str, r.trials))
            d["placement"] = json.dumps(r.placement, sort_keys=True)
            line = [_csv(d[c]) for c in CSV_COLUMNS]
            for a in ranking.against:
                c = r.comparison(a)
                line += [_csv(getattr(c, k)) if c else "" for k in COMPARISON_COLUMNS]
            w.writerow(line)
    return path


def _csv(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(v) if math.isfinite(v) else ""
    return str(v)


# --------------------------------------------------------------------------------------------------
# Markdown


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


def score_definition(objective: str) -> str:
    if objective == "robust":
        return (f"the validation loss in {UNIT} at the end of training, averaged over the whole learning-rate sweep "
                f"and over seeds (the `robust` objective: it punishes divergence and a narrow learning-rate basin). "
                f"Its 95% CI is Student's t over the seeds' own sweep averages")
    return (f"the validation loss in {UNIT} at the end of training, averaged over seeds at the architecture's best "
            f"learning rate (the `mean` objective; the best learning rate is the one with the lowest mean among "
            f"those where no seed diverged). Its 95% CI is Student's t over the seeds")


def _header(ranking: Ranking, files: dict[str, str]) -> list[str]:
    rec = ranking.recipe
    model, data, train = rec.get("model") or {}, rec.get("data") or {}, rec.get("train") or {}
    search = rec.get("search") or {}
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
    reasons = []
    max_params = max((r.n_params for r in ranked), default=0)
    tokens_run = ranking.cost.get("tokens_per_run")
    seeds = train.get("seeds") or sorted({s for r in ranked for s in r.seeds})
    if ranked and max_params < SMALL_PARAMS:
        reasons.append(f"the models have at most {_count(max_params)} parameters")
    if tokens_run is not None and tokens_run < SMALL_TOKENS:
        reasons.append(f"each run trains on {_count(tokens_run)} tokens")
    if len(seeds) < SMALL_SEEDS:
        reasons.append(f"each architecture has {len(seeds)} seed(s)")
    if reasons:
        lines += ["> **A demonstration, not a scientific result.** At this size (" + "; ".join(reasons) + ") the "
                  "ranking shows how the tool works. Which placement wins in a small, briefly trained model often "
                  "changes at scale, and differences inside the confidence intervals are noise.", ""]

    lines += ["## What was measured", ""]
    lines.append(f"- **Study** `{ranking.study}`: {len(ranked)} architecture(s) ranked ({n_base} baseline(s) from "
                 f"the papers, {len(ranked) - n_base} found by the search)"
                 + (f", {n_pruned} pruned before the end" if n_pruned else "")
                 + ". Trials by state: " + ", ".join(f"{n} {s.lower()}" for s, n in sorted(ranking.n_trials.items()))
                 + ". Several trials that proposed the same network are one row.")
    if model:
        lines.append(f"- **Model**: {model.get('n_layers')} layers, width {model.get('d_model')}, "
                     f"{model.get('n_heads')} heads, context {model.get('context_length')} tokens, vocabulary "
                     f"{model.get('vocab_size')}. **Data**: {data.get('corpus', '?')}, {data.get('tokenizer', '?')} "
                     f"tokens.")
    if train:
        lrs = ", ".join(f"{x:g}" for x in train.get("lr") or [])
        n_seeds, n_lr = len(train.get("seeds") or []), len(train.get("lr") or [])
        per_run = f" ({_count(tokens_run)} tokens)" if tokens_run else ""
        lines.append(f"- **Training**: every architecture, baselines included, gets the same budget: {n_seeds} "
                     f"seed(s) x {n_lr} learning rate(s) ({lrs}) = {n_seeds * n_lr} runs, each "
                     f"{train.get('steps')} steps of {train.get('batch_size')} sequences{per_run}. Seeds: "
                     f"{', '.join(map(str, train.get('seeds') or []))}.")
    lines.append(f"- **Score** (lower is better): {score_definition(ranking.objective)}. A run that diverged counts "
                 f"as its loss at initialisation (Wortsman et al. 2023). "
                 + (f"Search: {search.get('sampler')} sampler, {search.get('trials')} architectures to find besides "
                    f"the baselines." if search else ""))
    second = search.get("second_objective")
    if second and second != "none":
        lines.append(f"- This study also optimised {second} (a Pareto search); this ranking orders by the loss only.")
    c = ranking.cost
    if c.get("runs"):
        tps = f", {c['tokens_per_s']:,.0f} tokens/s on average" if c.get("tokens_per_s") else ""
        tokens = f", {_count(c['tokens'])} tokens" if c.get("tokens") else ""
        lines.append(f"- **Cost**: {c['runs']} training runs, {_duration(c['wall_time_s'])} of training in total "
                     f"(the sum of the runs' wall-clock times){tokens}{tps}.")
    envs = sorted({(r.device or "?", r.precision or "?", _kernels_text(r)) for r in ranking.rows if r.runs})
    if envs:
        lines.append("- **Hardware and kernels**: " + "; ".join(f"{d}, precision {p}, norm kernels {k}"
                                                                for d, p, k in envs) + ".")
    if files.get("csv"):
        lines.append(f"- The same rows as data: [{files['csv']}]({files['csv']}), [{files['json']}]({files['json']}).")
    lines.append("")
    return lines


def _table(ranking: Ranking) -> list[str]:
    from .spec import SITE_ABBREV

    cols = ["rank", "label", "sites", f"score ({UNIT}) [95% CI]", "seeds", "runs", "diverged", "best lr", "lr sens.",
            "params", "tokens/s", "kernels", "arch_id"]
    lines = ["## Ranking", "", "| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for r in ranking.rows:
        label = f"**{r.label}** (baseline)" if r.is_baseline else r.label
        cells = ["-" if r.rank is None else str(r.rank), label, f"`{r.sites}`" if r.sites else "-", _score_text(r),
                 str(r.n_seeds), str(r.n_runs), str(r.n_diverged), _num(r.best_lr, "{:g}"), _num(r.lr_sensitivity),
                 f"{r.n_params:,}", f"{r.tokens_per_s:,.0f}", _kernels_text(r), f"`{r.arch_id}`"]
        lines.append("| " + " | ".join(_md(x) for x in cells) + " |")
    tags = {t.split(":")[0].rstrip("F") for r in ranking.rows for t in r.sites.replace("|", " ").split()}
    used = [a for s, a in SITE_ABBREV.items() if a in tags and a != s]
    names = {v: k for k, v in SITE_ABBREV.items()}
    lines += ["", "How to read it:", "",
              "- **label**: a baseline's name, or `t<N>` for the placement found by trial N of the search.",
              "- **sites**: where the norms are, per block then after `|` the model-level ones, and the norm kind in "
              "brackets; `L0: ...; L1-3: ...` when layers differ, `F` after q/k/v: normalised over the full width "
              "instead of per head. "
              + (", ".join(f"`{t}` = {names[t]}" for t in used) + "." if used else ""),
              "- **score**: see *Score* above; **seeds**: seeds behind it; **runs**: every (seed, learning rate) "
              "run; **diverged**: runs that diverged (NaN or a loss far above its start).",
              "- **best lr**: the learning rate the score is taken at; **lr sens.**: learning-rate sensitivity as "
              "Wortsman et al. (2023) define it, the mean over the sweep of the final loss (capped at the loss at "
              "initialisation) minus its minimum: 0 is perfectly flat, larger means a narrow basin; `-` with one "
              "learning rate.",
              "- **params**: parameters of the model; **tokens/s**: training throughput (mean over runs that did not "
              "diverge); **kernels**: the norm implementation (torch, or fused Triton kernels with their version); "
              "**arch_id**: the network's identity (a hash of where every norm sits).", ""]
    return lines


def _verdict_line(ranking: Ranking, a: str) -> str:
    """One sentence: do found placements beat baseline ``a`` beyond noise?"""
    found = [(r, r.comparison(a)) for r in ranking.ranked if not r.is_baseline and r.comparison(a) is not None]
    compared = [(r, c) for r, c in found if c.compared]
    better = [(r, c) for r, c in compared if c.verdict == "better"]
    if not found:
        return f"No found placement has finished yet to compare with `{a}`."
    if not compared:
        return f"No found placement could be compared with `{a}`: {found[0][1].verdict}."
    if better:
        r, c = better[0]
        return (f"**{len(better)} of {len(compared)} found placement(s) beat `{a}` beyond noise**: "
                f"{', '.join(r.label for r, _ in better)} (the best, {r.label}, by {-c.diff:.3f} {UNIT}, "
                f"{format_p(c.p_value)}).")
    r, c = compared[0]
    return (f"**No found placement beats `{a}` beyond noise** ({len(compared)} compared; the best, {r.label}, "
            f"differs by {c.diff:+.3f} {UNIT}, {format_p(c.p_value)}: {c.verdict}).")


def _summary(ranking: Ranking) -> list[str]:
    ranked = ranking.ranked
    if not ranked:
        return []
    best = ranked[0]
    bases = [r for r in ranked if r.is_baseline]
    lines = ["## In short", ""]
    ci = f" (95% CI [{best.ci_low:.4f}, {best.ci_high:.4f}])" if best.ci_low is not None else ""
    kind = "a baseline" if best.is_baseline else "found by the search"
    lines.append(f"- Best architecture: **{best.label}** ({kind}, sites `{best.sites}`), "
                 f"{best.score_mean:.4f} {UNIT}{ci}.")
    if bases and not best.is_baseline:
        b = bases[0]
        lines.append(f"- Best baseline: **{b.label}**, {b.score_mean:.4f} {UNIT} (rank {b.rank}).")
    for a in ranking.against:
        if a not in ranking.missing_against:
            lines.append(f"- Against `{a}`: " + _verdict_line(ranking, a))
    if ranked and ranked[0].n_seeds < 2:
        lines.append("- One seed per architecture: no confidence intervals and no comparisons; the order of the "
                     "rows may be noise.")
    return lines + [""]


def _comparisons(ranking: Ranking) -> list[str]:
    lines = ["## Against the baselines", ""]
    lines.append("Each architecture is compared with a baseline on the seeds both have: the difference of their "
                 "scores seed by seed (negative: lower loss than the baseline), the 95% CI of its mean (Student's t), "
                 "and the p-value of a two-sided paired t-test. A difference counts only if p < 0.05; otherwise it "
                 "is **within noise**. With one seed nothing is compared. The p-values are not corrected for "
                 "multiple comparisons: of many comparisons, about 1 in 20 will look significant by chance.")
    lines.append("")
    for a in ranking.missing_against:
        lines += [f"- `{a}` is not a finished architecture of this study: nothing is compared with it.", ""]
    for a in ranking.against:
        if a in ranking.missing_against:
            continue
        comps = [(r, r.comparison(a)) for r in ranking.ranked if r.comparison(a) is not None]
        lines += [f"### Against `{a}`", ""]
        lines.append(_verdict_line(ranking, a))
        lines.append("")
        for r, c in comps:
            lines.append("- " + c.sentence(r.label, UNIT))
        lines += ["", "| label | seeds | difference | 95% CI | p | verdict |", "|---|---|---|---|---|---|"]
        for r, c in comps:
            ci = f"[{c.ci_low:+.4f}, {c.ci_high:+.4f}]" if c.ci_low is not None else "-"
            diff = f"{c.diff:+.4f}" if c.diff is not None else "-"
            p = "-" if c.p_value is None else f"{c.p_value:.3g}"
            lines.append(f"| {_md(r.label)} | {c.n} | {diff} | {ci} | {p} | {c.verdict} |")
        lines.append("")
    return lines


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
        lines.append(f"| {e.site} | {e.n_with} | {_num(e.mean_with)} | {e.n_some} | {_num(e.mean_some)} | "
                     f"{e.n_without} | {_num(e.mean_without)} | {diff} |")
    return lines + [""]


def _plots_section(plots: dict[str, str], top: int) -> list[str]:
    lines = ["## Plots", ""]
    if not plots:
        return lines + ["No plot could be drawn (no finished runs).", ""]
    lines.append(f"The curve plots show the {top} best found placements and every baseline.")
    lines.append("")
    for name, (title, caption) in PLOT_CAPTIONS.items():
        if name in plots:
            lines += [f"### {title}", "", caption, "", f"![{title}]({plots[name]})", ""]
    missing = [PLOT_CAPTIONS[n][0] for n in PLOT_CAPTIONS if n not in plots]
    if missing:
        lines += ["Not drawn (no data for them): " + ", ".join(missing) + ".", ""]
    return lines


def _problems(ranking: Ranking) -> list[str]:
    lines = []
    div = [r for r in ranking.rows if r.n_diverged]
    if div:
        lines += ["### Diverged runs", ""]
        for r in div:
            where = ", ".join(f"seed {x['seed']} at lr {float(x['lr']):g}"
                              + (f" (step {x['diverged_step']})" if x.get("diverged_step") is not None else "")
                              for x in r.runs if x.get("diverged"))
            lines.append(f"- {r.label}: {r.n_diverged} of {r.n_runs} runs diverged: {where}.")
        lines.append("")
    if ranking.running_trials:
        lines += ["### Still running", ""]
        for t in ranking.running_trials:
            total = f"/{t['runs_total']}" if t.get("runs_total") else ""
            lines.append(f"- trial {t['number']} ({t['label']}, `{t['arch_id'] or '?'}`): {t['runs_done']}{total} "
                         f"runs done.")
        lines.append("")
    if ranking.failures:
        lines += ["### Failed trials", "", "Failed trials are not ranked; a dead worker's trial is retried.", ""]
        for f in ranking.failures:
            lines.append(f"- trial {f['number']} ({f['label']}): {_md(f['failure'])}")
        lines.append("")
    return (["## Failures, divergences, unfinished work", ""] + lines) if lines else []


def report_markdown(ranking: Ranking, effects: list[SiteEffect], importance: Importance,
                    plots: dict[str, str] | None = None, files: dict[str, str] | None = None, top: int = 3) -> str:
    """``report.md``'s text. ``plots``: name -> file name (relative to the report)."""
    lines = _header(ranking, files or {})
    at = lines.index("## What was measured")
    lines[at:at] = _summary(ranking)
    if not ranking.rows:
        lines += ["No architecture has finished yet: nothing to rank.", ""]
    else:
        lines += _table(ranking) + _comparisons(ranking) + _sites_section(ranking, effects, importance)
        lines += _diagnostics_section(ranking)
        lines += _plots_section(plots or {}, top)
    lines += _problems(ranking)
    return "\n".join(lines).rstrip() + "\n"


def write_report(handle_or_study, out_dir: Path, against=DEFAULT_AGAINST, objective: str | None = None,
                 evaluator=None, top: int = 3) -> Ranking:
    """Rank the study and write ``report.md``, ``ranking.csv``, ``ranking.json`` and the PNG plots
    into ``out_dir`` (created). ``handle_or_study``: a StudyHandle, an optuna Study or a results
    folder. ``evaluator``: an Optuna importance evaluator (default PED-ANOVA, see
    :func:`site_importance`). Returns the ranking (print it with :func:`ranking_table`)."""
    from . import plots as P

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    ranking = rank(handle_or_study, against=against, objective=objective)
    effects = site_effects(ranking)
    importance = site_importance(ranking, evaluator)
    written: dict[str, str] = {}
    label = importance.evaluator + (f" (target_quantile={importance.target_quantile:g})"
                                    if importance.target_quantile else "")
    for name, fig in P.all_figures(ranking, effects, importance.importances, label, top).items():
        P.save(fig, out_dir / f"{name}.png")
        written[name] = f"{name}.png"
    for stale in set(P.PLOT_NAMES) - set(written):  # a plot of an earlier report that has no data now
        (out_dir / f"{stale}.png").unlink(missing_ok=True)
    files = {"csv": "ranking.csv", "json": "ranking.json"}
    write_csv(ranking, out_dir / files["csv"])
    data = ranking_json(ranking, effects, importance, written)
    (out_dir / files["json"]).write_text(json.dumps(data, indent=1) + "\n")
    (out_dir / "report.md").write_text(report_markdown(ranking, effects, importance, written, files, top))
    return ranking
