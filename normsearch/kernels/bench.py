"""Benchmark of the norm kernels on a CUDA GPU: ours (Triton) against torch eager, ``torch.compile``
of the eager code, and Liger-Kernel when it is installed.

For every op (``rmsnorm``, ``layernorm``, ``add_rmsnorm``: the residual add fused with RMSNorm) and
every shape tokens x hidden, it times the forward and the forward + backward, and reports the
bandwidth achieved: the bytes the op must move at the least (each token-by-hidden tensor read or
written once; parameters and per-row statistics, under 0.1% here, left out) over the time taken, and
that as a fraction of the device-to-device copy bandwidth measured in the same run, the practical
ceiling for a memory-bound op.

    python benchmarks/kernels.py --out results/kernels
    python benchmarks/kernels.py --tokens 16384 --hidden 4096 --ops rmsnorm --providers triton torch
"""

from __future__ import annotations

import argparse
import json
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

OPS = ("rmsnorm", "layernorm", "add_rmsnorm")
PROVIDERS = ("triton", "torch", "compile", "liger")
DTYPES = ("bf16", "fp16", "fp32")
EPS = 1e-5

#: token-by-hidden tensors each op reads and writes: forward, backward. The fused add reads x and h
#: and writes s and y; its backward reads s, dy and ds and writes one gradient, shared by x and h.
TRAFFIC = {"rmsnorm": (2, 3), "layernorm": (2, 3), "add_rmsnorm": (4, 4)}
COLUMNS = ("op", "tokens", "hidden", "provider", "fwd ms", "fwd GB/s", "fwd / copy",
           "fwd+bwd ms", "fwd+bwd GB/s", "fwd+bwd / copy")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="benchmarks/kernels.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, nargs="+", default=[4096, 16384, 65536], help="rows (batch x sequence)")
    ap.add_argument("--hidden", type=int, nargs="+", default=[1024, 2048, 4096, 8192], help="features per row")
    ap.add_argument("--ops", nargs="+", choices=OPS, default=list(OPS))
    ap.add_argument("--providers", nargs="+", choices=PROVIDERS, default=list(PROVIDERS),
                    help="liger is skipped when liger_kernel does not import")
    ap.add_argument("--dtype", choices=DTYPES, default="bf16")
    ap.add_argument("--rep", type=int, default=100, help="milliseconds of repetitions per measurement")
    ap.add_argument("--out", type=Path, help="directory to write kernels.md and kernels.json to")
    return ap.parse_args(argv)


def bytes_moved(op: str, tokens: int, hidden: int, itemsize: int) -> tuple[int, int]:
    """(forward, forward + backward) bytes for ``op`` on a tokens x hidden input."""
    fwd, bwd = TRAFFIC[op]
    unit = tokens * hidden * itemsize
    return fwd * unit, (fwd + bwd) * unit


def table(meta: dict, rows: list[dict]) -> str:
    """The results as markdown: a line on the run, then one row per op, shape and provider."""

    def cells(r, key):
        if r.get(f"{key}_ms") is None:
            return [r.get("error", "n/a"), "", ""]
        return [f"{r[f'{key}_ms']:.3f}", f"{r[f'{key}_gbps']:.0f}", f"{r[f'{key}_gbps'] / meta['copy_gbps']:.0%}"]

    lines = [
        f"{meta['device']}, {meta['dtype']}; device-to-device copy {meta['copy_gbps']:.0f} GB/s; "
        f"torch {meta['torch']}, triton {meta['triton']}, liger-kernel {meta['liger'] or 'not installed'}",
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|---|---:|---:|---|" + "---:|" * 6,
    ]
    for r in rows:
        row = [r["op"], str(r["tokens"]), str(r["hidden"]), r["provider"], *cells(r, "fwd"), *cells(r, "fwdbwd")]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def _eager():
    import torch.nn.functional as F

    def rmsnorm(x, h, w, b):
        return F.rms_norm(x, x.shape[-1:], w, EPS)

    def layernorm(x, h, w, b):
        return F.layer_norm(x, x.shape[-1:], w, b, EPS)

    def add_rmsnorm(x, h, w, b):
        s = x + h
        return s, F.rms_norm(s, s.shape[-1:], w, EPS)

    return {"rmsnorm": rmsnorm, "layernorm": layernorm, "add_rmsnorm": add_rmsnorm}


def _triton():
    from . import triton_norms

    rms, ln = triton_norms.kernel("rmsnorm"), triton_norms.kernel("layernorm")
    o = {"eps": EPS}
    return {
        "rmsnorm": lambda x, h, w, b: rms.forward(x, {"weight": w}, o),
        "layernorm": lambda x, h, w, b: ln.forward(x, {"weight": w, "bias": b}, o),
        "add_rmsnorm": lambda x, h, w, b: rms.add(x, h, {"weight": w}, o),
    }


def _liger():
    """Liger-Kernel's functions, those of them that import (the package moves things between
    releases), or {} without it."""
    fns = {}
    try:
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction

        # offset 0, Llama casting, and dY left intact (in_place=False) as the other providers do
        fns["rmsnorm"] = lambda x, h, w, b: LigerRMSNormFunction.apply(x, w, EPS, 0.0, "llama", False)
    except ImportError:
        pass
    try:
        from liger_kernel.ops.layer_norm import LigerLayerNormFunction

        fns["layernorm"] = lambda x, h, w, b: LigerLayerNormFunction.apply(x, w, b, EPS)
    except ImportError:
        pass
    try:
        from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction

        fns["add_rmsnorm"] = lambda x, h, w, b: LigerFusedAddRMSNormFunction.apply(x, h, w, EPS)
    except ImportError:
        pass
    return fns


def _liger_version() -> str | None:
    try:
        return version("liger-kernel")
    except PackageNotFoundError:
        return None


def _do_bench(fn, **kwargs) -> float:
    """Median milliseconds of ``fn()`` on the GPU, by Triton's timer (CUDA events, L2 flushed)."""
    from triton.testing import do_bench

    return do_bench(fn, return_mode="median", **kwargs)


def _measure(fn, args: tuple, grads: tuple, backward: bool, rep: int) -> float:
    """Milliseconds of ``fn(*args)``, with the backward of its outputs when ``backward``."""
    import torch

    if not backward:
        with torch.no_grad():
            return _do_bench(lambda: fn(*args), rep=rep)
    leaves = [a for a in args if a is not None]

    def step():
        out = fn(*args)
        outs = out if isinstance(out, tuple) else (out,)
        torch.autograd.backward(outs, grads[: len(outs)])

    return _do_bench(step, rep=rep, grad_to_none=leaves)


def copy_bandwidth(dtype, rep: int, device: str) -> float:
    """GB/s of ``dst.copy_(src)`` for two 1 GiB buffers: one read and one write per element."""
    import torch

    n = (1 << 30) // torch.empty((), dtype=dtype).element_size()
    src = torch.randn(n, device=device).to(dtype)
    dst = torch.empty_like(src)
    ms = _do_bench(lambda: dst.copy_(src), rep=rep)
    return 2 * n * src.element_size() / ms / 1e6


def _case(fn, op, tokens, hidden, dtype, device, rep, fwd_bytes, fwdbwd_bytes) -> dict:
    """Times of ``fn`` on fresh inputs of one shape, and the bandwidths they give."""
    import torch

    def leaf(*shape, shift=0.0, scale=1.0):
        return (torch.randn(*shape, device=device) * scale + shift).to(dtype).requires_grad_()

    x = leaf(tokens, hidden)
    h = leaf(tokens, hidden) if op == "add_rmsnorm" else None
    w = leaf(hidden, shift=1.0, scale=0.1)
    b = leaf(hidden, scale=0.1) if op == "layernorm" else None
    args = (x, h, w, b)
    grads = tuple(torch.randn(tokens, hidden, device=device).to(dtype) for _ in range(2))
    fwd = _measure(fn, args, grads, False, rep)
    fwdbwd = _measure(fn, args, grads, True, rep)
    return {"fwd_ms": fwd, "fwd_gbps": fwd_bytes / fwd / 1e6,
            "fwdbwd_ms": fwdbwd, "fwdbwd_gbps": fwdbwd_bytes / fwdbwd / 1e6}


def run(args: argparse.Namespace, device: str = "cuda") -> tuple[dict, list[dict]]:
    """Every case of ``args``: (what the run was on, one result row per op, shape and provider)."""
    import torch
    import triton

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    itemsize = torch.empty((), dtype=dtype).element_size()
    eager = _eager()
    providers = {"triton": _triton(), "torch": eager, "liger": _liger() if "liger" in args.providers else {}}
    name = torch.cuda.get_device_name(device) if device == "cuda" else device
    meta = {"device": name, "dtype": args.dtype, "copy_gbps": copy_bandwidth(dtype, args.rep, device),
            "torch": torch.__version__, "triton": triton.__version__, "liger": _liger_version()}
    rows = []
    for op in args.ops:
        for tokens in args.tokens:
            for hidden in args.hidden:
                fwd_bytes, fwdbwd_bytes = bytes_moved(op, tokens, hidden, itemsize)
                for provider in args.providers:
                    if provider == "compile":
                        torch._dynamo.reset()  # a fresh compile per shape, never the recompile limit
                        fn = torch.compile(eager[op], dynamic=False)
                    else:
                        fn = providers[provider].get(op)
                    if fn is None:
                        continue  # liger not installed, or without this op
                    row = {"op": op, "tokens": tokens, "hidden": hidden, "provider": provider}
                    try:
                        row |= _case(fn, op, tokens, hidden, dtype, device, args.rep, fwd_bytes, fwdbwd_bytes)
                    except torch.cuda.OutOfMemoryError:
                        row["error"] = "out of memory"
                    except Exception as e:
                        if provider != "liger":
                            raise
                        # an optional package whose signatures change between releases: note, go on
                        row["error"] = f"failed: {type(e).__name__}"
                    torch.cuda.empty_cache()
                    rows.append(row)
                    print(table(meta, [row]).splitlines()[-1], file=sys.stderr, flush=True)  # progress
    return meta, rows


def write(out: Path, meta: dict, rows: list[dict]) -> None:
    """The table to ``out/kernels.md`` and the numbers to ``out/kernels.json``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "kernels.md").write_text(table(meta, rows))
    (out / "kernels.json").write_text(json.dumps({"meta": meta, "results": rows}, indent=2) + "\n")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("error: the kernel benchmark needs a CUDA GPU, and torch sees none here", file=sys.stderr)
        return 2
    meta, rows = run(args)
    print(table(meta, rows), end="")
    if args.out is not None:
        write(args.out, meta, rows)
        print(f"wrote {args.out / 'kernels.md'} and {args.out / 'kernels.json'}")
    return 0
