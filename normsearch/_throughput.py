"""What a norm costs, and which runs a ranking may compare at all. Torch-free.

- **One precision.** Runs of different precisions are never pooled: a bf16 run's loss and tokens/s are not
  an fp32 run's. When a study's runs mix precisions (``train.precision: auto`` measures per machine, so
  two machines can choose differently), the ranking compares the runs of the precision most of them used
  and leaves the others out (:func:`compared_precision`; ``normsearch.ranking.rank`` does the leaving).
- **Throughput ratio.** A row's median training tokens/s over the runs of its chosen cell that trained to
  the end, over the best baseline's (the best-ranked baseline row).
- **Measured, or from the runs.** With a ``throughput.json`` of the study's shape (``normsearch report STUDY
  --measure-throughput``: every architecture's training step timed in one process, interleaved;
  :mod:`normsearch._cost_bench`), the ratio is of its measured tokens/s (``throughput_source: measured``):
  the median of the per-round ratios (round k of the row against round k of the baseline, timed within
  seconds of each other), with a distribution-free 95% interval for that median (:func:`paired_ratio`). A
  per-second verdict is drawn only where that interval puts the speed-up wholly on one side of 1.
  Without one it is of the runs' (``runs``), and when the runs of the row or of the baseline recorded tokens/s
  whose coefficient of variation exceeds :data:`NOISY_CV` (a shared machine) the row is ``throughput_noisy``: the
  ratio is kept, marked, and no per-second verdict is read from it (:func:`per_second_sentences`).
- **Effective speed-up.** How much more compute the best baseline needs to reach the row's final
  validation loss: the steps at which the baseline's mean validation curve (its successful runs at its
  chosen cell, interpolated linearly in log-steps) first reaches that loss, over the row's own steps
  (``step_speedup``), times the throughput ratio. A loss below anything the baseline reached gives a lower
  bound (its last evaluation's steps), never an extrapolation; a loss above the baseline's at its first
  evaluation after step 0 gives none, with the reason (``speedup_note``).
- **The other way round.** With equal budgets a row ahead per step always gets a lower bound, so its
  verdict per second is read on its own curve instead: the baseline's steps over the steps the row needs to
  reach the baseline's final loss, times the throughput ratio (``speedup_at_baseline_loss``).

The rules and their caveats are docs/statistics.md §13.
"""

from __future__ import annotations

import math
import statistics

from ._rows import RANKED, Row
from .records import RunResult

NOISY_CV = 0.10  # runs' tokens/s varying more than this (coefficient of variation): no per-second verdict
RATIO_LEVEL = 0.95  # the least coverage of the measured ratio's interval


def paired_ratio(rounds: list[float], base_rounds: list[float],
                 level: float = RATIO_LEVEL) -> tuple[float, float | None, float | None] | None:
    """(median, low, high) of the per-round tokens/s ratios ``rounds[k] / base_rounds[k]`` of two architectures
    measured interleaved (:mod:`normsearch._cost_bench`: round k times every architecture within seconds, so a
    burst of load that spoils a round spoils both). The interval is the order statistics (x_(j), x_(n+1-j)) with
    the largest j whose coverage for the median, 1 - 2 P(B <= j - 1) with B ~ Binomial(n, 1/2), is at least
    ``level``: distribution-free, assuming only that the rounds' ratios are independent draws; (median, None,
    None) when n is too small for ``level`` (fewer than 6 rounds at 95%). None without paired rounds."""
    n = len(rounds)
    if n == 0 or n != len(base_rounds) or any(b <= 0 for b in base_rounds):
        return None
    xs = sorted(a / b for a, b in zip(rounds, base_rounds))
    med = statistics.median(xs)
    k, below = 0, 0.0  # k: the largest j accepted so far (0: none); below: P(B <= k)
    while k + 1 <= n // 2:
        below_next = below + math.comb(n, k) / 2 ** n  # P(B <= k): the candidate j = k + 1's tail
        if 1 - 2 * below_next < level:
            break
        k, below = k + 1, below_next
    if k == 0:
        return med, None, None
    return med, xs[k - 1], xs[n - k]


def compared_precision(rows: list[Row]) -> tuple[str | None, dict[str, int]]:
    """The precision whose runs a ranking compares, and every precision with its number of evaluated runs
    (of the rows that finished): the one most runs used; on a tie 32-true, else the first by name."""
    counts: dict[str, int] = {}
    for r in rows:
        for x in r.runs if r.state == RANKED else ():
            if x.curve:
                counts[x.precision or ""] = counts.get(x.precision or "", 0) + 1
    if not counts:
        return None, {}
    best = min(counts, key=lambda p: (-counts[p], p != "32-true", p))
    return best, dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def chosen_runs(row: Row, successful: bool = True) -> list[RunResult]:
    """The runs of ``row``'s chosen cell (its learning rate in its variant of the grid); ``successful``: only
    the seeds its score counts (``row.seeds``), else every run there that trained to the end."""
    from .grid import variant_tag

    if row.best_lr is None:
        return []
    tag = variant_tag(row.variant or {})
    cell = [r for r in row.runs if float(r.lr) == float(row.best_lr) and variant_tag(r.variant or {}) == tag]
    if successful:
        return [r for r in cell if r.curve and int(r.seed) in row.seeds]
    return [r for r in cell if r.finished]


def _recorded(row: Row) -> list[float]:
    return [float(r.tokens_per_s) for r in chosen_runs(row, successful=False) if r.tokens_per_s]


def median_tokens_per_s(row: Row) -> float | None:
    values = _recorded(row)
    return statistics.median(values) if values else None


def tokens_per_s_cv(row: Row) -> float | None:
    """The coefficient of variation of the tokens/s the runs of ``row``'s chosen cell recorded (None: < 2)."""
    values = _recorded(row)
    return statistics.stdev(values) / statistics.mean(values) if len(values) > 1 else None


def mean_curve(runs: list[RunResult]) -> list[tuple[int, float]]:
    """(step, mean validation bits/byte) at every evaluation every run has, in step order."""
    if not runs:
        return []
    steps = set.intersection(*({int(p["step"]) for p in r.curve if p.get("val_bpb") is not None} for r in runs))
    by_run = [{int(p["step"]): float(p["val_bpb"]) for p in r.curve if p.get("val_bpb") is not None} for r in runs]
    return [(s, sum(d[s] for d in by_run) / len(by_run)) for s in sorted(steps)]


def final_point(runs: list[RunResult]) -> tuple[float, float] | None:
    """(mean final validation loss, mean steps at it) over ``runs``; the validation loss even for runs
    scored on the test split, so that it compares with a validation curve."""
    ends = [r.curve[-1] for r in runs if r.curve and r.curve[-1].get("val_bpb") is not None]
    if not ends:
        return None
    return sum(float(e["val_bpb"]) for e in ends) / len(ends), sum(float(e["step"]) for e in ends) / len(ends)


def steps_to_reach(curve: list[tuple[int, float]], loss: float) -> tuple[float | None, str]:
    """The steps at which ``curve`` (step, loss) first reaches ``loss``, linear in log-steps between its
    evaluations after step 0, and how to read it: ``"at"`` (reached there), ``"lower"`` (never reached: the
    last evaluation's steps, a lower bound), ``"above"`` (the loss is above the curve's first evaluation
    after step 0: no step count, None), ``"none"`` (no evaluation after step 0)."""
    points = [(s, v) for s, v in curve if s > 0 and math.isfinite(v)]
    if not points:
        return None, "none"
    if loss > points[0][1]:
        return None, "above"
    for i, (s, v) in enumerate(points):
        if v <= loss:
            if i == 0 or v == loss:
                return float(s), "at"
            s0, v0 = points[i - 1]
            f = (v0 - loss) / (v0 - v)
            return math.exp(math.log(s0) + f * (math.log(s) - math.log(s0))), "at"
    return float(points[-1][0]), "lower"


def best_baseline(rows: list[Row]) -> Row | None:
    """The best-ranked baseline row with a chosen cell."""
    bases = [r for r in rows if r.is_baseline and r.rank is not None and r.best_lr is not None and r.seeds]
    return min(bases, key=lambda r: r.rank) if bases else None


def add_speedups(rows: list[Row], measured: dict[str, float] | None = None,
                 rounds: dict[str, list[float]] | None = None) -> Row | None:
    """Fill in every row's ``throughput_ratio`` (its source, its interval and whether it is noisy),
    ``step_speedup``, ``effective_speedup`` (and its bound and note) against the best baseline, which it returns
    (None: no ranked baseline, every value null). ``measured``: arch_id -> tokens/s from ``throughput.json``,
    used for a row when it holds both the row and the baseline; ``rounds``: arch_id -> its per-round tokens/s
    there, which make the measured ratio the median of the paired per-round ratios, with its interval."""
    base = best_baseline(rows)
    measured, rounds = measured or {}, rounds or {}
    for r in rows:
        r.throughput_ratio = r.step_speedup = r.effective_speedup = r.speedup_at_baseline_loss = None
        r.throughput_ratio_low = r.throughput_ratio_high = None
        r.speedup_lower_bound, r.speedup_note, r.speedup_against = False, "", base.label if base else ""
        r.throughput_cv, r.measured_tokens_per_s = tokens_per_s_cv(r), measured.get(r.arch_id)
        r.throughput_source, r.throughput_noisy = "", False
    if base is None:
        for r in rows:
            r.speedup_note = "no ranked baseline to compare with"
        return None
    curve = mean_curve(chosen_runs(base))
    base_end = final_point(chosen_runs(base))
    for r in rows:
        _speedup(r, base, curve, base_end, rounds)
    return base


def _ratio(r: Row, base: Row, rounds: dict[str, list[float]]) -> None:
    """``r.throughput_ratio`` against ``base``: measured when both were (paired over ``rounds`` where both have
    them), else from the runs (noisy or not)."""
    if r.measured_tokens_per_s and base.measured_tokens_per_s:
        r.throughput_ratio, r.throughput_source = r.measured_tokens_per_s / base.measured_tokens_per_s, "measured"
        paired = None if r is base else paired_ratio(rounds.get(r.arch_id) or [], rounds.get(base.arch_id) or [])
        if paired is not None:
            r.throughput_ratio, r.throughput_ratio_low, r.throughput_ratio_high = paired
        return
    tps, base_tps = median_tokens_per_s(r), median_tokens_per_s(base)
    r.throughput_ratio = tps / base_tps if tps and base_tps else None
    if r.throughput_ratio is not None:
        r.throughput_source = "runs"
        r.throughput_noisy = r is not base and max(r.throughput_cv or 0.0, base.throughput_cv or 0.0) > NOISY_CV


def _speedup(r: Row, base: Row, curve: list[tuple[int, float]], base_end: tuple[float, float] | None,
             rounds: dict[str, list[float]]) -> None:
    _ratio(r, base, rounds)
    end = final_point(chosen_runs(r)) if r.rank is not None else None
    if end is None:
        r.speedup_note = "not ranked" if r.rank is None else "no successful run at its chosen cell"
        return
    loss, steps = end
    if base_end is not None and r.throughput_ratio is not None:  # the baseline's final loss on this row's curve
        own, how = steps_to_reach(mean_curve(chosen_runs(r)), base_end[0])
        if how == "at" and own:
            r.speedup_at_baseline_loss = base_end[1] / own * r.throughput_ratio
    needed, how = steps_to_reach(curve, loss)
    if how == "above":
        first = next(s for s, _ in curve if s > 0)
        r.speedup_note = (f"its final loss {loss:.4f} is above {base.label}'s at its first evaluation (step {first}): "
                          f"no step count to read off {base.label}'s curve")
        return
    if how == "none" or needed is None or steps <= 0:
        r.speedup_note = f"{base.label}'s runs have no validation curve after step 0"
        return
    r.step_speedup = needed / steps
    r.speedup_lower_bound = how == "lower"
    if r.speedup_lower_bound:
        r.speedup_note = (f"{base.label} never reached its final loss {loss:.4f} in {needed:g} steps: a lower bound, "
                          f"not extrapolated")
    if r.throughput_ratio is None:
        r.speedup_note = (r.speedup_note + "; " if r.speedup_note else "") + "no tokens/s recorded to scale by"
        return
    r.effective_speedup = r.step_speedup * r.throughput_ratio


def carried_interval(value: float | None, ratio: float | None, low: float | None,
                     high: float | None) -> tuple[float, float] | None:
    """``value``, the ratio itself or a speed-up that is a step count times ``ratio``, over the ratio's interval
    (``low``, ``high``): (low, high), or None where the ratio has none (read from the runs, or too few rounds).
    The steps' own uncertainty is not in it: it is the tokens/s measurement's alone."""
    if value is None or low is None or high is None or not ratio:
        return None
    return value * low / ratio, value * high / ratio


def scaled_interval(r: Row, value: float | None) -> tuple[float, float] | None:
    """:func:`carried_interval` of ``value`` over row ``r``'s measured ratio."""
    return carried_interval(value, r.throughput_ratio, r.throughput_ratio_low, r.throughput_ratio_high)


def ratio_words(r: Row) -> str:
    """'1.10x' or, measured with an interval, '1.10x [0.96, 1.25]'."""
    ci = "" if r.throughput_ratio_low is None else f" [{r.throughput_ratio_low:.2f}, {r.throughput_ratio_high:.2f}]"
    return f"{r.throughput_ratio:.2f}x{ci}"


def per_second_sentences(rows: list[Row]) -> list[str]:
    """One sentence per row whose verdict per step and per second differ against the best baseline: ahead per
    step (the baseline's curve never reaches its loss, or reaches it late) but behind per second (it reaches the
    baseline's final loss later in compute: ``speedup_at_baseline_loss`` < 1, or an exact effective speed-up
    < 1), or possibly behind (only a bound below 1 to go by); or behind per step but ahead per second. Where the
    measured ratio's interval (:func:`scaled_interval`) reaches across 1 the sentence says the measurement does
    not decide instead. None for a row whose ratio is ``throughput_noisy`` (:func:`noisy_notice` says why)."""
    out = []
    for r in rows:
        if r.label == r.speedup_against or r.step_speedup is None or r.throughput_ratio is None or r.throughput_noisy:
            continue
        base, ratio, eff = r.speedup_against, ratio_words(r), r.effective_speedup
        at_base = r.speedup_at_baseline_loss
        if r.speedup_lower_bound or r.step_speedup > 1:
            head = f"{r.label} is ahead per step but {ratio} the tokens/s of {base}: per second it"
            value = at_base if at_base is not None else eff
            if value is None or value >= 1:
                continue
            ci = scaled_interval(r, value)
            where = f" at {base}'s final loss" if at_base is not None else ""
            if ci is not None and ci[1] >= 1:
                out.append(f"{r.label} is ahead per step and {ratio} the tokens/s of {base}: per second the "
                           f"measurement does not decide (effective speed-up {value:.2f}x [{ci[0]:.2f}, "
                           f"{ci[1]:.2f}]{where})")
            elif at_base is not None:
                out.append(f"{head} is behind (effective speed-up {at_base:.2f}x{where}"
                           + (f", >= {eff:.2f}x at its own)" if r.speedup_lower_bound else ")"))
            else:
                out.append(f"{head} is behind (effective speed-up {eff:.2f}x)" if not r.speedup_lower_bound else
                           f"{head} may be behind (effective speed-up >= {eff:.2f}x: {base} never reached its loss)")
        elif r.step_speedup < 1 and eff is not None and eff > 1:
            ci = scaled_interval(r, eff)
            if ci is not None and ci[0] <= 1:
                out.append(f"{r.label} is behind per step and {ratio} the tokens/s of {base}: per second the "
                           f"measurement does not decide (effective speed-up {eff:.2f}x [{ci[0]:.2f}, {ci[1]:.2f}])")
            else:
                out.append(f"{r.label} is behind per step but {ratio} the tokens/s of {base}: per second it is "
                           f"ahead (effective speed-up {eff:.2f}x)")
    return out


def noisy_notice(rows: list[Row]) -> str:
    """The line that replaces the per-second verdicts of rows whose ratio is ``throughput_noisy`` ('' when none
    is): how much the runs' tokens/s vary within an architecture, and how to measure them instead."""
    if not any(r.throughput_noisy for r in rows):
        return ""
    worst = max((r.throughput_cv for r in rows if r.throughput_source == "runs" and r.throughput_cv), default=0.0)
    return (f"Training throughput recorded by the runs varies by up to {worst:.0%} within an architecture (a shared "
            f"machine): no per-second verdict from it; `normsearch report STUDY --measure-throughput` measures every "
            f"architecture interleaved in one process.")
