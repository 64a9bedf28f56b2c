"""Statistics of a study's runs: verdicts that hold (issue 15). Torch-free; scipy and statsmodels
are imported only inside the functions that need them.

From runs to a ranking, in order:

1. each run is an outcome (:func:`classify_run`): ``diverged``, ``stalled`` (ended near the unigram
   loss of the training bytes, :func:`unigram_bits_per_byte`, or never improved on its init loss),
   or ``ok``; only ok runs have a loss that enters a mean, an interval or a test;
2. per architecture and learning rate: failures with a Wilson interval (:func:`wilson`) and the mean
   loss of the successful runs; the chosen learning rate is the least-failing one, then the lowest
   mean (:func:`sweep`); the hurdle order ranks by failure rate there, then by loss
   (:func:`hurdle_order`);
3. each architecture's own seed-to-seed variance over its successful runs at the chosen learning
   rate (:func:`variance_fit`; never pooled, and no test of equal variances); intervals
   (:func:`interval`) are Student-t, differences (:func:`compare`) Welch's, with the df of
   :func:`welch_df`;
4. the comparisons form one family: Holm for claims, Benjamini-Hochberg q-values for screening, TOST
   for equivalence (and the smallest margin the data show equivalence within), and the more seeds
   that would decide what stays undecided (:func:`adjust`, :func:`seeds_needed`);
5. P(best), rank intervals and P(a < b) from posterior draws (:func:`posterior_ranks`);
6. the learning-rate basin (:func:`lr_basin`) and, for the search itself, whether it helped
   (:func:`search_value`): the trend of score over proposal order, and the sampler's model-based
   proposals against uniform draws (control and start-up proposals) by a Mann-Whitney test.

:func:`analyse` does 1-5 and the basin in one call. Rules and thresholds: ``docs/statistics.md``.
"""

from .analysis import ArchStats, StudyStats, analyse
from ._power import planning_diff, resolve_power, welch_df
from .inference import (ALPHA, MARGIN, POWER, VARIANCE_METHOD, VERDICTS, Comparison, Interval, Ranks, VarianceFit,
                        adjust, compare, interval, posterior_ranks, seeds_needed, variance_fit)
from .ladder import LadderStats, analyse_ladder, extrapolate
from .outcomes import (OUTCOMES, ArchLr, LrBasin, LrCell, Run, arch_basin, classify_run, hurdle_key, hurdle_order,
                       lr_basin, stall_margin, sweep, unigram_bits_per_byte, wilson)
from .lr_transfer import LrTransfer, TransferCost, lr_transfer
from .rung import Rung, RungArch, rung_from_runs
from .search_value import (FrontLoading, SearchValue, ShiftTest, Trend, expected_best_of_k, front_loading,
                           hodges_lehmann, search_value, shift_test, trend)

__all__ = [
    "ALPHA", "MARGIN", "POWER", "VERDICTS", "OUTCOMES",
    "Run", "classify_run", "stall_margin", "unigram_bits_per_byte", "wilson",
    "LrCell", "ArchLr", "sweep", "hurdle_key", "hurdle_order", "LrBasin", "lr_basin", "arch_basin",
    "VARIANCE_METHOD", "VarianceFit", "variance_fit", "welch_df", "Interval", "interval", "Comparison", "compare",
    "adjust", "seeds_needed", "resolve_power", "planning_diff",
    "Ranks", "posterior_ranks", "SearchValue", "expected_best_of_k", "search_value", "Trend", "trend", "ShiftTest",
    "shift_test", "hodges_lehmann", "FrontLoading", "front_loading",
    "ArchStats", "StudyStats", "analyse",
    "Rung", "RungArch", "rung_from_runs", "LadderStats", "analyse_ladder", "extrapolate",
    "LrTransfer", "TransferCost", "lr_transfer",
]
