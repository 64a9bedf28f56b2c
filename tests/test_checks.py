"""normsearch.checks: every problem ``run`` would refuse, found before a study exists and without
writing anything (what ``normsearch validate`` lists)."""

import os

import numpy as np
import pytest

from normsearch.checks import CHECKS, check_recipe, ensure_runnable
from normsearch.errors import NormsearchError
from normsearch.recipe import recipe_from_dict

SPACE = {"kind": "rmsnorm", "sites": {"attn_in": ["none", "norm"], "final": ["norm"]}}  # 2 architectures


@pytest.fixture
def make(tmp_path):
    """A recipe with a small text corpus in tmp_path; keyword arguments replace its sections."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the quick brown fox jumps over the lazy dog. " * 200)

    def build(**sections):
        raw = {"name": "chk", "model": {"n_layers": 2, "d_model": 32, "n_heads": 2, "context_length": 32},
               "data": {"corpus": "text", "path": str(corpus), "eval_windows": 2},
               "train": {"steps": 10, "warmup": 2, "batch_size": 4, "lr": [3e-3], "seeds": [0]},
               "space": SPACE, "search": {"trials": 1, "baselines": ["pre_ln"]},
               "results_dir": str(tmp_path / "results")}
        raw.update(sections)
        return recipe_from_dict({k: v for k, v in raw.items() if v is not None}, base=tmp_path)

    return build


def test_a_good_recipe_has_no_problem_and_nothing_is_written(make, tmp_path):
    before = set(os.listdir(tmp_path))
    recipe = make()
    assert check_recipe(recipe) == []
    ensure_runnable(recipe)  # does not raise
    assert set(os.listdir(tmp_path)) == before  # no results folder, no database
    assert not (tmp_path / "results").exists()


def test_a_data_path_that_is_not_there(make, tmp_path):
    problems = check_recipe(make(data={"corpus": "text", "path": str(tmp_path / "missing.txt")}))
    assert problems == [f"data.path {tmp_path / 'missing.txt'}: no such file or folder"]


def test_too_little_data_for_one_window(make, tmp_path):
    (tmp_path / "short.txt").write_text("hi")
    problems = check_recipe(make(data={"corpus": "text", "path": str(tmp_path / "short.txt")}))
    assert len(problems) == 1 and "fewer than one eval window of model.context_length 32 + 1" in problems[0]
    # a shorter context fits the same data: no problem left
    (tmp_path / "medium.txt").write_text("x" * 400)
    data = {"corpus": "text", "path": str(tmp_path / "medium.txt"), "val_fraction": 0.5}
    assert check_recipe(make(data=data)) == []
    model = {"n_layers": 2, "d_model": 32, "n_heads": 2, "context_length": 512}
    assert any("model.context_length 512" in p for p in check_recipe(make(data=data, model=model)))


def test_a_space_too_small_for_the_trials(make):
    problems = check_recipe(make(search={"trials": 5, "baselines": ["pre_ln"]}))
    assert problems == ["the space holds 2 distinct architectures at 2 layers, fewer than the 5 that search.trials 5 "
                        "needs; lower search.trials to 2 or widen the space"]
    assert check_recipe(make(search={"trials": 2, "baselines": ["pre_ln"]})) == []  # exactly enough


def test_baselines_inside_the_space_take_an_architecture_each(make):
    # pre_ln (norms at attn_in, ffn_in and final) is a point of this space: it takes one of its 2 architectures
    space = {"kind": "rmsnorm", "sites": {"attn_in": ["none", "norm"], "ffn_in": ["norm"], "final": ["norm"]}}
    problems = check_recipe(make(space=space, search={"trials": 2, "baselines": ["pre_ln"]}))
    assert len(problems) == 1 and "(1 of them baselines)" in problems[0] and "lower search.trials to 1" in problems[0]


def test_a_search_without_a_space(make):
    problems = check_recipe(make(space=None))
    assert problems == ["the recipe has no `space` but search.trials is 1; add a space (e.g. space: quick.yaml) or "
                        "set search.trials: 0"]
    assert check_recipe(make(space=None, search={"trials": 0, "baselines": ["pre_ln"]})) == []


def test_a_vocabulary_too_small_for_the_bytes(make):
    model = {"n_layers": 2, "d_model": 32, "n_heads": 2, "context_length": 32, "vocab_size": 100}
    assert check_recipe(make(model=model)) == ["the data has 256 token ids but model.vocab_size is 100; "
                                               "set model.vocab_size >= 256"]


def test_pre_tokenized_data_is_checked_against_its_largest_id(make, tmp_path):
    folder = tmp_path / "bin"
    folder.mkdir()
    np.arange(500, dtype=np.uint16).tofile(folder / "train.bin")
    np.array([7, 300, 2] * 40, dtype=np.uint16).tofile(folder / "val.bin")
    data = {"corpus": "bin", "path": str(folder), "bytes_per_token": 2.0, "eval_windows": 2}
    model = {"n_layers": 2, "d_model": 32, "n_heads": 2, "context_length": 32, "vocab_size": 256}
    assert check_recipe(make(data=data, model=model)) == ["the data has 500 token ids but model.vocab_size is 256; "
                                                          "set model.vocab_size >= 500"]
    assert check_recipe(make(data=data, model={**model, "vocab_size": 512})) == []


def test_storage_problems(make, tmp_path):
    assert check_recipe(make(storage="nonsense")) == [
        "storage 'nonsense' is neither a database URL (sqlite:///..., postgresql://...) nor a journal file "
        "(journal:PATH or *.journal)"]
    afile = tmp_path / "afile"
    afile.write_text("")
    problems = check_recipe(make(), storage=f"sqlite:///{afile}/study.db")  # --storage, not the recipe's
    assert problems == [f"storage sqlite:///{afile}/study.db: {afile} is a file, not a folder"]
    assert check_recipe(make(), storage="env:NORMSEARCH_TEST_SURELY_UNSET_VARIABLE")  # an unset variable


def test_a_results_folder_under_a_file(make, tmp_path):
    (tmp_path / "blocker").write_text("")
    problems = check_recipe(make(results_dir=str(tmp_path / "blocker" / "results")))
    # the default SQLite database lives in the results folder: both checks say so, each once
    assert problems and all("blocker is a file, not a folder" in p for p in problems)
    assert any(p.startswith("results folder") for p in problems)
    assert len(problems) == len(set(problems))


def test_a_token_cache_under_a_file(make, tmp_path):
    (tmp_path / "cachefile").write_text("")
    data = {"corpus": "text", "path": str(tmp_path / "corpus.txt"), "cache_dir": str(tmp_path / "cachefile" / "c")}
    assert check_recipe(make(data=data)) == [f"data.cache_dir {tmp_path / 'cachefile' / 'c'}: "
                                             f"{tmp_path / 'cachefile'} is a file, not a folder"]


def test_only_runs_the_named_checks_and_every_problem_is_listed(make, tmp_path):
    recipe = make(space=None, storage="nonsense", data={"corpus": "text", "path": str(tmp_path / "missing.txt")})
    every = check_recipe(recipe)
    assert len(every) == 3
    assert every[0].startswith("the recipe has no `space`")  # in the order of CHECKS
    assert check_recipe(recipe, only=("data", "vocabulary", "cache")) == [
        f"data.path {tmp_path / 'missing.txt'}: no such file or folder"]
    assert check_recipe(recipe, only=()) == []
    with pytest.raises(NormsearchError) as e:
        ensure_runnable(recipe)
    assert str(e.value) == every[0] + " (and 2 more: normsearch validate lists them)"
    with pytest.raises(NormsearchError) as e:
        ensure_runnable(recipe, only=("search",))
    assert str(e.value) == every[0]
    assert set(CHECKS) == {"search", "space", "storage", "results", "cache", "data", "vocabulary"}


def test_built_tokens_give_exact_counts(make):
    class Tokens:  # what the data module returns once built: exact counts and the vocabulary
        train, val, vocab_size = np.zeros(100), np.zeros(10), 50

    problems = check_recipe(make(), tokens=Tokens())
    assert problems == ["the validation split has 10 tokens, fewer than one eval window of model.context_length 32 "
                        "+ 1; use more data, a larger data.val_fraction or a shorter context"]
