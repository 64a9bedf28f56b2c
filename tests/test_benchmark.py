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


def test_option_cost_benchmark_prints_a_ratio_per_option(tmp_path):
    out = tmp_path / "cost.json"
    r = runner.invoke(app, ["bench", "options", "--layers", "1", "--d-model", "16", "--heads", "2", "--context", "8",
                            "--batch", "2", "--rounds", "2", "--steps", "1", "--only", "+ sinks,+ ctx norm,nanochat",
                            "--json", str(out)])
    assert r.exit_code == 0, r.output
    assert "ratio to pre_ln" in r.output and "+ sinks" in r.output and "nanochat" in r.output
    import json

    rows = {row["variant"]: row for row in json.loads(out.read_text())["rows"]}
    assert set(rows) == {"pre_ln", "+ sinks", "+ ctx norm", "nanochat"} and rows["pre_ln"]["ratio"] == 1.0
    assert all(row["tokens_per_s"] > 0 for row in rows.values())


def test_option_cost_benchmark_names_an_unknown_variant():
    r = runner.invoke(app, ["bench", "options", "--only", "+ wings"])
    assert r.exit_code == 2 and "unknown variant '+ wings'" in r.output and "+ sinks" in r.output
