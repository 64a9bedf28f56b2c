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


@register_norm
class Derf(NormKind):
    """Dynamic erf: gain * erf(alpha * x + shift) + bias, alpha and shift learnable scalars (Chen et
    al. 2025). As the authors' code (zlab-princeton/Derf, ``Dynamic_erf``): ``torch.erf`` itself,
    shift initialised at 0; their language-model runs start alpha at 1.0 (their class default, used
    for vision, is 0.5). Their GPT-2 patch also multiplies the embeddings by a learnable scalar
    initialised at sqrt(d_model); that is a change to the model, not to the norm, and is left out.
    A point-wise kind: no statistics over the features. Runs on torch only (no Triton kernel)."""

    name = "derf"
    options = {"alpha_init": 1.0, "shift_init": 0.0, "gain": True, "bias": True}
    source = "Chen et al. 2025, arXiv 2512.10938"

    @staticmethod
    def parameters(o):
        p = {"alpha": ("scalar", float(o["alpha_init"])), "shift": ("scalar", float(o["shift_init"]))}
        if o["gain"]:
            p["weight"] = ("dim", 1.0)
        if o["bias"]:
            p["bias"] = ("dim", 0.0)
        return p

    @staticmethod
    def forward(x, p, o):
        import torch

        y = torch.erf(p["alpha"] * x + p["shift"])
        if p.get("weight") is not None:
            y = y * p["weight"]
        if p.get("bias") is not None:
            y = y + p["bias"]
        return y


@register_norm
class SeeDNorm(NormKind):
    """Self-rescaled dynamic normalisation: [alpha * tanh(x . beta) + gamma] * x / RMS(x), with
    RMS(x) = sqrt(mean(x^2) + eps) and alpha, beta, gamma learnable vectors over the features; x .
    beta is one number per row, so the gain depends on the input (Cai et al. 2025, eq. 1). The
    authors' code is not public. gamma starts at 1 and beta at 0, so the norm starts as RMSNorm;
    alpha starts at 1 so that beta gets a gradient (with alpha = beta = 0 neither would). Runs on
    torch only (no Triton kernel)."""

    name = "seednorm"
    options = {"eps": 1e-5, "alpha_init": 1.0, "beta_init": 0.0}
    source = "Cai et al. 2025, arXiv 2510.22777"

    @staticmethod
    def parameters(o):
        return {"weight": ("dim", 1.0), "alpha": ("dim", float(o["alpha_init"])),
                "beta": ("dim", float(o["beta_init"]))}

    @staticmethod
    def forward(x, p, o):
        import torch
        import torch.nn.functional as F

        dynamic = torch.tanh((x * p["beta"]).sum(-1, keepdim=True)) * p["alpha"]
        return F.rms_norm(x, x.shape[-1:], None, o["eps"]) * (dynamic + p["weight"])


@register_norm
class SingleScaleRMSNorm(NormKind):
    """Single-scale RMSNorm ("SSNorm"): gain * x / sqrt(mean(x^2) + eps) with one learnable scalar
    gain, initialised at 1, instead of one per feature (Park et al. 2025, the norm of Outlier-Safe
    Pre-Training). Runs on torch only (no Triton kernel)."""

    name = "ssnorm"
    options = {"eps": 1e-5}
    source = "Park et al. 2025, arXiv 2506.19697 (ACL 2025)"

    @staticmethod
    def parameters(o):
        return {"weight": ("scalar", 1.0)}

    @staticmethod
    def forward(x, p, o):
        import torch.nn.functional as F

        return p["weight"] * F.rms_norm(x, x.shape[-1:], None, o["eps"])
