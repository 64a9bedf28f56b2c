"""The kernel benchmark's parts that run without a GPU: arguments, the byte counts, the table, and the
refusal to run on a machine without CUDA."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from normsearch.kernels import bench

ROOT = Path(__file__).resolve().parents[2]


def test_defaults_and_options():
    args = bench.parse_args([])
    assert (args.tokens, args.hidden, args.dtype, args.out) == ([4096, 16384, 65536], [1024, 2048, 4096, 8192], "bf16", None)
    assert args.ops == list(bench.OPS) and args.providers == list(bench.PROVIDERS)
    args = bench.parse_args(["--tokens", "128", "--hidden", "100", "300", "--ops", "add_rmsnorm",
                             "--providers", "triton", "torch", "--dtype", "fp32", "--out", "results/kernels"])
    assert (args.tokens, args.hidden, args.ops, args.providers) == ([128], [100, 300], ["add_rmsnorm"], ["triton", "torch"])
    assert args.dtype == "fp32" and args.out == Path("results/kernels")
    with pytest.raises(SystemExit):
        bench.parse_args(["--ops", "scalenorm"])


def test_bytes_moved():
    unit = 4096 * 1024 * 2
    assert bench.bytes_moved("rmsnorm", 4096, 1024, 2) == (2 * unit, 5 * unit)
    assert bench.bytes_moved("add_rmsnorm", 4096, 1024, 2) == (4 * unit, 8 * unit)


def test_table():
    meta = {"device": "GPU", "dtype": "bf16", "copy_gbps": 4000.0, "torch": "2", "triton": "3", "liger": None}
    rows = [{"op": "rmsnorm", "tokens": 4096, "hidden": 1024, "provider": "triton",
             "fwd_ms": 0.01, "fwd_gbps": 1677.7, "fwdbwd_ms": 0.03, "fwdbwd_gbps": 1398.1},
            {"op": "rmsnorm", "tokens": 4096, "hidden": 1024, "provider": "liger", "error": "out of memory"}]
    text = bench.table(meta, rows)
    assert "copy 4000 GB/s" in text and "liger-kernel not installed" in text
    assert "| rmsnorm | 4096 | 1024 | triton | 0.010 | 1678 | 42% | 0.030 | 1398 | 35% |" in text
    assert "| rmsnorm | 4096 | 1024 | liger | out of memory |" in text


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_needs_a_cuda_gpu(capsys):
    assert bench.main([]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "needs a CUDA GPU" in err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_script_calls_main():
    out = subprocess.run([sys.executable, "benchmarks/kernels.py", "--tokens", "8"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and "needs a CUDA GPU" in out.stderr


def test_run_end_to_end(monkeypatch, tmp_path, device):
    """Every op through each provider that runs here (the interpreter on a CPU, compiled on a GPU),
    the rows, the files; the GPU timer and the 1 GiB copy are stood in for, so this checks the wiring,
    not the numbers."""
    pytest.importorskip("triton", reason="Triton is not installed (pip install 'normsearch[triton]')")

    def once(fn, **kwargs):
        fn()
        return 0.5

    monkeypatch.setattr(bench, "_do_bench", once)
    monkeypatch.setattr(bench, "copy_bandwidth", lambda dtype, rep, device: 1000.0)
    args = bench.parse_args(["--tokens", "3", "--hidden", "33", "--providers", "triton", "torch"])
    meta, rows = bench.run(args, device=device)
    assert [(r["op"], r["provider"]) for r in rows] == [(op, p) for op in bench.OPS for p in ("triton", "torch")]
    fwd, fwdbwd = bench.bytes_moved("add_rmsnorm", 3, 33, 2)
    assert rows[-1]["fwd_gbps"] == fwd / 0.5 / 1e6 and rows[-1]["fwdbwd_gbps"] == fwdbwd / 0.5 / 1e6
    bench.write(tmp_path / "kernels", meta, rows)
    assert json.loads((tmp_path / "kernels" / "kernels.json").read_text())["results"] == rows
    assert (tmp_path / "kernels" / "kernels.md").read_text() == bench.table(meta, rows)
