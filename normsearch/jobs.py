"""A command's work as one typed job, and the one way to run it: in this process, or on local
workers (``--jobs N``; ``--devices``, one or more per GPU group) that each run the same job.

A :class:`Job` is what ``run``, ``confirm`` and ``ladder`` do once their options are read: the
study's recipe and storage, and the stage's settings (typed: ``ConfirmConfig``, ``RacingConfig``,
``LadderConfig``). :func:`launch` prepares it here once (opens the study, creates the stage, so that
its list of tasks is fixed before any worker starts), then runs :meth:`Job.work` in this process or
in N worker processes. A worker process gets the job as JSON in its environment
(``NORMSEARCH_JOB``), read back into the same types (:meth:`Job.from_json`); nothing is turned back
into command-line flags. Worker processes: :mod:`normsearch._worker`; their start, progress and
signals: :func:`normsearch.search.run_workers`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

KINDS = ("run", "confirm", "ladder", "robustness", "ablate")


@dataclass
class Job:
    """One command's work on one study. ``recipe`` is the study's (the search's for a stage);
    ``storage`` its URL; ``folder`` its results folder; ``study_name`` the search's study."""

    kind: str
    recipe: Any  # Recipe
    storage: str | None = None
    folder: Path | None = None
    study_name: str | None = None
    confirm: Any = None  # ConfirmConfig (a confirm job)
    racing: Any = None  # RacingConfig or None (a confirm job)
    ladder: Any = None  # LadderConfig (a ladder job)
    robustness: Any = None  # RobustnessConfig (a robustness job)
    ablate: Any = None  # AblateConfig, resolved (an ablate job)

    # -- words for the user ------------------------------------------------------------------------

    @property
    def title(self) -> str:
        return self.recipe.name + ("" if self.kind == "run" else f"/{self.kind}")

    @property
    def kept(self) -> str:
        """What an interrupted job keeps."""
        return "trials" if self.kind == "run" else "runs"

    @property
    def what(self) -> str:
        """What the same command resumes."""
        name = self.recipe.name
        return {"run": f"study {name!r}", "confirm": f"the confirmation of {name!r}",
                "ladder": f"the ladder of {name!r}", "robustness": f"the robustness variants of {name!r}",
                "ablate": f"the ablation of {name!r}"}[self.kind]

    # -- the work ----------------------------------------------------------------------------------

    def parent(self):
        """The search's handle (a stage job's)."""
        from .search import StudyHandle, open_results

        handle = open_results(None, self.storage, self.study_name or self.recipe.name)
        return StudyHandle(self.recipe, handle.study, handle.storage_url, self.folder or handle.folder)

    def prepare(self) -> str:
        """Before any worker: open the study (a run) or create its stage (its list fixed once).
        Returns the storage URL the workers share."""
        if self.kind == "run":
            from .search import Sampled, Search, open_study

            handle = open_study(self.recipe, self.storage)
            Sampled().enqueue_baselines(Search(handle))
            return handle.storage_url
        parent = self.parent()
        if self.kind == "confirm":
            from .stages import open_confirm

            open_confirm(parent, self.confirm, self.racing)
        elif self.kind == "ladder":
            from .stages.ladder import open_rungs

            open_rungs(parent, self.ladder)
        elif self.kind == "ablate":
            from .stages.ablate import open_ablation

            open_ablation(parent, self.ablate)
        else:
            from .stages.robustness import open_variants

            open_variants(parent, self.robustness)
        return parent.storage_url

    def work(self, display=None, verbose: bool = False, index: int = 0):
        """Be one worker of the job until it is done. Returns the study's (the search's) handle."""
        if self.kind == "run":
            from .search import run_study

            handle = run_study(self.recipe, storage=self.storage, display=display, verbose=verbose, seed_offset=index)
            if self.recipe.confirm is not None:  # the confirmation stage, once the search is done
                from .stages import run_confirm

                run_confirm(handle, self.recipe.confirm, self.recipe.search.racing, display, verbose)
            return handle
        parent = self.parent()
        if self.kind == "confirm":
            from .stages import run_confirm

            run_confirm(parent, self.confirm, self.racing, display, verbose)
        elif self.kind == "ladder":
            from .stages.ladder import run_ladder

            run_ladder(parent, self.ladder, display, verbose)
        elif self.kind == "ablate":
            from .stages.ablate import run_ablation

            run_ablation(parent, self.ablate, display, verbose)
        else:
            from .stages.robustness import run_robustness

            run_robustness(parent, self.robustness, display, verbose)
        return parent

    # -- typed round trip --------------------------------------------------------------------------

    def with_threads(self, threads: int | None) -> "Job":
        return replace(self, recipe=_threads(self.recipe, threads))

    def to_json(self) -> dict:
        from .config import to_mapping

        return {"kind": self.kind, "recipe": self.recipe.raw, "threads": self.recipe.train.threads,
                "folder": str(self.folder) if self.folder is not None else None, "study_name": self.study_name,
                "confirm": to_mapping(self.confirm) if self.confirm is not None else None,
                "racing": to_mapping(self.racing) if self.racing is not None else None,
                "ladder": to_mapping(self.ladder) if self.ladder is not None else None,
                "robustness": to_mapping(self.robustness) if self.robustness is not None else None,
                "ablate": to_mapping(self.ablate) if self.ablate is not None else None}

    @classmethod
    def from_json(cls, d: dict, storage: str | None = None) -> "Job":
        from .config import from_mapping
        from .recipe import ConfirmConfig, RacingConfig, ladder_config, recipe_from_dict
        from .sections import AblateConfig, RobustnessConfig

        if d.get("kind") not in KINDS:
            raise ValueError(f"not a job: {d.get('kind')!r}")
        recipe = recipe_from_dict(d["recipe"])
        job = cls(d["kind"], recipe, storage, Path(d["folder"]) if d.get("folder") else None, d.get("study_name"),
                  from_mapping(ConfirmConfig, d["confirm"], "confirm") if d.get("confirm") is not None else None,
                  from_mapping(RacingConfig, d["racing"], "racing") if d.get("racing") is not None else None,
                  ladder_config(d["ladder"]) if d.get("ladder") is not None else None,
                  from_mapping(RobustnessConfig, d["robustness"], "robustness") if d.get("robustness") is not None
                  else None,
                  ablate=from_mapping(AblateConfig, d["ablate"], "ablate") if d.get("ablate") is not None else None)
        return job.with_threads(d.get("threads"))


def _threads(recipe, threads: int | None):
    """``recipe`` with ``train.threads`` set (unchanged when ``threads`` is None)."""
    return recipe if threads is None else replace(recipe, train=replace(recipe.train, threads=threads))


def with_threads(handle, threads: int | None):
    """A study's handle with ``train.threads`` set (a stage command's --train.threads)."""
    handle.recipe = _threads(handle.recipe, threads)
    return handle


def stage_job(kind: str, parent, **settings) -> Job:
    """The job of a stage (``confirm``, ``ladder``) of the search ``parent`` (a StudyHandle)."""
    return Job(kind, parent.recipe, parent.storage_url, parent.folder, parent.study.study_name, **settings)


def launch(job: Job, jobs, devices: str | None = None, verbose: bool = False):
    """Run ``job`` to the end: in this process when one worker will do, else on local workers (their
    progress shown together). Raises KeyboardInterrupt when it was interrupted (the caller says
    what is kept), a NormsearchError when a worker failed."""
    from .errors import NormsearchError
    from .progress import RunBar, WorkersView
    from .cli_support import interrupted_code
    from .search import cuda_devices, device_groups, parse_jobs, plan_workers, run_workers, uses_gpu

    jobs = parse_jobs(jobs if jobs is not None else job.recipe.search.jobs)
    groups = device_groups(devices, job.recipe.train.devices) if devices is not None else None
    workers = plan_workers(jobs, job.recipe, groups, uses_gpu(job.recipe))
    if groups is None and len(workers) == 1:
        with RunBar(study=job.title) as bar:
            job.work(bar, verbose)
        return
    if groups is not None and not cuda_devices():
        import typer

        typer.echo(f"warning: no CUDA device here: {len(workers)} workers run on the CPU", err=True)
    url = job.prepare()
    names = [w.name for w in workers]
    with WorkersView(job.title, names) as view:
        codes = run_workers(job, workers, url, verbose, view, sigterm=lambda: interrupted_code() == 143)
    if any(c in (130, 143) for c in codes):
        raise KeyboardInterrupt
    if any(codes):
        raise NormsearchError(f"workers {', '.join(n for n, c in zip(names, codes) if c)} failed (exit codes "
                              f"{codes}); their errors are above; finished {job.kept} are kept")
