"""The report of the recipe variants (``normsearch robustness``): ``robustness.md`` and
``robustness.json`` in one folder, and each variant's own report (its ranking) beside them. The
statistics are :mod:`normsearch.stats.robustness`'s; this module writes them."""

from __future__ import annotations

import json
from pathlib import Path

from .._throughput import carried_interval
from ..records import jsonable


def _f(x, digits: int = 3, signed: bool = True) -> str:
    if x is None:
        return "-"
    return f"{x:+.{digits}f}" if signed else f"{x:.{digits}f}"


def _gap(g) -> str:
    if g.diff is None:
        return "not trained yet" if g.verdict == "not trained" else "failed"
    mark = {"better": " **better**", "worse": " **worse**", "equivalent": " equiv."}.get(g.verdict, "")
    return f"{g.diff:+.3f} [{_f(g.ci_low)}, {_f(g.ci_high)}]{mark}"


def robustness_data(parent, cfg, rungs_dir: Path | None = None, write_variants: bool = True) -> dict:
    """Every variant's ranking (written as its own report unless ``write_variants`` is False) and the
    statistics across them, as plain data."""
    from ..errors import NormsearchError
    from ..ranking import rank, stat_runs
    from ..stages._stage import has_finished_trial
    from ..stages.robustness import describe, kind_of, overrides_of, steps_factor, variant_handles
    from ..stats.rung import Rung, rung_from_runs
    from ..stats.robustness import summarise
    from ._files import write_report

    variants = variant_handles(parent, cfg)
    if not variants:
        raise NormsearchError(f"study {parent.recipe.name!r} has no robustness variants yet; run "
                              f"`normsearch robustness` on it first")
    entries = variants[0][2].entries
    found = [e.label for e in entries if not e.baseline]
    bases = [e.label for e in entries if e.baseline]
    rungs, listed = [], []
    for name, handle, stage in variants:
        folder = handle.folder if rungs_dir is None else Path(rungs_dir) / kind_of(name)
        t, m = stage.recipe.train, stage.recipe.model
        entry = {"name": name, "what": describe(parent.recipe, cfg, name),
                 "overrides": overrides_of(parent.recipe, cfg, name),
                 "steps_factor": steps_factor(parent.recipe, cfg, name), "steps": t.steps,
                 "tokens": t.steps * t.batch_size * m.context_length}
        if not has_finished_trial(handle):  # still to train (a stage in progress): no ranking to write, no gap to read
            rungs.append(Rung(name, {}))
            listed.append({**entry, "trained": False, "report": None, "rows": []})
            continue
        if write_variants:
            ranking = write_report(handle, folder, against=bases or None, overwrite=True)
        else:
            ranking = rank(handle, against=bases)
        rows = [r for r in ranking.rows if r.runs]
        rungs.append(rung_from_runs(name, stat_runs(rows, ranking.judgement.unigram_bpb)))
        listed.append({
            **entry, "trained": True, "report": str(folder / "report.md"),
            "rows": [{"label": r.label, "baseline": r.is_baseline, "rank": r.rank, "mean": r.score_mean,
                      "ci": [r.ci_low, r.ci_high], "n_seeds": r.n_seeds, "n_runs": r.n_runs,
                      "failure_rate": r.failure_rate, "lr": r.best_lr, "lrs": sorted(r.per_lr),
                      "init": r.init, "n_params": r.n_params, "tokens_per_s": r.tokens_per_s,
                      "precision": r.precision, "throughput_ratio": getattr(r, "throughput_ratio", None),
                      "throughput_ratio_ci": [getattr(r, "throughput_ratio_low", None),
                                              getattr(r, "throughput_ratio_high", None)],
                      "effective_speedup": getattr(r, "effective_speedup", None),
                      "speedup_lower_bound": getattr(r, "speedup_lower_bound", False),
                      "speedup_at_baseline_loss": getattr(r, "speedup_at_baseline_loss", None),
                      "speedup_against": getattr(r, "speedup_against", ""),
                      "throughput_source": getattr(r, "throughput_source", ""),
                      "throughput_noisy": getattr(r, "throughput_noisy", False)} for r in ranking.rows],
        })
    lengths = {v["name"]: v["steps_factor"] for v in listed if v["steps_factor"] is not None}
    pairs = [(a, b) for a in found for b in bases]
    summaries = summarise(rungs, pairs, lengths if len(lengths) >= 2 else None)
    return {"study": parent.recipe.name, "seeds": variants[0][2].seeds, "found": found, "baselines": bases,
            "variants": listed, "contrasts": [s.to_dict() for s in summaries]}


def write_robustness_report(parent, cfg, out_dir: Path, rungs_dir: Path | None = None) -> Path:
    """``robustness.md`` and ``robustness.json`` in ``out_dir``; each variant's report in
    ``<rungs_dir>/robust-<name>/`` (None: in its results folder)."""
    data = robustness_data(parent, cfg, rungs_dir)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "robustness.json").write_text(json.dumps(jsonable(data), indent=1) + "\n")
    path = out_dir / "robustness.md"
    path.write_text(robustness_markdown(data, out_dir))
    return path


def robustness_markdown(data: dict, out_dir: Path) -> str:
    from ..stats.robustness import ContrastSummary, Pooled, Trend, VariantGap

    lines = [f"# Recipe variants of study `{data['study']}`", "",
             f"The search's top placements ({', '.join(data['found']) or 'none'}) and the baselines "
             f"({', '.join(data['baselines']) or 'none'}), each in the init its search chose, retrained under each "
             f"variant on fresh seeds {data['seeds']}, the learning rate swept in each; every number is bits per "
             f"byte on the variant's own validation windows (a gap compares two architectures within one variant).",
             "", "| variant | what | steps | tokens a run | its report |", "|---|---|---|---|---|"]
    for v in data["variants"]:
        if not v.get("trained", True):
            lines.append(f"| {v['name']} | {v['what']} | {v['steps']} | {v['tokens']:,} | not trained yet |")
            continue
        rel = Path(v["report"])
        try:
            rel = rel.relative_to(out_dir.parent) if not rel.is_relative_to(out_dir) else rel.relative_to(out_dir)
            rel = Path("..") / rel if not Path(v["report"]).is_relative_to(out_dir) else rel
        except ValueError:
            pass
        lines.append(f"| {v['name']} | {v['what']} | {v['steps']} | {v['tokens']:,} | [report]({rel}) |")
    contrasts = []
    for c in data["contrasts"]:
        s = ContrastSummary(c["arch"], c["against"], [VariantGap(**g) for g in c["gaps"]], c["sign_holds"],
                            c["n_estimated"], c["n_better"], c["n_worse"], c["n_failed"],
                            Pooled(**c["pooled"]) if c["pooled"] else None,
                            Trend(**c["length"]) if c["length"] else None, n_untrained=c.get("n_untrained", 0))
        contrasts.append(s)
    names = [v["name"] for v in data["variants"]]
    untrained = sum(not v.get("trained", True) and not v.get("steps_factor") for v in data["variants"])
    lines += ["", "## Gaps by variant", "",
              "Found minus baseline, with its 95% interval; **better**/**worse**: Holm over the variant's contrasts "
              "at 0.05 (no variance pre-test). 'failed': a side with no successful run (reported apart, not a loss); "
              "'not trained yet': a side with no run yet (the stage is still training).",
              "", "| contrast | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for s in contrasts:
        by = {g.variant: g for g in s.gaps}
        lines.append(f"| {s.arch} vs {s.against} | " + " | ".join(_gap(by[n]) if n in by else "-" for n in names)
                     + " |")
    lines += ["", "## Across the recipe variants", "",
              "Over the reference and the recipe variants (the training-length series is read below): in how "
              "many the found placement's mean is lower, in how many it is significantly better or worse, and "
              "the average gap from a random-effects model (the variant a random effect; REML, Hartung-Knapp "
              "interval on k - 1 df; tau: how much a change of recipe moves the gap)"
              + (f"; {untrained} of the recipe variants are not trained yet and count in no column." if untrained
                 else "."), "",
              "| contrast | sign holds | better | worse | failed | average gap [95%] | tau |",
              "|---|---|---|---|---|---|---|"]
    for s in contrasts:
        p = s.pooled
        avg = f"{p.mean:+.3f} [{p.ci_low:+.3f}, {p.ci_high:+.3f}] (k = {p.k})" if p else "-"
        lines.append(f"| {s.arch} vs {s.against} | {s.sign_holds} of {s.n_estimated} | {s.n_better} | {s.n_worse} | "
                     f"{s.n_failed} | {avg} | {_f(p.tau, signed=False) if p else '-'} |")
    if any(s.length for s in contrasts):
        lines += ["", "## Training length", "",
                  "Each gap at the steps of the reference and of the length variants, regressed on log10 of the "
                  "factor (weights 1/SE^2; t on the smallest Welch df of the points). *Shrinks toward zero*: the "
                  "slope's 95% interval lies wholly against the gap's sign.", "",
                  "| contrast | gaps (x steps) | slope per 10x [95%] | trend |", "|---|---|---|---|"]
        for s in contrasts:
            t = s.length
            if t is None:
                continue
            gaps = ", ".join(f"{d:+.3f} ({f:g}x)" for f, d in zip(t.factors, t.diffs))
            lines.append(f"| {s.arch} vs {s.against} | {gaps} | {t.slope:+.3f} [{t.ci_low:+.3f}, {t.ci_high:+.3f}] | "
                         f"{t.verdict} |")
    cost = [(v["name"], r) for v in data["variants"] for r in v["rows"] if r.get("throughput_ratio") is not None]
    if cost:
        lines += ["", "## What it costs", "",
                  "Training tokens/s relative to the best baseline of the variant (measured: every architecture "
                  "timed interleaved in one process; runs: the runs' own records), and the effective speed-up: the "
                  "compute the best baseline needs to reach the architecture's final loss, per unit of the "
                  "architecture's, read from the baseline's validation curve, times the throughput ratio (`>=`: the "
                  "baseline never reached that loss, a lower bound, not extrapolated); and the other way round, "
                  "the baseline's compute over what the architecture needs to reach the baseline's final loss. "
                  "Measured ratios: the median of the per-round ratios with its distribution-free 95% interval, "
                  "carried over to both speed-ups (the tokens/s measurement's uncertainty alone, not the steps'). "
                  "`~`: from runs whose recorded tokens/s vary by more than 10% (a shared machine), no per-second "
                  "verdict.",
                  "", "| variant | architecture | against | tokens/s ratio | source | effective speed-up | "
                  "at the baseline's loss |", "|---|---|---|---|---|---|---|"]
        for name, r in cost:
            mark = "~" if r.get("throughput_noisy") else ""
            eff = r["effective_speedup"]
            eff = None if eff is None else {"value": eff, "bound": "lower" if r.get("speedup_lower_bound") else None}
            at = r.get("speedup_at_baseline_loss")
            lines.append(f"| {name} | {r['label']} | {r.get('speedup_against') or '-'} | "
                         f"{_f(r['throughput_ratio'], 2, False)}{_scaled(r, r['throughput_ratio'])}{mark} | "
                         f"{r.get('throughput_source') or '-'} | "
                         f"{_speedup(eff)}{_scaled(r, eff)}{mark if eff is not None else ''} | "
                         f"{_speedup(at)}{_scaled(r, at)}{mark if at is not None else ''} |")
    return "\n".join(lines) + "\n"


def _scaled(row: dict, x) -> str:
    """' [low, high]': ``x`` (the ratio, or a speed-up that is steps times it; a dict with its ``value``) over the
    measured ratio's interval (:func:`normsearch._throughput.carried_interval`); '' where there is none."""
    ci = carried_interval(x.get("value") if isinstance(x, dict) else x, row.get("throughput_ratio"),
                          *(row.get("throughput_ratio_ci") or (None, None)))
    return f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else ""


def _speedup(x) -> str:
    if x is None:
        return "-"
    if isinstance(x, dict):
        v = x.get("value")
        return "-" if v is None else (">= " if x.get("bound") == "lower" else "") + f"{v:.2f}x"
    return f"{x:.2f}x"
