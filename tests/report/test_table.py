"""normsearch.report (its __init__): the ranked table for the terminal, from a handle as from a study."""

from rich.console import Console
from test_ranking import build_study

from normsearch.report import SiteEffect, ranking_json, ranking_table, site_effects, write_report
from normsearch.search import StudyHandle, recipe_of


def test_handle_and_terminal_table(tmp_path):
    study = build_study(running=True)
    handle = StudyHandle(recipe_of(study), study, "memory", tmp_path)
    ranking = write_report(handle, tmp_path, against=["pre_ln"])
    assert ranking.against == ["pre_ln"] and ranking.row("t3").comparison("pre_ln").verdict == "better"
    console = Console(record=True, width=250)
    console.print(ranking_table(ranking))
    text = console.export_text()
    assert "not finished (1 running, 0 waiting)" in text and "triton (Triton 3.2.0)" in text and "pruned" in text
    assert "ai ao fi | fin  [rmsnorm]" in text  # not eaten as rich markup
    assert ranking_json(ranking)["rows"][0]["label"] == "t3"
    assert isinstance(site_effects(ranking)[0], SiteEffect)
