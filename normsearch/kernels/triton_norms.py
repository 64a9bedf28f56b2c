"""Triton kernels for the norm kinds ``rmsnorm``, ``layernorm`` and ``dyt``, alone and fused with the
residual add before them; :data:`KERNELS` maps a kind to its kernel.

Every kernel sees its input as rows of ``N`` features (the normalised dimension, contiguous) and works
on tiles of ``BLOCK_M`` rows by ``BLOCK_N = next_power_of_2(N)`` columns, masked past ``N``. Loads are
widened to float32 and all sums run in float32 whatever the input dtype (float32, bfloat16, float16);
outputs are stored in the input's dtype.

Forward: one program per row tile. RMSNorm and LayerNorm save per-row statistics (``rstd`` and, for
LayerNorm, ``mean``) for the backward; DyT saves nothing but its input.

Backward: a persistent grid of a few programs per streaming multiprocessor. Each program walks
the row tiles ``pid, pid + programs, ...``, writes the input gradient of each, and accumulates its
own partial sums of the parameter gradients (gain, bias, DyT's alpha) over its rows; a torch sum over
the ``programs`` partials finishes them. That keeps the cross-row reduction free of atomics and
deterministic.

The fused ``add(x, h)`` returns ``s = x + h`` and ``norm(s)`` from one pass over memory; its backward
takes the gradients of both outputs, ``ds_total = grad_s + dnorm/ds``, which is the gradient of both
``x`` and ``h``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
import triton
import triton.language as tl

from ..errors import NormsearchError, unknown
from ..norms import NORM_KINDS

#: The widest row one program holds in registers.
MAX_HIDDEN = 65536
#: Elements per row tile: narrow rows are packed several to a program up to this size.
_TILE = 4096
_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


# --------------------------------------------------------------------------------------------------
# RMSNorm and LayerNorm


@triton.jit
def _load_input(X, H, S, offs, mask, HAS_RES: tl.constexpr):
    """A block of rows of x, or with the add fused, of s = x + h (stored as the new stream). s is
    rounded to the stream's dtype before it is normalised, exactly as torch's x + h then norm(s)
    would be, so both outputs agree with the unfused computation."""
    x = tl.load(X + offs, mask=mask, other=0.0)
    if HAS_RES:
        s = (x.to(tl.float32) + tl.load(H + offs, mask=mask, other=0.0).to(tl.float32)).to(S.dtype.element_ty)
        tl.store(S + offs, s, mask=mask)
        x = s
    return x


@triton.jit
def _affine(y, W, B, cols, col_ok, HAS_W: tl.constexpr, HAS_B: tl.constexpr):
    """y * w + b, per column, in float32; either may be absent."""
    if HAS_W:
        y = y * tl.load(W + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
    if HAS_B:
        y = y + tl.load(B + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
    return y


@triton.jit
def _norm_fwd_kernel(X, H, S, Y, W, B, MEAN, RSTD, M, N, eps,
                     IS_RMS: tl.constexpr, HAS_RES: tl.constexpr, HAS_W: tl.constexpr, HAS_B: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    row_ok, col_ok = rows < M, cols < N
    mask = row_ok[:, None] & col_ok[None, :]
    offs = rows.to(tl.int64)[:, None] * N + cols[None, :]

    x = _load_input(X, H, S, offs, mask, HAS_RES).to(tl.float32)

    if IS_RMS:
        xc = x
    else:
        mean = tl.sum(x, axis=1) / N
        xc = tl.where(mask, x - mean[:, None], 0.0)  # masked columns must not add (0 - mean)^2
        tl.store(MEAN + rows, mean, mask=row_ok)
    rstd = tl.rsqrt(tl.sum(xc * xc, axis=1) / N + eps)
    tl.store(RSTD + rows, rstd, mask=row_ok)

    y = xc * rstd[:, None]
    y = _affine(y, W, B, cols, col_ok, HAS_W, HAS_B)
    tl.store(Y + offs, y.to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _norm_bwd_kernel(DY, DS, X, W, MEAN, RSTD, DX, DW_PART, DB_PART, M, N, n_blocks,
                     IS_RMS: tl.constexpr, HAS_DS: tl.constexpr, HAS_W: tl.constexpr, HAS_B: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # With xhat the normalised input and g = dy * w the gradient reaching it:
    #   LayerNorm  dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
    #   RMSNorm    dx = rstd * (g - xhat * mean(g * xhat))          (nothing was centred)
    #   dw = sum over rows of dy * xhat,  db = sum over rows of dy.
    # Masked rows and columns load x = dy = 0 (and rstd = 0), so they add nothing to any sum.
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < N
    if HAS_W:
        w = tl.load(W + cols, mask=col_ok, other=0.0).to(tl.float32)
    dw_acc = tl.zeros((BLOCK_N,), tl.float32)
    db_acc = tl.zeros((BLOCK_N,), tl.float32)

    for blk in range(pid, n_blocks, tl.num_programs(0)):
        rows = blk * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = rows < M
        mask = row_ok[:, None] & col_ok[None, :]
        offs = rows.to(tl.int64)[:, None] * N + cols[None, :]

        x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(DY + offs, mask=mask, other=0.0).to(tl.float32)
        rstd = tl.load(RSTD + rows, mask=row_ok, other=0.0)
        if IS_RMS:
            xhat = x * rstd[:, None]
        else:
            mean = tl.load(MEAN + rows, mask=row_ok, other=0.0)
            xhat = tl.where(mask, (x - mean[:, None]) * rstd[:, None], 0.0)
        if HAS_W:
            g = dy * w[None, :]
        else:
            g = dy

        proj = tl.sum(g * xhat, axis=1) / N
        if IS_RMS:
            dx = (g - xhat * proj[:, None]) * rstd[:, None]
        else:
            dx = (g - (tl.sum(g, axis=1) / N)[:, None] - xhat * proj[:, None]) * rstd[:, None]
        if HAS_DS:  # the fused add: s also fed the rest of the network directly
            dx += tl.load(DS + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(DX + offs, dx.to(DX.dtype.element_ty), mask=mask)

        if HAS_W:
            dw_acc += tl.sum(dy * xhat, axis=0)
        if HAS_B:
            db_acc += tl.sum(dy, axis=0)

    if HAS_W:
        tl.store(DW_PART + pid * N + cols, dw_acc, mask=col_ok)
    if HAS_B:
        tl.store(DB_PART + pid * N + cols, db_acc, mask=col_ok)


# --------------------------------------------------------------------------------------------------
# DyT


@triton.jit
def _tanh(z):
    """(tanh z, 1 - tanh^2 z), from e = exp(-2|z|) in (0, 1] so that nothing overflows for any z
    (libdevice.tanh does not run under TRITON_INTERPRET). The derivative is 4e / (1 + e)^2, not
    1 - t * t, which would cancel to noise where tanh saturates and lose the gradient there."""
    e = tl.exp(-2.0 * tl.abs(z))
    t = (1.0 - e) / (1.0 + e)
    return tl.where(z < 0, -t, t), 4.0 * e / ((1.0 + e) * (1.0 + e))


@triton.jit
def _dyt_fwd_kernel(X, H, S, Y, ALPHA, W, B, M, N,
                    HAS_RES: tl.constexpr, HAS_W: tl.constexpr, HAS_B: tl.constexpr,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < N
    mask = (rows < M)[:, None] & col_ok[None, :]
    offs = rows.to(tl.int64)[:, None] * N + cols[None, :]

    x = _load_input(X, H, S, offs, mask, HAS_RES)
    y, _ = _tanh(tl.load(ALPHA).to(tl.float32) * x.to(tl.float32))
    y = _affine(y, W, B, cols, col_ok, HAS_W, HAS_B)
    tl.store(Y + offs, y.to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _dyt_bwd_kernel(DY, DS, X, ALPHA, W, DX, DA_PART, DW_PART, DB_PART, M, N, n_blocks,
                    HAS_DS: tl.constexpr, HAS_W: tl.constexpr, HAS_B: tl.constexpr,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # y = w * t + b with t = tanh(a * x); with g = dy * w and du = g * (1 - t^2):
    #   dx = a * du,  da = sum of du * x over every element,  dw = sum over rows of dy * t,  db = sum of dy.
    # t is recomputed here rather than saved: one exp is cheaper than another tensor through memory.
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < N
    a = tl.load(ALPHA).to(tl.float32)
    if HAS_W:
        w = tl.load(W + cols, mask=col_ok, other=0.0).to(tl.float32)
    da_acc = tl.zeros((BLOCK_N,), tl.float32)
    dw_acc = tl.zeros((BLOCK_N,), tl.float32)
    db_acc = tl.zeros((BLOCK_N,), tl.float32)

    for blk in range(pid, n_blocks, tl.num_programs(0)):
        rows = blk * BLOCK_M + tl.arange(0, BLOCK_M)
        mask = (rows < M)[:, None] & col_ok[None, :]
        offs = rows.to(tl.int64)[:, None] * N + cols[None, :]

        x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(DY + offs, mask=mask, other=0.0).to(tl.float32)
        t, dt = _tanh(a * x)
        if HAS_W:
            g = dy * w[None, :]
        else:
            g = dy
        du = g * dt
        dx = a * du
        if HAS_DS:
            dx += tl.load(DS + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(DX + offs, dx.to(DX.dtype.element_ty), mask=mask)

        da_acc += tl.sum(du * x, axis=0)
        if HAS_W:
            dw_acc += tl.sum(dy * t, axis=0)
        if HAS_B:
            db_acc += tl.sum(dy, axis=0)

    tl.store(DA_PART + pid, tl.sum(da_acc, axis=0))
    if HAS_W:
        tl.store(DW_PART + pid * N + cols, dw_acc, mask=col_ok)
    if HAS_B:
        tl.store(DB_PART + pid * N + cols, db_acc, mask=col_ok)


# --------------------------------------------------------------------------------------------------
# Launch shapes


def _tiling(M: int, N: int) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_N, num_warps) for M rows of N features."""
    if N > MAX_HIDDEN:
        raise NormsearchError(f"the triton norm kernels take rows of at most {MAX_HIDDEN} features, not {N}; "
                              "use kernels: torch")
    block_n = triton.next_power_of_2(N)
    block_m = min(max(_TILE // block_n, 1), triton.next_power_of_2(M))
    # About 16 elements per thread: 4 warps for a 2048-element tile, 16 for 8192, at most 32 (1024
    # threads) for the widest rows.
    num_warps = min(max(block_m * block_n // 512, 1), 32)
    return block_m, block_n, num_warps


@functools.lru_cache(maxsize=None)
def _multiprocessors(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


def _backward_grid(x: torch.Tensor, M: int, block_m: int, num_warps: int) -> tuple[int, int]:
    """(row tiles, programs) for a persistent backward over the M rows of ``x``. On a GPU, enough
    programs for about 32 resident warps per multiprocessor, so that one program's loads overlap
    another's arithmetic; each program costs one row of partial sums. Under the CPU interpreter, two,
    so that programs still loop over several row tiles as they do on a GPU."""
    n_blocks = triton.cdiv(M, block_m)
    if x.device.type == "cuda":
        programs = _multiprocessors(x.device) * max(32 // num_warps, 1)
    else:
        programs = 2
    return n_blocks, min(n_blocks, programs)


def _finish(part: torch.Tensor | None, like: torch.Tensor | None) -> torch.Tensor | None:
    """The sum of the programs' partial gradients, shaped and typed as the parameter ``like``."""
    if part is None or like is None:
        return None
    return part.sum(0).reshape(like.shape).to(like.dtype)


# --------------------------------------------------------------------------------------------------
# Autograd functions
#
# They take the caller's tensors of any shape (..., N) and treat a contiguous copy (none when already
# contiguous) as M rows; outputs and gradients are allocated contiguous in the input's shape. No view
# stands between the caller's tensors and the function: the fused add's backward returns one tensor
# as the gradient of both x and h, and autograd copies it before it keeps it as a leaf's .grad only
# when it reaches the leaf as that same tensor, not as two views of it.


def _rows_of(x: torch.Tensor) -> tuple[int, int]:
    N = x.shape[-1]
    return x.numel() // N, N


def _new(x: torch.Tensor) -> torch.Tensor:
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


class _RowNorm(torch.autograd.Function):
    """RMSNorm or LayerNorm of ``x``, or of ``s = x + h`` when ``h`` is given; the fused form returns
    ``(s, y)``."""

    @staticmethod
    def forward(ctx, x, h, w, b, eps, rms):
        fused = h is not None
        x, h = x.contiguous(), h.contiguous() if fused else None
        M, N = _rows_of(x)
        block_m, block_n, num_warps = _tiling(M, N)
        s = _new(x) if fused else None
        y = _new(x)
        mean = None if rms else torch.empty(M, dtype=torch.float32, device=x.device)
        rstd = torch.empty(M, dtype=torch.float32, device=x.device)
        _norm_fwd_kernel[(triton.cdiv(M, block_m),)](
            x, h, s, y, w, b, mean, rstd, M, N, eps,
            IS_RMS=rms, HAS_RES=fused, HAS_W=w is not None, HAS_B=b is not None,
            BLOCK_M=block_m, BLOCK_N=block_n, num_warps=num_warps)
        ctx.save_for_backward(s if fused else x, w, b, mean, rstd)
        ctx.rms, ctx.fused, ctx.tiling = rms, fused, (block_m, block_n, num_warps)
        ctx.set_materialize_grads(False)  # a post norm's s is often unused: no zeros to read
        return (s, y) if fused else y

    @staticmethod
    def backward(ctx, *grads):
        ds, dy = grads if ctx.fused else (None, grads[0])
        if dy is None:  # only s was used: its gradient passes straight to x and h
            return ds, ds, None, None, None, None
        x, w, b, mean, rstd = ctx.saved_tensors
        block_m, block_n, num_warps = ctx.tiling
        M, N = _rows_of(x)
        n_blocks, programs = _backward_grid(x, M, block_m, num_warps)
        dx = _new(x)
        dw_part = None if w is None else torch.empty(programs, N, dtype=torch.float32, device=x.device)
        db_part = None if b is None else torch.empty(programs, N, dtype=torch.float32, device=x.device)
        _norm_bwd_kernel[(programs,)](
            dy.contiguous(), None if ds is None else ds.contiguous(), x, w, mean, rstd, dx, dw_part, db_part,
            M, N, n_blocks,
            IS_RMS=ctx.rms, HAS_DS=ds is not None, HAS_W=w is not None, HAS_B=b is not None,
            BLOCK_M=block_m, BLOCK_N=block_n, num_warps=num_warps)
        return dx, dx if ctx.fused else None, _finish(dw_part, w), _finish(db_part, b), None, None


class _DyT(torch.autograd.Function):
    """DyT of ``x``, or of ``s = x + h`` when ``h`` is given; the fused form returns ``(s, y)``."""

    @staticmethod
    def forward(ctx, x, h, alpha, w, b):
        fused = h is not None
        x, h = x.contiguous(), h.contiguous() if fused else None
        M, N = _rows_of(x)
        block_m, block_n, num_warps = _tiling(M, N)
        s = _new(x) if fused else None
        y = _new(x)
        _dyt_fwd_kernel[(triton.cdiv(M, block_m),)](
            x, h, s, y, alpha, w, b, M, N,
            HAS_RES=fused, HAS_W=w is not None, HAS_B=b is not None,
            BLOCK_M=block_m, BLOCK_N=block_n, num_warps=num_warps)
        ctx.save_for_backward(s if fused else x, alpha, w, b)
        ctx.fused, ctx.tiling = fused, (block_m, block_n, num_warps)
        ctx.set_materialize_grads(False)
        return (s, y) if fused else y

    @staticmethod
    def backward(ctx, *grads):
        ds, dy = grads if ctx.fused else (None, grads[0])
        if dy is None:
            return ds, ds, None, None, None
        x, alpha, w, b = ctx.saved_tensors
        block_m, block_n, num_warps = ctx.tiling
        M, N = _rows_of(x)
        n_blocks, programs = _backward_grid(x, M, block_m, num_warps)
        dx = _new(x)
        da_part = torch.empty(programs, dtype=torch.float32, device=x.device)
        dw_part = None if w is None else torch.empty(programs, N, dtype=torch.float32, device=x.device)
        db_part = None if b is None else torch.empty(programs, N, dtype=torch.float32, device=x.device)
        _dyt_bwd_kernel[(programs,)](
            dy.contiguous(), None if ds is None else ds.contiguous(), x, alpha, w, dx, da_part, dw_part, db_part,
            M, N, n_blocks,
            HAS_DS=ds is not None, HAS_W=w is not None, HAS_B=b is not None,
            BLOCK_M=block_m, BLOCK_N=block_n, num_warps=num_warps)
        return (dx, dx if ctx.fused else None, _finish(da_part, alpha), _finish(dw_part, w),
                _finish(db_part, b))


# --------------------------------------------------------------------------------------------------
# Kernels: any shape (..., N) in, the same shape and dtype out


def _run(fn, x, h, *args):
    """``fn`` on ``x`` (and ``h``, the residual branch added to it, broadcast and promoted as torch's
    ``x + h`` would be)."""
    if x.dtype not in _DTYPES:
        raise NormsearchError(f"the triton norm kernels take float32, bfloat16 or float16 inputs, not {x.dtype}; "
                              "use kernels: torch")
    if h is not None and (h.shape != x.shape or h.dtype != x.dtype):
        dtype = torch.promote_types(x.dtype, h.dtype)
        x, h = torch.broadcast_tensors(x.to(dtype), h.to(dtype))
    return fn.apply(x, h, *args)


class _NormKernel:
    """RMSNorm (``rms``) or LayerNorm, standalone and fused with the residual add."""

    def __init__(self, rms: bool):
        self.rms = rms

    def forward(self, x, p, o):
        return _run(_RowNorm, x, None, p.get("weight"), p.get("bias"), o["eps"], self.rms)

    def add(self, x, h, p, o):
        return _run(_RowNorm, x, h, p.get("weight"), p.get("bias"), o["eps"], self.rms)


class _DyTKernel:
    """DyT, standalone and fused with the residual add."""

    def forward(self, x, p, o):
        return _run(_DyT, x, None, p["alpha"], p.get("weight"), p.get("bias"))

    def add(self, x, h, p, o):
        return _run(_DyT, x, h, p["alpha"], p.get("weight"), p.get("bias"))


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
