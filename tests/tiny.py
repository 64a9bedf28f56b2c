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
