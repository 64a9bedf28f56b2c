"""The ranked table's columns, specified once: the terminal table, the Markdown table and the CSV file
all read this list (name, header, value, cell text)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable

from .._throughput import ratio_words, scaled_interval
from ..ranking import OTHER_PRECISION, RANKED, Row
from ..records import is_control_label

UNIT = "bits/byte"


def num(v, fmt="{:.4f}") -> str:
    return "-" if v is None else fmt.format(v)


def score_text(r: Row) -> str:
    if r.state != RANKED:
        return "pruned" if r.state == "PRUNED" else f"only {r.precision}" if r.state == OTHER_PRECISION else "no score"
    if r.score_mean is None:
        return "every run failed"
    ci = f" [{num(r.ci_low)}, {num(r.ci_high)}]" if r.ci_low is not None else ""
    return num(r.score_mean) + ci


def _noisy(r: Row) -> str:
    """'~' after a cell read from tokens/s the runs recorded too unevenly (``throughput_noisy``)."""
    return "~" if getattr(r, "throughput_noisy", False) else ""


def speedup_text(r: Row) -> str:
    """The effective speed-up against the best baseline: '1.25x', '>= 1.10x' (a lower bound) or '-', with the
    measured tokens/s ratio's interval carried over ('1.25x [1.10, 1.31]'); a trailing '~' when its tokens/s ratio
    is noisy."""
    if r.effective_speedup is None:
        return "-"
    ci = scaled_interval(r, r.effective_speedup)
    return ((">= " if r.speedup_lower_bound else "") + f"{r.effective_speedup:.2f}x"
            + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "") + _noisy(r))


def ratio_text(r: Row) -> str:
    """The tokens/s ratio against the best baseline: '0.97x', '1.10x [0.96, 1.25]' (measured, with its
    interval), '1.40x~' (noisy) or '-'."""
    return "-" if r.throughput_ratio is None else ratio_words(r) + _noisy(r)


def _control(r: Row) -> bool:
    """A control proposal's row (``search.control``: a uniform draw from the space, labelled ``c<j>``)."""
    return is_control_label(r.label, r.is_baseline)


def kernels_text(r: Row) -> str:
    if not r.kernels:
        return "-"
    return r.kernels + (f" (Triton {r.triton_version})" if r.triton_version else "")


@dataclass(frozen=True)
class Column:
    """``key``: the CSV/JSON name (None: a table-only column); ``title``/``short``: the Markdown and
    terminal headers (None: CSV only); ``value``: the raw value (CSV); ``text``: the cell text
    (tables); ``md``: the Markdown cell when it differs from ``text``."""

    key: str | None
    title: str | None = None
    short: str | None = None
    value: Callable[[Row], Any] | None = None
    text: Callable[[Row], str] | None = None
    md: Callable[[Row], str] | None = None
    right: bool = False

    def raw(self, r: Row) -> Any:
        return self.value(r) if self.value else getattr(r, self.key)

    def cell(self, r: Row, markdown: bool = False) -> str:
        if markdown and self.md:
            return self.md(r)
        if self.text:
            return self.text(r)
        v = self.raw(r)
        return "-" if v is None else str(v)


def _attr(key, title=None, short=None, text=None, md=None, right=False) -> Column:
    return Column(key, title, short, None, text, md, right)


COLUMNS: tuple[Column, ...] = (
    _attr("rank", "rank", text=lambda r: "-" if r.rank is None else str(r.rank), right=True),
    _attr("label", "label", text=lambda r: r.label + (" *" if r.is_baseline else " (control)" if _control(r) else ""),
          md=lambda r: f"**{r.label}** (baseline)" if r.is_baseline else f"{r.label} (control)" if _control(r)
          else r.label),
    _attr("is_baseline"),
    Column("is_control", value=lambda r: _control(r)),
    _attr("state"),
    _attr("sites", "sites", md=lambda r: f"`{r.sites}`" if r.sites else "-"),
    Column(None, f"score ({UNIT}) [95% CI]", "score [95% CI]", text=score_text),
    _attr("score_mean"),
    _attr("ci_low"),
    _attr("ci_high"),
    _attr("ci_method"),
    Column(None, "failed", text=lambda r: "-" if r.rank is None else f"{r.n_failed}/{r.n_failed + r.n_seeds}",
           right=True),
    _attr("n_failed"),
    _attr("n_stalled"),
    _attr("failure_rate"),
    _attr("failure_ci_low"),
    _attr("failure_ci_high"),
    _attr("fails_at_best_lr"),
    _attr("p_best", "P(best)", text=lambda r: num(r.p_best, "{:.2f}"), right=True),
    Column(None, "ranks", text=lambda r: "-" if r.rank_low is None else f"{r.rank_low}-{r.rank_high}"),
    _attr("rank_low"),
    _attr("rank_high"),
    _attr("n_seeds", "seeds", right=True),
    _attr("n_runs"),
    _attr("n_diverged"),
    _attr("best_lr", "best lr",
          text=lambda r: num(r.best_lr, "{:g}") + (f" {r.init}" if r.variant.get("init") else "")),
    _attr("init"),
    Column("variant", value=lambda r: json.dumps(r.variant, sort_keys=True) if r.variant else ""),
    _attr("lr_bracketed"),
    _attr("lr_vertex"),
    _attr("lr_basin", "basin", text=lambda r: num(r.lr_basin, "{:.2f}")),
    _attr("lr_sensitivity"),
    _attr("n_params", "params", text=lambda r: f"{r.n_params:,}", right=True),
    _attr("n_norm_params"),
    _attr("tokens_per_s", "tokens/s", "tok/s", text=lambda r: f"{r.tokens_per_s:,.0f}", right=True),
    _attr("throughput_ratio", "tokens/s vs best baseline", "tok/s x", text=ratio_text, right=True),
    _attr("effective_speedup", "effective speed-up", "speed-up", text=speedup_text, right=True),
    _attr("step_speedup"),
    _attr("speedup_lower_bound"),
    _attr("speedup_at_baseline_loss"),
    _attr("speedup_against"),
    _attr("speedup_note"),
    _attr("throughput_source"),
    _attr("throughput_noisy"),
    _attr("throughput_cv"),
    _attr("measured_tokens_per_s"),
    _attr("throughput_ratio_low"),
    _attr("throughput_ratio_high"),
    _attr("wall_time"),
    Column("kernels", "kernels", text=kernels_text),
    _attr("triton_version"),
    _attr("precision"),
    _attr("n_other_precision"),
    _attr("device"),
    _attr("arch_id", "arch_id", md=lambda r: f"`{r.arch_id}`"),
    Column("trials", value=lambda r: " ".join(map(str, r.trials))),
    Column("placement", value=lambda r: json.dumps(r.placement, sort_keys=True)),
)

#: the columns of the terminal and Markdown tables, in order
TABLE = tuple(c for c in COLUMNS if c.title)
#: the columns of the terminal summary (:func:`normsearch.report.terminal_summary`), in order: the ones that
#: fit 100 columns; the rest are in report.md
SUMMARY = tuple(c for c in TABLE if c.key in ("rank", "label", "sites", "p_best", "n_seeds")
                or c.text is score_text or c.title == "failed")
#: the columns of ranking.csv, in order (comparisons follow as vs_<baseline>_<field>)
CSV = tuple(c for c in COLUMNS if c.key)
COMPARISON_FIELDS = ("n", "diff", "ci_low", "ci_high", "p_value", "p_holm", "q_bh", "p_tost_holm",
                     "margin_equivalent", "p_improve", "seeds_needed", "diff_planned", "verdict")
