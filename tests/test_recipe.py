"""Recipes on their own: overrides parsed and applied, the round trip through the study's stored
form, and errors that name the key."""

from pathlib import Path

import pytest

from normsearch.errors import NormsearchError
from normsearch.recipe import _apply_overrides, load_recipe, parse_overrides, recipe_from_dict

RECIPES = Path(__file__).resolve().parents[1] / "recipes"


def test_overrides_parse_both_forms_and_read_values_as_yaml():
    assert parse_overrides(["--train.lr", "[1e-3,3e-3]", "--search.trials=3", "--name", "x", "--storage="]) == {
        "train.lr": [1e-3, 3e-3], "search.trials": 3, "name": "x", "storage": ""}
    assert parse_overrides(["--model.tie_embeddings", "true", "--search.pruner", "null"]) == {
        "model.tie_embeddings": True, "search.pruner": None}


@pytest.mark.parametrize("args,match", [
    (["train.lr", "1"], "unexpected argument"),
    (["--train.lr"], "needs a value"),
    (["--trials", "3"], "unknown option --trials"),
])
def test_bad_override_syntax(args, match):
    with pytest.raises(NormsearchError, match=match):
        parse_overrides(args)


def test_overrides_apply_without_touching_the_original():
    raw = {"name": "a", "train": {"steps": 10, "lr": [1e-3]}}
    out = _apply_overrides(raw, {"train.steps": 20, "search.trials": 2, "name": "b"})
    assert out == {"name": "b", "train": {"steps": 20, "lr": [1e-3]}, "search": {"trials": 2}}
    assert raw == {"name": "a", "train": {"steps": 10, "lr": [1e-3]}}


@pytest.mark.parametrize("overrides,match", [
    ({"trian.steps": 3}, "trian"),
    ({"name.x": 3}, "name is a value, not a section"),
])
def test_override_errors_name_the_override(overrides, match):
    with pytest.raises(NormsearchError, match=match):
        _apply_overrides({"name": "a"}, overrides)


def test_a_space_file_cannot_take_a_key_override():
    with pytest.raises(NormsearchError, match="the space is a file"):
        _apply_overrides({"space": "quick.yaml"}, {"space.kind": "rmsnorm"})


@pytest.mark.parametrize("path", sorted(RECIPES.rglob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_recipe_round_trips_through_its_stored_form(path):
    r = load_recipe(path)
    again = recipe_from_dict(r.raw)
    assert again.raw == r.raw and again.to_dict() == r.to_dict()
    assert again.train.runs == r.train.runs and again.search == r.search


def test_unknown_key_names_file_line_and_known_keys(tmp_path):
    f = tmp_path / "r.yaml"
    f.write_text("name: r\ntrain:\n  stpes: 3\n")
    with pytest.raises(NormsearchError) as e:
        load_recipe(f)
    assert "r.yaml:3" in str(e.value) and "stpes" in str(e.value) and "steps" in str(e.value)
