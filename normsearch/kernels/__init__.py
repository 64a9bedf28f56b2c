"""Which code computes a norm: plain torch (any device) or fused Triton kernels (CUDA).

A backend maps a norm kind's name to a kernel with ``forward(x, p, o)`` and
``add(x, h, p, o) -> (x + h, norm(x + h))``; ``p`` holds the norm's parameters by name and ``o`` its
options. The choice is explicit (``train.kernels: auto | torch | triton``), recorded with every
trial, and never part of an architecture id.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable

from ..errors import NormsearchError
from ..norms import NORM_KINDS

BACKENDS = ("torch", "triton")

log = logging.getLogger("normsearch")


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


def resolve_backend(requested: str, kinds: Iterable[str] = ()) -> str:
    """``auto`` -> ``triton`` on CUDA when Triton imports and every norm kind in ``kinds`` has a
    Triton kernel, else ``torch`` (the reason is logged). Asking for ``triton`` where it cannot run,
    or for kinds without a kernel, is an error that says why."""
    if requested not in (*BACKENDS, "auto"):
        raise NormsearchError(f"unknown kernels {requested!r}; choose auto, torch or triton")
    if requested == "torch":
        return "torch"
    ok, why = triton_status()
    if requested == "triton" and not ok:
        raise NormsearchError(f"kernels: triton was requested but cannot run here: {why}; use kernels: torch or auto")
    if requested == "auto":
        import torch

        if not (ok and torch.cuda.is_available()):
            return "torch"
    missing = missing_triton_kernels(kinds)
    if missing:
        why = f"norm kind {', '.join(map(repr, missing))} {'has' if len(missing) == 1 else 'have'} no Triton kernel"
        if requested == "triton":
            raise NormsearchError(f"kernels: triton was requested but {why}; use kernels: torch or auto")
        log.warning("norm kernels: torch, not triton: %s", why)
        return "torch"
    return "triton"


def missing_triton_kernels(kinds: Iterable[str]) -> list[str]:
    """The kinds among ``kinds`` that have no Triton kernel (Triton must import)."""
    from . import triton_norms

    return sorted(set(kinds) - set(triton_norms.KERNELS))


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
