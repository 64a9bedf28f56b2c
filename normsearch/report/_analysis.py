"""What the report says beyond the ranking itself, computed apart from how it is drawn or written:
which sites matter (mean score with and without a norm there; Optuna's parameter importance), the
diagnostics the papers use, summarised per architecture, and the runs each of those reads.

Compare Optuna, which keeps ``optuna/importance/`` (analysis) apart from ``optuna/visualization/``.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Any, Iterable

from ..ranking import Ranking
from ..records import RunResult

MIN_IMPORTANCE = 6  # architectures of the space needed before Optuna's importance means anything


def best_runs(row) -> list[RunResult]:
    """The runs at the row's chosen cell that did not diverge (all of them if every one did)."""
    runs = [r for r in row.runs if row.best_lr is None
            or (float(r.lr) == float(row.best_lr) and (r.variant or {}) == row.variant)]
    ok = [r for r in runs if not r.diverged]
    return ok or runs


def mean_curve(runs: Iterable[RunResult]) -> tuple[list[int], list[float]]:
    """Validation loss by step, averaged over the runs that reached the step."""
    by_step: dict[int, list[float]] = {}
    for r in runs:
        for p in r.curve:
            v = p.get("val_bpb")
            if v is not None and math.isfinite(v):
                by_step.setdefault(int(p["step"]), []).append(float(v))
    steps = sorted(by_step)
    return steps, [sum(by_step[s]) / len(by_step[s]) for s in steps]


def mean_diagnostic(runs: Iterable[RunResult], key: str, at: str = "last") -> list[float] | None:
    """A per-layer diagnostic (``resid_rms``, ``grad_norm``, ``max_logit``) at the first (``at=
    "first"``, initialisation) or last evaluation, averaged over the runs elementwise."""
    rows = []
    for r in runs:
        diags = [d for d in r.diagnostics if d.get(key)]
        if diags:
            rows.append([float(x) for x in (diags[0] if at == "first" else diags[-1])[key]])
    if not rows or len({len(x) for x in rows}) != 1:
        return None
    return [sum(col) / len(col) for col in zip(*rows)]



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


def presence(placement: dict, n_layers: int) -> dict[str, str]:
    """site -> all | some | none for one placement at ``n_layers``."""
    from ..spec import BLOCK_SITES, Placement

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
    from ..spec import SITES

    rows = [r for r in ranking.ranked if r.placement and r.score_mean is not None]
    n_layers = ranking.n_layers
    if not rows or not n_layers:
        return []
    pres = [(r, presence(r.placement, int(n_layers))) for r in rows]
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

    rows = [r for r in ranking.ranked if r.params and r.score_mean is not None]
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
# Diagnostics


def diagnostics_summary(ranking: Ranking) -> list[dict[str, Any]]:
    """A few numbers per ranked architecture from the runs at its best learning rate (mean over
    seeds): the residual-stream RMS after the last block at initialisation and at the end, its growth
    from the first block's output to the last's at the end (Kim et al. 2025), the largest attention
    logit at the end and at its peak (Wortsman et al. 2023), the last layer's FFN gradient norm over
    the first's at initialisation (Xiong et al. 2020), and the loss spikes."""
    out = []
    for r in ranking.ranked:
        runs = best_runs(r)
        rms0, rms1 = mean_diagnostic(runs, "resid_rms", "first"), mean_diagnostic(runs, "resid_rms", "last")
        g0 = mean_diagnostic(runs, "grad_norm", "first")
        logit1 = mean_diagnostic(runs, "max_logit", "last")
        peaks = [max(max(d["max_logit"]) for d in run.diagnostics if d.get("max_logit"))
                 for run in runs if any(d.get("max_logit") for d in run.diagnostics)]
        out.append({
            "label": r.label,
            "resid_rms_last_init": rms0[-1] if rms0 else None,
            "resid_rms_last_end": rms1[-1] if rms1 else None,
            "resid_growth_end": rms1[-1] / rms1[1] if rms1 and len(rms1) > 1 and rms1[1] else None,
            "max_logit_end": max(logit1) if logit1 else None,
            "max_logit_peak": sum(peaks) / len(peaks) if peaks else None,
            "grad_last_over_first_init": g0[-1] / g0[0] if g0 and g0[0] else None,
            "spikes": sum(int(run.spikes or 0) for run in runs),
        })
    return out
