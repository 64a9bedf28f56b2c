"""Stages after a search: fixed lists of architectures trained again under other conditions, each
an Optuna study of its own trained by the search's one loop (:class:`normsearch.search.Search`
with a stage's tasks as its source). Above the search (which trains them) and the ranking (which
picks what they train); below the report, which writes each stage's report beside the study's.

- :mod:`._stage`: what a stage is (its entries, tasks and stored definition) and its task source;
- :mod:`.confirm`: the confirmation (fresh seeds, the chosen learning rates, the test split);
- :mod:`.racing`: racing's rounds for the confirmation;
- :mod:`.ladder`: the scale ladder's rungs (its report: :mod:`normsearch.report._ladder`).
"""

from ._stage import (A_RACE_END, A_ROUND, A_STAGE, Entry, Stage, StageTasks, find_stage, open_stage, run_stage,
                     search_finished, stage_names, stage_recipe, stage_status, stage_study_name, stored_rounds)
from .confirm import confirm_handle, confirmed_order, open_confirm, run_confirm

__all__ = [
    "A_RACE_END", "A_ROUND", "A_STAGE", "Entry", "Stage", "StageTasks", "confirm_handle", "confirmed_order",
    "find_stage", "open_confirm", "open_stage", "run_confirm", "run_stage", "search_finished", "stage_names",
    "stage_recipe", "stage_status", "stage_study_name", "stored_rounds",
]
