"""The benchmarks run from the command line (their numbers are not asserted: machines are noisy)."""

from typer.testing import CliRunner

from normsearch.cli import app

runner = CliRunner()


def test_trial_overhead_benchmark_prints_its_ratio():
    r = runner.invoke(app, ["bench", "trial", "--layers", "1", "--d-model", "16", "--heads", "2", "--context", "16",
                            "--batch", "2", "--steps", "4", "--eval-every", "2", "--repeats", "1", "--threads", "1"])
    assert r.exit_code == 0, r.output
    assert "ratio normsearch / bare: " in r.output and "diagnostics cost" in r.output


def test_kernel_benchmark_needs_cuda():
    r = runner.invoke(app, ["bench", "kernels"])
    assert r.exit_code == 2
    assert "needs a CUDA GPU" in r.output
