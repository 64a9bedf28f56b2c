"""Weights files: safetensors with tied embeddings stored once, strict loading, loud failures."""

import importlib.util
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from normsearch.checkpoint import ARCH_ID_KEY, TIED_KEY, load_state_dict, read_metadata, save_weights
from normsearch.config import ModelConfig
from normsearch.errors import NormsearchError
from normsearch.export import standalone
from normsearch.model import build_model

CFG = ModelConfig(vocab_size=32, n_layers=4, d_model=24, n_heads=2, context_length=8, tie_embeddings=True)


pytestmark = pytest.mark.usefixtures("one_thread")


def stored_names(path):
    with safe_open(str(path), framework="pt") as f:
        return set(f.keys())


def logits(model, seed=1):
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, CFG.vocab_size, (2, CFG.context_length), generator=g)
    with torch.no_grad():
        return model.eval()(idx)


def test_tied_embeddings_are_stored_once_and_retied(tmp_path):
    torch.manual_seed(0)
    model = build_model("peri_ln", CFG)
    path = save_weights(model, tmp_path / "w.safetensors")
    names = stored_names(path)
    assert "wte.weight" in names and "lm_head.weight" not in names
    meta = read_metadata(path)
    assert meta[ARCH_ID_KEY] == model.arch_id
    assert TIED_KEY in meta

    sd = load_state_dict(path)
    assert sd["lm_head.weight"] is sd["wte.weight"]
    assert set(sd) == set(model.state_dict())
    again = build_model("peri_ln", CFG)
    again.load_state_dict(sd, strict=True)
    assert again.lm_head.weight is again.wte.weight  # still tied after loading
    torch.testing.assert_close(logits(again), logits(model), rtol=0, atol=0)


def test_untied_head_is_stored_separately(tmp_path):
    cfg = ModelConfig(vocab_size=32, n_layers=2, d_model=24, n_heads=2, context_length=8, tie_embeddings=False)
    model = build_model("pre_ln", cfg)
    path = save_weights(model.state_dict(), tmp_path / "w.safetensors")
    assert {"wte.weight", "lm_head.weight"} <= stored_names(path)
    assert TIED_KEY not in read_metadata(path)
    sd = load_state_dict(path)
    assert sd["lm_head.weight"] is not sd["wte.weight"]
    build_model("pre_ln", cfg).load_state_dict(sd, strict=True)


def test_dtypes_views_and_overlaps_survive(tmp_path):
    base = torch.arange(12, dtype=torch.float64).reshape(3, 4)
    sd = {
        "a": base,
        "a_t": base.t(),  # shares memory with a, but is not a: stored as a copy
        "half": torch.randn(5).to(torch.float16),
        "bf": torch.randn(2, 3).to(torch.bfloat16),
        "scalar": torch.tensor(0.5),
        "same": base,  # the very same tensor under a second name: tied
    }
    path = save_weights(sd, tmp_path / "sub" / "w.safetensors")  # parent folder is created
    got = load_state_dict(path)
    assert set(got) == set(sd)
    for k, v in sd.items():
        assert got[k].dtype == v.dtype and got[k].shape == v.shape
        torch.testing.assert_close(got[k], v, rtol=0, atol=0)
    assert got["same"] is got["a"]
    assert "a_t" in stored_names(path) and "same" not in stored_names(path)


def test_metadata_is_kept(tmp_path):
    path = save_weights({"x": torch.ones(2)}, tmp_path / "w.safetensors", metadata={"trial": "7"})
    assert read_metadata(path)["trial"] == "7"
    with pytest.raises(NormsearchError, match="strings to strings"):
        save_weights({"x": torch.ones(2)}, tmp_path / "v.safetensors", metadata={"trial": 7})


def one_line(excinfo):
    msg = str(excinfo.value)
    assert "\n" not in msg
    return msg


def test_missing_and_corrupt_files_fail_with_one_line(tmp_path):
    with pytest.raises(NormsearchError) as e:
        load_state_dict(tmp_path / "nope.safetensors")
    assert "no such file" in one_line(e)
    with pytest.raises(NormsearchError) as e:
        load_state_dict(tmp_path)
    assert "folder" in one_line(e)

    good = save_weights(build_model("pre_ln", CFG), tmp_path / "good.safetensors")
    data = good.read_bytes()
    cases = {
        "garbage": b"this is not a safetensors file at all",
        "empty": b"",
        "truncated": data[: len(data) // 2],
        "bad header": (100).to_bytes(8, "little") + b"{not json" + b" " * 200,
    }
    for name, raw in cases.items():
        bad = tmp_path / f"{name}.safetensors"
        bad.write_bytes(raw)
        with pytest.raises(NormsearchError) as e:
            load_state_dict(bad)
        assert "not a readable safetensors file" in one_line(e), name


def test_bad_tied_metadata_is_reported(tmp_path):
    path = save_weights({"x": torch.ones(2)}, tmp_path / "w.safetensors", metadata={TIED_KEY: '{"y": "z"}'})
    with pytest.raises(NormsearchError, match="tied to 'z'"):
        load_state_dict(path)


def test_only_tensors_are_saved(tmp_path):
    with pytest.raises(NormsearchError, match="not a tensor"):
        save_weights({"x": 3}, tmp_path / "w.safetensors")
    with pytest.raises(NormsearchError, match="expected a torch module or a state dict"):
        save_weights([torch.ones(1)], tmp_path / "w.safetensors")
    assert not list(tmp_path.iterdir())  # nothing half-written


def test_checkpoint_of_one_placement_does_not_load_into_another(tmp_path):
    path = save_weights(build_model("peri_ln", CFG), tmp_path / "peri.safetensors")
    sd = load_state_dict(path)
    with pytest.raises(RuntimeError, match="Unexpected key"):
        build_model("pre_ln", CFG).load_state_dict(sd, strict=True)
    with pytest.raises(RuntimeError, match="Missing key"):
        build_model("hybridnorm", CFG).load_state_dict(sd, strict=True)


def test_the_exported_pure_torch_reader_reads_what_save_weights_writes(tmp_path):
    """model.py's own reader (torch.frombuffer on the raw file) against safetensors itself."""
    (tmp_path / "model.py").write_text(Path(standalone.__file__).read_text())  # an export's model.py
    spec = importlib.util.spec_from_file_location("exported_reader_check", tmp_path / "model.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    sd = {
        "f64": torch.randn(3, 4, dtype=torch.float64),
        "f32": torch.randn(7),
        "f16": torch.randn(2, 2).half(),
        "bf16": torch.randn(5, 1).bfloat16(),
        "scalar": torch.tensor(0.25),
    }
    path = save_weights(sd, tmp_path / "w.safetensors", metadata={"note": "x"})
    got = mod.load(path)
    assert set(got) == set(sd)
    for k, v in sd.items():
        assert got[k].dtype == v.dtype and got[k].shape == v.shape
        torch.testing.assert_close(got[k], v, rtol=0, atol=0)
