"""The scale ladder (``normsearch ladder``): the search's top placements and the baselines retrained
at three or more model sizes ("rungs", model overrides), on fresh seeds, with training tokens growing
with parameters by the recipe's rule. Each rung is a stage of the study (``<study>/ladder-<i>``,
results in ``results/<study>/ladder-<i>/``): resumable, shared by workers, deduplicated by
(architecture, rung). The learning rate is swept at every rung (the extending sweep), unless the
parametrisation makes it transfer (muP): then each architecture keeps the one the search chose.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from ..errors import NormsearchError
from ..recipe import LadderConfig, Recipe
from ..search._open import StudyHandle
from ..search._stages import Entry, Stage, StageSearch, find_stage, open_stage, stage_recipe


def kind_of(i: int) -> str:
    return f"ladder-{i}"


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


def lr_mode(recipe: Recipe, cfg: LadderConfig) -> str:
    """sweep or transfer: ``auto`` transfers under muP (the learning rate found at one width holds)."""
    if cfg.lr != "auto":
        return cfg.lr
    return "transfer" if getattr(recipe.model, "parametrization", "standard") == "mup" else "sweep"


def _count(recipe: Recipe, model) -> int:
    from ..baselines import baseline
    from ..model import build_model

    return build_model(baseline(recipe.search.baselines[0] if recipe.search.baselines else "pre_ln",
                                recipe.search.norm_kind), model).num_parameters()


def plan_rungs(parent: Recipe, cfg: LadderConfig) -> list[Rung]:
    """Every rung's model and steps, checked: parameters grow rung by rung."""
    t = parent.train
    out: list[Rung] = []
    for i, overrides in enumerate(cfg.rungs):
        try:
            model = replace(parent.model, **overrides)
        except NormsearchError as e:
            raise NormsearchError(f"ladder.rungs[{i}]: {e}") from None
        n = _count(parent, model)
        steps = t.steps
        if cfg.tokens_per_param is not None:
            steps = max(1, math.ceil(cfg.tokens_per_param * n / (t.batch_size * model.context_length)))
        if cfg.max_steps is not None:
            steps = min(steps, cfg.max_steps)
        scale = steps / t.steps
        train = replace(t, steps=steps, warmup=min(steps, round(t.warmup * scale)),
                        eval_every=max(1, round(t.eval_every * scale)),
                        lr_extend=t.lr_extend if cfg.lr_extend is None else cfg.lr_extend)
        out.append(Rung(i, dict(overrides), steps, n, stage_recipe(parent, kind_of(i), model=model, train=train)))
    for a, b in zip(out, out[1:]):
        if b.n_params <= a.n_params:
            raise NormsearchError(f"ladder.rungs: rung {b.index} ({b.n_params:,} parameters) is not larger than rung "
                                  f"{a.index} ({a.n_params:,}); order the rungs smallest first")
    return out


def entries(parent: StudyHandle, cfg: LadderConfig, mode: str) -> list[Entry]:
    """The top ``cfg.top`` found placements and the baselines. Under transfer each keeps the learning
    rate the search chose for it (a baseline the search did not run is refused); under sweep the rung
    sweeps them all."""
    from ..baselines import baseline
    from ..ranking import rank

    rows = [r for r in rank(parent, against=[]).ranked if r.rank is not None]
    by_label = {r.label: r for r in rows}
    bases = cfg.baselines if cfg.baselines is not None else list(parent.recipe.search.baselines)
    out = []
    for r in [r for r in rows if not r.is_baseline][:cfg.top]:
        out.append(Entry(r.label, r.arch_id, r.placement, [float(r.best_lr or parent.recipe.train.lr[0])],
                         search_rank=r.rank, search_mean=r.score_mean, search_ci=(r.ci_low, r.ci_high),
                         search_seeds=r.n_seeds))
    for b in bases:
        row = by_label.get(b)
        if row is None and mode == "transfer":
            raise NormsearchError(f"ladder: baseline {b} was not run by the search, so no learning rate was chosen for "
                                  f"it to transfer; drop it or use --lr sweep")
        p = baseline(b, parent.recipe.search.norm_kind)
        lr = [float(row.best_lr or parent.recipe.train.lr[0])] if row is not None else list(parent.recipe.train.lr)
        out.append(Entry(b, p.arch_id(parent.recipe.model.n_layers) if row is None else row.arch_id, p.to_dict(), lr,
                         baseline=b, search_rank=row.rank if row else None,
                         search_mean=row.score_mean if row else None))
    if not out:
        raise NormsearchError("nothing to put on the ladder: the search ranked no architecture and no baseline is "
                              "named")
    return out


def settings_of(cfg: LadderConfig, mode: str) -> dict:
    d = asdict(cfg)
    d.pop("target")  # reporting only: changing it never changes a run
    d["lr"] = mode
    return d


def open_rungs(parent: StudyHandle, cfg: LadderConfig) -> list[tuple[Rung, StudyHandle, Stage]]:
    """Create or resume every rung's stage (checked against the settings each was created with)."""
    from ..search._confirm import search_finished

    mode = lr_mode(parent.recipe, cfg)
    rungs = plan_rungs(parent.recipe, cfg)
    if find_stage(parent, kind_of(0)) is None:
        search_finished(parent)
    settings = settings_of(cfg, mode)
    found = entries(parent, cfg, mode)
    seeds = list(range(cfg.first_seed, cfg.first_seed + cfg.seeds))
    overlap = set(seeds) & set(parent.recipe.train.seeds)
    if overlap:
        raise NormsearchError(f"ladder seeds {sorted(overlap)} were search seeds; raise ladder.first_seed")
    out = []
    for rung in rungs:
        def make(rung=rung) -> Stage:
            es = [replace(e, lr=list(rung.recipe.train.lr)) for e in found] if mode == "sweep" else found
            return Stage(kind_of(rung.index), settings, es, rung.recipe, seeds,
                         lr_extend=rung.recipe.train.lr_extend if mode == "sweep" else 0)

        handle, stage = open_stage(parent, kind_of(rung.index), settings, make)
        out.append((rung, handle, stage))
    return out


def run_ladder(parent: StudyHandle, cfg: LadderConfig, display=None, verbose: bool = False):
    """Train every rung, smallest first, to the end. Returns [(rung, handle)]."""
    out = []
    for rung, handle, stage in open_rungs(parent, cfg):
        StageSearch(handle, stage, display, verbose).run()
        out.append((rung, handle))
    return out


def ladder_handles(parent: StudyHandle, cfg: LadderConfig) -> list[tuple[Rung, StudyHandle]]:
    """The rungs that exist, to report on (no training, nothing created)."""
    out = []
    for rung in plan_rungs(parent.recipe, cfg):
        study = find_stage(parent, kind_of(rung.index))
        if study is not None:
            out.append((rung, StudyHandle(rung.recipe, study, parent.storage_url, parent.folder / kind_of(rung.index))))
    return out


def write_ladder_report(parent: StudyHandle, cfg: LadderConfig, out_dir: Path, against) -> Path:
    """``ladder.md`` (and ``ladder.json``, ``ladder.png``) in ``out_dir``, and every rung's own report in
    ``results/<study>/ladder-<i>/``."""
    import json

    from ..ranking import stat_runs
    from ..report import write_report
    from ..report._ladder_plots import ladder_plot
    from ..report._plots import save
    from ..stats.ladder import analyse_ladder, rung_from_runs
    from .ladder_report import ladder_markdown

    rungs = ladder_handles(parent, cfg)
    if not rungs:
        raise NormsearchError(f"study {parent.recipe.name!r} has no ladder yet; run `normsearch ladder` on it first")
    stats_rungs, rankings = [], []
    for rung, handle in rungs:
        ranking = write_report(handle, handle.folder, against=against, overwrite=True)
        rankings.append(ranking)
        rows = [r for r in ranking.rows if r.runs]
        sizes = {r.label: float(r.n_params) for r in rows if r.n_params}
        stats_rungs.append(rung_from_runs(rung.name, stat_runs(rows, ranking.judgement.unigram_bpb), sizes))
    stats = analyse_ladder(stats_rungs, target=cfg.target) if len(stats_rungs) >= 2 else None
    out_dir.mkdir(parents=True, exist_ok=True)
    plot = None
    if stats is not None:
        bases = [e for e in (cfg.baselines or parent.recipe.search.baselines)]
        fig = ladder_plot(stats, baselines=bases)
        if fig is not None:
            save(fig, out_dir / "ladder.png")
            plot = "ladder.png"
        (out_dir / "ladder.json").write_text(json.dumps(stats.to_dict(), indent=1) + "\n")
    text = ladder_markdown(parent, cfg, [r for r, _ in rungs], rankings, stats, plot, len(cfg.rungs), out_dir,
                           lr_mode(parent.recipe, cfg))
    path = out_dir / "ladder.md"
    path.write_text(text)
    return path
