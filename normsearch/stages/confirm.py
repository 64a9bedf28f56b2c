"""The confirmation stage (``normsearch confirm``): the search's top placements and the baselines,
trained again on fresh seeds at the learning rate the search chose for each, scored on the test
split. Validation chose; the test split and seeds that chose nothing confirm. (Here, above the
search and the ranking: it reads the search's ranking to pick what to confirm.)"""

from __future__ import annotations

from dataclasses import replace

from ..errors import NormsearchError
from ..recipe import ConfirmConfig
from ..search import StudyHandle
from ._stage import A_RACE_END, A_STAGE, Entry, Stage, find_stage, open_stage, run_stage, stage_recipe, stored_rounds
from .racing import racing_round

KIND = "confirm"


def confirm_recipe(parent, seeds: list[int], lrs: list[float]):
    """The recipe a confirmation's runs are trained under: the search's, with the fresh seeds and the
    chosen learning rates (each architecture trains at its own one only)."""
    return stage_recipe(parent, KIND, train=replace(parent.train, seeds=list(seeds), lr=sorted(set(lrs)), lr_extend=0))


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
    chosen learning rate."""
    from ..ranking import rank

    ranking = rank(parent, against=[])
    rows = [r for r in ranking.ranked if r.rank is not None]
    bases = cfg.baselines if cfg.baselines is not None else list(parent.recipe.search.baselines)
    found = [r for r in rows if not r.is_baseline][:cfg.top]
    by_label = {r.label: r for r in rows}
    missing = [b for b in bases if b not in by_label]
    if missing:
        raise NormsearchError(f"baselines {', '.join(missing)} were not evaluated by the search of "
                              f"{parent.recipe.name!r}, so no learning rate was chosen for them; confirm the "
                              f"ones it has ({', '.join(r.label for r in rows if r.is_baseline) or 'none'})")
    out = []
    for r in found + [by_label[b] for b in bases]:
        lr = r.best_lr if r.best_lr is not None else min(r.lr_points, key=lambda p: (p.n_failed, p.mean or 1e9)).lr
        out.append(Entry(label=r.label, arch_id=r.arch_id, placement=r.placement, lr=[float(lr)],
                         baseline=r.label if r.is_baseline else None, search_rank=r.rank, search_mean=r.score_mean,
                         search_ci=(r.ci_low, r.ci_high), search_seeds=r.n_seeds))
    if not out:
        raise NormsearchError("nothing to confirm: the search ranked no architecture")
    return out


def open_confirm(parent: StudyHandle, cfg: ConfirmConfig, racing=None) -> tuple[StudyHandle, Stage]:
    bases = cfg.baselines if cfg.baselines is not None else list(parent.recipe.search.baselines)
    settings = {"top": cfg.top, "seeds": cfg.seeds, "baselines": list(bases), "test_bytes": cfg.test_bytes,
                "first_seed": cfg.first_seed, "racing_budget": racing.budget if racing else 0,
                "racing_p_best": racing.p_best if racing else None}
    overlap = set(cfg.seed_list(racing.budget if racing else 0)) & set(parent.recipe.train.seeds)
    if overlap:
        raise NormsearchError(f"confirmation seeds {sorted(overlap)} were search seeds; give a --first-seed above "
                              f"{max(parent.recipe.train.seeds)}")

    def make() -> Stage:
        found = entries(parent, cfg)
        recipe = confirm_recipe(parent.recipe, cfg.seed_list(), [lr for e in found for lr in e.lr])
        return Stage(KIND, settings, found, recipe, cfg.seed_list(), test_bytes=cfg.test_bytes, racing=racing,
                     decide=racing_round)

    handle, stage = open_stage(parent, KIND, settings, make)
    lrs = [lr for e in stage.entries for lr in e.lr]
    stage.recipe = handle.recipe = confirm_recipe(parent.recipe, stage.seeds, lrs)
    return handle, stage


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
