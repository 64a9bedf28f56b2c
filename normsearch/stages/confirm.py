"""The confirmation stage (``normsearch confirm``): the search's top placements and the baselines,
trained again on fresh seeds at the learning rate the search chose for each, scored on the test
split. Validation chose; the test split and seeds that chose nothing confirm. (Here, above the
search and the ranking: it reads the search's ranking to pick what to confirm.)"""

from __future__ import annotations

import logging
from dataclasses import replace

from ..errors import NormsearchError
from ..recipe import ConfirmConfig
from ..search import StudyHandle
from ._stage import A_RACE_END, A_STAGE, Entry, Stage, find_stage, open_stage, run_stage, stage_recipe, stored_rounds
from .racing import racing_round

KIND = "confirm"
FIRST, BEST_BASELINE = "first", "best_baseline"  # the words of confirm.primary
DEFAULT_PRIMARY = [f"{FIRST} vs {BEST_BASELINE}"]
log = logging.getLogger("normsearch")


def confirm_recipe(parent, seeds: list[int], lrs: list[float]):
    """The recipe a confirmation's runs are trained under: the search's, with the fresh seeds and the
    chosen learning rates (each architecture trains at its own one only)."""
    return stage_recipe(parent, KIND, train=replace(parent.train, seeds=list(seeds), lr=sorted(set(lrs)), lr_extend=0,
                                                      lr_resolution=None))


def confirm_handle(parent: StudyHandle) -> StudyHandle | None:
    """The confirmation of a search, to report on, or None when it was never started."""
    study = find_stage(parent, KIND)
    info = study.user_attrs.get(A_STAGE) if study is not None else None
    if not info:
        return None
    recipe = confirm_recipe(parent.recipe, info["seeds"], [lr for e in info["entries"] for lr in e["lr"]])
    return StudyHandle(recipe, study, parent.storage_url, parent.folder / KIND)


def entries(parent: StudyHandle, cfg: ConfirmConfig) -> list[Entry]:
    """The top ``cfg.top`` found placements and the baselines, from the search's ranking, each at its
    chosen cell (learning rate and variant). A ranked row always has one: it had a successful run."""
    from ..ranking import rank

    ranking = rank(parent, against=[])
    rows = [r for r in ranking.ranked if r.rank is not None]
    bases = cfg.baselines if cfg.baselines is not None else list(parent.recipe.search.baselines)
    # only an architecture with a successful run has a chosen cell to train at
    found = [r for r in rows if not r.is_baseline and r.best_lr is not None][:cfg.top]
    by_label = {r.label: r for r in rows}
    missing = [b for b in bases if b not in by_label]
    if missing:
        raise NormsearchError(f"baselines {', '.join(missing)} were not evaluated by the search of "
                              f"{parent.recipe.name!r}, so no learning rate was chosen for them; confirm the "
                              f"ones it has ({', '.join(r.label for r in rows if r.is_baseline) or 'none'})")
    never = [b for b in bases if by_label[b].best_lr is None]
    if never:
        log.warning("not confirmed: %s never trained in the search (every run failed), so it has no cell to train "
                    "at; the search's report lists its failures", ", ".join(never))
    out = []
    for r in found + [by_label[b] for b in bases if b not in never]:
        # the chosen cell: its learning rate and its variant of the tuned grid (the one rule, stats.outcomes.sweep)
        out.append(Entry(label=r.label, arch_id=r.arch_id, placement=r.placement, lr=[float(r.best_lr)],
                         baseline=r.label if r.is_baseline else None, search_rank=r.rank, search_mean=r.score_mean,
                         search_ci=(r.ci_low, r.ci_high), search_seeds=r.n_seeds, variant=dict(r.variant)))
    if not out:
        raise NormsearchError("nothing to confirm: the search ranked no architecture")
    return out


def open_confirm(parent: StudyHandle, cfg: ConfirmConfig, racing=None) -> tuple[StudyHandle, Stage]:
    bases = cfg.baselines if cfg.baselines is not None else list(parent.recipe.search.baselines)
    settings = {"top": cfg.top, "seeds": cfg.seeds, "baselines": list(bases), "test_bytes": cfg.test_bytes,
                "first_seed": cfg.first_seed, "racing_budget": racing.budget if racing else 0,
                "racing_p_best": racing.p_best if racing else None, "primary": list(cfg.primary)}
    if cfg.seeds == "auto":
        settings.update(power=cfg.power, min_seeds=cfg.min_seeds, max_seeds=cfg.max_seeds)
    overlap = set(cfg.seed_list(racing.budget if racing else 0)) & set(parent.recipe.train.seeds)
    if overlap:
        raise NormsearchError(f"confirmation seeds {sorted(overlap)} were search seeds; give a --first-seed above "
                              f"{max(parent.recipe.train.seeds)}")

    def make() -> Stage:
        found = entries(parent, cfg)
        plan = design(parent, cfg, found)
        seeds = cfg.seed_list(n=plan["seeds"])
        recipe = confirm_recipe(parent.recipe, seeds, [lr for e in found for lr in e.lr])
        return Stage(KIND, settings, found, recipe, seeds, test_bytes=cfg.test_bytes, racing=racing,
                     decide=racing_round, design=plan)

    handle, stage = open_stage(parent, KIND, settings, make)
    lrs = [lr for e in stage.entries for lr in e.lr]
    stage.recipe = handle.recipe = confirm_recipe(parent.recipe, stage.seeds, lrs)
    return handle, stage


def primary_pairs(contrasts: list[str], rows, bases: list[str]) -> list[tuple[str, str]]:
    """The declared contrasts as (label, label) pairs of the search's ranking: ``first`` is its first found
    placement with a chosen cell, ``best_baseline`` its best-ranked baseline among ``bases``. A name the
    ranking does not have is an error that lists the ones it has."""
    from ..errors import closest

    ranked = [r for r in rows if r.rank is not None and r.best_lr is not None]
    found = [r.label for r in ranked if not r.is_baseline]
    base = [r.label for r in ranked if r.is_baseline and r.label in bases]
    words = {FIRST: found[0] if found else None, BEST_BASELINE: base[0] if base else None}
    labels = {r.label for r in ranked}
    out = []
    for c in contrasts:
        pair = []
        for name in (x.strip() for x in c.split(" vs ")):
            label = words.get(name, name)
            if label is None:
                raise NormsearchError(f"confirm.primary {c!r}: the search has no {name.replace('_', ' ')} with a "
                                      f"successful run to confirm")
            if label not in labels:
                hint = closest(label, sorted(labels))
                mean = f" (did you mean {hint}?)" if hint else ""
                raise NormsearchError(f"confirm.primary {c!r}: {label!r} is not an architecture the search ranked"
                                      f"{mean}; it has {', '.join(sorted(labels))}, and the words first and "
                                      f"best_baseline")
            pair.append(label)
        if pair[0] == pair[1]:
            raise NormsearchError(f"confirm.primary {c!r} compares {pair[0]} with itself")
        out.append((pair[0], pair[1]))
    return out


def design(parent: StudyHandle, cfg: ConfirmConfig, found: list[Entry]) -> dict:
    """The confirmation's design: its primary contrasts and the seeds per architecture, with the power
    each contrast has at that count. Each contrast is planned for the difference the search saw, shrunk
    toward 0 (``stats.planning_diff``), at the run SDs the search saw, tested two-sided at alpha / (the
    number of primary contrasts) by Welch's test (``stats.resolve_power``, the difference test alone).
    ``seeds: auto`` takes the fewest seeds in [min_seeds, max_seeds] at which every contrast has
    ``power``; a fixed count is kept, and the power it gives is recorded."""
    import statistics

    from ..ranking import rank
    from ..stats import planning_diff, resolve_power

    rows = rank(parent, against=[]).rows
    by_label = {r.label: r for r in rows}
    trained = {e.label for e in found}
    try:
        pairs = primary_pairs(cfg.primary, rows, [e.label for e in found if e.baseline])
    except NormsearchError as e:
        if cfg.primary != DEFAULT_PRIMARY or cfg.seeds == "auto":
            raise
        # the default contrast needs a found placement and a baseline with successful runs: without one, the
        # confirmation has no primary contrast (said in the report) rather than no confirmation
        log.warning("no primary contrast: %s", e)
        pairs = []
    missing = [x for p in pairs for x in p if x not in trained]
    if missing and cfg.primary == DEFAULT_PRIMARY and cfg.seeds != "auto":  # e.g. --top 0: baselines only
        log.warning("no primary contrast: the confirmation does not train %s", ", ".join(dict.fromkeys(missing)))
        pairs, missing = [], []
    if not pairs:
        return {"primary": [], "alpha": parent.recipe.report.alpha, "alpha_each": None, "target_power": cfg.power,
                "auto": False, "seeds": cfg.seeds, "contrasts": [], "capped": False}
    if missing:
        bases = ", ".join(e.label for e in found if e.baseline)
        raise NormsearchError(f"confirm.primary names {', '.join(dict.fromkeys(missing))}, which the confirmation does "
                              f"not train (its top {cfg.top} and baselines {bases}); raise --top or add the baseline")
    alpha = parent.recipe.report.alpha / len(pairs)
    lo, hi = (cfg.min_seeds, cfg.max_seeds) if cfg.seeds == "auto" else (cfg.seeds, cfg.seeds)
    ns = list(range(lo, hi + 1))
    plans = []
    for a, b in pairs:
        xa, xb = list(by_label[a].seeds.values()), list(by_label[b].seeds.values())
        plan = {"contrast": [a, b], "search_diff": None, "effect": None, "sd": None, "power": None, "seeds": hi}
        if len(xa) >= 2 and len(xb) >= 2:
            sa, sb = statistics.stdev(xa), statistics.stdev(xb)
            diff = statistics.fmean(xa) - statistics.fmean(xb)
            effect = planning_diff(diff, (sa * sa / len(xa) + sb * sb / len(xb)) ** 0.5)
            powers = resolve_power(effect, sa, sb, ns, ns, margin=0.0, alpha=alpha)
            ok = [n for n, pw in zip(ns, powers) if pw >= cfg.power]
            n = ok[0] if ok else hi
            plan.update(search_diff=diff, effect=effect, sd=[sa, sb], seeds=n)
            plan["power_at"] = {str(n): float(pw) for n, pw in zip(ns, powers)}
        plans.append(plan)
    n = max(p["seeds"] for p in plans)
    for p in plans:
        p["power"] = p.get("power_at", {}).get(str(n))
        p.pop("power_at", None)
    return {"primary": [list(p) for p in pairs], "alpha": parent.recipe.report.alpha, "alpha_each": alpha,
            "target_power": cfg.power, "auto": cfg.seeds == "auto", "seeds": n, "contrasts": plans,
            "capped": cfg.seeds == "auto" and any(p["power"] is None or p["power"] < cfg.power for p in plans)}


def run_confirm(parent: StudyHandle, cfg: ConfirmConfig, racing=None, display=None, verbose: bool = False):
    """Create or resume the confirmation of a finished search and train it to the end (racing
    included). Returns the stage's handle."""
    handle, stage = open_confirm(parent, cfg, racing)
    return run_stage(handle, stage, display, verbose)


def confirmed_order(parent: StudyHandle) -> list[str]:
    """The found placements (arch ids) of the search's finished confirmation, best first by the
    confirmed ranking; empty when the search has none, or it is not finished (a task to train, one
    running, racing not ended): a partial confirmation orders nothing."""
    from ..ranking import rank

    stage = confirm_handle(parent)
    if stage is None:
        return []
    attrs = stage.study.user_attrs
    info = attrs.get(A_STAGE) or {}
    if (info.get("settings") or {}).get("racing_budget") and not attrs.get(A_RACE_END):
        return []
    ranking = rank(stage, against=[])
    seeds = len(info.get("seeds") or [])
    expected = len(info.get("entries") or []) * seeds + sum(len(r.get("added", [])) for r in stored_rounds(stage.study))
    if ranking.running or sum(len(r.runs) for r in ranking.rows) < expected:
        return []
    return [r.arch_id for r in ranking.ranked if r.rank is not None and not r.is_baseline]
