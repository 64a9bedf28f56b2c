"""The search: an Optuna study whose trials are architectures.

One trial = one placement evaluated over the recipe's seeds and learning-rate sweep, every run
trained exactly as the baselines are. The modules:

- :mod:`._open`: create or load a study, check the recipe, find one from a results folder;
- :mod:`._loop`: the one loop: take a task, deduplicate, train, store (``run_study``);
- :mod:`._tasks`: what a trial trains (a task) and where tasks come from (a source);
- :mod:`._sampled`: the architecture search's source: the baselines, then the sampler's proposals;
- :mod:`._propose`: proposals that depend on the recipe, not on the workers' timing;
- :mod:`._controls`: control proposals (uniform draws, ``search.control``) and the searched proposals by kind;
- :mod:`._liveness`: heartbeats, and reaping the trials of dead workers;
- :mod:`._census`: where a study stands (``normsearch status``);
- :mod:`._disk`: results on disk before storage, and sending them on;
- :mod:`._samplers`: the sampler and pruner registries;
- :mod:`._workers`: local workers (``--jobs``, ``--devices``), started for any job;
- :mod:`._optuna`: every use of Optuna's private API.

The records a study stores are in :mod:`normsearch.records`.
"""

from ._census import Census, census, status_text
from ._controls import Proposal, searched_proposals
from ._liveness import reap_dead_trials, worker_host, worker_id
from ._loop import Search, StudyInterrupted, run_study
from ._open import StudyHandle, fingerprint, open_results, open_study, recipe_of
from ._sampled import Sampled
from ._samplers import PRUNERS, SAMPLERS, make_pruner, make_sampler
from ._tasks import Task, TaskSource
from ._workers import (WORKER_INDEX, WORKER_JOB, WORKER_NAME, WORKER_STORAGE, WORKER_VERBOSE, Worker, cuda_devices,
                       device_groups, parse_jobs, plan_workers, run_workers, uses_gpu)

__all__ = [
    "Census", "PRUNERS", "Proposal", "SAMPLERS", "Sampled", "Search", "StudyHandle", "StudyInterrupted", "Task",
    "TaskSource",
    "census", "fingerprint", "make_pruner", "make_sampler", "open_results", "open_study", "reap_dead_trials",
    "recipe_of", "run_study", "searched_proposals", "status_text", "worker_host", "worker_id",
    "WORKER_INDEX", "WORKER_JOB", "WORKER_NAME", "WORKER_STORAGE", "WORKER_VERBOSE", "Worker", "cuda_devices",
    "device_groups", "parse_jobs", "plan_workers", "run_workers", "uses_gpu",
]
