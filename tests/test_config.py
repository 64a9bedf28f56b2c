"""Typed config sections: built from mappings, checked, and back to plain data."""

import pytest

from normsearch.config import ModelConfig, from_mapping, to_mapping
from normsearch.errors import NormsearchError
from normsearch.recipe import SearchConfig, TrainConfig


def test_model_config_round_trips_and_derives_its_widths():
    m = ModelConfig.from_dict({"n_layers": 2, "d_model": 64, "n_heads": 4})
    assert m.head_dim == 16 and m.ffn_dim > m.d_model
    assert ModelConfig.from_dict(m.to_dict()) == m


@pytest.mark.parametrize("bad,match", [
    ({"d_model": 30, "n_heads": 4}, "n_heads"),
    ({"n_layers": "four"}, "n_layers"),
    ({"widht": 3}, "widht"),
])
def test_bad_model_config(bad, match):
    with pytest.raises(NormsearchError, match=match):
        ModelConfig.from_dict(bad)


def test_sections_reject_unknown_keys_with_the_known_ones():
    with pytest.raises(NormsearchError) as e:
        from_mapping(TrainConfig, {"stpes": 3}, "train")
    assert "stpes" in str(e.value) and "steps" in str(e.value)


def test_train_config_runs_are_every_seed_at_every_lr():
    t = from_mapping(TrainConfig, {"lr": [1e-3, 3e-3], "seeds": [0, 1]}, "train")
    assert sorted(t.runs) == [(0, 1e-3, ""), (0, 3e-3, ""), (1, 1e-3, ""), (1, 3e-3, "")]
    assert from_mapping(TrainConfig, to_mapping(t), "train") == t
    g = from_mapping(TrainConfig, {"lr": [1e-3], "seeds": [0], "grid": {"init": ["gpt", "small"]},
                                   "lr_resolution": None}, "train")
    assert g.runs == [(0, 1e-3, "init-gpt"), (0, 1e-3, "init-small")]
    assert from_mapping(TrainConfig, to_mapping(g), "train") == g  # comes back typed from storage


def test_search_config_checks_names():
    with pytest.raises(NormsearchError, match="sampler"):
        from_mapping(SearchConfig, {"sampler": "annealing"}, "search")
    with pytest.raises(NormsearchError, match="pre_lm"):
        from_mapping(SearchConfig, {"baselines": ["pre_lm"]}, "search")


def test_model_init_takes_the_paper_inits_and_names_them_when_wrong():
    import re

    from normsearch.config import INITS

    for init in INITS:
        assert ModelConfig.from_dict({"init": init}).init == init
    with pytest.raises(NormsearchError, match=re.escape("model.init must be gpt | small | normal | truncnormal")):
        ModelConfig.from_dict({"init": "xavier"})
