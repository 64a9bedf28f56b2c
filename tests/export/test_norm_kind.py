"""A new norm kind is one registered class: registered here, inside the test, it trains in a study,
is ranked, exports, and the export loads with torch alone giving normsearch's logits."""

import json
import subprocess
import sys

import pytest
import torch

from normsearch.norms import NORM_KINDS, NormKind, register_norm

KIND = "scalenorm_kind_test"

pytestmark = pytest.mark.usefixtures("one_thread")


class ScaleNorm(NormKind):
    """g * sqrt(d) * x / ||x||, one scalar gain (Nguyen & Salazar 2019)."""

    name = "scalenorm_kind_test"  # literal: the class is copied into norms.py as it is written
    options = {"eps": 1e-5}

    @staticmethod
    def parameters(o):
        return {"weight": ("scalar", 1.0)}

    @staticmethod
    def forward(x, p, o):
        return p["weight"] * x * x.shape[-1] ** 0.5 / x.norm(dim=-1, keepdim=True).clamp_min(o["eps"])


@pytest.fixture(scope="module")
def scalenorm():
    register_norm(ScaleNorm)
    try:
        yield KIND
    finally:
        NORM_KINDS.pop(KIND)


RECIPE = """
name: kind
model: {{n_layers: 2, d_model: 32, n_heads: 2, context_length: 32}}
data: {{eval_windows: 4}}
train: {{steps: 40, batch_size: 8, warmup: 2, eval_every: 20, lr: [1.0e-2], seeds: [0, 1], threads: 1}}  # runs that learn
space:
  kind: {kind}
  sites: {{attn_in: [none, norm], ffn_in: [norm], final: [norm]}}
search: {{sampler: random, trials: 1, baselines: [pre_ln], norm_kind: {kind}, heartbeat: 1, grace: 5}}
results_dir: {results}
"""

LOAD = r"""
import importlib.util, json, sys
sys.modules["normsearch"] = None
import torch
folder = sys.argv[1]
spec = importlib.util.spec_from_file_location("exported", f"{folder}/model.py")
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
model = mod.from_pretrained(folder)
idx = torch.tensor(json.loads(sys.argv[2]))
with torch.no_grad():
    print(json.dumps({"f32": model(idx).tolist(), "f64": model.double()(idx).tolist()}))
"""


def test_a_kind_registered_in_a_test_trains_ranks_and_exports(scalenorm, tmp_path):
    from normsearch.export import export, load_exported
    from normsearch.ranking import rank
    from normsearch.recipe import load_recipe
    from normsearch.search import open_results, run_study

    recipe = tmp_path / "kind.yaml"
    recipe.write_text(RECIPE.format(kind=KIND, results=tmp_path / "results"))
    handle = run_study(load_recipe(recipe))
    ranking = rank(open_results(handle.folder))
    rows = [r for r in ranking.rows if r.rank is not None]
    assert rows and all(KIND in r.sites for r in rows), [r.sites for r in ranking.rows]
    pre = next(r for r in rows if r.label == "pre_ln")
    assert pre.n_runs == 2 and all(r.curve for r in pre.runs)  # trained and evaluated (a tiny run may stall)

    out = export(handle.folder, tmp_path / "export", baseline="pre_ln")
    assert f"class {ScaleNorm.__name__}(NormKind)" in (out / "norms.py").read_text()
    model = load_exported(out)
    assert model.arch_id == pre.arch_id
    assert model.blocks[0].norms.attn_in.weight.shape == ()
    idx = torch.randint(0, model.config.vocab_size, (2, 16), generator=torch.Generator().manual_seed(0))
    res = subprocess.run([sys.executable, "-c", LOAD, str(out), json.dumps(idx.tolist())], capture_output=True,
                         text=True, timeout=300, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    got = json.loads(res.stdout)
    with torch.no_grad():
        torch.testing.assert_close(torch.tensor(got["f32"]), model(idx), rtol=0, atol=1e-6)
        torch.testing.assert_close(torch.tensor(got["f64"], dtype=torch.float64), model.double()(idx),
                                   rtol=0, atol=1e-12)
