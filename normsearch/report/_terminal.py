"""What the terminal shows after a report is written: the same headline as ``report.md``, in at most
100 columns. When the study has a confirmation, its ranking (fresh seeds, test split) comes first,
as in ``report.md``, so that the terminal never leads with a search winner the confirmation did not
keep; otherwise the search's ranking. Then the one-line verdicts against each baseline, the same
sentences ``report.md`` uses (:func:`._verdicts.verdict_line`, :func:`._confirmed._first_lines`),
and last the report's path. Nothing is computed here: every number is the ranking's."""

from __future__ import annotations

import io
import textwrap
from pathlib import Path

from ..ranking import Ranking
from ._columns import SUMMARY, UNIT
from ._confirmed import _first_lines
from ._verdicts import verdict_line

CAPTION = ("* a baseline from the papers; failed: diverged or stalled runs at the chosen lr; P(best): the "
           "probability of being first; the other columns, the comparisons and the plots are in the report")


def _plain(markdown: str) -> str:
    """A report.md sentence for the terminal: no bold, no code marks."""
    return markdown.replace("**", "").replace("`", "")


def _wrap(text: str, width: int, bullet: bool = False) -> list[str]:
    first, rest = ("- ", "  ") if bullet else ("", "")
    return textwrap.wrap(text, width, initial_indent=first, subsequent_indent=rest) or [""]


def compact_table(ranking: Ranking, width: int = 100) -> list[str]:
    """The ranked rows in the :data:`._columns.SUMMARY` columns (rank, label, sites, score with its
    95% interval, failed, P(best), seeds), as plain lines of at most ``width`` characters: the sites
    are cut short with an ellipsis when the row would not fit."""
    from rich import box
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0), expand=False)
    for c in SUMMARY:
        sites = c.key == "sites"
        # the sites column alone gives way when the row is too wide (rich narrows wrappable columns first);
        # its cells are not wrapped but cut, one line per row
        table.add_column(c.short or c.title, justify="right" if c.right else "left", no_wrap=not sites,
                         overflow="ellipsis", min_width=8 if sites else None)
    for r in ranking.rows:
        # Text, not markup: sites hold "[rmsnorm]", which rich would read as a tag
        table.add_row(*(Text(c.cell(r), no_wrap=True, overflow="ellipsis") for c in SUMMARY))
    out = io.StringIO()
    Console(file=out, width=width, color_system=None, force_terminal=False, highlight=False, emoji=False,
            markup=False, legacy_windows=False).print(table)
    return [line.rstrip() for line in out.getvalue().splitlines()]


def _title(ranking: Ranking, width: int, confirmed: bool = False) -> list[str]:
    test = any(x.metric == "test_bpb" for r in ranking.rows for x in r.runs)  # a stage scored on the test split
    what = f"{'test' if test else 'validation'} {UNIT} over successful runs"
    if confirmed:
        what = f"the confirmed ranking, fresh seeds, {what}"
    title = f"{ranking.study}: {what} (lower is better; failures rank last)"
    if not ranking.finished:
        title += (f"; not finished ({ranking.running} running, {ranking.n_trials.get('WAITING', 0)} waiting), "
                  f"ranking what is finished")
    return _wrap(title + ":", width)


def _verdicts(ranking: Ranking, prefix: str, width: int) -> list[str]:
    lines = []
    for a in ranking.against:
        if a in ranking.missing_against:
            lines += _wrap(f"{prefix}{a}: not a finished architecture of this study, nothing compared with it.",
                           width, bullet=True)
        else:
            lines += _wrap(_plain(f"{prefix}`{a}`: " + verdict_line(ranking, a)), width, bullet=True)
    return lines


def terminal_summary(result: Ranking, width: int = 100, path: str | Path | None = None) -> str:
    """The end of ``normsearch run``, ``confirm`` and ``report``, as text of at most ``width`` columns
    a line (the path's line excepted: a path is never cut). The last line is ``report: <path>``.

    ``result``: what :func:`normsearch.report.write_report` returned (a :class:`._files.ReportResult`,
    carrying the confirmation's ranking when the study has one); a plain :class:`Ranking` shows as a
    study without a confirmation. ``path``: the report to name last (default: the result's)."""
    confirmed: Ranking | None = getattr(result, "confirmed", None)
    path = path if path is not None else getattr(result, "path", None)
    lines: list[str] = []
    if confirmed is not None and confirmed.ranked:
        lines += _title(confirmed, width, confirmed=True)
        lines += compact_table(confirmed, width)
        lines += _wrap(CAPTION, width)
        lines.append("")
        lines += _verdicts(confirmed, "Confirmed, against ", width)
        info = (getattr(result, "confirm_attrs", None) or {}).get("stage") or {}
        for line in _first_lines(result, confirmed, info):
            lines += _wrap(_plain(line[2:] if line.startswith("- ") else line), width, bullet=True)
    else:
        if confirmed is not None:
            lines += _wrap("The confirmation has no finished architecture yet: the search's ranking follows, from "
                           "the seeds and validation windows that chose.", width)
            lines.append("")
        lines += _title(result, width)
        if result.rows:
            lines += compact_table(result, width)
            lines += _wrap(CAPTION, width)
        else:
            lines.append("No architecture has finished yet: nothing to rank.")
        lines.append("")
        lines += _verdicts(result, "Against ", width)
    if path is not None:
        if lines and lines[-1]:
            lines.append("")
        line = f"report: {path}"
        more = f"{line} (with ranking.csv, ranking.json and plots)"
        lines.append(more if Path(path).name == "report.md" and len(more) <= width else line)
    return "\n".join(lines)
