"""What the terminal shows after a report (issue 23): the confirmed ranking first when the study has a
confirmation, as report.md does, else the search's, in 100 columns; the verdicts against each baseline
in report.md's words; the report's path last."""

import copy
import re
import shutil
from pathlib import Path

import pytest

from normsearch.ranking import Ranking, rank
from normsearch.report import ReportResult, terminal_summary, write_report
from normsearch.report._confirmed import _first_lines
from normsearch.report._verdicts import verdict_line

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "results" / "quickstart"
STUDY_V1 = ROOT / "tests" / "fixtures" / "study_v1"
RULE = re.compile(r"^─+$")


def flat(text: str) -> str:
    """The text with its wrapping undone (and report.md's marks taken out), to find a sentence in it."""
    return " ".join(text.replace("**", "").replace("`", "").split())


def table_rows(text: str) -> list[list[str]]:
    """The compact table's rows, cut into cells (two spaces or more between cells)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if RULE.match(line)) + 1
    rows = []
    for line in lines[start:]:
        if not line.strip() or not line.lstrip()[0].isdigit() and not line.lstrip().startswith("-"):
            break
        rows.append(re.split(r"\s{2,}", line.strip()))
    return rows


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory):
    """results/quickstart copied (the report writes into its folder; results/ is never touched) and
    reported as `normsearch run` reports it."""
    from normsearch.search import open_results

    folder = tmp_path_factory.mktemp("terminal") / "quickstart"
    shutil.copytree(QUICKSTART, folder)
    handle = open_results(folder)
    result = write_report(handle, folder, overwrite=True)
    return result, folder, terminal_summary(result)


def test_the_confirmed_ranking_leads(quickstart):
    result, folder, text = quickstart
    assert isinstance(result, ReportResult) and result.confirmed is not None
    confirmed = result.confirmed
    rows = table_rows(text)
    first = confirmed.ranked[0]
    assert rows[0][:2] == ["1", first.label + (" *" if first.is_baseline else "")]
    assert [r[1].rstrip(" *") for r in rows] == [r.label for r in confirmed.rows]
    assert text.splitlines()[0].startswith(f"{confirmed.study}: the confirmed ranking")
    # the same first as report.md's headline table (the terminal no longer contradicts the report)
    md = (folder / "report.md").read_text()
    head = md.index("## Confirmed verdicts")
    assert re.search(r"^\| 1 \| (\S+)", md[head:], re.M).group(1) == first.label
    # the committed study's search chose another first than the confirmation: the terminal says so
    if result.ranked[0].label != first.label:
        assert result.ranked[0].label not in rows[0][1]
        assert f"The search's first, {result.ranked[0].label}, is not first" in flat(text)


def test_every_line_fits_100_columns_and_the_path_is_last(quickstart):
    result, folder, text = quickstart
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 100
    assert lines[-1].split(" (with ")[0] == f"report: {folder / 'report.md'}"
    assert (folder / "report.md").is_file()


def test_the_verdicts_are_report_md_s(quickstart):
    result, folder, text = quickstart
    confirmed = result.confirmed
    said = flat(text)
    compared = [a for a in confirmed.against if a not in confirmed.missing_against]
    assert compared
    md = flat((folder / "report.md").read_text())
    for a in compared:
        sentence = flat(f"Confirmed, against `{a}`: " + verdict_line(confirmed, a))
        assert f"- {sentence}" in said and sentence in md
    for line in _first_lines(result, confirmed, result.confirm_attrs.get("stage") or {}):
        assert flat(line) in said and flat(line) in md
    # the search's own verdicts stay in report.md: the terminal gives the confirmed ones only
    assert "- Against " not in said


def test_the_result_is_still_the_search_s_ranking(quickstart):
    result, folder, _ = quickstart
    assert isinstance(result, Ranking)
    assert [r.label for r in result.rows] == [r.label for r in rank(folder).rows]
    assert result.confirmed.study.endswith("/confirm") and result.confirmed.path == folder / "confirm" / "report.md"


def test_long_sites_are_cut_with_an_ellipsis(quickstart):
    result, folder, _ = quickstart
    search = copy.deepcopy(result)
    search.confirmed = None
    long = "L0: ai q k ap fi fo | fin; L1: q k ap fi fo; L2-3: ai ao fi fo [rmsnorm]"
    search.rows[0].sites = long
    text = terminal_summary(search)
    assert max(len(line) for line in text.splitlines()) <= 100
    first = table_rows(text)[0]
    assert first[2].endswith("…") and long.startswith(first[2][:-1])


def test_a_study_without_a_confirmation_shows_the_search(tmp_path, monkeypatch):
    from normsearch.search import open_results

    shutil.copytree(STUDY_V1, tmp_path / "v1")
    monkeypatch.chdir(tmp_path / "v1")  # the recipe's results_dir is relative
    handle = open_results("results/v1")
    result = write_report(handle, Path("results/v1"))
    assert result.confirmed is None and result.confirm_attrs == {}
    text = terminal_summary(result)
    lines = text.splitlines()
    assert lines[0].startswith(f"{result.study}: validation")
    assert max(len(line) for line in lines) <= 100
    rows = table_rows(text)
    assert [r[1].rstrip(" *") for r in rows] == [r.label for r in result.rows]
    said = flat(text)
    for a in result.against:
        if a in result.missing_against:
            assert f"- Against {a}: not a finished architecture" in said
        else:
            assert f"- {flat(f'Against `{a}`: ' + verdict_line(result, a))}" in said
    assert "Confirmed" not in text
    assert lines[-1] == "report: results/v1/report.md (with ranking.csv, ranking.json and plots)"
