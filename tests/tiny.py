"""Tiny recipes: whole studies that train in seconds on a CPU (imported by the tests)."""

TINY_RECIPE = """
name: {name}
model: {{n_layers: 2, d_model: 32, n_heads: 2, context_length: 32}}
data: {{eval_windows: 8}}
train: {{steps: {steps}, batch_size: {batch_size}, warmup: 2, eval_every: 5, lr: [{lr}], seeds: [0, 1], threads: 1}}
space:
  kind: rmsnorm
  sites: {{attn_in: [none, norm], attn_out: [none, norm], ffn_in: [none, norm], final: [norm]}}
search: {{sampler: {sampler}, trials: {trials}, baselines: [pre_ln, post_ln], heartbeat: 1, grace: 5, startup_trials: 2,
         jobs: 1}}
report: {{plots: {plots}}}
results_dir: {results}
"""


def write_tiny_recipe(folder, name="tiny", steps=10, trials=3, sampler="tpe", batch_size=4, lr="3.0e-3",
                      plots=False):
    """A recipe small enough to train a whole study in seconds on a CPU. At the defaults (10 steps of 4
    sequences) every run ends near the unigram loss, a stalled run: mechanics only. ``learning()`` gives
    the settings at which runs end below it (successful runs: chosen cells, kept weights, verdicts).
    ``plots``: draw the report's plots (off: about 8 s a report; tests/report checks the drawing)."""
    path = folder / f"{name}.yaml"
    path.write_text(TINY_RECIPE.format(name=name, steps=steps, trials=trials, sampler=sampler, batch_size=batch_size,
                                       lr=lr, results=folder / "results", plots=str(plots).lower()))
    return path


#: 40 steps of 8 sequences at lr 1e-2: a tiny run ends about 0.15 bits/byte below the unigram loss
LEARNING = {"steps": 40, "batch_size": 8, "lr": "1.0e-2"}


def skip_plots(mp):
    """Leave a report's plots out (matplotlib, about 0.6 s a figure): tests/report draws and checks them."""
    from normsearch.report import _plots

    mp.setattr(_plots, "all_figures", lambda *a, **k: {})


def learned_study(folder, name):
    """A finished tiny study whose runs learn (one seed, one searched placement, no plots): what a stage
    command (robustness, ablate) stands on. Returns its results folder."""
    import pytest
    from typer.testing import CliRunner

    from normsearch.cli import app

    recipe = write_tiny_recipe(folder, name, trials=1, **LEARNING)
    with pytest.MonkeyPatch.context() as mp:
        skip_plots(mp)
        result = CliRunner().invoke(app, ["run", str(recipe), "--train.seeds", "[0]"])
    assert result.exit_code == 0, result.output
    return folder / "results" / name


def killed_then_resumed(args, runs_of, at_least=3, timeout=240):
    """Start the command ``args`` (``normsearch`` arguments) in a session of its own, ``kill -9`` its process
    group once ``runs_of()`` (run file -> mtime) has ``at_least`` files, then run the same command again in
    this process (plots left out): it must finish, and no run finished before the kill is trained again.
    Returns the run files after the resume."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    import pytest
    from typer.testing import CliRunner

    from normsearch.cli import app

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(root)}
    p = subprocess.Popen([sys.executable, "-m", "normsearch", *map(str, args)], cwd=root, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.time() + timeout
    while time.time() < deadline and len(runs_of()) < at_least:
        time.sleep(0.2)
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    before = runs_of()
    assert before, "no run finished before the kill"
    with pytest.MonkeyPatch.context() as mp:
        skip_plots(mp)
        result = CliRunner().invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    after = runs_of()
    assert all(after[q] == m for q, m in before.items()), "a finished run was trained again"
    return after
