"""``normsearch ablate``: a thin command over :mod:`normsearch.stages.ablate`, registered on the app of
:mod:`normsearch.cli` (which imports this module last)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Tuple

import typer

from .cli_stage import STAGE_OPTIONS, _launch, _stage_parent
from .cli_support import at_least, shared_options, user_errors

#: the stage options an ablation takes (its two architectures replace --top and --baselines)
OPTIONS = tuple(o for o in STAGE_OPTIONS if o[0] in ("study", "storage", "study_name", "jobs", "threads", "verbose"))


@user_errors
@shared_options(*OPTIONS)
def ablate(
    between: Tuple[str, str] = typer.Option(..., "--between", help="A and B: two architectures of the study (labels "
                                            "like t6, baseline names like pre_ln, or spec files); A, the reference, "
                                            "gives every combination its chosen learning rate and init."),
    sites: Optional[str] = typer.Option(None, help="The factors, comma-separated: sites where A and B differ "
                                        "(default: every one; with --leave-one-out, A's norms too)."),
    seeds: Optional[int] = typer.Option(None, help="Fresh seeds per combination (default 3; at least 2)."),
    first_seed: Optional[int] = typer.Option(None, "--first-seed", help="The first fresh seed (default 4000)."),
    design: Optional[str] = typer.Option(None, help="full | half | auto: every combination, or the half fraction "
                                         "(resolution k, from 5 factors on); auto: full up to 5 factors."),
    init: Optional[str] = typer.Option(None, help="Add an init factor: swap (A's and B's chosen inits) or two "
                                       "inits a,b (e.g. small,smallmegatron); none: no init factor (the default)."),
    leave_one_out: bool = typer.Option(False, "--leave-one-out", help="Instead of the factorial: A with each of its "
                                       "norms removed and each empty site filled from B, each compared with A."),
    test_bytes: Optional[int] = typer.Option(None, "--test-bytes", help="The test split's size (default: "
                                             "confirm.test_bytes, else 100000)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the design, the run count and the time it would "
                                 "take; train nothing, write nothing."),
    out: Optional[Path] = typer.Option(None, help="Folder for ablate.md, ablate.json and the plots (default: "
                                       "results/<name>/ablate-<i>)."),
    **shared,
):
    """Which sites carry the gap between two architectures? Train every combination of the sites where A
    and B differ (2^k; the half fraction when k > 5), each at A's chosen learning rate and init (or with an
    init factor), on fresh seeds, scored on the test split; report the main effects and two-way
    interactions with intervals (each combination's own SD, Welch-Satterthwaite, Holm) and each one's
    share of the gap. Part of the same study: resumable, shared by workers, deduplicated."""
    from .jobs import stage_job
    from .report._ablate import write_ablate_report
    from .stages.ablate import dry_run as describe, plan

    at_least(2, seeds=seeds)
    parent = _stage_parent(**shared)
    given: dict = {"between": list(between), "leave_one_out": leave_one_out}
    for key, value in {"seeds": seeds, "first_seed": first_seed, "design": design, "test_bytes": test_bytes}.items():
        if value is not None:
            given[key] = value
    if sites is not None:
        given["sites"] = list(dict.fromkeys(s.strip() for s in sites.split(",") if s.strip()))
    if init is not None:
        given["init"] = [s.strip() for s in init.split(",") if s.strip()]
    p = plan(parent, given)
    if dry_run:
        typer.echo(describe(parent, p, shared["jobs"]))
        return
    _launch(stage_job("ablate", parent, ablate=p.cfg), shared["jobs"], None, shared["verbose"])
    path = write_ablate_report(parent, p.cfg, out)
    typer.echo(f"ablation report: {path} (with ablate.json and its plots)")


def register(app) -> None:
    """Add ``normsearch ablate`` to the app (:mod:`normsearch.cli` does, after its own commands)."""
    app.command()(ablate)
