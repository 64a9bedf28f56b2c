"""What the commands that run a job share: launching it (one line on an interruption), and the options
and settings of every stage command (``confirm``, ``ladder``, ``robustness``, ``ablate``). Kept apart
from :mod:`normsearch.cli` so that the stage commands in modules of their own import it without
importing the app (no import cycle)."""

from __future__ import annotations

from typing import Optional

import typer

from .cli_support import interrupted_code, read_only, setup_logging, stop_on_sigterm


def _launch(job, jobs, devices, verbose: bool) -> None:
    """Run a job (in this process or on local workers); an interruption is one line and the shell's code."""
    from .jobs import launch
    from .search import StudyInterrupted

    stop_on_sigterm()
    setup_logging(verbose)
    try:
        launch(job, jobs, devices, verbose)
    except (StudyInterrupted, KeyboardInterrupt):
        typer.echo(f"interrupted: finished {job.kept} are kept; run the same command to resume {job.what}", err=True)
        raise typer.Exit(interrupted_code()) from None


# The options every stage command takes, defined once (cli_support.shared_options).
STAGE_OPTIONS = (
    ("study", str, typer.Argument(..., help="A results folder (results/<name>) or the recipe file of a finished "
                                  "search.")),
    ("top", Optional[int], typer.Option(None, "--top", help="Found placements, best first (default: the recipe's "
                                        "confirm: or ladder: section, else 3 to confirm, 2 for a ladder).")),
    ("seeds", Optional[str], typer.Option(None, "--seeds", help="Fresh seeds per architecture (and rung) (default: "
                                          "the recipe's section, else 3 to confirm, 2 for a ladder); to confirm, "
                                          "also auto: as many as the primary contrasts need for confirm.power.")),
    ("baselines", Optional[str], typer.Option(None, "--baselines", help="Baselines beside them, comma-separated "
                                              "(default: the search's).")),
    ("first_seed", Optional[int], typer.Option(None, "--first-seed", help="The first fresh seed (default 1000 to "
                                               "confirm, 2000 for a ladder).")),
    ("storage", Optional[str], typer.Option(None, "--storage", help="Optuna storage URL of the study.")),
    ("study_name", Optional[str], typer.Option(None, "--study-name", help="Study name in that storage.")),
    ("jobs", Optional[str], typer.Option(None, "--jobs", "-j", help="Local workers (default: as for run).")),
    ("threads", Optional[int], typer.Option(None, "--train.threads", help="CPU threads per worker.")),
    ("verbose", bool, typer.Option(False, "--verbose", "-v", help="Show Lightning's and Optuna's own output.")),
)


# The options of the stages that sweep the learning rate in each of several stages (a ladder's rungs, the
# recipe variants) and measure what each architecture costs per second there, defined once.
SWEEP_OPTIONS = (
    ("lr_extend", Optional[int], typer.Option(None, "--lr-extend", help="Points the sweep of each stage (each rung, "
                                              "each variant) may add past an end that holds the best (default: "
                                              "train.lr_extend).")),
    ("lr_resolution", Optional[float], typer.Option(None, "--lr-resolution", help="Refine each architecture's sweep "
                                                    "in each stage (each rung, each variant) to this many decades "
                                                    "around its best; 0: no refinement (default: "
                                                    "train.lr_resolution).")),
    ("measure_throughput", bool, typer.Option(False, "--measure-throughput", help="Before the report, time every "
                                              "architecture's training step in each trained stage at that stage's "
                                              "own model, batch and context, interleaved in one process, into the "
                                              "stage's throughput.json: its tokens/s ratios and effective speed-ups "
                                              "then come from it, not from the runs' records.")),
)


def _sweep_settings(shared: dict) -> dict:
    """The sweep settings given on the command line (SWEEP_OPTIONS)."""
    return {k: shared[k] for k in ("lr_extend", "lr_resolution") if shared[k] is not None}


def _measure_stages(handles, echo=typer.echo) -> None:
    """``--measure-throughput``: every stage in ``handles`` (StudyHandles) that has a finished trial, measured at
    its own recipe's shape into its own folder's ``throughput.json`` (a stage still to train is skipped)."""
    from ._cost_bench import measure_study
    from .ranking import rank
    from .stages._stage import has_finished_trial

    for h in handles:
        if not has_finished_trial(h):
            echo(f"{h.study.study_name}: nothing trained yet, not measured")
            continue
        echo(f"wrote {measure_study(h, rank(h, against=[]))}")


def _stage_settings(shared: dict, auto: bool = False) -> dict:
    """The settings of a stage given on the command line (top, seeds, first seed, baselines); ``auto``:
    ``--seeds auto`` is allowed (the confirmation's power analysis)."""
    from .errors import NormsearchError

    out = {k: shared[k] for k in ("top", "first_seed") if shared[k] is not None}
    seeds = shared["seeds"]
    if seeds is not None:
        if seeds.strip() == "auto" and auto:
            out["seeds"] = "auto"
        elif seeds.strip().isdigit():
            out["seeds"] = int(seeds)
        else:
            raise NormsearchError(f"--seeds must be a whole number{' or auto' if auto else ''}, not {seeds!r}")
    if shared["baselines"] is not None:
        out["baselines"] = [b.strip() for b in shared["baselines"].split(",") if b.strip()]
    return out


def _stage_parent(study: str, storage: Optional[str], study_name: Optional[str], threads: Optional[int], **_):
    """The finished search a stage command works on (its recipe with --train.threads applied)."""
    url = read_only(study, storage)
    from .jobs import with_threads
    from .search import open_results

    return with_threads(open_results(study, url, study_name), threads)
