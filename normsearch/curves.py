"""Curves where researchers look at them: every run's losses, learning rate and diagnostics through
one of Lightning's loggers (``train.logger``), offline, one logger run per training run, named by
architecture, seed and learning rate and grouped by study, under ``results/<name>/logs/``."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable

from .errors import NormsearchError


def _csv(save_dir: Path, group: str, run: str):
    from lightning.pytorch.loggers import CSVLogger

    return CSVLogger(save_dir=str(save_dir), name=group, version=run)


def _tensorboard(save_dir: Path, group: str, run: str):
    _need("tensorboard", "tensorboard")
    from lightning.pytorch.loggers import TensorBoardLogger

    return TensorBoardLogger(save_dir=str(save_dir), name=group, version=run, default_hp_metric=False)


def _wandb(save_dir: Path, group: str, run: str):
    _need("wandb", "wandb")
    from lightning.pytorch.loggers import WandbLogger

    return WandbLogger(project=group, name=run, group=group, save_dir=str(save_dir), offline=True)


def _mlflow(save_dir: Path, group: str, run: str):
    _need("mlflow", "mlflow")
    from lightning.pytorch.loggers import MLFlowLogger

    return MLFlowLogger(experiment_name=group, run_name=run, tracking_uri=f"file:{Path(save_dir).resolve() / 'mlruns'}")


def _need(module: str, package: str) -> None:
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise NormsearchError(f"train.logger {module} needs the {package} package: pip install {package} "
                              f"(or set train.logger: csv)")


#: train.logger -> (folder, study, run name) -> a Lightning logger; "none" makes none
LOGGERS: dict[str, Callable[[Path, str, str], Any]] = {
    "csv": _csv, "tensorboard": _tensorboard, "wandb": _wandb, "mlflow": _mlflow,
}


def run_name(label: str | None, arch_id: str, seed: int, lr: float) -> str:
    """``t6-a56195506d99-s0-lr0.003``: a run's name in a logger, the same in every logger."""
    return f"{label or 'run'}-{arch_id}-s{seed}-lr{lr:g}"


def make_logger(kind: str, save_dir: Path | None, group: str, run: str):
    """The logger of one run, or None (``train.logger: none``, or nowhere to write)."""
    if kind == "none" or save_dir is None:
        return None
    return LOGGERS[kind](Path(save_dir), group, run)


def scalars(diagnostics: dict[str, Any]) -> dict[str, float]:
    """The diagnostics of one evaluation as scalars: per-layer lists become one value per layer, and
    their largest."""
    out: dict[str, float] = {}
    for key in ("resid_rms", "grad_norm", "max_logit"):
        values = [float(v) for v in diagnostics.get(key) or [] if v is not None and math.isfinite(float(v))]
        for i, v in enumerate(values):
            out[f"{key}/layer{i}"] = v
        if values:
            out[f"{key}/max"] = max(values)
    return out
