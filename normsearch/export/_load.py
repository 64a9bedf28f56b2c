"""Reading an export folder back into normsearch's own ``Transformer``."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..config import ModelConfig
from ..errors import NormsearchError
from ..spec import Placement


def fit_problems(state: Mapping[str, Any], model) -> str | None:
    """One line saying how a state dict does not fit ``model`` (names, shapes), or None."""
    want = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    have = {k: tuple(v.shape) for k, v in state.items()}
    missing = [k for k in want if k not in have]
    unexpected = [k for k in have if k not in want]
    shapes = [f"{k} {list(have[k])} != {list(want[k])}" for k in want if k in have and have[k] != want[k]]

    def few(items):
        return ", ".join(items[:3]) + (f", ... ({len(items)} in all)" if len(items) > 3 else "")

    problems = []
    if missing:
        problems.append(f"missing {few(missing)}")
    if unexpected:
        problems.append(f"unexpected {few(unexpected)}")
    if shapes:
        problems.append(f"wrong shape {few(shapes)}")
    return "; ".join(problems) or None


def load_exported(directory: str | os.PathLike, *, kernels: str = "torch"):
    """normsearch's own ``Transformer`` for an export folder, its weights loaded strictly, in eval
    mode. The arch_id in ``spec.yaml`` (and in the weights' metadata, where present) must be the
    one its placement builds. Reads ``spec.yaml`` and ``model.safetensors`` only, so folders of
    every export format load (format 1 had a generated model.py and no config.json)."""
    from .._yaml import load
    from ..checkpoint import ARCH_ID_KEY, load_state_dict, read_metadata
    from ..model import build_model

    folder = Path(directory)
    spec_path = folder / "spec.yaml"
    if not folder.is_dir():
        raise NormsearchError(f"{folder}: no such folder")
    if not spec_path.is_file():
        raise NormsearchError(f"{folder}: no spec.yaml, so not a normsearch export")
    data = load(spec_path)
    if not isinstance(data, Mapping) or not all(k in data for k in ("arch_id", "placement", "model")):
        raise NormsearchError(f"{spec_path}: expected the keys arch_id, placement and model")
    model = build_model(Placement.from_dict(data["placement"]), ModelConfig.from_dict(data["model"]), kernels)
    stored = str(data["arch_id"])
    if stored != model.arch_id:
        raise NormsearchError(
            f"{spec_path}: arch_id {stored}, but its placement builds {model.arch_id}; "
            "the file was edited, or written by a normsearch with other defaults"
        )
    weights = folder / "model.safetensors"
    state = load_state_dict(weights)
    file_id = read_metadata(weights).get(ARCH_ID_KEY)
    if file_id is not None and file_id != stored:
        raise NormsearchError(f"{weights}: the weights are of {file_id}, but spec.yaml is {stored}")
    if model.config.tie_embeddings and "wte.weight" in state:
        state.setdefault("lm_head.weight", state["wte.weight"])
    problem = fit_problems(state, model)
    if problem:
        raise NormsearchError(f"{weights}: does not fit the architecture in spec.yaml: {problem}")
    model.load_state_dict(state, strict=True)
    return model.eval()
