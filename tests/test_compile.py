"""``train.compile``: the model compiles without graph breaks, and a compiled run trains."""

import pytest
import torch

from normsearch.config import ModelConfig
from normsearch.data import DataConfig
from normsearch.model import build_model
from normsearch.recipe import TrainConfig


@pytest.mark.parametrize("placement", ["pre_ln", "post_ln", "peri_ln", "hybridnorm"])
def test_the_model_compiles_without_graph_breaks(placement, one_thread):
    torch._dynamo.reset()
    model = build_model(placement, ModelConfig(n_layers=2, d_model=32, n_heads=2, context_length=16))
    x = torch.randint(0, 256, (2, 16))
    explained = torch._dynamo.explain(model)(x)
    assert explained.graph_break_count == 0, explained.break_reasons
    assert explained.graph_count == 1


def test_compile_auto_is_off_on_cpu_and_a_compiled_run_matches_eager(one_thread):
    from normsearch.train import _compiled, train_run

    assert _compiled(TrainConfig(), "cpu") is False and _compiled(TrainConfig(), "gpu") is True
    assert _compiled(TrainConfig(compile=True), "cpu") is True
    cfg = ModelConfig(n_layers=1, d_model=32, n_heads=2, context_length=16)
    runs = [train_run("pre_ln", cfg, DataConfig(eval_windows=4),
                      TrainConfig(steps=3, batch_size=2, warmup=0, eval_every=3, compile=c, threads=1),
                      seed=0, lr=3e-3) for c in (False, True)]
    assert [r.compiled for r in runs] == [False, True]
    assert runs[1].value == pytest.approx(runs[0].value, rel=1e-3)
