"""A whole trial with ``train.kernels: triton``, run by the interpreter at a tiny size."""

import pytest

pytest.importorskip("triton", reason="Triton is not installed (pip install 'normsearch[triton]')")

from normsearch.config import ModelConfig  # noqa: E402
from normsearch.data import DataConfig  # noqa: E402
from normsearch.recipe import TrainConfig  # noqa: E402
from normsearch.train import train_run  # noqa: E402


def test_trial_end_to_end_with_triton_kernels():
    model = ModelConfig(n_layers=1, d_model=16, n_heads=2, context_length=8)
    data = DataConfig(eval_windows=2)

    def train(kernels):
        return TrainConfig(steps=3, batch_size=2, warmup=0, eval_every=3, kernels=kernels, threads=1)

    tri = train_run("peri_ln", model, data, train("triton"), seed=0, lr=3e-3)
    ref = train_run("peri_ln", model, data, train("torch"), seed=0, lr=3e-3)
    assert tri.kernels == "triton" and tri.triton_version and ref.kernels == "torch"
    assert tri.arch_id == ref.arch_id  # the kernel is not part of the architecture
    assert not tri.diverged and tri.steps == 3
    for a, b in zip(tri.train_loss, ref.train_loss):
        assert a[1] == pytest.approx(b[1], rel=1e-4)
    assert tri.value == pytest.approx(ref.value, rel=1e-4)
