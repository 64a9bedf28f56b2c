"""``normsearch export STUDY``: choose one architecture of a study and export it with its weights."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..errors import NormsearchError
from ..spec import Placement
from ._folder import export_architecture


def _ranked(study, storage: str | None, study_name: str | None):
    """(the study's handle, its ranking): the one place export reads a study."""
    from ..ranking import rank as rank_study
    from ..search import open_results

    handle = open_results(study, storage, study_name)
    return handle, rank_study(handle)


def export(study, out_dir: str | os.PathLike, *, rank: int | None = None, trial: int | None = None,
           baseline: str | None = None, retrain: bool = False, steps: int | None = None,
           storage: str | None = None, study_name: str | None = None, overwrite: bool = False,
           progress=None) -> Path:
    """Export one architecture of a study: the ``rank``-th of its ranking, the one ``trial`` N
    evaluated, or ``baseline`` NAME. The weights are the kept checkpoint of its best seed at its
    best learning rate; ``retrain`` trains it again (at the recipe's budget, or ``steps``) instead.
    ``study``: a results folder or a recipe file (or None with ``storage`` and ``study_name``)."""
    if sum(x is not None for x in (rank, trial, baseline)) != 1:
        raise NormsearchError("choose the architecture with exactly one of --rank K, --trial N or --baseline NAME")
    handle, ranking = _ranked(study, storage, study_name)
    row = _select(ranking, rank, trial, baseline)
    placement = Placement.from_dict(row.placement).with_name(row.label)
    from ..grid import apply as apply_variant, variant_tag

    # the chosen cell's init (and warmup, for a retrain): the exported module is the one that was scored
    config, train_at = apply_variant(handle.recipe.model, handle.recipe.train, variant_tag(row.variant))
    summary: dict[str, Any] = {"metric": f"validation bits per byte ({ranking.objective} objective)",
                               "score_mean": row.score_mean, "ci_low": row.ci_low, "ci_high": row.ci_high,
                               "ci_level": 0.95, "study": ranking.study, "rank": row.rank,
                               "seeds": len(row.seeds), "best_lr": row.best_lr, "init": row.init,
                               **({"variant": row.variant} if row.variant else {})}
    summary["comparisons"] = [{"against": c.against, "diff": c.diff, "ci_low": c.ci_low, "ci_high": c.ci_high,
                               "p_value": c.p_value, "verdict": c.verdict} for c in row.comparisons]
    if retrain or steps is not None:
        from ..train import train_run

        seed = min(row.seeds, key=row.seeds.__getitem__) if row.seeds else handle.recipe.train.seeds[0]
        lr = row.best_lr if row.best_lr is not None else handle.recipe.train.lr[0]
        train = train_at if steps is None else replace(train_at, steps=steps, warmup=min(train_at.warmup, steps))
        with tempfile.TemporaryDirectory(prefix="normsearch-retrain-") as tmp:
            weights = Path(tmp) / "model.safetensors"
            result = train_run(placement, config, handle.recipe.data, train, seed=seed, lr=lr, checkpoint=weights,
                               progress=progress, label=row.label)
            if result.diverged:
                raise NormsearchError(f"retraining {row.label} diverged at step {result.diverged_step}; "
                                      f"nothing exported")
            summary.update({"retrained": f"seed {seed}, lr {lr:g}, {train.steps} steps",
                            "retrained_value": result.value})
            return export_architecture(placement, config, out_dir, weights_path=weights, arch_id=row.arch_id,
                                       summary=summary, overwrite=overwrite)
    weights = handle.folder / "checkpoints" / f"{row.arch_id}.safetensors"
    if not weights.is_file():
        raise NormsearchError(
            f"no kept weights for {row.label} [{row.arch_id}] in {weights.parent} (trained on another machine, or "
            f"pruned); add --retrain to train it again"
        )
    meta = weights.with_suffix(".json")
    if meta.is_file():
        kept = json.loads(meta.read_text())
        summary["weights"] = f"seed {kept['seed']}, lr {kept['lr']:g}: {kept['value']:.4f} bits/byte"
    return export_architecture(placement, config, out_dir, weights_path=weights, arch_id=row.arch_id,
                               summary=summary, overwrite=overwrite)


def _select(ranking, rank: int | None, trial: int | None, baseline: str | None):
    if rank is not None:
        ranked = [r for r in ranking.rows if r.rank is not None]
        if not 1 <= rank <= len(ranked):
            raise NormsearchError(f"--rank {rank}: the study ranks {len(ranked)} architectures (1..{len(ranked)})")
        return ranked[rank - 1]
    if trial is not None:
        row = next((r for r in ranking.rows if trial in r.trials), None)
        if row is None:
            raise NormsearchError(f"--trial {trial}: no finished trial {trial} in study {ranking.study!r}")
        return row
    row = next((r for r in ranking.rows if r.is_baseline and r.label == baseline), None)
    if row is None:
        known = [r.label for r in ranking.rows if r.is_baseline]
        raise NormsearchError(f"--baseline {baseline}: not a finished baseline of study {ranking.study!r}; "
                              f"its baselines: {', '.join(known) or 'none'}")
    return row
