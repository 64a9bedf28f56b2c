"""Recipes: one YAML file that says what to search and how to score it.

Sections: ``model``, ``data``, ``train``, ``space``, ``search``, ``report``, ``storage`` (plus ``name``). Each is
read into a typed object (:mod:`normsearch.sections` holds those of train, search, report, confirm and
ladder); unknown keys are rejected with the valid ones and the file and line; any field can be
overridden from the command line as ``--section.key value``. This module holds the :class:`Recipe`
and its reading: the file, the overrides and the checks across sections. Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from . import _yaml
from ._secrets import is_masked, mask_url
from .config import ModelConfig, from_mapping, to_mapping
from .data import DataConfig
from .errors import NormsearchError, unknown
from .sections import (ConfirmConfig, LadderConfig, ReportConfig, SearchConfig, TrainConfig, ladder_config,
                       lr_problem)
# re-exported: their home was this module
from .sections import RUNG_KEYS, RacingConfig, rung_problem, seed_problem  # noqa: F401

SECTIONS = ("name", "model", "data", "train", "space", "search", "report", "confirm", "ladder", "storage",
            "results_dir")
SCALARS = ("name", "storage", "results_dir")  # top-level values given as text, never read as YAML


def name_problem(name) -> str | None:
    """Why ``name`` cannot name a study (and its results folder), or None."""
    ok = (isinstance(name, str) and 0 < len(name) <= 100 and name.isprintable() and not name.startswith(".")
          and not any(c.isspace() or c in '/\\:*?"<>|' for c in name))
    if ok:
        return None
    return (f"a study name is a plain word (letters, digits, - _ . +; at most 100 characters, no spaces, slashes "
            f"or control characters), not {name!r}")


@dataclass(frozen=True)
class Recipe:
    name: str
    model: ModelConfig
    data: DataConfig
    train: TrainConfig
    space: Any  # the search space (a SearchSpace, see normsearch.space), or None: baselines only
    search: SearchConfig
    storage: str | None = None  # an Optuna storage URL or journal file; default SQLite in the results folder
    results_dir: str = "results"
    source: str | None = None  # the file it came from
    raw: dict = field(default_factory=dict, compare=False)  # the resolved recipe as plain data
    report: ReportConfig = field(default_factory=ReportConfig)
    confirm: ConfirmConfig | None = None  # the confirmation stage, run after the search
    ladder: LadderConfig | None = None  # the scale ladder (normsearch ladder)

    @property
    def folder(self) -> Path:
        return Path(self.results_dir) / self.name

    @property
    def storage_url(self) -> str:
        """The URL to open: the recipe's ``storage`` (``env:VAR`` read from the environment), else
        SQLite in the results folder. A NormsearchError if it names an unset variable or is a URL
        whose password was masked when it was saved."""
        from .storage import check_storage, from_env

        if not self.storage:
            return f"sqlite:///{self.folder / 'study.db'}"
        url = from_env(self.storage)
        if is_masked(url):
            raise NormsearchError(check_storage(url))
        return url

    def to_dict(self) -> dict[str, Any]:
        """The recipe as plain data, as saved with a study: its storage URL's password masked."""
        return {
            "name": self.name,
            "model": self.model.to_dict(),
            "data": self.data.to_dict(),
            "train": to_mapping(self.train),
            "space": self.space.to_dict() if self.space is not None else None,
            "search": to_mapping(self.search),
            "report": to_mapping(self.report),
            **({"confirm": to_mapping(self.confirm)} if self.confirm is not None else {}),
            **({"ladder": to_mapping(self.ladder)} if self.ladder is not None else {}),
            "storage": mask_url(self.storage),
            "results_dir": self.results_dir,
        }

    def to_yaml(self) -> str:
        return _yaml.dumps(self.to_dict())

    def with_model(self, **changes) -> Recipe:
        return replace(self, model=replace(self.model, **changes))


def parse_overrides(args: list[str]) -> dict[str, Any]:
    """``["--train.lr", "0.01", "--search.trials=3"]`` -> ``{"train.lr": 0.01, "search.trials": 3}``.
    Values are read as YAML (numbers, lists ``[1e-3,3e-3]``, null, true)."""
    out: dict[str, Any] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("--"):
            raise NormsearchError(f"unexpected argument {arg!r}; overrides look like --section.key value")
        key, eq, value = arg[2:].partition("=")
        if not eq:
            if i + 1 >= len(args):
                raise NormsearchError(f"--{key} needs a value")
            value = args[i + 1]
            i += 1
        if "." not in key and key not in (*SCALARS, "space"):
            raise NormsearchError(f"unknown option --{key}; recipe overrides look like --section.key value")
        if key in SCALARS:
            out[key] = value
        else:
            out[key] = _yaml.loads(value, source=f"--{key}") if value != "" else ""
        i += 1
    return out


def _apply_overrides(raw: dict, overrides: dict[str, Any]) -> dict:
    """The recipe with the overrides applied; an error about an overridden value names the override
    (``--train.lr: ...``), not the line of the recipe file it replaced."""
    raw = _yaml.copy(raw)
    for dotted, value in overrides.items():
        section, _, key = dotted.partition(".")
        if section not in SECTIONS:
            raise NormsearchError(f"--{dotted}: {unknown('recipe section', section, SECTIONS)}")
        if not key:
            raw[section] = value
            _yaml.mark_override(raw, section, f"--{dotted}")
            continue
        if section in ("name", "storage", "results_dir"):
            raise NormsearchError(f"--{dotted}: {section} is a value, not a section; use --{section} VALUE")
        current = raw.get(section)
        if current is None or isinstance(current, str):
            if section == "space" and isinstance(current, str):
                raise NormsearchError(
                    f"--{dotted}: the space is a file ({current}); edit the file or give an inline space"
                )
            current = {}
        current = _yaml.copy(current)
        current[key] = value
        _yaml.mark_override(current, key, f"--{dotted}")
        raw[section] = current
    return raw


def load_recipe(path: str | Path, overrides: dict[str, Any] | list[str] | None = None) -> Recipe:
    """Read, override and validate a recipe. ``overrides`` maps ``"section.key"`` to a value (or is a
    list of ``--section.key value`` arguments)."""
    path = Path(path)
    raw = _yaml.load(path)
    if not isinstance(raw, dict):
        raise NormsearchError(f"{path}: a recipe is a mapping with sections {', '.join(SECTIONS)}")
    if isinstance(overrides, list):
        overrides = parse_overrides(overrides)
    raw = _apply_overrides(raw, overrides or {})
    raw.setdefault("name", path.stem)
    if raw.get("storage") is None:  # $NORMSEARCH_STORAGE, when set, is where the recipe's study lives
        from .storage import default_storage

        raw["storage"] = default_storage()
    return recipe_from_dict(raw, base=path.parent, source=str(path))


LR_RANGE_KEYS = ("low", "high", "points", "extend", "resolution")


def _lr_range(train):
    """``train.lr`` given as a log range, ``{low, high, points, extend, resolution}``, as the list of its
    points (log-spaced, rounded to 4 significant digits), ``train.lr_extend`` and ``train.lr_resolution``."""
    if not isinstance(train, dict) or not isinstance(train.get("lr"), dict):
        return train
    spec = train["lr"]
    for key in spec:
        if key not in LR_RANGE_KEYS:
            raise NormsearchError(f"{_yaml.where(spec, key)}train.lr: {unknown('key', key, LR_RANGE_KEYS)}")
    low, high, points = spec.get("low"), spec.get("high"), spec.get("points", 3)
    for what, v in (("low", low), ("high", high)):
        problem = lr_problem(v, f"train.lr.{what}")
        if problem:
            raise NormsearchError(f"{_yaml.where(spec, what)}{problem}")
    if isinstance(points, bool) or not isinstance(points, int) or points < 2 or high <= low:
        raise NormsearchError(f"{_yaml.where(spec)}train.lr as a range needs low < high and points >= 2 (an "
                              f"integer), not {dict(spec)}")
    extend = spec.get("extend", 0)
    if "lr_extend" in train and "extend" in spec:
        raise NormsearchError("give the sweep's extension once: train.lr.extend or train.lr_extend")
    lrs = [float(f"{low * (high / low) ** (i / (points - 1)):.4g}") for i in range(points)]
    if "lr_resolution" in train and "resolution" in spec:
        raise NormsearchError("give the sweep's resolution once: train.lr.resolution or train.lr_resolution")
    out = {**{k: v for k, v in train.items() if k != "lr"}, "lr": lrs, "lr_extend": train.get("lr_extend", extend)}
    if "resolution" in spec:
        out["lr_resolution"] = spec["resolution"]
    return out


def recipe_from_dict(raw: dict, base: Path | None = None, source: str | None = None) -> Recipe:
    """A recipe from its plain-data form (as written in YAML, or as saved with a study)."""
    from .space import load_space

    for key in raw:
        if key not in SECTIONS:
            raise NormsearchError(f"{_yaml.where(raw, key)}recipe: {unknown('section', key, SECTIONS)}")
    name = raw.get("name")
    problem = name_problem(name)
    if problem:
        raise NormsearchError(f"{_yaml.where(raw, 'name')}{problem}")
    data = DataConfig.from_dict(raw.get("data"))
    model_raw = raw.get("model") or {}
    model = ModelConfig.from_dict(model_raw)
    if data.tokenizer == "bpe":  # the vocabulary is the data's unless the model asks for a larger one
        if "vocab_size" not in model_raw:
            model = replace(model, vocab_size=data.vocab_size)
        elif model.vocab_size < data.vocab_size:
            raise NormsearchError(f"model.vocab_size {model.vocab_size} is smaller than the BPE vocabulary "
                                  f"data.vocab_size {data.vocab_size}")
    train = from_mapping(TrainConfig, _lr_range(raw.get("train")), "train")
    search = from_mapping(SearchConfig, raw.get("search"), "search")
    space = None
    if raw.get("space") is not None:
        space = load_space(raw["space"], base=base, default_kind=search.norm_kind)
        space.check_depth(model.n_layers)
    storage = raw.get("storage")
    if storage is not None and (not isinstance(storage, str) or not storage.strip()):
        raise NormsearchError(f"{_yaml.where(raw, 'storage')}storage must be a URL, a file path or env:VAR, "
                              f"not {storage!r}")
    results_dir = raw.get("results_dir", "results")
    if not isinstance(results_dir, str) or not results_dir or not results_dir.isprintable():
        raise NormsearchError(f"{_yaml.where(raw, 'results_dir')}results_dir must be a folder path, "
                              f"not {results_dir!r}")
    if search.second_objective == "none" and search.sampler == "nsga2":
        raise NormsearchError("search.sampler nsga2 needs search.second_objective")
    report = from_mapping(ReportConfig, raw.get("report"), "report")
    confirm = from_mapping(ConfirmConfig, raw["confirm"], "confirm") if raw.get("confirm") is not None else None
    if search.racing is not None and confirm is None:
        raise NormsearchError(f"{_yaml.where(raw, 'search')}search.racing races the confirmation stage's seeds; add a "
                              f"`confirm:` section (e.g. confirm: {{top: 3, seeds: 3}}) or remove search.racing")
    if confirm is not None and set(confirm.seed_list(search.racing.budget if search.racing else 0)) & set(train.seeds):
        raise NormsearchError(f"confirm.first_seed {confirm.first_seed}: the confirmation's seeds must be fresh, not "
                              f"train.seeds {train.seeds}; raise confirm.first_seed")
    ladder = ladder_config(raw["ladder"]) if raw.get("ladder") is not None else None
    recipe = Recipe(name, model, data, train, space, search, storage, results_dir, source, report=report,
                    confirm=confirm, ladder=ladder)
    return replace(recipe, raw=recipe.to_dict())
