"""The Triton code of the norm kernels (``rmsnorm``, ``layernorm``, ``dyt``, alone and fused with the
residual add before them) and their launch shapes; :mod:`normsearch.kernels.triton_norms` registers
them as torch ops.

Rows. Every kernel sees its input as ``M`` rows of ``N`` features (the normalised dimension,
contiguous). A row's start need not be ``row * N``: an input is read as ``(A, G, N)`` with row ``r``
at ``(r // G) * stride_a + (r % G) * stride_g``, so a slice of a fused projection (q of
``qkv(x).split(C, -1)``: rows ``3C`` apart) or its heads (``(B, T, H, head_dim)`` views of it) is
read in place, without a copy. Outputs are written contiguous, row ``r`` at ``r * N``.

Tiles. ``BLOCK_M`` rows by ``BLOCK_N = next_power_of_2(N)`` columns, masked past ``N``. A row wider than
:data:`MAX_BLOCK_N` is not held in registers at once (it would spill): the kernels loop over it in
chunks of ``MAX_BLOCK_N`` columns (``CHUNKED``), RMSNorm and LayerNorm in two passes, statistics
(LayerNorm's mean and variance combined chunk by chunk, Chan et al.) then the normalisation.

Precision. Loads are widened to float32 and all sums run in float32 whatever the input dtype; each
output is stored in its own tensor's dtype (the callers choose it as torch's norms would).

Forward: one program per row tile. RMSNorm and LayerNorm save per-row statistics (``rstd`` and, for
LayerNorm, ``mean``) for the backward; DyT saves nothing but its input.

Backward: a persistent grid of a few programs per streaming multiprocessor. Each program walks the
row tiles ``pid, pid + programs, ...``, writes the input gradient of each, and accumulates its own
partial sums of the parameter gradients (gain, bias, DyT's alpha) over its rows; a torch sum over the
``programs`` partials finishes them. That keeps the cross-row reduction free of atomics and
deterministic.

The fused ``add(x, h)`` returns ``s = x + h`` and ``norm(s)`` from one pass over memory; its backward
takes the gradients of both outputs, ``ds_total = grad_s + dnorm/ds``, which is the gradient of both
``x`` and ``h``. ``x`` and ``h`` may differ in dtype (an fp32 residual stream and a bf16 branch):
each is read as it is, and ``s`` is stored in the promoted dtype.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

#: The widest row a program holds in registers at once; wider rows are looped over in chunks.
MAX_BLOCK_N = 16384
#: Elements per row tile: narrow rows are packed several to a program up to this size.
_TILE = 4096


@triton.jit
def _row_start(rows, G, SA, SG):
    """Element offset of each row's first feature in a tensor read as (A, G, N) with strides SA, SG."""
    r = rows.to(tl.int64)
    return (r // G) * SA + (r % G) * SG


@triton.jit
def _load_input(X, H, S, xo, ho, so, mask, HAS_RES: tl.constexpr):
    """A block of x, or with the add fused, of s = x + h (stored as the new stream). s is rounded to
    the stream's dtype before it is normalised, exactly as torch's x + h then norm(s) would be, so both
    outputs agree with the unfused computation."""
    x = tl.load(X + xo, mask=mask, other=0.0)
    if HAS_RES:
        s = (x.to(tl.float32) + tl.load(H + ho, mask=mask, other=0.0).to(tl.float32)).to(S.dtype.element_ty)
        tl.store(S + so, s, mask=mask)
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


# --------------------------------------------------------------------------------------------------
# RMSNorm and LayerNorm


@triton.jit
def _norm_fwd_kernel(X, H, S, Y, W, B, MEAN, RSTD, M, N, G, SXA, SXG, SHA, SHG, eps,
                     IS_RMS: tl.constexpr, HAS_RES: tl.constexpr, HAS_W: tl.constexpr, HAS_B: tl.constexpr,
                     CHUNKED: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < M
    xrow = _row_start(rows, G, SXA, SXG)[:, None]
    hrow = _row_start(rows, G, SHA, SHG)[:, None]
    orow = rows.to(tl.int64)[:, None] * N
    if not CHUNKED:
        cols = tl.arange(0, BLOCK_N)
        col_ok = cols < N
        mask = row_ok[:, None] & col_ok[None, :]
        x = _load_input(X, H, S, xrow + cols[None, :], hrow + cols[None, :], orow + cols[None, :], mask,
                        HAS_RES).to(tl.float32)
        if IS_RMS:
            xc = x
        else:
            mean = tl.sum(x, axis=1) / N
            xc = tl.where(mask, x - mean[:, None], 0.0)  # masked columns must not add (0 - mean)^2
            tl.store(MEAN + rows, mean, mask=row_ok)
        rstd = tl.rsqrt(tl.sum(xc * xc, axis=1) / N + eps)
        tl.store(RSTD + rows, rstd, mask=row_ok)
        y = _affine(xc * rstd[:, None], W, B, cols, col_ok, HAS_W, HAS_B)
        tl.store(Y + orow + cols[None, :], y.to(Y.dtype.element_ty), mask=mask)
    else:
        # pass 1: statistics, chunk by chunk (LayerNorm: each chunk's mean and squared deviations
        # folded into the running ones, which stays accurate where E[x^2] - mean^2 would cancel)
        mean = tl.zeros((BLOCK_M,), tl.float32)
        m2 = tl.zeros((BLOCK_M,), tl.float32)
        for start in range(0, N, BLOCK_N):
            cols = start + tl.arange(0, BLOCK_N)
            col_ok = cols < N
            mask = row_ok[:, None] & col_ok[None, :]
            x = _load_input(X, H, S, xrow + cols[None, :], hrow + cols[None, :], orow + cols[None, :], mask,
                            HAS_RES).to(tl.float32)
            if IS_RMS:
                m2 += tl.sum(x * x, axis=1)
            else:
                n_new = tl.minimum(N, start + BLOCK_N).to(tl.float32)
                n_c = n_new - start
                c_mean = tl.sum(x, axis=1) / n_c
                d = tl.where(mask, x - c_mean[:, None], 0.0)
                delta = c_mean - mean
                mean += delta * (n_c / n_new)
                m2 += tl.sum(d * d, axis=1) + delta * delta * (start * n_c / n_new)
        rstd = tl.rsqrt(m2 / N + eps)
        tl.store(RSTD + rows, rstd, mask=row_ok)
        if not IS_RMS:
            tl.store(MEAN + rows, mean, mask=row_ok)
        # pass 2: normalise (the fused add reads back the s it stored: the same program and tile
        # layout, so each element is read by the thread that wrote it)
        for start in range(0, N, BLOCK_N):
            cols = start + tl.arange(0, BLOCK_N)
            col_ok = cols < N
            mask = row_ok[:, None] & col_ok[None, :]
            if HAS_RES:
                x = tl.load(S + orow + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            else:
                x = tl.load(X + xrow + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            if IS_RMS:
                xc = x
            else:
                xc = x - mean[:, None]
            y = _affine(xc * rstd[:, None], W, B, cols, col_ok, HAS_W, HAS_B)
            tl.store(Y + orow + cols[None, :], y.to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _norm_grad_terms(X, DY, W, xo, dyo, cols, mask, col_ok, mean, rstd, IS_RMS: tl.constexpr, HAS_W: tl.constexpr):
    """(xhat, dy, g = dy * w) of one block, in float32; masked elements are 0."""
    x = tl.load(X + xo, mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(DY + dyo, mask=mask, other=0.0).to(tl.float32)
    if IS_RMS:
        xhat = x * rstd[:, None]
    else:
        xhat = tl.where(mask, (x - mean[:, None]) * rstd[:, None], 0.0)
    if HAS_W:
        g = dy * tl.load(W + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
    else:
        g = dy
    return xhat, dy, g


@triton.jit
def _norm_bwd_kernel(DY, DS, X, W, MEAN, RSTD, DX, DW_PART, DB_PART, M, N, n_blocks,
                     G, SXA, SXG, SDA, SDG, SSA, SSG,
                     IS_RMS: tl.constexpr, HAS_DS: tl.constexpr, HAS_W: tl.constexpr, HAS_B: tl.constexpr,
                     CHUNKED: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # With xhat the normalised input and g = dy * w the gradient reaching it:
    #   LayerNorm  dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
    #   RMSNorm    dx = rstd * (g - xhat * mean(g * xhat))          (nothing was centred)
    #   dw = sum over rows of dy * xhat,  db = sum over rows of dy.
    # Masked rows and columns load x = dy = 0 (and rstd = 0), so they add nothing to any sum.
    # CHUNKED: a first pass over the row's chunks for the two means, a second for dx; the partial
    # parameter gradients are then added into this program's row of DW_PART / DB_PART (zeroed by the
    # caller) chunk by chunk, as no register holds a whole row of them.
    pid = tl.program_id(0)
    dw_acc = tl.zeros((BLOCK_N,), tl.float32)
    db_acc = tl.zeros((BLOCK_N,), tl.float32)
    for blk in range(pid, n_blocks, tl.num_programs(0)):
        rows = blk * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = rows < M
        xrow = _row_start(rows, G, SXA, SXG)[:, None]
        dyrow = _row_start(rows, G, SDA, SDG)[:, None]
        dsrow = _row_start(rows, G, SSA, SSG)[:, None]
        orow = rows.to(tl.int64)[:, None] * N
        rstd = tl.load(RSTD + rows, mask=row_ok, other=0.0)
        if IS_RMS:
            mean = rstd  # unused
        else:
            mean = tl.load(MEAN + rows, mask=row_ok, other=0.0)
        if not CHUNKED:
            cols = tl.arange(0, BLOCK_N)
            col_ok = cols < N
            mask = row_ok[:, None] & col_ok[None, :]
            xhat, dy, g = _norm_grad_terms(X, DY, W, xrow + cols[None, :], dyrow + cols[None, :], cols, mask, col_ok,
                                           mean, rstd, IS_RMS, HAS_W)
            proj = tl.sum(g * xhat, axis=1) / N
            gmean = tl.sum(g, axis=1) / N
        else:
            proj = tl.zeros((BLOCK_M,), tl.float32)
            gmean = tl.zeros((BLOCK_M,), tl.float32)
            for start in range(0, N, BLOCK_N):
                cols = start + tl.arange(0, BLOCK_N)
                col_ok = cols < N
                mask = row_ok[:, None] & col_ok[None, :]
                xhat, dy, g = _norm_grad_terms(X, DY, W, xrow + cols[None, :], dyrow + cols[None, :], cols, mask,
                                               col_ok, mean, rstd, IS_RMS, HAS_W)
                proj += tl.sum(g * xhat, axis=1)
                gmean += tl.sum(g, axis=1)
            proj, gmean = proj / N, gmean / N
        for start in range(0, N, BLOCK_N if CHUNKED else N):
            if CHUNKED:  # the second pass reloads each chunk; a single block still has its terms
                cols = start + tl.arange(0, BLOCK_N)
                col_ok = cols < N
                mask = row_ok[:, None] & col_ok[None, :]
                xhat, dy, g = _norm_grad_terms(X, DY, W, xrow + cols[None, :], dyrow + cols[None, :], cols, mask,
                                               col_ok, mean, rstd, IS_RMS, HAS_W)
            if IS_RMS:
                dx = (g - xhat * proj[:, None]) * rstd[:, None]
            else:
                dx = (g - gmean[:, None] - xhat * proj[:, None]) * rstd[:, None]
            if HAS_DS:  # the fused add: s also fed the rest of the network directly
                dx += tl.load(DS + dsrow + cols[None, :], mask=mask, other=0.0).to(tl.float32)
            tl.store(DX + orow + cols[None, :], dx.to(DX.dtype.element_ty), mask=mask)
            if CHUNKED:
                if HAS_W:
                    p = DW_PART + pid * N + cols
                    tl.store(p, tl.load(p, mask=col_ok, other=0.0) + tl.sum(dy * xhat, axis=0), mask=col_ok)
                if HAS_B:
                    p = DB_PART + pid * N + cols
                    tl.store(p, tl.load(p, mask=col_ok, other=0.0) + tl.sum(dy, axis=0), mask=col_ok)
            else:
                if HAS_W:
                    dw_acc += tl.sum(dy * xhat, axis=0)
                if HAS_B:
                    db_acc += tl.sum(dy, axis=0)
    if not CHUNKED:
        cols = tl.arange(0, BLOCK_N)
        if HAS_W:
            tl.store(DW_PART + pid * N + cols, dw_acc, mask=cols < N)
        if HAS_B:
            tl.store(DB_PART + pid * N + cols, db_acc, mask=cols < N)


# --------------------------------------------------------------------------------------------------
# DyT: no per-row statistics, so a row wider than a block is simply walked chunk by chunk


@triton.jit
def _tanh(z):
    """(tanh z, 1 - tanh^2 z), from e = exp(-2|z|) in (0, 1] so that nothing overflows for any z
    (libdevice.tanh does not run under TRITON_INTERPRET). The derivative is 4e / (1 + e)^2, not
    1 - t * t, which would cancel to noise where tanh saturates and lose the gradient there."""
    e = tl.exp(-2.0 * tl.abs(z))
    t = (1.0 - e) / (1.0 + e)
    return tl.where(z < 0, -t, t), 4.0 * e / ((1.0 + e) * (1.0 + e))


@triton.jit
def _dyt_fwd_kernel(X, H, S, Y, ALPHA, W, B, M, N, G, SXA, SXG, SHA, SHG,
                    HAS_RES: tl.constexpr, HAS_W: tl.constexpr, HAS_B: tl.constexpr,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < M
    xrow = _row_start(rows, G, SXA, SXG)[:, None]
    hrow = _row_start(rows, G, SHA, SHG)[:, None]
    orow = rows.to(tl.int64)[:, None] * N
    a = tl.load(ALPHA).to(tl.float32)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        col_ok = cols < N
        mask = row_ok[:, None] & col_ok[None, :]
        x = _load_input(X, H, S, xrow + cols[None, :], hrow + cols[None, :], orow + cols[None, :], mask, HAS_RES)
        y, _ = _tanh(a * x.to(tl.float32))
        y = _affine(y, W, B, cols, col_ok, HAS_W, HAS_B)
        tl.store(Y + orow + cols[None, :], y.to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _dyt_bwd_kernel(DY, DS, X, ALPHA, W, DX, DA_PART, DW_PART, DB_PART, M, N, n_blocks,
                    G, SXA, SXG, SDA, SDG, SSA, SSG,
                    HAS_DS: tl.constexpr, HAS_W: tl.constexpr, HAS_B: tl.constexpr,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # y = w * t + b with t = tanh(a * x); with g = dy * w and du = g * (1 - t^2):
    #   dx = a * du,  da = sum of du * x over every element,  dw = sum over rows of dy * t,  db = sum of dy.
    # t is recomputed here rather than saved: one exp is cheaper than another tensor through memory.
    # Column chunks outside, this program's row tiles inside: a chunk's dw / db sums stay in registers.
    pid = tl.program_id(0)
    a = tl.load(ALPHA).to(tl.float32)
    da_acc = tl.zeros((BLOCK_N,), tl.float32)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        col_ok = cols < N
        if HAS_W:
            w = tl.load(W + cols, mask=col_ok, other=0.0).to(tl.float32)
        dw_acc = tl.zeros((BLOCK_N,), tl.float32)
        db_acc = tl.zeros((BLOCK_N,), tl.float32)
        for blk in range(pid, n_blocks, tl.num_programs(0)):
            rows = blk * BLOCK_M + tl.arange(0, BLOCK_M)
            mask = (rows < M)[:, None] & col_ok[None, :]
            x = tl.load(X + _row_start(rows, G, SXA, SXG)[:, None] + cols[None, :], mask=mask, other=0.0)
            dy = tl.load(DY + _row_start(rows, G, SDA, SDG)[:, None] + cols[None, :], mask=mask, other=0.0)
            x, dy = x.to(tl.float32), dy.to(tl.float32)
            t, dt = _tanh(a * x)
            if HAS_W:
                g = dy * w[None, :]
            else:
                g = dy
            du = g * dt
            dx = a * du
            if HAS_DS:
                dx += tl.load(DS + _row_start(rows, G, SSA, SSG)[:, None] + cols[None, :], mask=mask,
                              other=0.0).to(tl.float32)
            tl.store(DX + rows.to(tl.int64)[:, None] * N + cols[None, :], dx.to(DX.dtype.element_ty), mask=mask)
            da_acc += tl.sum(du * x, axis=0)
            if HAS_W:
                dw_acc += tl.sum(dy * t, axis=0)
            if HAS_B:
                db_acc += tl.sum(dy, axis=0)
        if HAS_W:
            tl.store(DW_PART + pid * N + cols, dw_acc, mask=col_ok)
        if HAS_B:
            tl.store(DB_PART + pid * N + cols, db_acc, mask=col_ok)
    tl.store(DA_PART + pid, tl.sum(da_acc, axis=0))


# --------------------------------------------------------------------------------------------------
# Launch shapes


def tiling(M: int, N: int) -> tuple[int, int, int, bool]:
    """(BLOCK_M, BLOCK_N, num_warps, chunked) for M rows of N features: chunked when a row is wider
    than :data:`MAX_BLOCK_N` (read at call time, so that a test can lower it)."""
    block_n = min(triton.next_power_of_2(N), MAX_BLOCK_N)
    chunked = block_n < N
    block_m = min(max(_TILE // block_n, 1), triton.next_power_of_2(M))
    # About 16 elements per thread: 4 warps for a 2048-element tile, 16 for 8192, at most 32 (1024
    # threads) for the widest blocks.
    num_warps = min(max(block_m * block_n // 512, 1), 32)
    return block_m, block_n, num_warps, chunked


@functools.lru_cache(maxsize=None)
def _multiprocessors(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


def backward_grid(x: torch.Tensor, M: int, block_m: int, num_warps: int) -> tuple[int, int]:
    """(row tiles, programs) for a persistent backward over the M rows of ``x``. On a GPU, enough
    programs for about 32 resident warps per multiprocessor, so that one program's loads overlap
    another's arithmetic; each program costs one row of partial sums. Under the CPU interpreter, two,
    so that programs still loop over several row tiles as they do on a GPU."""
    n_blocks = triton.cdiv(M, block_m)
    if x.device.type == "cuda":
        programs = _multiprocessors(x.device) * max(32 // num_warps, 1)
    else:
        programs = 2
    return n_blocks, max(min(n_blocks, programs), 1)


def row_layout(shape: torch.Size) -> tuple[int, int, int]:
    """(A, G, N) of a tensor of ``shape`` (..., N): its rows read as an A x G grid."""
    N = shape[-1]
    G = shape[-2] if len(shape) >= 2 else 1
    M = 1
    for d in shape[:-1]:
        M *= d
    return (M // G if G else 0), G, N


def rows_of(t: torch.Tensor, A: int, G: int, N: int) -> tuple[torch.Tensor, int, int]:
    """``t`` read in place as (A, G, N) rows with contiguous features: (t, stride_a, stride_g). Only a
    tensor that has no such view (features not contiguous, leading dims that do not merge) is copied."""
    try:
        v = t.view(A, G, N)
    except RuntimeError:
        v = None
    if v is None or (N > 1 and v.stride(2) != 1):
        t = t.contiguous()
        v = t.view(A, G, N)
    return t, v.stride(0), v.stride(1)
