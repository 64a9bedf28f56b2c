"""The Triton norm kernels (:mod:`normsearch.kernels.triton_jit`) as torch ops, and :data:`KERNELS`,
which maps a norm kind to its kernel.

Ops. Four ``torch.library`` ops, ``normsearch::norm_fwd`` / ``norm_bwd`` (RMSNorm and LayerNorm,
alone or fused with the residual add) and ``normsearch::dyt_fwd`` / ``dyt_bwd``, with autograd
formulas registered on the forward ops, so that ``torch.compile`` traces a model on these kernels as
one graph: no graph break at a norm, and Inductor sees the Triton kernels themselves. They are
``triton_op``\\ s launching through ``wrap_triton``; under ``TRITON_INTERPRET=1`` (tests on a CPU)
``@triton.jit`` makes interpreter functions, which ``wrap_triton`` cannot trace, so there the same
bodies are plain ``custom_op``\\ s (opaque to the compiler) with a fake implementation that allocates
the outputs and launches nothing. Either way there is no ``autograd.Function`` left: dynamo does not
trace into one that launches Triton kernels, and the ops replace it everywhere.

Dtypes. Each output takes the dtype torch's own norm would give (see :func:`_norm_dtype`): under CUDA
autocast RMSNorm and LayerNorm return float32 (torch autocasts ``rms_norm`` and ``layer_norm`` to
float32; ours read the low-precision input as it is and widen in registers, no cast copy), otherwise
the input's dtype; DyT's output promotes with its gain and bias as ``w * tanh(alpha x) + b`` does. The
fused add takes ``x`` and ``h`` of different dtypes (an fp32 stream and a bf16 branch) as they are and
stores ``s`` in the promoted dtype, as ``x + h``.
"""

import threading
from collections.abc import Callable
from typing import Any, Optional

import torch
import triton
from torch import Tensor
from triton.runtime.jit import JITFunction

from ..errors import NormsearchError, unknown
from ..norms import NORM_KINDS
from . import triton_jit as jit

_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
#: the kernels were made by the interpreter (TRITON_INTERPRET=1 when triton_jit was imported)
INTERPRETED = not isinstance(jit._norm_fwd_kernel, JITFunction)

_fake = threading.local()  # .on while a fake implementation runs: allocate, launch nothing


def _launch(kernel, grid, *args, **meta) -> None:
    if getattr(_fake, "on", False):
        return
    torch.library.wrap_triton(kernel)[grid](*args, **meta)


def _op(name: str):
    """Registers a function as the op ``normsearch::name``: a ``triton_op`` over compiled kernels, a
    ``custom_op`` with a launch-free fake over interpreted ones."""

    def register(fn):
        if not INTERPRETED:
            return torch.library.triton_op(f"normsearch::{name}", fn, mutates_args=())
        op = torch.library.custom_op(f"normsearch::{name}", fn, mutates_args=())

        def fake(*args, **kwargs):
            _fake.on = True
            try:
                return fn(*args, **kwargs)
            finally:
                _fake.on = False

        op.register_fake(fake)
        return op

    return register


def _none(like: Tensor) -> Tensor:
    """A placeholder output (ops return tensors, never None)."""
    return torch.empty(0, device=like.device)


def _inputs(x: Tensor, h: Optional[Tensor]):
    """(rows (A, G, N), x and its strides, h and its strides) with h read in place as x is."""
    A, G, N = jit.row_layout(x.shape)
    x, sxa, sxg = jit.rows_of(x, A, G, N)
    if h is None:
        return (A, G, N), x, sxa, sxg, None, 0, 0
    h, sha, shg = jit.rows_of(h, A, G, N)
    return (A, G, N), x, sxa, sxg, h, sha, shg


def _grad_inputs(dy: Tensor, ds: Optional[Tensor], A: int, G: int, N: int):
    dy, sda, sdg = jit.rows_of(dy, A, G, N)
    if ds is None:
        return dy, sda, sdg, None, 0, 0
    ds, ssa, ssg = jit.rows_of(ds, A, G, N)
    return dy, sda, sdg, ds, ssa, ssg


# --------------------------------------------------------------------------------------------------
# RMSNorm and LayerNorm


@_op("norm_fwd")
def norm_fwd(x: Tensor, h: Optional[Tensor], w: Optional[Tensor], b: Optional[Tensor], eps: float, rms: bool,
             out_dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(s, y, mean, rstd): s = x + h (empty without h), y = norm(s or x) in ``out_dtype``, and the
    per-row statistics (mean empty for RMSNorm)."""
    (A, G, N), x, sxa, sxg, h, sha, shg = _inputs(x, h)
    M = A * G
    block_m, block_n, num_warps, chunked = jit.tiling(M, N)
    fused = h is not None
    s = torch.empty(x.shape, dtype=torch.promote_types(x.dtype, h.dtype), device=x.device) if fused else None
    y = torch.empty(x.shape, dtype=out_dtype, device=x.device)
    mean = None if rms else torch.empty(M, dtype=torch.float32, device=x.device)
    rstd = torch.empty(M, dtype=torch.float32, device=x.device)
    _launch(jit._norm_fwd_kernel, (triton.cdiv(M, block_m),),
            x, h, s, y, w, b, mean, rstd, M, N, G, sxa, sxg, sha, shg, eps,
            IS_RMS=rms, HAS_RES=fused, HAS_W=w is not None, HAS_B=b is not None, CHUNKED=chunked,
            BLOCK_M=block_m, BLOCK_N=block_n, num_warps=num_warps)
    return (_none(x) if s is None else s), y, (_none(x) if mean is None else mean), rstd


@_op("norm_bwd")
def norm_bwd(dy: Tensor, ds: Optional[Tensor], x: Tensor, w: Optional[Tensor], mean: Tensor, rstd: Tensor,
             has_b: bool, rms: bool) -> tuple[Tensor, Tensor, Tensor]:
    """(dx, dw, db) of the norm of ``x`` (the fused add's s), dx in x's dtype, the parameter gradients
    in float32 (empty where there is no such parameter); ``ds``, the gradient reaching s directly, is
    added to dx."""
    A, G, N = jit.row_layout(x.shape)
    x, sxa, sxg = jit.rows_of(x, A, G, N)
    dy, sda, sdg, ds, ssa, ssg = _grad_inputs(dy, ds, A, G, N)
    M = A * G
    block_m, block_n, num_warps, chunked = jit.tiling(M, N)
    n_blocks, programs = jit.backward_grid(x, M, block_m, num_warps)
    parts = torch.zeros if chunked else torch.empty  # chunked kernels add into their rows
    dx = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    dw = None if w is None else parts(programs, N, dtype=torch.float32, device=x.device)
    db = parts(programs, N, dtype=torch.float32, device=x.device) if has_b else None
    _launch(jit._norm_bwd_kernel, (programs,),
            dy, ds, x, w, mean, rstd, dx, dw, db, M, N, n_blocks, G, sxa, sxg, sda, sdg, ssa, ssg,
            IS_RMS=rms, HAS_DS=ds is not None, HAS_W=w is not None, HAS_B=has_b, CHUNKED=chunked,
            BLOCK_M=block_m, BLOCK_N=block_n, num_warps=num_warps)
    return dx, (_none(x) if dw is None else dw.sum(0)), (_none(x) if db is None else db.sum(0))


def _norm_setup(ctx, inputs, output):
    x, h, w, b, eps, rms, out_dtype = inputs
    s, y, mean, rstd = output
    ctx.fused, ctx.rms = h is not None, rms
    ctx.dtypes = (x.dtype, None if h is None else h.dtype)
    ctx.save_for_backward(s if h is not None else x, w, b, mean, rstd)
    ctx.mark_non_differentiable(mean, rstd, *(() if h is not None else (s,)))
    ctx.set_materialize_grads(False)  # a post norm's s is often unused: no zeros to read


def _norm_backward(ctx, ds, dy, _dmean, _drstd):
    x, w, b, mean, rstd = ctx.saved_tensors
    if dy is None:  # only s was used: its gradient passes straight to x and h
        dx = ds
        dw = db = None
    else:
        dx, dw, db = norm_bwd(dy, ds if ctx.fused else None, x, w, mean, rstd, b is not None, ctx.rms)
        dw, db = _finish(dw, w), _finish(db, b)
    return (*_input_grads(dx, ctx), dw, db, None, None, None)


norm_fwd.register_autograd(_norm_backward, setup_context=_norm_setup)


# --------------------------------------------------------------------------------------------------
# DyT


@_op("dyt_fwd")
def dyt_fwd(x: Tensor, h: Optional[Tensor], alpha: Tensor, w: Optional[Tensor], b: Optional[Tensor],
            out_dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """(s, y): s = x + h (empty without h), y = w * tanh(alpha * (s or x)) + b in ``out_dtype``."""
    (A, G, N), x, sxa, sxg, h, sha, shg = _inputs(x, h)
    M = A * G
    block_m, block_n, num_warps, _ = jit.tiling(M, N)
    fused = h is not None
    s = torch.empty(x.shape, dtype=torch.promote_types(x.dtype, h.dtype), device=x.device) if fused else None
    y = torch.empty(x.shape, dtype=out_dtype, device=x.device)
    _launch(jit._dyt_fwd_kernel, (triton.cdiv(M, block_m),),
            x, h, s, y, alpha, w, b, M, N, G, sxa, sxg, sha, shg,
            HAS_RES=fused, HAS_W=w is not None, HAS_B=b is not None,
            BLOCK_M=block_m, BLOCK_N=block_n, num_warps=num_warps)
    return (_none(x) if s is None else s), y


@_op("dyt_bwd")
def dyt_bwd(dy: Tensor, ds: Optional[Tensor], x: Tensor, alpha: Tensor, w: Optional[Tensor],
            has_b: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(dx, dalpha, dw, db), as :func:`norm_bwd`; dalpha a float32 scalar."""
    A, G, N = jit.row_layout(x.shape)
    x, sxa, sxg = jit.rows_of(x, A, G, N)
    dy, sda, sdg, ds, ssa, ssg = _grad_inputs(dy, ds, A, G, N)
    M = A * G
    block_m, block_n, num_warps, _ = jit.tiling(M, N)
    n_blocks, programs = jit.backward_grid(x, M, block_m, num_warps)
    dx = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    da = torch.empty(programs, dtype=torch.float32, device=x.device)
    dw = None if w is None else torch.empty(programs, N, dtype=torch.float32, device=x.device)
    db = torch.empty(programs, N, dtype=torch.float32, device=x.device) if has_b else None
    _launch(jit._dyt_bwd_kernel, (programs,),
            dy, ds, x, alpha, w, dx, da, dw, db, M, N, n_blocks, G, sxa, sxg, sda, sdg, ssa, ssg,
            HAS_DS=ds is not None, HAS_W=w is not None, HAS_B=has_b,
            BLOCK_M=block_m, BLOCK_N=block_n, num_warps=num_warps)
    return dx, da.sum(0), (_none(x) if dw is None else dw.sum(0)), (_none(x) if db is None else db.sum(0))


def _dyt_setup(ctx, inputs, output):
    x, h, alpha, w, b, out_dtype = inputs
    s, y = output
    ctx.fused = h is not None
    ctx.dtypes = (x.dtype, None if h is None else h.dtype)
    ctx.save_for_backward(s if h is not None else x, alpha, w, b)
    if h is None:
        ctx.mark_non_differentiable(s)
    ctx.set_materialize_grads(False)


def _dyt_backward(ctx, ds, dy):
    x, alpha, w, b = ctx.saved_tensors
    if dy is None:
        dx = ds
        da = dw = db = None
    else:
        dx, da, dw, db = dyt_bwd(dy, ds if ctx.fused else None, x, alpha, w, b is not None)
        da, dw, db = _finish(da, alpha), _finish(dw, w), _finish(db, b)
    return (*_input_grads(dx, ctx), da, dw, db, None)


dyt_fwd.register_autograd(_dyt_backward, setup_context=_dyt_setup)


def _finish(grad: Tensor, like: Optional[Tensor]) -> Optional[Tensor]:
    """A parameter's gradient (summed over the programs in float32), typed as the parameter."""
    return None if like is None else grad.reshape(like.shape).to(like.dtype)


def _input_grads(dx: Tensor, ctx) -> tuple[Optional[Tensor], Optional[Tensor]]:
    """The gradients of x and h: one tensor, the gradient of s, in each input's dtype (no copy where
    they already agree)."""
    x_dtype, h_dtype = ctx.dtypes
    if not ctx.fused:
        return dx, None
    return dx.to(x_dtype), dx.to(h_dtype)


# --------------------------------------------------------------------------------------------------
# Kernels: any shape (..., N) in, that shape out

#: device type -> the aten norms torch's autocast runs in float32 there (the ops that have an
#: autocast kernel: norms are never on the low-precision list). Read once, here: dynamo cannot trace
#: the dispatcher query, and the answer is fixed for a torch build.
_AUTOCAST_FP32 = {dev: {op for op in ("rms_norm", "layer_norm")
                        if torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{op}", key)}
                  for dev, key in (("cuda", "AutocastCUDA"), ("cpu", "AutocastCPU"))}


def _norm_dtype(op: str, dtype: torch.dtype, dev: str) -> torch.dtype:
    """The dtype torch's ``op`` (``rms_norm`` or ``layer_norm``) returns for an input of ``dtype`` on
    device type ``dev``: float32 where autocast is on and casts that op to float32, else ``dtype``."""
    if op in _AUTOCAST_FP32.get(dev, ()) and torch.is_autocast_enabled(dev):
        return torch.float32
    return dtype


def _check(x: Tensor, h: Optional[Tensor]) -> tuple[Tensor, Optional[Tensor], torch.dtype]:
    """x and h broadcast to one shape (each keeps its dtype), and the dtype of x + h."""
    if x.dtype not in _DTYPES or (h is not None and h.dtype not in _DTYPES):
        bad = x.dtype if x.dtype not in _DTYPES else h.dtype
        raise NormsearchError(f"the triton norm kernels take float32, bfloat16 or float16 inputs, not {bad}; "
                              "use kernels: torch")
    if h is None:
        return x, None, x.dtype
    if h.shape != x.shape:
        x, h = torch.broadcast_tensors(x, h)
    return x, h, torch.promote_types(x.dtype, h.dtype)


def _row_norm(x, h, p, o, rms: bool):
    x, h, dtype = _check(x, h)
    out = _norm_dtype("rms_norm" if rms else "layer_norm", dtype, x.device.type)
    s, y, _, _ = norm_fwd(x, h, p.get("weight"), p.get("bias"), float(o["eps"]), rms, out)
    return y if h is None else (s, y)


def _dyt(x, h, p, o):
    x, h, dtype = _check(x, h)
    w, b = p.get("weight"), p.get("bias")
    for t in (w, b):  # w * tanh(alpha x) + b: alpha, a scalar, does not promote; w and b do
        if t is not None:
            dtype = torch.promote_types(dtype, t.dtype)
    s, y = dyt_fwd(x, h, p["alpha"], w, b, dtype)
    return y if h is None else (s, y)


class _NormKernel:
    """RMSNorm (``rms``) or LayerNorm, standalone and fused with the residual add."""

    def __init__(self, rms: bool):
        self.rms = rms

    def forward(self, x, p, o):
        return _row_norm(x, None, p, o, self.rms)

    def add(self, x, h, p, o):
        return _row_norm(x, h, p, o, self.rms)


class _DyTKernel:
    """DyT, standalone and fused with the residual add."""

    def forward(self, x, p, o):
        return _dyt(x, None, p, o)

    def add(self, x, h, p, o):
        return _dyt(x, h, p, o)


#: Norm kind name -> a factory of its Triton kernel. A kind without an entry runs on torch under
#: ``kernels: auto`` and is an error under ``kernels: triton`` (see :func:`normsearch.kernels.resolve_backend`).
KERNELS: dict[str, Callable[[], Any]] = {}


def register_kernel(kind: str, factory: Callable[[], Any]) -> None:
    """Give the registered norm ``kind`` a Triton kernel: ``factory()`` returns an object with
    ``forward(x, p, o)`` and ``add(x, h, p, o)``."""
    if kind not in NORM_KINDS:
        raise NormsearchError(unknown("norm kind", kind, NORM_KINDS))
    KERNELS[kind] = factory


register_kernel("rmsnorm", lambda: _NormKernel(rms=True))
register_kernel("layernorm", lambda: _NormKernel(rms=False))
register_kernel("dyt", _DyTKernel)


def kernel(kind: str):
    """The Triton kernel for norm ``kind``: ``forward(x, p, o)`` and ``add(x, h, p, o)`` as
    :class:`normsearch.kernels.TorchKernel`."""
    if kind not in KERNELS:
        raise NormsearchError(f"no Triton kernel for norm kind {kind!r} (there are: {', '.join(sorted(KERNELS))}); "
                              "use kernels: torch")
    return KERNELS[kind]()
