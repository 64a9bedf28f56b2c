"""The report of a study: a ranked table in the terminal, with the same rows in Markdown, CSV and
JSON, paired comparisons with the baselines, which sites matter, and plots.

    result = write_report(handle, Path("results/quickstart"))   # report.md, ranking.csv/.json, *.png
    print(terminal_summary(result))   # the confirmed ranking first (or the search's), verdicts, the path

- :mod:`._analysis`: site effects, importance, diagnostics (numbers, no drawing);
- :mod:`._columns`: the table's columns, once, for the terminal, Markdown and CSV;
- :mod:`._markdown`: ``report.md``; :mod:`._plots`: the PNG plots; :mod:`._files`: writing them;
- :mod:`._terminal`: what the terminal shows after a report (100 columns).
"""

from __future__ import annotations

from ._analysis import (Importance, SiteEffect, best_runs, diagnostics_summary, mean_curve, mean_diagnostic,
                        site_effects, site_importance)
from ._columns import COLUMNS, CSV, SUMMARY, TABLE, UNIT
from ._ladder import write_ladder_report
from ._robustness import write_robustness_report
from ._files import ReportResult, check_out_dir, ranking_json, write_csv, write_report
from ._markdown import PLOT_CAPTIONS, report_markdown
from ._terminal import compact_table, terminal_summary
from ._verdicts import comparison_sentence, score_definition


def ranking_table(ranking):
    """The ranked rows as a rich table (baselines marked with *), every column of report.md's table;
    :func:`terminal_summary` is what the commands print."""
    from rich.markup import escape
    from rich.table import Table

    title = f"{ranking.study}: validation {UNIT} over successful runs (lower is better; failures rank last)"
    if not ranking.finished:
        title += (f" - study not finished ({ranking.running} running, {ranking.n_trials.get('WAITING', 0)} waiting), "
                  f"ranking what is finished")
    caption = "* a baseline from the papers; failed: diverged or stalled runs at the chosen lr"
    table = Table(title=escape(title), title_justify="left", caption=caption,
                  caption_justify="left")
    for c in TABLE:
        table.add_column(c.short or c.title, justify="right" if c.right else "left")
    for r in ranking.rows:
        table.add_row(*(escape(c.cell(r)) for c in TABLE))  # sites hold "[rmsnorm]", which rich would read as markup
    return table


__all__ = [
    "COLUMNS", "CSV", "Importance", "PLOT_CAPTIONS", "ReportResult", "SUMMARY", "SiteEffect", "TABLE", "UNIT",
    "best_runs", "check_out_dir", "compact_table", "diagnostics_summary", "mean_curve", "mean_diagnostic",
    "ranking_json", "ranking_table", "report_markdown", "comparison_sentence", "score_definition", "site_effects",
    "site_importance", "terminal_summary", "write_csv", "write_ladder_report", "write_report",
    "write_robustness_report",
]
