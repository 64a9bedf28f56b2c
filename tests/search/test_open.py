"""Opening studies: a study that never finished a run takes a new recipe; a new study does not write
over another recipe's results; looking a study up writes nothing; the report writes only into folders
it owns."""

import pytest
from typer.testing import CliRunner

from normsearch.cli import app
from normsearch.errors import NormsearchError
from normsearch.recipe import load_recipe
from normsearch.search import open_results, open_study
from tiny import write_tiny_recipe


def snapshot(folder):
    return {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_a_study_with_no_finished_run_takes_the_new_recipe(tmp_path):
    path = write_tiny_recipe(tmp_path, name="fresh")
    handle = open_study(load_recipe(path))  # created, nothing finished (a first run that failed, say)
    assert handle.study.user_attrs["recipe"]["train"]["steps"] == 10
    again = open_study(load_recipe(path, ["--train.steps", "12"]))
    assert again.study.user_attrs["recipe"]["train"]["steps"] == 12
    assert "steps: 12" in (tmp_path / "results" / "fresh" / "recipe.yaml").read_text()


def test_a_study_with_results_refuses_an_incomparable_recipe(tiny_study):
    recipe = load_recipe(tiny_study / "recipe.yaml", ["--train.steps", "99", "--results_dir",
                                                      str(tiny_study.parent)])
    with pytest.raises(NormsearchError, match="was run with another recipe .*train.steps"):
        open_study(recipe)


def test_a_new_study_does_not_write_over_another_recipes_results(tmp_path):
    path = write_tiny_recipe(tmp_path, name="kept")
    folder = tmp_path / "results" / "kept"
    open_study(load_recipe(path))
    (folder / "study.db").unlink()  # committed results without their database, as in a fresh clone
    (folder / "report.md").write_text("# a committed report\n")
    before = snapshot(folder)
    with pytest.raises(NormsearchError, match="holds the results of another run .*--name NEW"):
        open_study(load_recipe(path, ["--train.steps", "7"]))
    assert snapshot(folder) == before and not (folder / "study.db").exists()
    open_study(load_recipe(path))  # the same recipe may take the folder back


def test_looking_for_a_study_creates_no_database(tmp_path):
    path = write_tiny_recipe(tmp_path, name="never")
    with pytest.raises(NormsearchError):
        open_results(path)
    with pytest.raises(NormsearchError):
        open_results(None, f"sqlite:///{tmp_path / 'typo' / 'study.db'}", "never")
    assert not (tmp_path / "results").exists() and not (tmp_path / "typo").exists()


def test_report_out_writes_only_into_a_folder_it_owns(tiny_study, tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "loss_curves.png").write_bytes(b"my own picture")
    result = CliRunner().invoke(app, ["report", str(tiny_study), "--out", str(mine)])
    assert result.exit_code == 2 and "not a normsearch report" in result.output
    assert (mine / "loss_curves.png").read_bytes() == b"my own picture" and len(list(mine.iterdir())) == 1
    result = CliRunner().invoke(app, ["report", str(tiny_study), "--out", str(tmp_path / "new")])
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(app, ["report", str(tiny_study), "--out", str(tmp_path / "new")])
    assert result.exit_code == 0, result.output  # an earlier report of its own: rewritten
    result = CliRunner().invoke(app, ["report", str(tiny_study), "--out", str(mine), "--overwrite"])
    assert result.exit_code == 0 and (mine / "loss_curves.png").read_bytes()[:4] == b"\x89PNG"
