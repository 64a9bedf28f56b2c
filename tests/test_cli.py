"""The command line, through Typer's CliRunner and, where start-up matters, a real process."""

import json
import subprocess
import sys

from typer.testing import CliRunner

from normsearch import __version__
from normsearch.cli import app

runner = CliRunner()


def test_help_imports_no_torch():
    code = (
        "import sys\n"
        "from normsearch.cli import app\n"
        "try:\n    app(['--help'])\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in ('torch', 'lightning', 'optuna', 'matplotlib') if m in sys.modules]\n"
        "print('HEAVY', heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "Usage" in out and "HEAVY []" in out


def test_version():
    r = runner.invoke(app, ["--version"])
    assert r.exit_code == 0 and r.output.strip() == f"normsearch {__version__}"


def test_baselines_lists_every_baseline_with_sites_and_source():
    r = runner.invoke(app, ["baselines"])
    assert r.exit_code == 0
    assert "peri_ln" in r.output and "ai ao fi fo | fin" in r.output and "2502.02732" in r.output
    r = runner.invoke(app, ["baselines", "--json", "--kind", "layernorm"])
    rows = json.loads(r.output)
    assert [row["name"] for row in rows][:3] == ["post_ln", "pre_ln", "peri_ln"]
    assert rows[1]["placement"]["block"]["attn_in"]["kind"] == "layernorm"


def test_show_a_baseline_and_a_spec_file(tmp_path):
    r = runner.invoke(app, ["show", "mix_ln", "--layers", "8"])
    assert r.exit_code == 0, r.output
    assert "layers 0-1:" in r.output and "layers 2-7:" in r.output
    assert "norm parameters: " in r.output and "arch_id" in r.output
    spec = tmp_path / "mine.yaml"
    spec.write_text("block: {attn_in: layernorm, q: {kind: rmsnorm, granularity: full}}\nfinal: layernorm\n")
    r = runner.invoke(app, ["show", str(spec)])
    assert r.exit_code == 0, r.output
    assert "q: rmsnorm/full" in r.output and "attn_in   layernorm" in r.output
    # 4 layers x (128 + 128 bias for layernorm attn_in + 128 for the full q norm) + final 256
    assert "norm parameters: 1,792" in r.output


def test_bad_input_is_one_line_and_exit_code_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("block: {attn_in: [unclosed\n")
    typo = tmp_path / "typo.yaml"
    typo.write_text("block:\n  atn_in: rmsnorm\n")
    for args, message in [
        (["show", "peri"], "unknown baseline 'peri'"),
        (["show", str(tmp_path / "missing.yaml")], "no such spec file"),
        (["show", str(bad)], "not valid YAML"),
        (["show", str(typo)], "typo.yaml:2: block: unknown site 'atn_in' (did you mean 'attn_in'?)"),
        (["baselines", "--kind", "batchnorm"], "unknown norm kind 'batchnorm'"),
    ]:
        r = runner.invoke(app, args)
        assert r.exit_code == 2, (args, r.output)
        lines = r.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], r.output
