"""The confirmation stage (``normsearch confirm``): the search's top placements and the baselines,
trained again on fresh seeds at the learning rate the search chose for each, scored on the test
split. Validation chose; the test split and seeds that chose nothing confirm."""

from __future__ import annotations

from ..errors import NormsearchError
from ..recipe import ConfirmConfig
from ._open import StudyHandle
from ._stages import Entry, Stage, StageSearch, find_stage, open_stage, stage_recipe

KIND = "confirm"


def search_finished(parent: StudyHandle) -> None:
    """A NormsearchError unless the search has every architecture it asks for, none running."""
    from ._census import census
    from ._loop import Search

    c = census(parent.study)
    need = Search(parent).need(c)
    if need > 0 or c.running:
        raise NormsearchError(
            f"the search of study {parent.recipe.name!r} is not finished ({need} architectures to go, "
            f"{len(c.running)} running): a confirmation takes its top placements from the finished search; run "
            f"`normsearch run` on it first")


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
                "first_seed": cfg.first_seed}
    overlap = set(cfg.seed_list(racing.budget if racing else 0)) & set(parent.recipe.train.seeds)
    if overlap:
        raise NormsearchError(f"confirmation seeds {sorted(overlap)} were search seeds; give a --first-seed above "
                              f"{max(parent.recipe.train.seeds)}")
    if find_stage(parent, KIND) is None:
        search_finished(parent)

    def make() -> Stage:
        found = entries(parent, cfg)
        recipe = confirm_recipe(parent.recipe, cfg.seed_list(), [lr for e in found for lr in e.lr])
        return Stage(KIND, settings, found, recipe, cfg.seed_list(), test_bytes=cfg.test_bytes, racing=racing)

    handle, stage = open_stage(parent, KIND, settings, make)
    lrs = [lr for e in stage.entries for lr in e.lr]
    stage.recipe = handle.recipe = confirm_recipe(parent.recipe, stage.seeds, lrs)
    return handle, stage


def confirm_recipe(parent, seeds: list[int], lrs: list[float]):
    """The recipe a confirmation's runs are trained under: the search's, with the fresh seeds and the
    chosen learning rates (each architecture trains at its own one only)."""
    from dataclasses import replace

    return stage_recipe(parent, KIND, train=replace(parent.train, seeds=list(seeds), lr=sorted(set(lrs)), lr_extend=0))


def run_confirm(parent: StudyHandle, cfg: ConfirmConfig, racing=None, display=None, verbose: bool = False):
    """Create or resume the confirmation of a finished search and train it to the end (racing
    included). Returns the stage's handle."""
    handle, stage = open_confirm(parent, cfg, racing)
    StageSearch(handle, stage, display, verbose).run()
    return handle


def confirm_handle(parent: StudyHandle) -> StudyHandle | None:
    """The confirmation of a search, to report on, or None when it was never started."""
    from ._stages import A_STAGE

    study = find_stage(parent, KIND)
    info = study.user_attrs.get(A_STAGE) if study is not None else None
    if not info:
        return None
    recipe = confirm_recipe(parent.recipe, info["seeds"], [lr for e in info["entries"] for lr in e["lr"]])
    return StudyHandle(recipe, study, parent.storage_url, parent.folder / KIND)
