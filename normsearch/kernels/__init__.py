"""Which code computes a norm: plain torch (any device) or fused Triton kernels (CUDA).

A backend maps a norm kind's name to a kernel with ``forward(x, p, o)`` and
``add(x, h, p, o) -> (x + h, norm(x + h))``; ``p`` holds the norm's parameters by name and ``o`` its
options. The choice is explicit (``train.kernels: auto | torch | triton``), recorded with every
trial, and never part of an architecture id.
"""

from __future__ import annotations

import os

from ..errors import NormsearchError
from ..norms import NORM_KINDS

BACKENDS = ("torch", "triton")


class TorchKernel:
    """The kind's reference maths, run by torch itself."""

    def __init__(self, kind: str):
        self.kind = NORM_KINDS[kind]
        self.forward = self.kind.forward

    def add(self, x, h, p, o):
        s = x + h
        return s, self.kind.forward(s, p, o)


def triton_status() -> tuple[bool, str]:
    """(usable, version or reason). Usable means Triton imports and there is a CUDA device, or
    TRITON_INTERPRET=1 runs the kernels on the CPU (for tests)."""
    try:
        import triton
    except ImportError:
        return False, "Triton is not installed (pip install 'normsearch[triton]')"
    import torch

    if torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1":
        return True, triton.__version__
    return False, f"Triton {triton.__version__} is installed but there is no CUDA device"


def resolve_backend(requested: str) -> str:
    """``auto`` -> ``triton`` on CUDA when Triton imports, else ``torch``. Asking for ``triton``
    where it cannot run is an error that says why."""
    if requested not in (*BACKENDS, "auto"):
        raise NormsearchError(f"unknown kernels {requested!r}; choose auto, torch or triton")
    if requested == "torch":
        return "torch"
    ok, why = triton_status()
    if requested == "triton" and not ok:
        raise NormsearchError(f"kernels: triton was requested but cannot run here: {why}; use kernels: torch or auto")
    if requested == "auto":
        import torch

        return "triton" if ok and torch.cuda.is_available() else "torch"
    return "triton"


def triton_version() -> str | None:
    try:
        import triton
    except ImportError:
        return None
    return triton.__version__


def get_kernel(kind: str, backend: str):
    if backend == "torch":
        return TorchKernel(kind)
    if backend == "triton":
        from . import triton_norms

        return triton_norms.kernel(kind)
    raise NormsearchError(f"unknown kernels {backend!r}; choose auto, torch or triton")
