"""The README a user reads: its links resolve, its command table names every option, and the short
site names of the tables have a legend (in the README, in docs/ and under `normsearch baselines`)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from normsearch.cli import app
from normsearch.spec import SITE_ABBREV

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
COMMANDS = ["run", "validate", "train", "status", "report", "export", "show", "baselines"]


def test_links_stay_inside_the_repository():
    for doc in (ROOT / "README.md", ROOT / "docs" / "norm-sites.md"):
        for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", doc.read_text()):
            if "://" in target:
                continue
            path = (doc.parent / target).resolve()
            assert path.exists() and ROOT in path.parents, (doc.name, target)


@pytest.mark.parametrize("command", COMMANDS)
def test_the_command_table_lists_every_option(command):
    help_text = CliRunner().invoke(app, [command, "--help"], terminal_width=200).stdout
    options = set(re.findall(r"^\s+(?:-\w, )?(--[a-z][a-z-]*)", help_text, re.MULTILINE)) - {"--help"}
    hidden = {"--worker-index", "--progress-json"}  # workers of --devices, not for users
    rows = [line for line in README.splitlines() if line.startswith(f"| `normsearch {command} ")]
    assert len(rows) == 1, rows
    missing = sorted(o for o in options - hidden if o not in rows[0])
    assert not missing, (command, missing)


def test_every_short_site_name_has_a_legend():
    legend = CliRunner().invoke(app, ["baselines"]).stdout
    sites_doc = (ROOT / "docs" / "norm-sites.md").read_text()
    for site, short in SITE_ABBREV.items():
        assert f"{short} {site}" in legend or short == site
        assert f"`{short}`" in README and f"`{short}`" in sites_doc, short
    for mark in ("qF", "* in a ranking: a baseline"):
        assert mark in legend
    assert "`*`" in README and "`qF`" in README
