"""``normsearch robustness``: a thin command over :mod:`normsearch.stages.robustness`, registered on
the app of :mod:`normsearch.cli` (which imports this module last)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .cli_stage import STAGE_OPTIONS, SWEEP_OPTIONS, _launch, _measure_stages, _stage_parent, _stage_settings, \
    _sweep_settings
from .cli_support import shared_options, user_errors


@user_errors
@shared_options(*STAGE_OPTIONS, *SWEEP_OPTIONS)
def robustness(
    variants: Optional[str] = typer.Option(None, help="Variants of the recipe, comma-separated (default: swiglu, "
                                           "context-4x, bpe, shakespeare, no-weight-decay, no-warmup, steps-4x, "
                                           "steps-16x; the reference, base, is always trained)."),
    define: Optional[str] = typer.Option(None, help="More variants, as YAML: '{wd-high: {train.weight_decay: 0.3}}' "
                                         "(each a mapping of recipe overrides); name them in --variants."),
    out: Optional[Path] = typer.Option(None, help="Folder for robustness.md and robustness.json, and each "
                                       "variant's report in OUT/robust-<name>/ (default: "
                                       "results/<name>/robustness, the variants' reports in "
                                       "results/<name>/robust-<name>/)."),
    report_only: bool = typer.Option(False, "--report-only", help="Write the report of the variants trained so "
                                     "far; train nothing."),
    **shared,
):
    """Does a win survive a change of recipe? Retrain the search's top placements and the baselines,
    each in its chosen init, under named variants of the recipe (SwiGLU, a longer context, BPE, a
    second corpus, no weight decay, no warmup, 4x and 16x the steps, or your own), the learning rate
    swept in each, on fresh seeds; report each variant's ranking and, per contrast, in how many
    variants its sign holds and its average advantage over variants (a random-effects model), with
    the trend of each gap with training length. Part of the same study: resumable, shared by
    workers, deduplicated."""
    from . import _yaml
    from .errors import NormsearchError
    from .jobs import stage_job
    from .report import write_robustness_report
    from .stages.robustness import resolve

    parent = _stage_parent(**shared)
    given = {**_sweep_settings(shared), **_stage_settings(shared)}
    if variants is not None:
        given["variants"] = [v.strip() for v in variants.split(",") if v.strip()]
    if define is not None:
        given["define"] = _yaml.loads(define, "--define")
        if not isinstance(given["define"], dict):
            raise NormsearchError(f"--define must be a mapping of variant names to recipe overrides, e.g. "
                                  f"'{{wd-high: {{train.weight_decay: 0.3}}}}', not {define!r}")
    cfg = resolve(parent, given, report_only)
    if not report_only:
        _launch(stage_job("robustness", parent, robustness=cfg), shared["jobs"], None, shared["verbose"])
    if shared["measure_throughput"]:
        from .stages.robustness import variant_handles

        _measure_stages([h for _, h, _ in variant_handles(parent, cfg)])
    path = write_robustness_report(parent, cfg, out or parent.folder / "robustness", rungs_dir=out)
    typer.echo(f"robustness report: {path} (with robustness.json; each variant's report in "
               f"{out or parent.folder}/robust-<name>/)")


def register(app) -> None:
    """Add ``normsearch robustness`` to the app (:mod:`normsearch.cli` does, after its own commands)."""
    app.command()(robustness)
