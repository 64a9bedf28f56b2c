"""Norm kinds: the maths of each normalisation, apart from the kernel that runs it.

A kind is one registered class. Its ``options`` say what a spec may set and their defaults, its
``parameters`` which learnable tensors a layer of it holds, and ``forward`` is the reference
computation in plain torch (also the CPU backend). Triton kernels in ``normsearch.kernels`` plug in
behind the same kinds; which one runs is chosen in :func:`normsearch.model.build_model`.

This module is importable without torch: spec validation, the command line and the search space read
the registry; torch is imported only when a norm actually runs.

The class is also what an export ships: :meth:`NormKind.torch_source` (by default the class's own
source) is written into the exported folder's ``norms.py``, so ``forward`` imports what it needs
inside itself. A kind without a Triton kernel runs on torch (``normsearch.kernels``).

Adding a kind::

    @register_norm
    class ScaleNorm(NormKind):
        name = "scalenorm"
        options = {"eps": 1e-5}
        source = "Nguyen & Salazar 2019"

        @staticmethod
        def parameters(o):
            return {"weight": ("scalar", 1.0)}

        @staticmethod
        def forward(x, p, o):
            return p["weight"] * x / x.norm(dim=-1, keepdim=True).clamp_min(o["eps"])
"""

from __future__ import annotations

from typing import Any, ClassVar

NORM_KINDS: dict[str, type[NormKind]] = {}


def register_norm(cls: type[NormKind]) -> type[NormKind]:
    if cls.name in NORM_KINDS:
        raise ValueError(f"norm kind {cls.name!r} is registered twice")
    NORM_KINDS[cls.name] = cls
    return cls


class NormKind:
    """One normalisation's maths. Subclass, fill the class attributes, decorate with
    :func:`register_norm`."""

    name: ClassVar[str]
    #: option name -> default; a spec may set exactly these (plus ``kind`` and, at q/k/v sites,
    #: ``granularity``). Defaults are part of the canonical form, so an explicit default and an
    #: omitted one give the same architecture id.
    options: ClassVar[dict[str, Any]]
    source: ClassVar[str] = ""

    @staticmethod
    def parameters(o: dict[str, Any]) -> dict[str, tuple[str, float]]:
        """Learnable tensors for these options: name -> (shape, initial value), where shape is
        ``"dim"`` (one per normalised feature) or ``"scalar"``."""
        raise NotImplementedError

    @staticmethod
    def forward(x, p: dict, o: dict[str, Any]):
        """Normalise over the last dimension of ``x`` with parameters ``p`` (name -> tensor)."""
        raise NotImplementedError

    @classmethod
    def torch_source(cls) -> str:
        """This kind as Python source that runs with torch alone, defining a class named as this one
        (a subclass of ``NormKind``, ``name``, ``options``, ``parameters``, ``forward``): what an
        export writes into its ``norms.py``. By default the class's own source; override it for a
        kind whose methods use names from around the class."""
        import inspect
        import textwrap

        return textwrap.dedent(inspect.getsource(cls))


@register_norm
class LayerNorm(NormKind):
    """(x - mean) / sqrt(var + eps) * gain + bias (Ba et al. 2016)."""

    name = "layernorm"
    options = {"eps": 1e-5, "gain": True, "bias": True}
    source = "Ba et al. 2016, arXiv 1607.06450"

    @staticmethod
    def parameters(o):
        p = {}
        if o["gain"]:
            p["weight"] = ("dim", 1.0)
        if o["bias"]:
            p["bias"] = ("dim", 0.0)
        return p

    @staticmethod
    def forward(x, p, o):
        import torch.nn.functional as F

        return F.layer_norm(x, x.shape[-1:], p.get("weight"), p.get("bias"), o["eps"])


@register_norm
class RMSNorm(NormKind):
    """x / sqrt(mean(x^2) + eps) * gain (Zhang & Sennrich 2019)."""

    name = "rmsnorm"
    options = {"eps": 1e-5, "gain": True}
    source = "Zhang & Sennrich 2019, arXiv 1910.07467"

    @staticmethod
    def parameters(o):
        return {"weight": ("dim", 1.0)} if o["gain"] else {}

    @staticmethod
    def forward(x, p, o):
        import torch.nn.functional as F

        return F.rms_norm(x, x.shape[-1:], p.get("weight"), o["eps"])


@register_norm
class DyT(NormKind):
    """Dynamic Tanh: gain * tanh(alpha * x) + bias, alpha a learnable scalar (Zhu et al. 2025)."""

    name = "dyt"
    options = {"alpha_init": 0.5, "gain": True, "bias": True}
    source = "Zhu et al. 2025, arXiv 2503.10622"

    @staticmethod
    def parameters(o):
        p = {"alpha": ("scalar", float(o["alpha_init"]))}
        if o["gain"]:
            p["weight"] = ("dim", 1.0)
        if o["bias"]:
            p["bias"] = ("dim", 0.0)
        return p

    @staticmethod
    def forward(x, p, o):
        import torch

        y = torch.tanh(p["alpha"] * x)
        if p.get("weight") is not None:
            y = y * p["weight"]
        if p.get("bias") is not None:
            y = y + p["bias"]
        return y
