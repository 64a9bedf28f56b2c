"""The confirmation stage (``normsearch confirm``): the search's top placements and the baselines,
trained again on fresh seeds at the learning rate the search chose for each, scored on the test
split. Validation chose; the test split and seeds that chose nothing confirm."""

from __future__ import annotations

from ._open import StudyHandle
from ._stages import find_stage, stage_recipe

KIND = "confirm"


def confirm_recipe(parent, seeds: list[int], lrs: list[float]):
    """The recipe a confirmation's runs are trained under: the search's, with the fresh seeds and the
    chosen learning rates (each architecture trains at its own one only)."""
    from dataclasses import replace

    return stage_recipe(parent, KIND, train=replace(parent.train, seeds=list(seeds), lr=sorted(set(lrs)), lr_extend=0))


def confirm_handle(parent: StudyHandle) -> StudyHandle | None:
    """The confirmation of a search, to report on, or None when it was never started."""
    from ._stages import A_STAGE

    study = find_stage(parent, KIND)
    info = study.user_attrs.get(A_STAGE) if study is not None else None
    if not info:
        return None
    recipe = confirm_recipe(parent.recipe, info["seeds"], [lr for e in info["entries"] for lr in e["lr"]])
    return StudyHandle(recipe, study, parent.storage_url, parent.folder / KIND)
