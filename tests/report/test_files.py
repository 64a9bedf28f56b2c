"""normsearch.report._files: report.md, ranking.csv, ranking.json and the plots, written only into a
folder the report owns."""

import csv
import json

import optuna
import pytest
from report_synth import PNGS, SCORE
from test_ranking import L, build_study

from normsearch.baselines import baseline
from normsearch.errors import NormsearchError
from normsearch.ranking import rank
from normsearch.report import CSV, check_out_dir, ranking_json, write_csv, write_report
from normsearch.spec import Placement


def test_every_file_is_written(report):
    ranking, out = report
    for name in ("report.md", "ranking.csv", "ranking.json", *[f"{p}.png" for p in PNGS]):
        assert (out / name).is_file(), name
    for p in PNGS:
        assert (out / f"{p}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [r.label for r in ranking.ranked][:3] == ["t3", "t5", "peri_ln"]


def test_csv_has_the_rows_and_columns(report):
    ranking, out = report
    with open(out / "ranking.csv") as f:
        rows = list(csv.DictReader(f))
    header = list(rows[0])
    assert header[:len(CSV)] == [c.key for c in CSV]
    for a in ("peri_ln", "hybridnorm"):
        for c in ("n", "diff", "ci_low", "ci_high", "p_value", "p_holm", "q_bh", "p_improve", "seeds_needed",
                  "verdict"):
            assert f"vs_{a}_{c}" in header
    assert [r["label"] for r in rows] == [r.label for r in ranking.rows]
    by = {r["label"]: r for r in rows}
    for label, score in SCORE.items():
        assert float(by[label]["score_mean"]) == pytest.approx(score)
    t3 = ranking.row("t3")
    assert float(by["t3"]["ci_low"]) == pytest.approx(t3.ci_low) and by["t3"]["rank"] == "1"
    assert by["t3"]["vs_peri_ln_verdict"] == "better" and by["t4"]["vs_peri_ln_verdict"] == "worse"
    assert by["t5"]["vs_peri_ln_verdict"] == "undecided" and float(by["t5"]["vs_peri_ln_margin_equivalent"]) > 0
    assert float(by["t3"]["vs_peri_ln_p_value"]) == pytest.approx(t3.comparison("peri_ln").p_value)
    assert float(by["t3"]["vs_peri_ln_p_holm"]) == pytest.approx(t3.comparison("peri_ln").p_holm)
    assert float(by["t3"]["p_best"]) == pytest.approx(t3.p_best) and by["t3"]["n_failed"] == "0"
    assert by["peri_ln"]["vs_peri_ln_verdict"] == "" and by["t8"]["rank"] == "" and by["t8"]["state"] == "PRUNED"
    assert by["hybridnorm"]["n_diverged"] == "1" and by["hybridnorm"]["best_lr"] == "0.001"
    assert by["t5"]["kernels"] == "triton" and by["t5"]["triton_version"] == "3.2.0"
    assert by["t3"]["trials"] == "3 7" and by["hybridnorm"]["is_baseline"] == "True"
    assert Placement.from_dict(json.loads(by["t3"]["placement"])).arch_id(L) == t3.arch_id


def test_json_rows_carry_the_required_fields(report):
    ranking, out = report

    def no_nan(x):
        raise AssertionError(f"non-standard JSON constant {x}")

    data = json.loads((out / "ranking.json").read_text(), parse_constant=no_nan)
    assert data["study"] == "synth" and data["objective"] == "mean" and data["finished"] is False
    assert data["running"][0]["number"] == 11 and data["failures"][0]["number"] == 9
    required = {"rank", "label", "is_baseline", "arch_id", "placement", "score_mean", "ci_low", "ci_high", "n_runs",
                "n_diverged", "best_lr", "comparisons", "sites", "lr_sensitivity", "n_params", "tokens_per_s",
                "kernels", "triton_version", "n_failed", "failure_rate", "failure_ci_low", "failure_ci_high", "p_best",
                "rank_low", "rank_high", "init", "variant", "lr_bracketed", "lr_vertex", "loss_optimal", "failure_free"}
    for row in data["rows"]:
        assert required <= set(row)
    by = {r["label"]: r for r in data["rows"]}
    assert by["t3"]["rank"] == 1 and by["t3"]["score_mean"] == pytest.approx(SCORE["t3"])
    c = by["t5"]["comparisons"][0]
    assert c["against"] == "peri_ln" and c["verdict"] == "undecided" and c["seeds_needed"] >= 4
    assert {"p_holm", "q_bh", "p_improve", "seeds_needed", "margin_equivalent", "diff_planned", "verdict"} <= set(c)
    assert {"variance_method", "seed_sd"} <= set(data["judgement"]) and "variance_p" not in data["judgement"]
    assert data["judgement"]["variance_method"] == ranking.judgement.variance_method
    search = data["judgement"]["search"]  # did the search help: the trend, the tests against uniform draws
    assert search["trend"]["verdict"] == "no trend" and search["trend"]["p"] > 0.05 and search["vs_control"] is None
    assert search["vs_startup"]["against"] == "startup" and search["front_loading"]["verdict"] in ("ahead", "behind", "even")
    assert by["hybridnorm"]["placement"] == baseline("hybridnorm").to_dict()
    assert set(data["plots"]) == set(PNGS)
    assert data["importance"]["evaluator"] == "PedAnovaImportanceEvaluator"
    assert {e["site"] for e in data["site_effects"]} >= {"attn_in", "ffn_out", "final"}
    assert data["cost"]["runs"] == 44


def test_empty_and_failed_only_studies_do_not_crash(tmp_path):
    study = optuna.create_study(storage=optuna.storages.InMemoryStorage(), study_name="empty")
    with pytest.raises(NormsearchError, match="not made by normsearch"):
        write_report(study, tmp_path / "not-ours")
    assert not (tmp_path / "not-ours").exists()
    study.set_user_attr("recipe", build_study().user_attrs["recipe"])
    ranking = write_report(study, tmp_path / "empty")
    assert ranking.rows == [] and "nothing to rank" in (tmp_path / "empty" / "report.md").read_text()
    json.loads((tmp_path / "empty" / "ranking.json").read_text())
    study.add_trial(optuna.trial.create_trial(state=optuna.trial.TrialState.FAIL,
                                              user_attrs={"label": "pre_ln", "failure": "dead worker: gone"}))
    write_report(study, tmp_path / "failed")
    assert "dead worker: gone" in (tmp_path / "failed" / "report.md").read_text()


def test_ranking_json_and_csv_agree_on_every_row(tmp_path):
    ranking = rank(build_study())
    data = ranking_json(ranking)
    assert data["plots"] == {} and data["site_effects"] == [] and data["unit"] == "bits/byte"
    write_csv(ranking, tmp_path / "r.csv")
    with open(tmp_path / "r.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["arch_id"] for r in rows] == [r["arch_id"] for r in data["rows"]]
    for line, row in zip(rows, data["rows"]):
        if row["score_mean"] is None:
            assert line["score_mean"] == ""
        else:
            assert float(line["score_mean"]) == row["score_mean"]  # repr: no digits lost


def test_the_report_writes_only_into_a_folder_it_owns(tmp_path):
    empty = tmp_path / "new" / "deeper"
    check_out_dir(empty)  # a folder to be made
    assert not empty.exists()  # the check makes nothing
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "thesis.tex").write_text("mine")
    with pytest.raises(NormsearchError, match=r"holds files that are not a normsearch report \(thesis.tex\)"):
        check_out_dir(theirs)
    check_out_dir(theirs, overwrite=True)
    afile = tmp_path / "afile"
    afile.write_text("")
    with pytest.raises(NormsearchError, match="a file, not a folder"):
        check_out_dir(afile, overwrite=True)
    with pytest.raises(NormsearchError, match="is a file, not a folder"):
        check_out_dir(afile / "out")
    results = tmp_path / "results"  # a study's results folder
    results.mkdir()
    for name in ("recipe.yaml", "study.db"):
        (results / name).write_text("")
    (results / "runs").mkdir()
    check_out_dir(results)


def test_a_second_report_replaces_its_own_plots_and_removes_stale_ones(tmp_path, report):
    _, first = report
    out = tmp_path / "again"
    out.mkdir()
    for f in first.iterdir():
        (out / f.name).write_bytes(f.read_bytes())
    check_out_dir(out)  # an earlier report, plots included: ours to replace
    (out / "notes.txt").write_text("mine")
    with pytest.raises(NormsearchError, match="notes.txt"):
        write_report(build_study(), out)
    (out / "notes.txt").unlink()
    write_report(build_study(only=("pre_ln", "peri_ln", "hybridnorm", "t3")), out)
    assert not (out / "importance.png").exists()  # not drawn this time: the earlier one is gone
    assert (out / "loss_curves.png").is_file()
    assert "importance" not in json.loads((out / "ranking.json").read_text())["plots"]


def test_report_plots_false_writes_the_report_without_drawing(tiny_study, tmp_path):
    """report.plots: false (a recipe's choice, kept with the study): report.md, the CSV and the JSON, no PNG."""
    from dataclasses import replace

    from normsearch.search import open_results

    handle = open_results(tiny_study)
    handle.recipe = replace(handle.recipe, report=replace(handle.recipe.report, plots=False))
    write_report(handle, tmp_path / "out")
    written = {p.name for p in (tmp_path / "out").iterdir()}
    assert {"report.md", "ranking.csv", "ranking.json"} <= written and not any(n.endswith(".png") for n in written)
    assert ".png" not in (tmp_path / "out" / "report.md").read_text()


def test_a_stage_reported_alone_does_not_take_its_studys_confirmation(monkeypatch, tmp_path):
    """`normsearch report STUDY --study-name S/ladder-2` opens the stage under the study's recipe; the stage has
    no confirmation of its own, and S/confirm (found by the recipe's name) is not it."""
    from types import SimpleNamespace

    from normsearch.report import _files
    from normsearch.search import StudyHandle
    import normsearch.stages

    asked = []
    monkeypatch.setattr(normsearch.stages, "confirm_handle", lambda h: asked.append(h) or None)
    recipe = SimpleNamespace(name="s")
    stage = StudyHandle(recipe, SimpleNamespace(study_name="s/ladder-2"), "sqlite://", tmp_path)
    assert _files._confirmation(stage, None, tmp_path, []) is None and asked == []
    study = StudyHandle(recipe, SimpleNamespace(study_name="s"), "sqlite://", tmp_path)
    assert _files._confirmation(study, None, tmp_path, []) is None and asked == [study]  # a study still looks
