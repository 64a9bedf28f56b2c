"""Writing an export folder: the architecture as data, the norm kinds as source, the weights.

The folder holds ``spec.yaml`` (the placement in canonical form, the model config, the arch_id),
``config.json`` (what ``model.py`` builds: the sizes and, per layer, each present site's norm with
its width from the site table), ``model.py`` (:mod:`normsearch.export.standalone`, copied as is),
``norms.py`` (the used norm kinds' :meth:`~normsearch.norms.NormKind.torch_source`), the weights and
a README. Before anything is written, the standalone model is built from these very files, loads the
weights strictly and must give normsearch's logits: an export that would not is refused.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .._version import __version__
from ..config import ModelConfig
from ..errors import NormsearchError
from ..norms import NORM_KINDS
from ..spec import BLOCK_SITES, SITE, NormSpec, Placement, ResolvedPlacement
from ._load import fit_problems

EXPORT_FILES = ("spec.yaml", "config.json", "model.py", "norms.py", "model.safetensors", "README.md")
FORMAT = "normsearch-export/2"  # 1: model.py generated per placement, no config.json (still loads)
STANDALONE = Path(__file__).with_name("standalone.py")


# --------------------------------------------------------------------------------------------------
# The architecture as data, the norm kinds as source (torch-free)


def _entry(site: str, spec: NormSpec | None, config: ModelConfig, layer: int = 0) -> dict[str, Any] | None:
    if spec is None:
        return None
    entry = {"kind": spec.kind, "options": spec.opts, "width": SITE[site].features(spec, config),
             "per_head": SITE[site].per_head(spec)}
    if spec.depth_scale:
        entry["scale"] = spec.scale(layer)
    return entry


def architecture(resolved: ResolvedPlacement, config: ModelConfig) -> dict[str, Any]:
    """config.json: the model config (with ``head_dim`` and ``ffn_dim`` worked out), the block's
    sites in data-flow order, every norm as ``{kind, options, width, per_head}`` (plus ``scale``
    with depth_scale), and the block options ``residual``, ``gate``, and ``x0`` and ``sinks`` where set."""
    return {
        "format": FORMAT,
        "arch_id": resolved.arch_id,
        **config.to_dict(),
        "head_dim": config.head_dim,
        "ffn_dim": config.ffn_dim,
        "sites": list(BLOCK_SITES),
        "norms": {
            "embed": _entry("embed", resolved.embed, config),
            "final": _entry("final", resolved.final, config),
            "blocks": [{site: _entry(site, spec, config, i) for site, spec in block}
                       for i, block in enumerate(resolved.blocks)],
        },
        "residual": dict(resolved.residual),
        "gate": resolved.gate,
        **{k: v for k, v in (("x0", resolved.x0), ("sinks", resolved.sinks)) if v},
    }


_NORMS_HEAD = f'''"""The norm kinds of this model, copied from the registry of normsearch {__version__}: each
kind's options, its learnable tensors (``parameters``) and its maths in plain torch (``forward``).
model.py reads ``NORM_KINDS``."""

from __future__ import annotations


class NormKind:
    """A norm kind: ``name``, ``options`` (name -> default), ``parameters(options)`` (name ->
    (shape "dim" or "scalar", initial value)) and ``forward(x, parameters, options)``."""
'''
_REGISTER = re.compile(r"^@(\w+\.)*register_norm\s*$")


def norms_source(kinds: list[str]) -> str:
    """norms.py for ``kinds``: each kind's torch-only source, and ``NORM_KINDS``."""
    parts, names = [_NORMS_HEAD], []
    for kind in kinds:
        cls = NORM_KINDS[kind]
        try:
            text = cls.torch_source()
        except (OSError, TypeError) as e:
            raise NormsearchError(f"norm kind {kind!r}: its source cannot be read ({e}); give its class a "
                                  "torch_source() that returns it") from None
        lines = text.strip("\n").splitlines()
        while lines and _REGISTER.match(lines[0]):
            lines.pop(0)  # registered below, by name
        if cls.__name__ in names:
            raise NormsearchError(f"norm kinds {kinds} have two classes named {cls.__name__}; rename one to export")
        parts.append("\n".join(lines))
        names.append(cls.__name__)
    table = "".join(f"\n    {kind!r}: {name}," for kind, name in zip(kinds, names))  # one line each
    parts.append(f"NORM_KINDS: dict[str, type[NormKind]] = {{{table}\n}}")
    return "\n\n\n".join(parts) + "\n"


def _kinds(resolved: ResolvedPlacement) -> list[str]:
    specs = [s for b in resolved.blocks for _, s in b] + [s for s in (resolved.embed, resolved.final) if s]
    return [k for k in NORM_KINDS if any(s.kind == k for s in specs)]


# --------------------------------------------------------------------------------------------------
# The folder


def _coerce(placement: Any, config: Any) -> tuple[Placement, ModelConfig]:
    if isinstance(placement, str):
        from ..baselines import baseline

        placement = baseline(placement)
    elif not isinstance(placement, Placement):
        placement = Placement.from_dict(placement)
    if not isinstance(config, ModelConfig):
        config = ModelConfig.from_dict(config)
    return placement, config


def _write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _is_export(folder: Path) -> str | None:
    """The arch_id of an export folder, or None when it is not one."""
    from .._yaml import load

    spec = folder / "spec.yaml"
    if not spec.is_file():
        return None
    try:
        data = load(spec)
    except NormsearchError:
        return None
    arch_id = data.get("arch_id") if isinstance(data, Mapping) else None
    return str(arch_id) if arch_id else None


def _check_standalone(model, arch: dict[str, Any], norms: str, state: Mapping[str, Any]) -> None:
    """Build the standalone model from ``arch`` and ``norms`` as model.py will, load ``state``
    strictly into it and into normsearch's ``model``, and compare their logits."""
    import torch

    from . import standalone

    namespace: dict[str, Any] = {"__name__": "normsearch_export_norms"}
    try:
        exec(compile(norms, "norms.py", "exec"), namespace)
        with torch.random.fork_rng(devices=[]):
            twin = standalone.Transformer(arch, namespace["NORM_KINDS"])
        cpu = {k: v.detach().to("cpu", torch.float32, copy=True) for k, v in state.items()}
        twin.load_state_dict(cpu, strict=True)
        model.load_state_dict(cpu, strict=True)
        T = min(8, arch["context_length"])
        idx = torch.arange(2 * T).remainder(arch["vocab_size"]).view(2, T)
        with torch.no_grad():
            got, want = twin.eval()(idx), model.eval()(idx)
    except Exception as e:  # a kind's source that cannot stand alone, or an exporter bug
        raise NormsearchError(
            f"the standalone model.py would not run: {type(e).__name__}: {e}; a norm kind's torch_source() "
            "must run on its own (import what forward needs inside it); nothing exported"
        ) from None
    if not torch.allclose(got, want, rtol=1e-5, atol=1e-5):
        diff = (got - want).abs().max().item()
        raise NormsearchError(f"the standalone model.py computes other logits than normsearch's model (by up to "
                              f"{diff:.3g}); a norm kind's torch_source() differs from its forward; nothing exported")


def export_architecture(placement: Placement | str | Mapping, config: ModelConfig | Mapping,
                        out_dir: str | os.PathLike, *, state_dict: Any = None,
                        weights_path: str | os.PathLike | None = None, arch_id: str | None = None,
                        summary: Mapping[str, Any] | None = None, seed: int = 0,
                        overwrite: bool = False) -> Path:
    """Write the export folder of ``placement`` at ``config`` to ``out_dir``; returns its path.

    The weights come from ``state_dict`` (a state dict or a module), or ``weights_path`` (a
    safetensors file, copied), or else are the untrained initialisation of
    ``build_model(placement, config)`` under ``seed`` (the README says so). The weights must fit
    (names and shapes), and where they record an arch_id (a normsearch model, a file written by
    :func:`~normsearch.checkpoint.save_weights`) it must be this one. ``arch_id``, when given (a
    study's record), must be the placement's. ``summary`` (``score_mean``, ``ci_low``,
    ``ci_high``, ``metric``, ``comparisons``: [{against, diff, ci_low, ci_high, p_value}], ...) is
    rendered in the README as given.

    ``out_dir`` may be new, empty, or an earlier export of the same architecture; anything else
    needs ``overwrite=True`` (which replaces the export's files and touches nothing else).
    """
    import torch

    from .._yaml import dumps, flow_leaves
    from ..checkpoint import ARCH_ID_KEY, load_state_dict, read_metadata, save_weights
    from ..model import build_model
    from ._readme import readme

    placement, config = _coerce(placement, config)
    resolved = placement.resolve(config.n_layers)
    if arch_id is not None and arch_id != resolved.arch_id:
        raise NormsearchError(
            f"arch_id {arch_id} was given, but this placement at {config.n_layers} layers is "
            f"{resolved.arch_id}; export the placement that arch_id was recorded with"
        )
    if state_dict is not None and weights_path is not None:
        raise NormsearchError("give the weights as state_dict or as weights_path, not both")
    if summary is not None and not isinstance(summary, Mapping):
        raise NormsearchError(f"summary must be a mapping, not {type(summary).__name__}")
    arch = architecture(resolved, config)
    norms = norms_source(_kinds(resolved))

    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise NormsearchError(f"{out}: exists and is not a folder; choose another --out")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        found = _is_export(out)
        if found is None:
            raise NormsearchError(
                f"{out}: the folder is not empty and holds no export; choose a new folder or overwrite it"
            )
        if found != resolved.arch_id:
            raise NormsearchError(
                f"{out}: holds the export of {found}, not {resolved.arch_id}; choose a new folder or overwrite it"
            )

    with torch.random.fork_rng(devices=[]):  # the caller's random state stays as it was
        torch.manual_seed(seed)
        model = build_model(placement, config)
    untrained = None
    if weights_path is not None:
        weights_path = Path(weights_path)
        state, what = load_state_dict(weights_path), str(weights_path)
        source_id = read_metadata(weights_path).get(ARCH_ID_KEY)
    elif state_dict is not None:
        source_id = getattr(state_dict, "arch_id", None) if isinstance(state_dict, torch.nn.Module) else None
        state = state_dict.state_dict() if isinstance(state_dict, torch.nn.Module) else state_dict
        if not isinstance(state, Mapping):
            raise NormsearchError(f"state_dict must be a mapping of name -> tensor, not {type(state).__name__}")
        state, what = dict(state), "the state dict"
    else:
        state, what, untrained, source_id = dict(model.state_dict()), "", seed, None
    if source_id is not None and source_id != resolved.arch_id:
        raise NormsearchError(
            f"{what}: the weights are of architecture {source_id}, not {resolved.arch_id}; "
            "export the placement they were trained with"
        )
    if config.tie_embeddings and "wte.weight" in state:
        head, wte = state.get("lm_head.weight"), state["wte.weight"]
        if head is not None and head is not wte and not (head.shape == wte.shape and torch.equal(head, wte)):
            raise NormsearchError(
                f"{what}: lm_head.weight differs from wte.weight, but the config ties them "
                "(tie_embeddings: true); the weights come from another model config"
            )
        state["lm_head.weight"] = wte  # tied: one tensor, stored once
    problem = fit_problems(state, model)
    if problem:
        raise NormsearchError(f"{what} does not fit the architecture {resolved.arch_id}: {problem}")
    _check_standalone(model, arch, norms, state)

    out.mkdir(parents=True, exist_ok=True)
    target = out / "model.safetensors"
    if weights_path is not None:
        if not (target.exists() and target.samefile(weights_path)):
            tmp = target.with_name(".model.safetensors.tmp")
            shutil.copyfile(weights_path, tmp)
            os.replace(tmp, target)
    else:
        save_weights(state, target, metadata={ARCH_ID_KEY: resolved.arch_id})
    _write_text(out / "model.py", STANDALONE.read_text())
    _write_text(out / "norms.py", norms)
    _write_text(out / "config.json", json.dumps(arch, indent=1) + "\n")
    _write_text(out / "README.md", readme(placement, config, resolved, summary, out.name, untrained))
    spec = {
        "arch_id": resolved.arch_id,
        "placement": flow_leaves(placement.to_dict()),
        "model": config.to_dict(),
    }
    header = "# normsearch export: the architecture of model.py and model.safetensors\n"
    _write_text(out / "spec.yaml", header + dumps(spec))  # last: its presence marks a whole export
    return out
