"""Tiny recipes: whole studies that train in seconds on a CPU (imported by the tests)."""

TINY_RECIPE = """
name: {name}
model: {{n_layers: 2, d_model: 32, n_heads: 2, context_length: 32}}
data: {{eval_windows: 8}}
train: {{steps: {steps}, batch_size: 4, warmup: 2, eval_every: 5, lr: [3.0e-3], seeds: [0, 1], threads: 1}}
space:
  kind: rmsnorm
  sites: {{attn_in: [none, norm], attn_out: [none, norm], ffn_in: [none, norm], final: [norm]}}
search: {{sampler: {sampler}, trials: {trials}, baselines: [pre_ln, post_ln], heartbeat: 1, grace: 5, startup_trials: 2,
         jobs: 1}}
results_dir: {results}
"""


def write_tiny_recipe(folder, name="tiny", steps=10, trials=3, sampler="tpe"):
    """A recipe small enough to train a whole study in seconds on a CPU."""
    path = folder / f"{name}.yaml"
    path.write_text(TINY_RECIPE.format(name=name, steps=steps, trials=trials, sampler=sampler,
                                       results=folder / "results"))
    return path
