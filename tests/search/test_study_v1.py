"""A study written before the restructuring (tests/fixtures/study_v1, made at commit 99392a7) still
opens, ranks to the same numbers, reports, resumes and exports."""

import json
import shutil
from pathlib import Path

import pytest

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "study_v1"


@pytest.fixture
def old_study(tmp_path, monkeypatch):
    shutil.copytree(FIXTURE, tmp_path / "v1")
    monkeypatch.chdir(tmp_path / "v1")  # the recipe's results_dir is relative: the fixture is relocatable
    return tmp_path / "v1"


def test_it_reads_the_runs_it_had(old_study, one_thread):
    """The same rows and the same runs as before: every number the old ranking was built from is read
    back unchanged (the statistics over them are issue 15's, so the verdicts differ by design)."""
    from normsearch.ranking import rank

    expected = {r["arch_id"]: r for r in json.loads((old_study / "expected_ranking.json").read_text())["rows"]}
    ranking = rank("results/v1")
    assert {r.arch_id for r in ranking.rows} == set(expected)
    for row in ranking.rows:
        old = expected[row.arch_id]
        assert (row.label, row.is_baseline, row.sites, row.state, row.trials) == \
               (old["label"], old["is_baseline"], old["sites"], old["state"], old["trials"])
        assert (row.n_runs, row.n_diverged, row.n_params) == (old["n_runs"], old["n_diverged"], old["n_params"])
        for key in ("lr_sensitivity", "tokens_per_s", "wall_time"):
            assert getattr(row, key) == pytest.approx(old[key], rel=1e-12), key
        at_best = {int(r.seed): r.loss for r in row.runs if r.lr == old["best_lr"]}
        assert {str(k): v for k, v in at_best.items()} == pytest.approx(old["seeds"], rel=1e-12)
        # ten steps of a tiny model end far above the unigram loss: every run counts as stalled
        assert row.n_failed == row.n_runs and row.score_mean is None


def test_status_reads_as_before(old_study):
    from normsearch.search import open_results, status_text

    assert status_text(open_results("results/v1")) + "\n" == (old_study / "expected_status.txt").read_text()


def test_report_writes_into_its_results_folder(old_study):
    from normsearch.report import write_report

    write_report("results/v1", Path("results/v1"))
    text = (old_study / "results/v1/report.md").read_text()
    assert "# normsearch report: `v1`" in text and "f5852304fd7f" in text


def test_it_resumes_and_grows(old_study, one_thread):
    from normsearch.recipe import load_recipe
    from normsearch.search import census, run_study

    before = {p.name for p in (old_study / "results/v1/runs").iterdir()}
    handle = run_study(load_recipe("recipe_file.yaml"))  # finished: nothing to train
    assert {p.name for p in (old_study / "results/v1/runs").iterdir()} == before
    handle = run_study(load_recipe("recipe_file.yaml", ["--search.trials", "3"]))
    c = census(handle.study)
    assert c.searched_done == 3 and len(c.done) == 5
    assert len({p.name for p in (old_study / "results/v1/runs").iterdir()} - before) == 1


def test_it_exports_the_same_network(old_study):
    import torch

    from normsearch import Placement, export, load_exported
    from normsearch.checkpoint import load_state_dict
    from normsearch.model import build_model
    from normsearch.recipe import load_recipe

    out = export("results/v1", old_study / "exp", baseline="pre_ln")
    model = load_exported(out)
    arch = next(r for r in json.loads((old_study / "expected_ranking.json").read_text())["rows"]
                if r["label"] == "pre_ln")
    ref = build_model(Placement.from_dict(arch["placement"]), load_recipe("recipe_file.yaml").model)
    ref.load_state_dict(load_state_dict(old_study / "results/v1/checkpoints" / f"{arch['arch_id']}.safetensors"),
                        strict=True)
    ref.eval()
    x = torch.randint(0, 256, (2, 16))
    with torch.no_grad():
        assert torch.allclose(model(x), ref(x), atol=1e-6)
