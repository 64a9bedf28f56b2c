"""normsearch.report._columns: the ranked table's columns, specified once for the terminal, Markdown and
CSV."""

import copy

import pytest
from test_ranking import build_study

from normsearch.ranking import rank
from normsearch.report import COLUMNS, CSV, TABLE
from normsearch.report._columns import kernels_text, num, score_text


@pytest.fixture(scope="module")
def ranking():
    return rank(build_study())


def col(title):
    return next(c for c in TABLE if c.title == title)


def test_num_formats_and_dashes_none():
    assert num(None) == "-" and num(2.123456) == "2.1235" and num(0.5, "{:.2f}") == "0.50"


def test_score_text_by_state(ranking):
    t3 = copy.deepcopy(ranking.row("t3"))
    assert score_text(t3) == f"{t3.score_mean:.4f} [{t3.ci_low:.4f}, {t3.ci_high:.4f}]"
    assert score_text(ranking.row("t8")) == "pruned"
    t3.ci_low = None
    assert score_text(t3) == f"{t3.score_mean:.4f}"  # no interval: the mean alone
    t3.score_mean = None
    assert score_text(t3) == "every run failed"
    t3.state = "INCOMPLETE"
    assert score_text(t3) == "no score"


def test_kernels_text(ranking):
    assert kernels_text(ranking.row("t5")) == "triton (Triton 3.2.0)"
    assert kernels_text(ranking.row("t3")) == "torch"
    t4 = copy.deepcopy(ranking.row("t4"))
    t4.kernels = ""
    assert kernels_text(t4) == "-"


def test_cells_for_the_terminal_and_for_markdown(ranking):
    peri, t3, t8 = ranking.row("peri_ln"), ranking.row("t3"), ranking.row("t8")
    label = col("label")
    assert label.cell(peri) == "peri_ln *" and label.cell(peri, markdown=True) == "**peri_ln** (baseline)"
    assert label.cell(t3) == label.cell(t3, markdown=True) == "t3"
    assert col("sites").cell(t3, markdown=True) == f"`{t3.sites}`" and col("sites").cell(t3) == t3.sites
    assert col("arch_id").cell(t3, markdown=True) == f"`{t3.arch_id}`"
    assert col("rank").cell(t3) == "1" and col("rank").cell(t8) == "-"
    assert col("failed").cell(t3) == f"0/{t3.n_seeds}" and col("failed").cell(t8) == "-"
    assert col("ranks").cell(t3) == f"{t3.rank_low}-{t3.rank_high}"
    assert col("params").cell(t3) == f"{t3.n_params:,}" and "," in col("params").cell(t3)
    assert col("best lr").cell(t3) == "0.003"


def test_table_and_csv_columns_are_taken_from_one_list():
    assert TABLE == tuple(c for c in COLUMNS if c.title)
    assert CSV == tuple(c for c in COLUMNS if c.key)
    keys = [c.key for c in CSV]
    assert len(keys) == len(set(keys))  # no CSV column twice
    assert {"rank", "label", "arch_id", "score_mean", "ci_low", "ci_high", "placement", "trials"} <= set(keys)
    assert [c.title for c in TABLE][:3] == ["rank", "label", "sites"]
    assert all(c.title or c.key for c in COLUMNS)


def test_raw_values_are_the_row_attributes_or_computed(ranking):
    t3 = ranking.row("t3")
    by_key = {c.key: c for c in CSV}
    assert by_key["score_mean"].raw(t3) == t3.score_mean
    assert by_key["trials"].raw(t3) == " ".join(map(str, t3.trials)) == "3 7"
    assert by_key["placement"].raw(t3).startswith("{") and '"final"' in by_key["placement"].raw(t3)
    assert by_key["ci_low"].cell(ranking.row("t8")) == "-"  # None in a table cell
