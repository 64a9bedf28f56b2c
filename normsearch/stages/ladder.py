"""The scale ladder (``normsearch ladder``): the search's top placements and the baselines retrained
at three or more model sizes ("rungs", model overrides), on fresh seeds, with training tokens growing
with parameters by the recipe's rule. Each rung is a stage of the study (``<study>/ladder-<i>``,
results in ``results/<study>/ladder-<i>/``): resumable, shared by workers, deduplicated by
(architecture, rung). The learning rate is swept at every rung (the extending sweep), unless the
parametrisation makes it transfer (muP along width alone): then each architecture keeps the one the
search chose.

Each rung is stored with the settings the ladder shares and its own overrides, not the whole list
of rungs, so that a ladder can grow: ``--rungs`` with one more rung after the stored ones reuses
every rung trained and trains the new one. The stored settings are the truth: a setting given that
differs is refused, naming the stored value, and one left out is taken from storage
(:func:`resolve_ladder`). Rungs stored in the first form (the whole list in each) are read as well.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from ..config import ModelConfig, from_mapping, to_mapping
from ..errors import NormsearchError
from ..recipe import LadderConfig, Recipe, ladder_config
from ..search import StudyHandle
from ._stage import (A_STAGE, Entry, Stage, find_stage, open_stage, recipe_with, search_finished, shared_settings,
                     stage_names, stage_recipe, train_stages, with_seeds, with_sweep)

PREFIX = "ladder-"
#: the settings every rung of a ladder shares, stored with each rung beside its own overrides
#: (``target`` is not among them: it changes the report, never a run)
SHARED = ("top", "baselines", "seeds", "first_seed", "tokens_per_param", "max_steps", "lr", "lr_extend",
          "lr_resolution", "recipe")

#: ladders one option sets up (``--preset``); settings given beside it override the preset's
PRESETS = {
    # issue 26: the same ladder for a GPU machine, 21M to 354M parameters (GPT-2's BPE vocabulary of 50,304
    # with untied embeddings: most of the small rungs' parameters), 20 tokens per parameter (0.4B to 7.1B
    # tokens a run), 1024-token context, bf16, on pre-tokenized nanoGPT .bin files that the machine has:
    # `--recipe '{data.path: /data/fineweb10B}'` (nothing is downloaded)
    "gpu": {
        "name": "gpu",
        "rungs": [{"n_layers": 4, "d_model": 192, "n_heads": 3}, {"n_layers": 6, "d_model": 384, "n_heads": 6},
                  {"n_layers": 8, "d_model": 512, "n_heads": 8}, {"n_layers": 12, "d_model": 768, "n_heads": 12},
                  {"n_layers": 20, "d_model": 1024, "n_heads": 16}],
        "tokens_per_param": 20.0, "lr": "sweep", "lr_extend": 1, "lr_resolution": 0, "seeds": 2,
        "recipe": {"data.corpus": "bin", "data.bytes_per_token": 4.3, "data.eval_windows": 256,
                   "model.vocab_size": 50304, "model.context_length": 1024, "train.batch_size": 32,
                   "train.lr": [3.0e-4, 1.0e-3, 3.0e-3], "train.precision": "bf16-mixed", "train.device": "cuda",
                   "train.eval_every": 1000, "train.warmup": 200, "train.steps": 5000},
    },
}


def kind_of(i: int, name: str = "") -> str:
    """Rung ``i``'s stage: ``ladder-<i>``, or ``ladder-<name>-<i>`` for a named ladder."""
    return f"{PREFIX}{name + '-' if name else ''}{i}"


def shared_recipe(parent: Recipe, cfg: LadderConfig) -> Recipe:
    """The search's recipe with the overrides every rung shares (``ladder.recipe``), checked as a recipe."""
    return recipe_with(parent, cfg.recipe, "ladder.recipe") if cfg.recipe else parent


def flag(key: str) -> str:
    """The command-line option of a ladder setting."""
    return "--" + key.replace("_", "-")


def show(value) -> str:
    """A setting as it would be typed: YAML flow style (``{n_layers: 2}``, ``[pre_ln, post_ln]``)."""
    import yaml

    if isinstance(value, (dict, list)):
        return yaml.safe_dump(value, default_flow_style=True, width=10**6, sort_keys=False).strip()
    return "null" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


@dataclass
class Rung:
    """One rung as trained: its model, budget and size."""

    index: int
    overrides: dict
    steps: int
    n_params: int  # of the first baseline (Pre-LN when listed): the rung's size
    recipe: Recipe

    @property
    def name(self) -> str:
        return "r{}: {}".format(self.index, ", ".join(f"{k} {v}" for k, v in self.overrides.items()))

    @property
    def tokens(self) -> int:
        return self.steps * self.recipe.train.batch_size * self.recipe.model.context_length


# --------------------------------------------------------------------------------------------------
# Rungs and the learning-rate mode


def rung_model(parent: ModelConfig, i: int, overrides: dict) -> ModelConfig:
    """Rung ``i``'s model: the search's with the rung's overrides, read as a recipe's ``model:``
    section is (every value's type and range checked), so that a bad rung is one error line naming
    it rather than a model built from a string."""
    section = f"ladder.rungs[{i}]"
    try:
        return from_mapping(ModelConfig, {**to_mapping(parent), **dict(overrides)}, section)
    except NormsearchError as e:
        msg = str(e)
        raise NormsearchError(msg if msg.startswith(section) else f"{section} {show(dict(overrides))}: {msg}") from None


def _no_transfer(search: ModelConfig, models: list[ModelConfig]) -> str | None:
    """Why the search's learning rates would not be each rung's best (None: muP makes them transfer)."""
    if search.parametrization != "mup":
        return ("under standard parametrisation the best learning rate moves with the model's size (results/mup: it "
                "halves per doubling of width), so the search's would not be each rung's best")
    for key, why in (("n_layers", "depth transfer (CompleteP) is not implemented: docs/parametrization.md"),
                     ("n_heads", "mup's attention scale assumes a fixed number of heads: docs/parametrization.md")):
        if len({getattr(m, key) for m in [search, *models]}) > 1:
            return (f"muP carries the learning rate across width only, and these rungs change {key} from the "
                    f"search's {getattr(search, key)} ({why})")
    if models[0].mup_base_width != search.mup_base_width:
        return (f"the rungs' mup_base_width {models[0].mup_base_width} is not the search's {search.mup_base_width}, "
                f"the width at which the search chose its learning rates")
    if len({m.ffn_dim / m.d_model for m in [search, *models]}) > 1:
        return "the FFN does not grow with the width at these rungs (model.ffn_hidden), which muP's rules do not cover"
    return None


def lr_mode(recipe: Recipe, cfg: LadderConfig, models: list[ModelConfig] | None = None,
            stored: str | None = None) -> str:
    """sweep or transfer. ``auto`` transfers only where muP makes the learning rate transfer: under
    model.parametrization mup, along width alone (the same depth, heads and base width at every rung
    as in the search, the FFN growing with the width); anywhere else it sweeps. ``transfer`` where
    the learning rate would not transfer is refused, saying why. ``stored``: the mode a stored ladder
    was trained with, which it keeps (a ladder of an earlier rule is resumed and reported as it was
    trained; a different mode asked for is refused by :func:`check_stored`)."""
    if stored is not None and cfg.lr in ("auto", stored):
        return stored
    if models is None:
        models = [rung_model(recipe.model, i, o) for i, o in enumerate(cfg.rungs)]
    why = _no_transfer(recipe.model, models) if models else "no rungs"
    if cfg.lr == "auto":
        return "sweep" if why else "transfer"
    if cfg.lr == "transfer" and why:
        raise NormsearchError(f"ladder.lr transfer: {why}; use --lr sweep (or auto, which sweeps here)")
    return cfg.lr


def _count(recipe: Recipe, model) -> int:
    """The rung's parameters (of its first baseline), counted on torch's meta device: no memory is
    allocated, so a rung of a billion parameters is planned as cheaply as a small one."""
    import torch

    from ..baselines import baseline
    from ..model import build_model

    with torch.device("meta"):
        return build_model(baseline(recipe.search.baselines[0] if recipe.search.baselines else "pre_ln",
                                    recipe.search.norm_kind), model).num_parameters()


def plan_rungs(parent: Recipe, cfg: LadderConfig) -> list[Rung]:
    """Every rung's model and steps, checked: typed like a recipe's model, one base width for the
    whole ladder, parameters growing rung by rung."""
    if not cfg.rungs:
        raise NormsearchError("give the rungs: --rungs '[{n_layers: 2}, {n_layers: 4}, {n_layers: 8}]' or a "
                              "`ladder:` section with rungs in the recipe")
    search = parent
    parent = shared_recipe(search, cfg)
    models = [rung_model(parent.model, i, o) for i, o in enumerate(cfg.rungs)]
    bases = sorted({m.mup_base_width for m in models})
    if len(bases) > 1:
        raise NormsearchError(f"ladder.rungs: mup_base_width differs between rungs ({', '.join(map(str, bases))}); it "
                              f"is the width at which mup equals standard, one for the whole ladder: set it once "
                              f"(in the recipe's model section) or at every rung alike")
    t = parent.train
    out: list[Rung] = []
    for i, (overrides, model) in enumerate(zip(cfg.rungs, models)):
        n = _count(parent, model)
        steps = t.steps
        if cfg.tokens_per_param is not None:
            steps = max(1, math.ceil(cfg.tokens_per_param * n / (t.batch_size * model.context_length)))
        if cfg.max_steps is not None:
            steps = min(steps, cfg.max_steps)
        scale = steps / t.steps
        train = with_sweep(replace(t, steps=steps, warmup=min(steps, round(t.warmup * scale)),
                                   eval_every=max(1, round(t.eval_every * scale))), cfg.lr_extend, cfg.lr_resolution)
        out.append(Rung(i, dict(overrides), steps, n, stage_recipe(search, kind_of(i, cfg.name), model=model,
                                                                   train=train, data=parent.data)))
    for a, b in zip(out, out[1:]):
        if b.n_params <= a.n_params:
            raise NormsearchError(f"ladder.rungs: rung {b.index} ({b.n_params:,} parameters) is not larger than rung "
                                  f"{a.index} ({a.n_params:,}); order the rungs smallest first")
    return out


def top_found(parent: StudyHandle, rows: list, k: int) -> list:
    """The top ``k`` found placements of the search's ranked ``rows``, each with the ranking that chose
    it: in the confirmed order when the search has a finished confirmation (its verdicts are the
    study's), then the rest in the search's order."""
    from .confirm import confirmed_order

    found = [r for r in rows if not r.is_baseline]
    confirmed = confirmed_order(parent)
    found.sort(key=lambda r: confirmed.index(r.arch_id) if r.arch_id in confirmed else len(confirmed))  # stable
    return [(r, "confirmation" if r.arch_id in confirmed else "search") for r in found[:k]]


def entries(parent: StudyHandle, cfg: LadderConfig, mode: str) -> list[Entry]:
    """The top ``cfg.top`` found placements (:func:`top_found`) and the baselines. Under transfer each
    keeps the learning rate the search chose for it (a baseline the search did not run is refused);
    under sweep the rung sweeps them all."""
    from ..baselines import baseline
    from ..ranking import rank

    rows = [r for r in rank(parent, against=[]).ranked if r.rank is not None]
    by_label = {r.label: r for r in rows}
    bases = cfg.baselines if cfg.baselines is not None else list(parent.recipe.search.baselines)
    out = []
    for r, chosen_by in top_found(parent, rows, cfg.top):
        out.append(Entry(r.label, r.arch_id, r.placement, [float(r.best_lr or parent.recipe.train.lr[0])],
                         search_rank=r.rank, search_mean=r.score_mean, search_ci=(r.ci_low, r.ci_high),
                         search_seeds=r.n_seeds, chosen_by=chosen_by, variant=dict(r.variant)))
    for b in bases:
        row = by_label.get(b)
        if row is None and mode == "transfer":
            raise NormsearchError(f"ladder: baseline {b} was not run by the search, so no learning rate was chosen for "
                                  f"it to transfer; drop it or use --lr sweep")
        p = baseline(b, parent.recipe.search.norm_kind)
        lr = [float(row.best_lr or parent.recipe.train.lr[0])] if row is not None else list(parent.recipe.train.lr)
        out.append(Entry(b, p.arch_id(parent.recipe.model.n_layers) if row is None else row.arch_id, p.to_dict(), lr,
                         baseline=b, search_rank=row.rank if row else None,
                         search_mean=row.score_mean if row else None, variant=dict(row.variant) if row else {}))
    if not out:
        raise NormsearchError("nothing to put on the ladder: the search ranked no architecture and no baseline is "
                              "named")
    return out


# --------------------------------------------------------------------------------------------------
# The settings each rung is stored with


def _normal(recipe: Recipe, settings: dict) -> dict:
    """The shared settings in one form, to compare (:func:`normsearch.stages._stage.shared_settings`), and
    the overrides every rung shares."""
    out = shared_settings(recipe, settings, SHARED)
    out["recipe"] = dict(out["recipe"] or {})
    return out


def settings_of(recipe: Recipe, cfg: LadderConfig, mode: str, i: int) -> dict:
    """What rung ``i`` is stored with: the settings the ladder shares (resolved) and the rung's own
    overrides, not the whole list of rungs, so that a rung added later leaves those before it as
    they were stored."""
    d = _normal(recipe, {**to_mapping(cfg), "lr": mode})
    d["rung"] = dict(cfg.rungs[i])
    return d


@dataclass
class StoredRung:
    """A rung of the ladder as stored with the study."""

    index: int
    settings: dict  # verbatim (what open_stage compares against)
    rung: dict | None  # its overrides (None: the stored list is shorter than its index)
    shared: dict  # SHARED, normalised (_normal)
    entries: list = field(default_factory=list)  # the architectures it trains, as stored (Entry fields)


def stored_rungs(parent: StudyHandle, name: str = "") -> dict[int, StoredRung]:
    """The rungs stored with the study, by index. A rung stored in the first form carries the whole
    list of rungs (``rungs``); its own overrides are the ones at its index. A stage whose definition
    was never stored (a worker stopped between creating and defining it) is left out: it will be
    defined as new."""
    out = {}
    prefix = kind_of(0, name)[:-1]
    for kind in stage_names(parent):
        if not kind.startswith(prefix) or not kind[len(prefix):].isdigit():
            continue
        i = int(kind[len(prefix):])
        study = find_stage(parent, kind)
        info = (study.user_attrs.get(A_STAGE) or {}) if study is not None else {}
        settings = info.get("settings")
        if settings is None:
            continue
        if "rung" in settings:
            rung = settings["rung"]
        else:
            listed = settings.get("rungs") or []
            rung = listed[i] if i < len(listed) else None
        out[i] = StoredRung(i, settings, dict(rung) if rung is not None else None, _normal(parent.recipe, settings),
                            list(info.get("entries") or []))
    return dict(sorted(out.items()))


def stored_mode(stored: dict[int, StoredRung]) -> str | None:
    """The learning-rate mode (sweep or transfer) a stored ladder was trained with; None when none is."""
    return next(iter(stored.values())).shared.get("lr") if stored else None


def check_stored(parent: StudyHandle, cfg: LadderConfig, mode: str, stored: dict[int, StoredRung]) -> None:
    """Refuse a ladder that differs from the one stored: a rung's overrides, or a shared setting, with
    the stored value named."""
    name = parent.recipe.name
    want = _normal(parent.recipe, {**to_mapping(cfg), "lr": mode})
    for i, st in stored.items():
        if i >= len(cfg.rungs):
            raise NormsearchError(
                f"the ladder of study {name!r} has {len(stored)} rungs stored, "
                f"{show([s.rung for s in stored.values()])}; give them all in --rungs (a new rung after them), or "
                f"leave --rungs out to use them")
        if dict(cfg.rungs[i]) != st.rung:
            raise NormsearchError(
                f"ladder.rungs[{i}] is {show(dict(cfg.rungs[i]))}, but rung {i} of the ladder of study {name!r} was "
                f"trained as {show(st.rung)}; give the stored rungs first, in order (new rungs after them), or leave "
                f"--rungs out")
        for key in SHARED:
            if want[key] != st.shared[key]:
                raise NormsearchError(
                    f"the ladder of study {name!r} was trained with {key} {show(st.shared[key])}, not "
                    f"{show(want[key])}; leave {flag(key)} out to use the stored value (or give "
                    f"{flag(key)} {show(st.shared[key])})")


def resolve_ladder(parent: StudyHandle, given: dict, report_only: bool = False) -> LadderConfig:
    """The ladder to run or report on: the settings ``given`` (the command line's, None left out) over
    those stored with the study's ladder over the recipe's ``ladder:`` section. With a ladder stored,
    its settings are the truth: one given that differs is refused, naming the stored value; rungs
    left out are the stored ones, and rungs given must start with them (a rung after them is a rung
    added to the ladder)."""
    base = to_mapping(parent.recipe.ladder) if parent.recipe.ladder is not None else {}
    stored = stored_rungs(parent, given.get("name", base.get("name", "")))
    if not stored:
        if report_only:
            raise NormsearchError(f"study {parent.recipe.name!r} has no ladder yet; run `normsearch ladder` on it "
                                  f"first (without --report-only)")
        return ladder_config({**base, **given})
    first = next(iter(stored.values()))
    rungs = given["rungs"] if "rungs" in given else [s.rung for s in stored.values() if s.rung is not None]
    cfg = ladder_config({**base, **first.shared, **given, "rungs": rungs})
    plan_rungs(parent.recipe, cfg)  # the rungs' own errors first (a bad type names the rung)
    check_stored(parent, cfg, lr_mode(parent.recipe, cfg, stored=stored_mode(stored)), stored)
    return cfg


# --------------------------------------------------------------------------------------------------
# Training and reporting


def open_rungs(parent: StudyHandle, cfg: LadderConfig) -> list[tuple[Rung, StudyHandle, Stage]]:
    """Create or resume every rung's stage: a stored rung is resumed only with the settings it was
    created with (checked here with the stored value named; then open_stage checks them verbatim)."""
    rungs = plan_rungs(parent.recipe, cfg)
    stored = stored_rungs(parent, cfg.name)
    mode = lr_mode(parent.recipe, cfg, [r.recipe.model for r in rungs], stored=stored_mode(stored))
    check_stored(parent, cfg, mode, stored)
    if stored:  # a rung added to a stored ladder trains the architectures the others did, not today's top K
        found = [Entry(**{**e, "search_ci": tuple(e.get("search_ci") or (None, None))})
                 for e in next(iter(stored.values())).entries]
    else:
        search_finished(parent)  # before ranking it: "not finished" is the error to give
        found = entries(parent, cfg, mode)
    seeds = list(range(cfg.first_seed, cfg.first_seed + cfg.seeds))
    overlap = set(seeds) & set(parent.recipe.train.seeds)
    if overlap:
        raise NormsearchError(f"ladder seeds {sorted(overlap)} were search seeds; raise ladder.first_seed")
    out = []
    for rung in rungs:
        settings = stored[rung.index].settings if rung.index in stored else settings_of(parent.recipe, cfg, mode,
                                                                                          rung.index)

        def make(rung=rung, settings=settings) -> Stage:
            es = [replace(e, lr=list(rung.recipe.train.lr)) for e in found] if mode == "sweep" else found
            return Stage(kind_of(rung.index, cfg.name), settings, es, rung.recipe, seeds,
                         lr_extend=rung.recipe.train.lr_extend if mode == "sweep" else 0)

        handle, stage = open_stage(parent, kind_of(rung.index, cfg.name), settings, make)
        out.append((rung, handle, stage))
    return out


def run_ladder(parent: StudyHandle, cfg: LadderConfig, display=None, verbose: bool = False):
    """Train every rung, smallest first, to the end. Returns [(rung, handle)]."""
    return train_stages(open_rungs(parent, cfg), display, verbose)


def ladder_handles(parent: StudyHandle, cfg: LadderConfig) -> list[tuple[Rung, StudyHandle]]:
    """The rungs that exist, to report on (no training, nothing created)."""
    out = []
    for rung in plan_rungs(parent.recipe, cfg):
        study = find_stage(parent, kind_of(rung.index, cfg.name))
        if study is not None:
            folder = parent.folder / kind_of(rung.index, cfg.name)
            seeds = (study.user_attrs.get(A_STAGE) or {}).get("seeds") or rung.recipe.train.seeds
            out.append((rung, StudyHandle(with_seeds(rung.recipe, seeds), study, parent.storage_url, folder)))
    return out


def first_rung_entries(parent: StudyHandle, name: str = "") -> list[dict]:
    """The entries stored with the ladder's first rung (every rung trains these), [] without one."""
    study = find_stage(parent, kind_of(0, name))
    return ((study.user_attrs.get(A_STAGE) or {}) if study is not None else {}).get("entries") or []


def found_labels(entries: list[dict]) -> list[str]:
    """The ladder's found placements in the order they were chosen."""
    return [e["label"] for e in entries if not e.get("baseline") and e.get("label")]


def chosen_by(entries: list[dict]) -> str:
    """Which ranking chose the ladder's found placements (a ladder stored before that was recorded was
    chosen by the search's)."""
    by = {e.get("chosen_by") or "search" for e in entries if not e.get("baseline")}
    if by == {"confirmation"}:
        return "the top of the confirmation's ranking, fresh seeds and the test split"
    if by == {"confirmation", "search"}:
        return "the confirmation's ranking, then the search's for those it did not train"
    return "the top of the search's ranking"
