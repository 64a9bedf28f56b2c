"""Everything ``run`` would refuse, checked before a study is created and without writing anything.

:func:`check_recipe` lists the problems of a loaded recipe (its fields were checked when it was
read): a search without a space, a space with fewer architectures than ``search.trials``, data that
cannot be read or is too short for the context, a vocabulary the model cannot hold, a storage URL
that is malformed or whose folder cannot be made, a results folder or token cache that cannot be
written. :func:`ensure_runnable` raises the first of them. ``validate`` prints them; ``run`` calls
:func:`ensure_runnable` before it opens the study, so a failed first run never locks a study.
Torch-free and optuna-free.
"""

from __future__ import annotations

from typing import Callable

from .errors import NormsearchError


def _search(recipe) -> str | None:
    if recipe.space is None and recipe.search.trials > 0:
        return (f"the recipe has no `space` but search.trials is {recipe.search.trials}; add a space "
                f"(e.g. space: quick.yaml) or set search.trials: 0")
    if recipe.space is None and recipe.search.control > 0:
        return (f"the recipe has no `space` but search.control is {recipe.search.control}: control proposals are "
                f"uniform draws from the space; add a space or set search.control: 0")
    return None


def _space(recipe) -> str | None:
    from .baselines import baseline

    space, L, trials = recipe.space, recipe.model.n_layers, recipe.search.trials
    if space is None or trials == 0:
        return None
    inside = set()
    for name in recipe.search.baselines:  # baselines that are points of the space take one architecture each
        p = baseline(name, recipe.search.norm_kind)
        if space.params_of(p, L) is not None:
            inside.add(p.arch_id(L))
    need = trials + len(inside)
    have = space.architectures(L, enough=need)
    if have >= need:
        return None
    with_baselines = f" ({len(inside)} of them baselines)" if inside else ""
    return (f"the space holds {have} distinct architectures at {L} layers{with_baselines}, fewer than the "
            f"{need} that search.trials {trials} needs; lower search.trials to {max(0, have - len(inside))} "
            f"or widen the space")


def _data(recipe, tokens=None) -> str | None:
    from .data import token_counts

    ctx, data = recipe.model.context_length, recipe.data
    if tokens is not None:
        train, val, exact = len(tokens.train), len(tokens.val), True
    else:
        train, val, exact = token_counts(data)
    unit = "tokens" if exact else "bytes (at most as many tokens)"
    if val < ctx + 1:
        return (f"the validation split has {val} {unit}, fewer than one eval window of model.context_length "
                f"{ctx} + 1; use more data, a larger data.val_fraction or a shorter context")
    if train < ctx + 2:
        return (f"the train split has {train} {unit}, too few for one window of model.context_length {ctx} + 1; "
                f"use more data or a shorter context")
    return None


def _vocab(recipe, tokens=None) -> str | None:
    data, model = recipe.data, recipe.model
    if tokens is not None:
        vocab = tokens.vocab_size
    elif data.tokenizer == "bytes" and data.corpus != "bin":
        vocab = 256
    elif data.corpus == "bin":
        import numpy as np

        from .data import _bin_files

        arrays = [np.memmap(f, dtype=np.uint16, mode="r") for f in _bin_files(data).values() if f.stat().st_size]
        vocab = int(max(a.max() for a in arrays)) + 1 if arrays else 0
    else:
        return None  # BPE: recipe_from_dict already sized the model for data.vocab_size
    if vocab > model.vocab_size:
        return (f"the data has {vocab} token ids but model.vocab_size is {model.vocab_size}; "
                f"set model.vocab_size >= {vocab}")
    return None


def _storage(recipe, storage: str | None = None) -> str | None:
    from .storage import check_storage, from_env

    url = from_env(storage, "--storage") if storage else recipe.storage_url
    return check_storage(url)


def _results(recipe) -> str | None:
    from .storage import folder_problem

    return folder_problem(recipe.folder, f"results folder {recipe.folder}", create=True)


def _cache(recipe) -> None:
    from .data import cache_root

    cache_root(recipe.data)  # raises when the token cache cannot be made


#: (what is checked, the check): each returns a problem or None, and may raise a NormsearchError
CHECKS: dict[str, Callable[..., str | None]] = {
    "search": lambda r, **_: _search(r),
    "space": lambda r, **_: _space(r),
    "storage": lambda r, storage=None, **_: _storage(r, storage),
    "results": lambda r, **_: _results(r),
    "cache": lambda r, **_: _cache(r),
    "data": lambda r, tokens=None, **_: _data(r, tokens),
    "vocabulary": lambda r, tokens=None, **_: _vocab(r, tokens),
}


def check_recipe(recipe, storage: str | None = None, tokens=None, only=None) -> list[str]:
    """Every problem ``run`` would meet with this recipe, without training or writing anything.
    ``storage``: the ``--storage`` value (``env:VAR`` allowed), if one is given; ``tokens``: the
    data's built tokens (exact counts), if they are at hand; ``only``: names of :data:`CHECKS` to
    run (``train`` needs data, vocabulary and cache only). An empty list: it would run."""
    problems = []
    for name, check in CHECKS.items():
        if only is not None and name not in only:
            continue
        try:
            problem = check(recipe, storage=storage, tokens=tokens)
        except NormsearchError as e:
            problem = str(e)
        if problem and problem not in problems:
            problems.append(problem)
    return problems


def ensure_runnable(recipe, storage: str | None = None, tokens=None, only=None) -> None:
    """Raise a NormsearchError with the problems of :func:`check_recipe`, on one line."""
    problems = check_recipe(recipe, storage=storage, tokens=tokens, only=only)
    if problems:
        more = f" (and {len(problems) - 1} more: normsearch validate lists them)" if len(problems) > 1 else ""
        raise NormsearchError(problems[0] + more)


def recipe_summary(r, source, storage: str | None, url: str) -> str:
    """What ``normsearch validate`` prints for a valid recipe: the model, data, budget, space, baselines,
    search (with how its proposals are made) and the runs it plans; ``url`` is the storage URL (its
    password masked here)."""
    from ._secrets import mask_url
    from .baselines import baseline
    from .grid import grid_text

    L = r.model.n_layers
    t = r.train
    lines = [f"recipe {r.name!r} ({source}) is valid",
             f"  model: {L} layers, d_model {r.model.d_model}, {r.model.n_heads} heads, "
             f"context {r.model.context_length}, {r.model.ffn}",
             f"  data: {r.data.corpus}" + (f" {r.data.path}" if r.data.path else "") + f", {r.data.tokenizer} tokens",
             f"  budget per run: {t.steps} steps x {t.batch_size} x {r.model.context_length} tokens; "
             f"{len(t.seeds)} seed(s) x {len(t.lr)} learning rate(s)"
             + (f" x {t.n_variants} variant(s) of train.grid ({grid_text(t.grid)}; a found placement has no paper "
                f"init)" if t.grid else "")
             + f" = {len(t.runs)} runs per found architecture"
             + (f", refined around each one's chosen cell to {t.lr_resolution:g} decades" if t.lr_resolution else "")]
    if r.space is not None:
        params = ", ".join(f"{k} ({len(v)})" for k, v in r.space.distributions().items())
        lines.append(f"  space: {r.space.source or 'inline'}: {r.space.size():,} points; choices: {params}")
    else:
        lines.append("  space: none (baselines only)")
    base = []
    for b in r.search.baselines:
        p = baseline(b, r.search.norm_kind)
        inside = r.space is not None and r.space.params_of(p, L) is not None
        base.append(f"{b}{'' if inside else ' (outside the space)'}")
    lines.append(f"  baselines ({len(base)}): {', '.join(base)}")
    s = r.search
    n = len(s.baselines) + s.trials + s.control
    rule = (f"reproducible, {s.in_flight} in flight" if s.reproducible
            else "as the workers ask (not reproducible with more than one worker)")
    controls = f" and {s.control} control proposals (uniform draws)" if s.control else ""
    lines.append(f"  search: {s.sampler} sampler ({rule}), {s.trials} searched architectures{controls}, "
                 f"pruner {s.pruner}, objective {s.objective}; at most {n * len(t.runs)} runs"
                 + (f" and {n * t.lr_extend * len(t.seeds)} more where the sweep extends past an end"
                    if t.lr_extend else ""))
    if r.confirm is not None:
        c = r.confirm
        k = c.top + len(c.baselines if c.baselines is not None else s.baselines)
        race = f", racing up to {s.racing.budget} more" if s.racing else ""
        n = (f"as many fresh seeds as give {', '.join(c.primary)} power {c.power:g} ({c.min_seeds} to {c.max_seeds})"
             if c.seeds == "auto" else f"{c.seeds} fresh seeds")
        runs = f"{k * c.min_seeds} to {k * c.max_seeds}" if c.seeds == "auto" else f"{k * c.seeds}"
        lines.append(f"  then confirm: the top {c.top} and the baselines on {n} from {c.first_seed}, "
                     f"scored on a {c.test_bytes:,}-byte test split; {runs} runs{race}")
    where = storage or r.storage
    lines.append(f"  storage: {where + ' = ' if where and where.startswith('env:') else ''}{mask_url(url)}")
    return "\n".join(lines)
