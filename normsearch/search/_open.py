"""Opening a study: create or load it, check that the recipe still matches, and find an existing
one from a results folder, a recipe file or a storage URL."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import _yaml
from ..errors import NormsearchError
from ..recipe import Recipe
from ..records import A_RECIPE
from .._secrets import mask_recipe
from ..storage import mask, open_storage, retry

FINGERPRINT_EXCLUDE = {"train": {"threads", "kernels", "device", "devices", "strategy", "compile", "logger"},
                       "data": {"cache_dir"}}


@dataclass
class StudyHandle:
    """A study, its recipe (typed) and its results folder."""

    recipe: Recipe
    study: Any  # optuna.Study
    storage_url: str
    folder: Path

    @property
    def runs_dir(self) -> Path:
        return self.folder / "runs"

    @property
    def checkpoints_dir(self) -> Path:
        return self.folder / "checkpoints"


def directions(recipe: Recipe) -> list[str]:
    second = recipe.search.second_objective
    return ["minimize"] + ({"params": ["minimize"], "throughput": ["maximize"]}.get(second, []))


def fingerprint(raw: dict) -> dict:
    """The parts of a resolved recipe that change what a run measures: a study's trials are only
    comparable when these agree."""
    out = {}
    for section in ("model", "data", "train", "space"):
        value = raw.get(section)
        if isinstance(value, dict):
            value = {k: v for k, v in value.items() if k not in FINGERPRINT_EXCLUDE.get(section, set())}
        out[section] = value
    search = raw.get("search") or {}
    out["search"] = {k: search.get(k) for k in ("objective", "second_objective", "norm_kind")}
    return out


def stored_fingerprint(raw: dict) -> dict:
    """:func:`fingerprint` of a recipe saved by an earlier version: read again as today's recipe, so
    that a setting added since (saved without it) compares as its default, which is what those runs
    used."""
    from ..recipe import recipe_from_dict

    try:
        return fingerprint(recipe_from_dict(raw).raw)
    except Exception:  # a recipe this version cannot read: compare as saved
        return fingerprint(raw)


def first_difference(a: Any, b: Any, path: str = "") -> str | None:
    """Where two plain-data trees first differ, as ``train.steps: 200 in the study, 10 now``."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in list(a) + [k for k in b if k not in a]:
            d = first_difference(a.get(k), b.get(k), f"{path}.{k}" if path else k)
            if d:
                return d
        return None
    return None if a == b else f"{path}: {a!r} in the study, {b!r} now"


def _has_results(study) -> bool:
    """Whether any trial finished (complete or pruned): only then is the study's recipe binding."""
    return any(t.state.name in ("COMPLETE", "PRUNED") for t in study.get_trials(deepcopy=False))


def _check_folder(recipe: Recipe, folder: Path, creating: bool) -> None:
    """A new study does not write over the results of another recipe in the same folder (a fresh
    clone holds committed results, say, whose study database is not there)."""
    saved = folder / "recipe.yaml"
    if not creating or not saved.is_file():
        return
    try:
        old = _yaml.load(saved)
    except NormsearchError:
        old = None
    diff = first_difference(stored_fingerprint(old), fingerprint(recipe.raw)) if isinstance(old, dict) else "unreadable"
    if diff:
        raise NormsearchError(
            f"{folder} holds the results of another run of study {recipe.name!r} ({diff}) and no database of it; "
            f"give this one a new name (--name NEW) or another folder (--results_dir DIR), or delete {folder}"
        )


def open_study(recipe: Recipe, storage: str | None = None, create: bool = True, seed_offset: int = 0) -> StudyHandle:
    """Open (or create) the recipe's study and check that it was run with the same recipe. A study
    in which no trial has finished takes the new recipe (a first run that failed on bad data does
    not lock it)."""
    import optuna

    from ._samplers import make_pruner, make_sampler

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    url = storage or recipe.storage_url
    folder = recipe.folder
    if url.startswith("sqlite:///") and not Path(url[len("sqlite:///"):]).exists():
        _check_folder(recipe, folder, creating=True)  # before the database file exists
    store = open_storage(url)
    created = []

    def create_or_load():
        existing = None
        try:
            existing = optuna.load_study(study_name=recipe.name, storage=store)
        except KeyError:
            if not create:
                raise NormsearchError(f"no study named {recipe.name!r} in {mask(url)}") from None
        if existing is None:
            _check_folder(recipe, folder, creating=True)
            created.append(True)
        n_existing = len(existing.get_trials(deepcopy=False)) if existing else 0
        sampler = make_sampler(recipe, recipe.search.seed + n_existing + seed_offset)
        if recipe.search.reproducible:  # proposals by search._propose's rule, replayed into the study
            from ._propose import replay_sampler

            sampler = replay_sampler(sampler)
        return optuna.create_study(
            study_name=recipe.name, storage=store, directions=directions(recipe), load_if_exists=True,
            sampler=sampler, pruner=make_pruner(recipe),
        )

    study = retry(create_or_load, "open the study")
    stored = study.user_attrs.get(A_RECIPE)
    now = recipe.raw
    if stored is None or (stored != now and not retry(lambda: _has_results(study), "read the trials")):
        retry(lambda: study.set_user_attr(A_RECIPE, now), "save the recipe")
    else:
        diff = first_difference(stored_fingerprint(stored), fingerprint(now))
        if diff:
            raise NormsearchError(
                f"study {recipe.name!r} was run with another recipe ({diff}); its trials would not be comparable: "
                f"keep the recipe or give this one a new name (--name NEW)"
            )
    if list(directions(recipe)) != [d.name.lower() for d in study.directions]:
        raise NormsearchError(f"study {recipe.name!r} has other objectives; give this recipe a new name")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "recipe.yaml").write_text(_yaml.dumps(mask_recipe(now)))  # a file people commit
    return StudyHandle(recipe, study, url, folder)


def open_results(target: str | Path | None = None, storage: str | None = None,
                 study_name: str | None = None) -> StudyHandle:
    """An existing study: a results folder (``results/<name>``, which holds the recipe it was run
    with), a recipe file, or ``storage`` + ``study_name``. A missing study is a NormsearchError, and
    looking for one writes nothing (no database file is created)."""
    import optuna

    from ..recipe import load_recipe, recipe_from_dict

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    folder = None
    if target is not None:
        path = Path(target)
        if path.is_dir():
            if not (path / "recipe.yaml").is_file():
                raise NormsearchError(f"{path} is not a normsearch results folder (no recipe.yaml in it)")
            folder = path
            recipe = recipe_from_dict(_yaml.load(path / "recipe.yaml"), source=str(path / "recipe.yaml"))
            if storage is None and recipe.storage is None:
                storage = f"sqlite:///{path / 'study.db'}"
                if not (path / "study.db").is_file():
                    raise NormsearchError(f"{path}: no study.db here; give --storage URL if the study lives elsewhere")
        elif path.suffix in (".yaml", ".yml"):
            recipe = load_recipe(path)
        else:
            raise NormsearchError(f"{target}: no such results folder or recipe file")
        url = storage or recipe.storage_url
        name = study_name or recipe.name
    else:
        if not (storage and study_name):
            raise NormsearchError("name a results folder, or give --storage URL and --study-name NAME")
        url, name, recipe = storage, study_name, None
    store = open_storage(url, create=False)  # looking for a study creates no database
    try:
        study = retry(lambda: optuna.load_study(study_name=name, storage=store), "open the study")
    except KeyError:
        known = [s.study_name for s in optuna.get_all_study_summaries(store, include_best_trial=False)]
        raise NormsearchError(f"no study named {name!r} in {mask(url)}; studies there: {', '.join(known) or 'none'}") \
            from None
    if recipe is None:
        raw = study.user_attrs.get(A_RECIPE)
        if raw is None:
            raise NormsearchError(f"study {name!r} in {mask(url)} was not made by normsearch (no recipe stored)")
        recipe = recipe_from_dict(raw)
    return StudyHandle(recipe, study, url, folder or recipe.folder)


def recipe_of(study) -> Recipe:
    """The typed recipe stored with a study made by normsearch."""
    from ..recipe import recipe_from_dict

    raw = study.user_attrs.get(A_RECIPE)
    if raw is None:
        raise NormsearchError(f"study {study.study_name!r} was not made by normsearch (no recipe stored)")
    return recipe_from_dict(raw)
