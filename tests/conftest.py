import os

import pytest

# Quiet, deterministic CPU runs in tests.
os.environ.setdefault("NORMSEARCH_QUIET", "1")


@pytest.fixture
def tiny_config():
    from normsearch.config import ModelConfig

    return ModelConfig(vocab_size=64, n_layers=4, d_model=32, n_heads=4, context_length=16)
