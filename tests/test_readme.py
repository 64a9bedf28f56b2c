"""The README's first screen: its quickstart command runs (at a tiny size) as written."""

import re
import shlex
from pathlib import Path

from typer.testing import CliRunner

from normsearch.cli import app

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--model.n_layers", "2", "--model.d_model", "32", "--model.n_heads", "2", "--model.context_length", "32",
        "--data.eval_windows", "4", "--train.steps", "6", "--train.batch_size", "4", "--train.warmup", "1",
        "--train.eval_every", "3", "--train.seeds", "[0, 1]", "--search.trials", "1"]


def quickstart_command() -> list[str]:
    block = re.search(r"```bash\n(.*?)\n```", (ROOT / "README.md").read_text(), re.S).group(1)
    command = block.split("&&")[-1].strip()
    assert command.startswith("normsearch run "), command
    return shlex.split(command)[1:]


def test_the_quickstart_command_runs_as_written(tmp_path, monkeypatch, one_thread):
    args = quickstart_command()
    assert args[:2] == ["run", "recipes/quickstart.yaml"] and "--name" in args  # never the committed study
    monkeypatch.chdir(ROOT)
    committed = {p: p.stat().st_mtime for p in (ROOT / "results" / "quickstart").rglob("*") if p.is_file()}
    result = CliRunner().invoke(app, args + TINY + ["--results_dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    name = args[args.index("--name") + 1]
    assert (tmp_path / name / "report.md").is_file() and (tmp_path / name / "study.db").is_file()
    assert {p: p.stat().st_mtime for p in committed} == committed  # the committed results are untouched
