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
results_dir: {results}
"""


def write_tiny_recipe(folder, name="tiny", steps=10, trials=3, sampler="tpe", batch_size=4, lr="3.0e-3"):
    """A recipe small enough to train a whole study in seconds on a CPU. At the defaults (10 steps of 4
    sequences) every run ends near the unigram loss, a stalled run: mechanics only. ``learning()`` gives
    the settings at which runs end below it (successful runs: chosen cells, kept weights, verdicts)."""
    path = folder / f"{name}.yaml"
    path.write_text(TINY_RECIPE.format(name=name, steps=steps, trials=trials, sampler=sampler, batch_size=batch_size,
                                       lr=lr, results=folder / "results"))
    return path


#: 40 steps of 8 sequences at lr 1e-2: a tiny run ends about 0.15 bits/byte below the unigram loss
LEARNING = {"steps": 40, "batch_size": 8, "lr": "1.0e-2"}
