"""Export folders written before the export package (format 1: a model.py generated per placement, no
config.json) still load; and the public names of export keep working."""

import importlib.util
from pathlib import Path

import pytest
import torch

from normsearch.export import load_exported

V1 = Path(__file__).resolve().parents[1] / "fixtures" / "export_v1"
FOLDERS = sorted(p.name for p in V1.iterdir() if p.is_dir())

pytestmark = pytest.mark.usefixtures("one_thread")


def test_there_are_v1_folders():
    assert len(FOLDERS) == 4 and not any((V1 / f / "config.json").exists() for f in FOLDERS)


@pytest.mark.parametrize("name", FOLDERS)
def test_a_v1_export_loads_and_gives_the_logits_it_was_written_with(name):
    ref = torch.load(V1 / "reference.pt")
    model = load_exported(V1 / name)
    with torch.no_grad():
        torch.testing.assert_close(model(ref["idx"]), ref[f"{name}.logits"], rtol=0, atol=1e-6)
    # and its own generated model.py agrees
    spec = importlib.util.spec_from_file_location(f"v1_{name.replace('-', '_')}", V1 / name / "model.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with torch.no_grad():
        torch.testing.assert_close(mod.from_pretrained(V1 / name)(ref["idx"]), ref[f"{name}.logits"],
                                   rtol=0, atol=1e-6)


def test_normsearch_export_is_the_function_however_it_was_imported(tmp_path):
    import normsearch
    import normsearch.export as package  # importing the package sets normsearch.export to it

    assert normsearch.export is package
    assert callable(normsearch.export) and callable(normsearch.load_exported)
    with pytest.raises(normsearch.NormsearchError, match="exactly one of --rank K"):
        normsearch.export(tmp_path, tmp_path / "out")  # the package calls export()
    assert package.export.__module__ == "normsearch.export._select"


def test_readme_shows_a_dash_for_a_missing_number(tmp_path):
    from normsearch.config import ModelConfig
    from normsearch.export import export_architecture

    cfg = ModelConfig(vocab_size=32, n_layers=2, d_model=16, n_heads=2, context_length=8)
    summary = {"score_mean": 1.25, "ci_low": None, "ci_high": None, "best_lr": None,
               "comparisons": [{"against": "pre_ln", "diff": None, "ci_low": None, "ci_high": None,
                                "p_value": None}]}
    text = (export_architecture("pre_ln", cfg, tmp_path / "e", summary=summary) / "README.md").read_text()
    assert "None" not in text
    assert "- best_lr: -" in text and "| pre_ln | - | - | - | - |" in text
