"""The report of an ablation (``normsearch ablate``): ``ablate.md``, ``ablate.json``, ``ablate_effects.png``
and ``ablate_interactions.png`` in the stage's folder (``results/<study>/ablate-<i>/``). A plain answer
first (which sites, alone or together, carry most of the A-B gap, or that nothing does beyond noise),
then the design with each combination's runs and failures, the main effects and two-way interactions
with their intervals, Holm p-values and shares of the gap. The statistics are
:mod:`normsearch.stats.ablate`'s; this module reads the stage's runs and writes them."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from ..records import jsonable

UNIT = "bits/byte"


def _f(x, digits: int = 3, signed: bool = True) -> str:
    if x is None:
        return "-"
    return f"{x:+.{digits}f}" if signed else f"{x:.{digits}f}"


def _p(p) -> str:
    return "-" if p is None else "< 0.001" if p < 0.001 else f"{p:.3f}"


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def _samples(handle, combos: list[dict]):
    """Each combination's successful losses {seed: loss} and its failed runs, from the stage's ranking rows
    (the runs of one network split by the init they trained in); a failed run never enters a mean."""
    from ..grid import variant_tag
    from ..ranking import rank
    from ..scoring import stat_run

    ranking = rank(handle, against=[])
    unigram = ranking.judgement.unigram_bpb
    runs: dict[tuple[str, str], list] = {}
    for r in ranking.rows:
        for x in r.runs:
            if x.curve:
                runs.setdefault((r.arch_id, variant_tag(x.variant or {})), []).append(x)
    samples, failed = {}, {}
    for c in combos:
        stat = [stat_run(x, c["label"], unigram) for x in runs.get((c["arch_id"], variant_tag(c["variant"])), [])]
        samples[c["label"]] = {s.seed: float(s.loss) for s in stat if s.ok}
        failed[c["label"]] = sum(not s.ok for s in stat)
    return samples, failed


def ablate_data(handle, info: dict, alpha: float = 0.05) -> dict:
    """The ablation's statistics as plain data (``ablate.json``)."""
    from ..stats.ablate import factorial, leave_one_out

    design = info["design"]
    combos, factors = design["combos"], design["factors"]
    a, b = design["a"]["label"], design["b"]["label"]
    samples, failed = _samples(handle, combos)
    loo = design["fraction"] == "leave-one-out"
    if loo:
        ref_a, ref_b = combos[0]["label"], combos[-1]["label"]
        st = leave_one_out(ref_a, [c["label"] for c in combos[1:-1]], samples, failed, ref_b, alpha)
    else:
        codes = {c["label"]: c["codes"] for c in combos}
        ref_a = next(c["label"] for c in combos if all(x < 0 for x in c["codes"]))
        ref_b = next(c["label"] for c in combos if all(x > 0 for x in c["codes"]))
        st = factorial(factors, codes, samples, failed, ref_a, ref_b, alpha,
                       in_design=[c["label"] for c in combos if c["in_design"]])
    cells = {c.label: c for c in st.cells}
    rows = []
    for c in combos:
        cell = cells.get(c["label"])
        rows.append({"label": c["label"], "sites": c["sites"], "arch_id": c["arch_id"], "init": c["init"],
                     "variant": c["variant"], "in_design": c["in_design"], "trained_as": c.get("entry", c["label"]),
                     "levels": {f: ("B" if x > 0 else "A") for f, x in zip(factors, c.get("codes") or [])},
                     "from_b": c.get("from_b", []), "codes": c.get("codes", []), "change": c.get("change"),
                     "n_runs": cell.n_runs if cell else 0, "n_ok": cell.n_ok if cell else 0,
                     "n_failed": cell.n_failed if cell else 0, "failure_rate": cell.failure_rate if cell else None,
                     "failure_ci": list(cell.failure_ci) if cell else [0.0, 1.0], "mean": cell.mean if cell else None,
                     "sd": cell.sd if cell else None})
    data = {"study": handle.recipe.name.split("/")[0], "stage": handle.recipe.name.split("/")[-1],
            "between": {"a": design["a"], "b": design["b"]}, "factors": factors, "fraction": design["fraction"],
            "relation": design.get("relation"), "inits": design.get("inits"), "seeds": info.get("seeds"),
            "settings": info.get("settings"), "alpha": alpha, "reference": [ref_a, ref_b],
            "design": rows, "gap": asdict(st.gap), "effects": [e.to_dict() for e in st.effects],
            "interactions": [e.to_dict() for e in st.interactions], "unusable": st.unusable}
    data["answer"] = answer(data, a, b)
    return jsonable(data)


def answer(data: dict, a: str, b: str) -> list[str]:
    """The plain answer: which sites carry the gap, alone or together, or that nothing does beyond noise."""
    gap, alpha = data["gap"], data["alpha"]
    ref_a, ref_b = data["reference"]
    if gap["estimate"] is None:
        return [f"The gap cannot be measured: {ref_a} or {ref_b} has no successful run, so no share of it is "
                f"given (the effects below still are)."]
    real = gap["p_value"] is not None and gap["p_value"] < alpha
    if gap["p_value"] is None:
        noise = " (no interval: a corner has fewer than two successful runs)"
    else:
        noise = (f" [{_f(gap['ci_low'])}, {_f(gap['ci_high'])}]"
                 + ("" if real else f", within noise (p {_p(gap['p_value'])})"))
    out = [f"At {a}'s cell, {ref_b} minus {ref_a} is {gap['estimate']:+.3f} {UNIT}{noise}."]
    sig = sorted((e for e in data["effects"] if e["significant"]), key=lambda e: -abs(e["estimate"]))
    pairs = [e for e in data["interactions"] if e["significant"]]
    tested = sum(e["p_value"] is not None for e in data["effects"] + data["interactions"])
    if data["fraction"] == "leave-one-out":
        if not sig:
            return out + [f"**No single change of {a} moves its loss beyond noise** (Holm over {tested} changes at "
                          f"{alpha:g})."]
        return out + ["**" + "; ".join(f"{e['name']} moves it by {e['estimate']:+.3f} [{_f(e['ci_low'])}, "
                                       f"{_f(e['ci_high'])}]" + (f", {_pct(e['share'])} of the gap" if e["share"]
                                                                  is not None else "") for e in sig)
                      + "** (Holm over the single changes); the other changes are within noise."]
    if not sig and not pairs:
        return out + [f"**Nothing carries the gap beyond noise**: no main effect or two-way interaction is "
                      f"significant (Holm over {tested} at {alpha:g})."]
    lines = []
    helps = [e for e in sig if (e["share"] or 0) > 0]
    if helps:
        total = sum(e["share"] for e in helps)
        lines.append("**" + " and ".join(e["name"] for e in helps) + (" carries" if len(helps) == 1 else " carry")
                     + " the gap**: " + "; ".join(f"{e['name']} {e['estimate']:+.3f} [{_f(e['ci_low'])}, "
                                                  f"{_f(e['ci_high'])}], {_pct(e['share'])} of it" for e in helps)
                     + (f" (together {_pct(total)})" if len(helps) > 1 else "") + ".")
    against = [e for e in sig if (e["share"] or 0) <= 0]
    if against:
        lines.append(", ".join(f"{e['name']} ({e['estimate']:+.3f}, {_pct(e['share'])})" for e in against)
                     + " work against the gap.")
    for e in pairs:
        lines.append(f"**{' and '.join(e['factors'])} act together**: their interaction is {e['estimate']:+.3f} "
                     f"[{_f(e['ci_low'])}, {_f(e['ci_high'])}] (Holm p {_p(e['p_holm'])}): the effect of one depends "
                     f"on the other.")
    return out + lines


def ablate_markdown(data: dict, plots: dict[str, str]) -> str:
    a, b = data["between"]["a"], data["between"]["b"]
    loo = data["fraction"] == "leave-one-out"
    lines = [f"# Ablation of `{a['label']}` against `{b['label']}` (study `{data['study']}`, stage {data['stage']})",
             "", *data["answer"], ""]
    if loo:
        what = f"leave-one-out: {a['label']} with each single change, each compared with {a['label']}"
    elif data["fraction"] == "half":
        what = (f"the half fraction of 2^{len(data['factors'])} ({data['relation']}, resolution "
                f"{len(data['factors'])}: no main effect or two-way interaction aliased with another)")
    else:
        what = f"every combination: 2^{len(data['factors'])}"
    seeds = data.get("seeds") or []
    init = (f"; an init factor: {data['inits'][0]} ({a['label']}'s level) against {data['inits'][1]}"
            if data.get("inits") else "")
    lines += ["## The design", "",
              f"- **A** `{a['label']}` ({a['sites']}), **B** `{b['label']}` ({b['sites']}); "
              + (f"{'sites' if loo else 'factors'}: {', '.join(data['factors'])}" if data["factors"] else
                 "every site where they differ, and A's other norms")
              + f"{init}; design: {what}.",
              f"- Every combination trained at {a['label']}'s chosen cell (learning rate {a['lr']:g}"
              + "".join(f", {k} {v}" for k, v in (a.get("variant") or {}).items()
                        if not data.get("inits") or k != "init")
              + f") on the fresh seeds {', '.join(map(str, seeds))}, scored on the test split "
              f"({(data.get('settings') or {}).get('test_bytes', 0):,} bytes); losses in {UNIT}, the mean over "
              f"successful runs (a diverged or stalled run never enters a mean; its failure is counted apart).", "",
              "| combination | " + ("change" if loo else "from B") + " | sites | runs | failed [95% Wilson] | "
              "mean [SD] |", "|---|---|---|---|---|---|"]
    for r in data["design"]:
        frm = (r["change"] or "-") if loo else (", ".join(r["from_b"]) or "-")
        note = "" if r["in_design"] else (" (for the gap)" if loo else " (beside the design, for the gap)")
        twin = "" if r["trained_as"] == r["label"] else f" (= {r['trained_as']})"
        lo, hi = r["failure_ci"]
        lines.append(f"| {r['label']}{note}{twin} | {frm} | `{r['sites']}` | {r['n_runs']} | {r['n_failed']} "
                     f"[{lo:.2f}, {hi:.2f}] | {_f(r['mean'], 4, False)} [{_f(r['sd'], 4, False)}] |")
    if data["unusable"]:
        lines += ["", f"Left out of every contrast (fewer than two successful runs, so no variance of their own): "
                  f"{', '.join(data['unusable'])}; " + ("their changes are not compared." if loo else
                                                       "the effects take the mean over the combinations they have "
                                                       "at each level, no longer free of the other effects.")]
    head = "| change | vs A [95% CI] |" if loo else "| factor | effect (B - A) [95% CI] |"
    lines += ["", "## Single changes" if loo else "## Main effects", "",
              ("Each change minus A (Welch, each side's own SD)" if loo else
               "The mean over the combinations at B's level minus the mean at A's (each combination's own SD, "
               "Welch-Satterthwaite df)") + "; Holm over every " + ("change" if loo else "effect and interaction")
              + f" together at {data['alpha']:g}; share: the effect over the gap B - A.", "",
              head + " Holm p | share of the gap | could not use |", "|---|---|---|---|---|"]
    lines += [_row(e) for e in data["effects"]]
    gap = data["gap"]
    if gap["estimate"] is not None and (gap["p_value"] is None or gap["p_value"] >= data["alpha"]):
        lines += ["", "The gap itself is not distinguished from noise here, so its shares say little."]
    if data["interactions"]:
        lines += ["", "## Two-way interactions", "",
                  "The mean over the combinations where the two factors' levels agree (both A's or both B's) minus "
                  "the mean where they differ: half the change in one factor's effect when the other goes from A's "
                  "level to B's. An interaction is the same at both corners, so it is no part of the A-B gap; it "
                  "says that one site's effect depends on the other.", "",
                  "| factors | interaction [95% CI] | Holm p | share of the gap | could not use |",
                  "|---|---|---|---|---|"]
        lines += [_row(e) for e in data["interactions"]]
    if plots:
        lines += ["", "## Plots", ""] + [f"![{name}]({path})" for name, path in plots.items()]
    return "\n".join(lines) + "\n"


def _row(e: dict) -> str:
    mark = " **" if e["significant"] else " "
    est = "-" if e["estimate"] is None else f"{e['estimate']:+.4f} [{_f(e['ci_low'], 4)}, {_f(e['ci_high'], 4)}]"
    return (f"|{mark}{e['name']}{mark.strip()} | {est} | {_p(e['p_holm'])} | {_pct(e['share'])} | "
            f"{', '.join(e['unused']) or '-'} |")


def write_ablate_report(parent, cfg, out_dir: Path | None = None) -> Path:
    """``ablate.md``, ``ablate.json`` and the plots in ``out_dir`` (default: the stage's folder)."""
    from ..stages.ablate import ablation_handle
    from . import _plots as P
    from ._ablate_plots import effects_plot, interactions_plot

    handle, info = ablation_handle(parent, cfg)
    data = ablate_data(handle, info, parent.recipe.report.alpha)
    out_dir = Path(out_dir or handle.folder)
    out_dir.mkdir(parents=True, exist_ok=True)
    plots = {}
    for name, fig in (("ablate_effects", effects_plot(data)), ("ablate_interactions", interactions_plot(data))):
        if fig is not None:
            P.save(fig, out_dir / f"{name}.png")
            plots[name] = f"{name}.png"
    data["plots"] = plots
    (out_dir / "ablate.json").write_text(json.dumps(data, indent=1) + "\n")
    path = out_dir / "ablate.md"
    path.write_text(ablate_markdown(data, plots))
    return path


def ablation_lines(parent, out_dir: Path) -> list[str]:
    """The study report's line listing its ablations (none: no line)."""
    import os

    from ..errors import NormsearchError
    from ..stages.ablate import stored_ablations

    try:
        stored = stored_ablations(parent)
    except NormsearchError:  # a storage that cannot hold stages (an in-memory study)
        return []
    links = []
    for kind, info in sorted(stored.items(), key=lambda kv: int(kv[0].rsplit("-", 1)[-1])):
        d = info.get("design") or {}
        name = f"{d.get('a', {}).get('label')} vs {d.get('b', {}).get('label')}"
        name += " (leave-one-out)" if d.get("fraction") == "leave-one-out" else ""
        md = Path(parent.folder) / kind / "ablate.md"
        links.append(f"[{name}]({os.path.relpath(md, out_dir)})" if md.is_file() else f"{name} ({kind}, no report yet)")
    return [f"- **Ablations** (`normsearch ablate`): {', '.join(links)}."] if links else []
