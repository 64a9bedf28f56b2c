"""The robustness report's markdown (normsearch.report._robustness), from plain data whose truth is set
here: a variant still training reads 'not trained yet' (not 'failed'), and a speed-up the baseline's
curve only bounds is written as a bound, with the speed-up read the other way round beside it."""

from pathlib import Path

import numpy as np

from normsearch.report._robustness import robustness_markdown
from normsearch.stats.robustness import summarise
from normsearch.stats.rung import Rung, RungArch


def _row(label, ratio, eff, bound=False, at=None, baseline=False):
    return {"label": label, "baseline": baseline, "throughput_ratio": ratio, "effective_speedup": eff,
            "speedup_lower_bound": bound, "speedup_at_baseline_loss": at, "speedup_against": "b",
            "throughput_source": "measured", "throughput_noisy": False}


def _data(tmp: Path) -> dict:
    rng = np.random.default_rng(0)
    base = Rung("base", {"f": RungArch(lr=1e-2, losses={s: 2.0 + rng.normal(0, 0.01) for s in range(3)}),
                         "b": RungArch(lr=1e-2, losses={s: 2.2 + rng.normal(0, 0.01) for s in range(3)})})
    (s,) = summarise([base, Rung("no-warmup", {})], [("f", "b")])
    variant = {"what": "x", "overrides": {}, "steps_factor": None, "steps": 200, "tokens": 204800}
    return {"study": "s", "seeds": [3000, 3001, 3002], "found": ["f"], "baselines": ["b"],
            "variants": [{**variant, "name": "base", "trained": True, "report": str(tmp / "robust-base/report.md"),
                          "rows": [_row("f", 1.03, 1.03, bound=True, at=1.57), _row("b", 1.0, 1.0, baseline=True)]},
                         {**variant, "name": "no-warmup", "trained": False, "report": None, "rows": []}],
            "contrasts": [s.to_dict()]}


def test_a_variant_in_progress_reads_not_trained_yet_and_counts_in_no_column(tmp_path):
    text = robustness_markdown(_data(tmp_path), tmp_path)
    assert "| no-warmup | x | 200 | 204,800 | not trained yet |" in text
    (row,) = [line for line in text.splitlines() if line.startswith("| f vs b |") and "not trained yet" in line]
    assert "**better**" in row and "failed" not in row
    (across,) = [line for line in text.splitlines() if line.startswith("| f vs b | 1 of 1 |")]
    assert across.split(" | ")[4] == "0"  # no failure counted
    assert "1 of the recipe variants are not trained yet" in text


def test_a_speedup_the_baselines_curve_only_bounds_is_written_as_a_bound(tmp_path):
    text = robustness_markdown(_data(tmp_path), tmp_path)
    assert "| base | f | b | 1.03 | measured | >= 1.03x | 1.57x |" in text
    assert "| base | b | b | 1.00 | measured | 1.00x | - |" in text


def test_a_measured_ratio_carries_its_interval_to_both_speedups(tmp_path):
    data = _data(tmp_path)
    data["variants"][0]["rows"][0]["throughput_ratio_ci"] = [0.9, 1.2]  # ratio 1.03: x 0.874 to x 1.165
    text = robustness_markdown(data, tmp_path)
    assert "| base | f | b | 1.03 [0.90, 1.20] | measured | >= 1.03x [0.90, 1.20] | 1.57x [1.37, 1.83] |" in text
    assert "median of the per-round ratios with its distribution-free 95% interval" in text
