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
3. the two-way model loss ~ arch + seed over the successful runs at the chosen learning rates gives
   a pooled sigma and df, and Brown-Forsythe's test says whether variances may be pooled
   (:func:`pooled_fit`); intervals (:func:`interval`) and differences (:func:`compare`) use it when
   they may, per-architecture estimates (Welch) otherwise;
4. the comparisons form one family: Holm for claims, Benjamini-Hochberg q-values for screening, TOST
   for equivalence, and seeds needed for what stays undecided (:func:`adjust`);
5. P(best), rank intervals and P(a < b) from posterior draws (:func:`posterior_ranks`);
6. the learning-rate basin (:func:`lr_basin`) and, for the search itself, the sampler against random
   order over the same pool (:func:`search_value`).

:func:`analyse` does 1-5 and the basin in one call. Rules and thresholds: ``docs/statistics.md``.
"""

from .analysis import ArchStats, StudyStats, analyse
from .inference import (ALPHA, MARGIN, POWER, VERDICTS, Comparison, Interval, PooledFit, Ranks, adjust, compare,
                        interval, pooled_fit, posterior_ranks, seeds_needed)
from .ladder import LadderStats, analyse_ladder, extrapolate
from .outcomes import (OUTCOMES, ArchLr, LrBasin, LrCell, Run, arch_basin, classify_run, hurdle_key, hurdle_order,
                       lr_basin, stall_margin, sweep, unigram_bits_per_byte, wilson)
from .rung import Rung, RungArch, rung_from_runs
from .search_value import SearchValue, expected_best_of_k, search_value

__all__ = [
    "ALPHA", "MARGIN", "POWER", "VERDICTS", "OUTCOMES",
    "Run", "classify_run", "stall_margin", "unigram_bits_per_byte", "wilson",
    "LrCell", "ArchLr", "sweep", "hurdle_key", "hurdle_order", "LrBasin", "lr_basin", "arch_basin",
    "PooledFit", "pooled_fit", "Interval", "interval", "Comparison", "compare", "adjust", "seeds_needed",
    "Ranks", "posterior_ranks", "SearchValue", "expected_best_of_k", "search_value",
    "ArchStats", "StudyStats", "analyse",
    "Rung", "RungArch", "rung_from_runs", "LadderStats", "analyse_ladder", "extrapolate",
]
