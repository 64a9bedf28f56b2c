"""The README a user reads and the pages under docs/: their links resolve, the README's command table
names every option of every command (and none that does not exist), and the short site names of the
tables have a legend (in the README, in docs/ and under `normsearch baselines`)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from normsearch.cli import app
from normsearch.spec import SITE_ABBREV

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# The commands whose options are a benchmark script's (argparse): `normsearch bench NAME -- --help`.
FORWARDED = {"bench"}


def leaf_commands(group, prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], object]:
    """Every command a user can run, by the words that name it (`("bench", "trial")`)."""
    out = {}
    for name, command in sorted(group.commands.items()):
        if getattr(command, "hidden", False):
            continue
        if hasattr(command, "commands"):  # a group (typer ships its own click: no isinstance here)
            out.update(leaf_commands(command, prefix + (name,)))
        else:
            out[prefix + (name,)] = command
    return out


CLICK = leaf_commands(typer.main.get_command(app))
COMMANDS = list(CLICK)


def test_every_command_is_checked():
    names = {" ".join(c) for c in COMMANDS}
    assert {"run", "confirm", "ladder", "validate", "train", "status", "report", "export", "show", "baselines",
            "bench trial", "bench kernels"} <= names, names


def help_of(command: tuple[str, ...]) -> str:
    args = [*command, "--", "--help"] if command[0] in FORWARDED else [*command, "--help"]
    result = CliRunner().invoke(app, args, terminal_width=200)
    assert result.exit_code == 0, result.output
    return result.stdout


def options_of(help_text: str) -> tuple[set[str], dict[str, str]]:
    """The options a `--help` lists (Click's and argparse's both put them two spaces in), and the short
    form of each that has one."""
    options, short = set(), {}
    for m in re.finditer(r"^  (?:(-\w), )?(--[\w.-]+)(?: / (--[\w.-]+))?", help_text, re.MULTILINE):
        options.update(o for o in (m.group(2), m.group(3)) if o)
        if m.group(1) and m.group(2) != "--help":
            short[m.group(2)] = m.group(1)
    return options - {"--help"}, short


def table_row(command: tuple[str, ...]) -> str:
    rows = [line for line in README.splitlines() if line.startswith(f"| `normsearch {' '.join(command)} ")]
    assert len(rows) == 1, (command, rows)
    return rows[0]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_the_command_table_lists_every_option(command):
    options, short = options_of(help_of(command))
    assert options, command  # the help was read
    row = table_row(command)
    named = set(re.findall(r"(?<![\w-])--[a-z][\w.-]*[a-z]", row))
    missing = sorted(options - named)
    assert not missing, (command, "options missing from the README's table", missing)
    # `--section.key` stands for the recipe overrides of the commands that take them
    unknown = sorted(named - options - {"--section.key"})
    assert not unknown, (command, "the README's table names options that do not exist", unknown)
    if "--section.key" in named:  # only where the command takes recipe overrides as extra arguments
        assert command[0] not in FORWARDED and CLICK[command].context_settings.get("allow_extra_args"), command
    for long, s in short.items():
        assert f"{s}/{long}" in row, (command, f"write {s}/{long} in the table")


def anchors(doc: Path) -> set[str]:
    """GitHub's anchors for the headings of a Markdown file."""
    out = set()
    text = re.sub(r"```.*?```", "", doc.read_text(), flags=re.S)
    for heading in re.findall(r"^#+ (.+)$", text, re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        out.add(slug)
    return out


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_at_files_that_exist(doc):
    text = re.sub(r"```.*?```", "", doc.read_text(), flags=re.S)  # code blocks hold no links
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    assert links or doc.name in {"parametrization.md", "statistics.md"}, doc
    for link in links:
        if "://" in link or link.startswith("mailto:"):
            continue
        target, _, anchor = link.partition("#")
        path = (doc.parent / target).resolve() if target else doc
        assert path.exists(), (doc.name, link, "no such file")
        assert path == ROOT or ROOT in path.parents, (doc.name, link, "outside the repository")
        if anchor and path.suffix == ".md":
            assert anchor in anchors(path), (doc.name, link, "no such heading", sorted(anchors(path)))


def test_the_code_map_lists_every_module():
    mapped = re.findall(r"^- `(normsearch/[\w/]+\.py)`", (ROOT / "docs" / "code-map.md").read_text(), re.MULTILINE)
    modules = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "normsearch").rglob("*.py"))
    assert sorted(set(mapped)) == sorted(mapped), "a module listed twice"
    assert not sorted(set(modules) - set(mapped)), ("add to docs/code-map.md", sorted(set(modules) - set(mapped)))
    assert not sorted(set(mapped) - set(modules)), ("no such module", sorted(set(mapped) - set(modules)))


def test_the_readme_names_both_test_commands():
    assert "&& python -m pytest -q -n auto --dist loadfile\n```" in README  # the full suite: what CI runs (.ci/run)
    assert 'python -m pytest -q -m "not slow"' in README  # the inner loop
    assert "docs/code-map.md" in README


def test_every_short_site_name_has_a_legend():
    legend = CliRunner().invoke(app, ["baselines"]).stdout
    sites_doc = (ROOT / "docs" / "norm-sites.md").read_text()
    for site, short in SITE_ABBREV.items():
        assert f"{short} {site}" in legend or short == site
        assert f"`{short}`" in README and f"`{short}`" in sites_doc, short
    for mark in ("qF", "* in a ranking: a baseline"):
        assert mark in legend
    assert "`*`" in README and "`qF`" in README
