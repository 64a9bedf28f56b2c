"""Weights on disk: ``.safetensors`` files of a normsearch model's state dict.

safetensors refuses tensors that share memory, and a model with tied embeddings has one: its
``lm_head.weight`` *is* ``wte.weight``. :func:`save_weights` stores such a tensor once, under the
first of its names (``wte.weight``; never ``lm_head.weight`` while another name is left), and
records the other names in the file's metadata; :func:`load_state_dict` puts them back, so
``model.load_state_dict(load_state_dict(path), strict=True)`` works on the model that was saved.

The file stays a plain safetensors file: any reader (``safetensors.torch.load_file``, the reader in
an exported ``model.py``) sees every tensor, and only the tied names are missing.

torch and safetensors are imported when a function runs, so importing this module is free.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .errors import NormsearchError

#: metadata key: JSON mapping of each left-out name to the stored name it is tied to
TIED_KEY = "normsearch.tied"
#: metadata key: the architecture id of the model the weights came from (when known)
ARCH_ID_KEY = "normsearch.arch_id"

# Kept last among aliases of one tensor: the head is the tied copy of the embedding.
_TIED_LAST = ("lm_head.weight",)


def _tensors(model_or_state_dict: Any) -> tuple[dict[str, Any], dict[str, str]]:
    """(name -> tensor, metadata) from a module or a state dict; rejects anything else."""
    import torch

    meta: dict[str, str] = {}
    if isinstance(model_or_state_dict, torch.nn.Module):
        arch_id = getattr(model_or_state_dict, "arch_id", None)
        if isinstance(arch_id, str):
            meta[ARCH_ID_KEY] = arch_id
        state = model_or_state_dict.state_dict()
    elif isinstance(model_or_state_dict, Mapping):
        state = dict(model_or_state_dict)
    else:
        raise NormsearchError(
            f"save_weights: expected a torch module or a state dict, not {type(model_or_state_dict).__name__}"
        )
    for name, value in state.items():
        if not isinstance(name, str) or not isinstance(value, torch.Tensor):
            raise NormsearchError(
                f"save_weights: {name!r} is a {type(value).__name__}, not a tensor; "
                "a weights file holds tensors only"
            )
        if value.device.type == "meta":
            raise NormsearchError(f"save_weights: {name!r} is on the meta device and has no data to save")
    return state, meta


def save_weights(model_or_state_dict: Any, path: str | os.PathLike, *,
                 metadata: Mapping[str, str] | None = None) -> Path:
    """Write a module's state dict (or a state dict) to ``path`` as safetensors; returns the path.

    Tensors that are the same tensor under several names (tied embeddings) are stored once and
    re-tied by :func:`load_state_dict`; tensors that merely overlap in memory are copied. A
    normsearch model's ``arch_id`` goes into the metadata, with any string pairs in ``metadata``.
    The file is written next to its final name and moved into place, so a reader never sees half
    of it.
    """
    import torch
    from safetensors.torch import save_file

    state, meta = _tensors(model_or_state_dict)
    for key, value in (metadata or {}).items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise NormsearchError(f"save_weights: metadata must map strings to strings, not {key!r}: {value!r}")
        meta[key] = value

    # One stored name per distinct tensor view; lm_head.weight yields to any alias of it.
    names = sorted(state, key=lambda n: n in _TIED_LAST)  # stable: otherwise the state dict's order
    stored: dict[str, torch.Tensor] = {}
    tied: dict[str, str] = {}
    views: dict[tuple, str] = {}
    storages: set[tuple] = set()
    for name in names:
        t = state[name].detach()
        if t.numel() > 0:
            storage = (t.device, t.untyped_storage().data_ptr())
            view = (*storage, t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.dtype)
            if view in views:
                tied[name] = views[view]
                continue
            if storage in storages:
                t = t.clone()  # overlaps another tensor without being it: store a copy
            views[view] = name
            storages.add(storage)
        stored[name] = t.to("cpu").contiguous()
    stored = {name: stored[name] for name in state if name in stored}  # the state dict's order
    if tied:
        meta[TIED_KEY] = json.dumps(tied, sort_keys=True)
    meta.setdefault("format", "pt")

    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        save_file(stored, str(tmp), metadata=meta)
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise NormsearchError(f"{path}: cannot write the weights ({e.strerror or e})") from None
    return path


def _open(path: str | os.PathLike):
    from safetensors import SafetensorError, safe_open

    path = Path(path)
    if not path.is_file():
        what = "is a folder, not a weights file" if path.is_dir() else "no such file"
        raise NormsearchError(f"{path}: {what}")
    try:
        return safe_open(str(path), framework="pt", device="cpu")
    except (SafetensorError, OSError, ValueError) as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise NormsearchError(
            f"{path}: not a readable safetensors file ({reason}); re-export or re-save the weights"
        ) from None


def read_metadata(path: str | os.PathLike) -> dict[str, str]:
    """The string metadata of a safetensors file (empty when it has none)."""
    with _open(path) as f:
        return dict(f.metadata() or {})


def load_state_dict(path: str | os.PathLike, device: str = "cpu") -> dict[str, Any]:
    """The state dict in a safetensors file, on ``device``, with tied names restored (the same
    tensor under each of them), ready for ``model.load_state_dict(sd, strict=True)``.

    A missing or unreadable file raises :class:`NormsearchError` with one line.
    """
    from safetensors import SafetensorError

    path = Path(path)
    try:
        with _open(path) as f:
            meta = dict(f.metadata() or {})
            state = {name: f.get_tensor(name) for name in f.keys()}
    except (SafetensorError, OSError, ValueError) as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise NormsearchError(
            f"{path}: not a readable safetensors file ({reason}); re-export or re-save the weights"
        ) from None
    if device != "cpu":
        state = {name: t.to(device) for name, t in state.items()}
    try:
        tied = json.loads(meta.get(TIED_KEY, "{}"))
    except json.JSONDecodeError:
        tied = None
    if not isinstance(tied, dict):
        raise NormsearchError(f"{path}: the metadata {TIED_KEY!r} is not a JSON mapping; the file is damaged")
    for name, source in tied.items():
        if source not in state:
            raise NormsearchError(f"{path}: {name!r} is tied to {source!r}, which the file does not hold")
        state[name] = state[source]
    return state
