"""The command line: thin Typer commands over plain functions.

Heavy imports (torch, lightning, optuna, matplotlib) happen inside the commands that need them, so
``normsearch --help`` is instant. Bad input prints one line, ``error: ...``, and exits with code 2.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

from ._version import __version__
from .cli_support import (
    Group,
    at_least,
    bench_errors,
    check_new_file,
    read_only,
    shared_options,
    storage_option,
    user_errors,
)
from .cli_stage import (STAGE_OPTIONS, SWEEP_OPTIONS, _launch, _measure_stages, _stage_parent, _stage_settings,
                        _sweep_settings)
from .errors import NormsearchError

app = typer.Typer(
    cls=Group,
    name="normsearch",
    help="Search where the normalization layers of a Transformer should go.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _version(value: bool):
    if value:
        typer.echo(f"normsearch {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Print the version and exit."),
):
    """Search where the normalization layers of a Transformer should go."""


@app.command("baselines")
@user_errors
def baselines_cmd(
    as_json: bool = typer.Option(False, "--json", help="Print the canonical specs as JSON."),
    kind: str = typer.Option("rmsnorm", help="Norm kind of the baselines (dyt stays DyT)."),
    layers: int = typer.Option(4, help="Depth used to resolve per-layer rules and arch ids."),
):
    """List the built-in baselines: their sites and their source (a legend of the short site names
    follows the list)."""
    from .baselines import listing

    at_least(1, layers=layers)
    typer.echo(listing(kind, layers, as_json))


@app.command()
@user_errors
def show(
    spec: str = typer.Argument(..., help="A baseline name or a placement spec file (.yaml)."),
    layers: int = typer.Option(4, "--layers", help="Depth to resolve the placement for."),
    d_model: int = typer.Option(128, help="Width, for the parameter count."),
    n_heads: int = typer.Option(4, help="Heads, for the q/k/v parameter count."),
    kind: str = typer.Option("rmsnorm", help="Norm kind for a baseline."),
):
    """Draw one block's data flow with its norms (per layer where they differ)."""
    at_least(1, layers=layers, d_model=d_model, n_heads=n_heads)
    from .baselines import named_or_file
    from .config import ModelConfig
    from .show import show_text

    placement, source = named_or_file(spec, kind)
    config = ModelConfig(n_layers=layers, d_model=d_model, n_heads=n_heads)
    typer.echo(show_text(placement, config, source))


OVERRIDES = {"allow_extra_args": True, "ignore_unknown_options": True}


@app.command(context_settings=OVERRIDES)
@user_errors
def train(
    ctx: typer.Context,
    recipe: Path = typer.Argument(..., help="A recipe YAML (its model, data and train sections are used)."),
    placement: str = typer.Option(..., "--placement", "-p", help="A baseline name or a placement spec file."),
    seed: Optional[int] = typer.Option(None, help="Seed (default: the recipe's first)."),
    lr: Optional[float] = typer.Option(None, help="Peak learning rate (default: the recipe's first)."),
    checkpoint: Optional[Path] = typer.Option(None, help="Write the final weights (.safetensors) here."),
    as_json: bool = typer.Option(False, "--json", help="Print the whole result record as JSON."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Show Lightning's own output."),
):
    """Train one placement once (one seed, one learning rate) and print its result.

    Any recipe field can be overridden: --train.steps 50 --model.n_layers 2."""
    from .checks import ensure_runnable
    from .recipe import lr_problem, seed_problem

    for problem in (seed is not None and seed_problem(seed, "--seed"), lr is not None and lr_problem(lr, "--lr")):
        if problem:
            raise NormsearchError(problem)
    if checkpoint is not None:
        check_new_file(checkpoint, "--checkpoint")
    from .recipe import load_recipe

    from .baselines import named_or_file

    r = load_recipe(recipe, ctx.args)
    p, _ = named_or_file(placement, r.search.norm_kind)
    ensure_runnable(r, only=("data", "vocabulary", "cache"))
    from .progress import RunBar
    from .train import summarize, train_run

    with RunBar() as bar:
        result = train_run(p, r.model, r.data, r.train, seed=r.train.seeds[0] if seed is None else seed,
                           lr=r.train.lr[0] if lr is None else lr, progress=bar, verbose=verbose,
                           checkpoint=checkpoint, log_dir=r.folder / "logs", log_group=r.name)
    typer.echo(json.dumps(result.to_dict(), indent=1) if as_json else summarize(result))


@app.command(context_settings=OVERRIDES)
@user_errors
def run(
    ctx: typer.Context,
    recipe: Path = typer.Argument(..., help="The recipe YAML."),
    storage: Optional[str] = typer.Option(None, help="Optuna storage URL or journal file shared by workers "
                                          "(default: SQLite in results/<name>/)."),
    name: Optional[str] = typer.Option(None, help="Study name (default: the recipe's)."),
    devices: Optional[str] = typer.Option(None, help="GPU ids, e.g. 0,1,2,3: one worker per GPU (per "
                                          "train.devices GPUs when a trial spans several), progress shown together."),
    jobs: Optional[str] = typer.Option(None, "--jobs", "-j", help="Local workers on the study (per GPU group with "
                                       "--devices), sharing its runs; auto (the default, search.jobs): split "
                                       "the CPU cores by what is fastest for the model, one per GPU group."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Show Lightning's and Optuna's own output."),
):
    """Run the search: baselines first, then searched placements, until the recipe's trials are done.

    Running it again resumes; running it on several processes or machines with one --storage makes
    them workers of one study. Any recipe field can be overridden: --search.trials 20."""
    from .checks import ensure_runnable
    from .jobs import Job
    from .recipe import load_recipe

    r = load_recipe(recipe, list(ctx.args) + (["--name", name] if name else []))
    url = storage_option(storage)
    ensure_runnable(r, storage=url)
    job = Job("run", r, url)
    _launch(job, jobs, devices, verbose)
    from .search import open_results

    handle = open_results(None, url or r.storage_url, r.name)
    _print_report(handle, r.folder)


@app.command()
@user_errors
@shared_options(*STAGE_OPTIONS)
def confirm(
    racing: Optional[int] = typer.Option(None, help="Race: add up to this many runs, one seed at a time, to the "
                                         "architectures whose rank interval reaches the leader's (default: "
                                         "search.racing); its verdicts are exploratory."),
    primary: Optional[str] = typer.Option(None, "--primary", help="The declared contrasts, 'A vs B', comma-separated "
                                          "(labels, baselines, first, best_baseline; default: confirm.primary, else "
                                          "'first vs best_baseline')."),
    **shared,
):
    """Confirm a finished search: retrain its top placements and the baselines on fresh seeds, each at
    the learning rate the search chose for it, scored on the test split. Part of the same study:
    resumable, shared by workers, deduplicated. The report then leads with the confirmed verdicts."""
    from dataclasses import replace

    from .jobs import stage_job
    from .recipe import ConfirmConfig, RacingConfig

    at_least(0, racing=racing)
    parent = _stage_parent(**shared)
    settings = _stage_settings(shared, auto=True)
    if primary is not None:
        settings["primary"] = [c.strip() for c in primary.split(",") if c.strip()]
    cfg = replace(parent.recipe.confirm or ConfirmConfig(), **settings)
    race = parent.recipe.search.racing
    if racing is not None:
        race = replace(race or RacingConfig(), budget=racing) if racing > 0 else None
    _launch(stage_job("confirm", parent, confirm=cfg, racing=race), shared["jobs"], None, shared["verbose"])
    _print_report(parent, parent.folder)


@app.command()
@user_errors
@shared_options(*STAGE_OPTIONS, *SWEEP_OPTIONS)
def ladder(
    rungs: Optional[str] = typer.Option(None, help="Model overrides per rung, smallest first, as YAML: "
                                        "'[{n_layers: 2}, {n_layers: 4}, {n_layers: 8}]' (default: ladder.rungs)."),
    tokens_per_param: Optional[float] = typer.Option(None, help="Training tokens per run = this x parameters "
                                                     "(default: the search's steps at every rung)."),
    max_steps: Optional[int] = typer.Option(None, help="Cap on steps per run."),
    lr: Optional[str] = typer.Option(None, help="auto | sweep | transfer (auto: transfer under muP when the rungs "
                                     "vary the width alone, else sweep; transfer elsewhere is refused)."),
    preset: Optional[str] = typer.Option(None, help="A ladder set up in one word: gpu (21M to 354M parameters, 20 "
                                         "tokens per parameter, GPT-2 BPE .bin files, bf16 on CUDA; give the data "
                                         "with --recipe '{data.path: DIR}'). Settings given beside it win."),
    name: Optional[str] = typer.Option(None, "--name", help="A second ladder of the same study, trained and stored "
                                       "apart (stages ladder-NAME-<i>; default: the study's ladder)."),
    recipe: Optional[str] = typer.Option(None, "--recipe", help="Recipe overrides every rung shares, as YAML: "
                                         "'{train.precision: bf16-mixed, data.path: /data/fineweb10B}'."),
    target: Optional[float] = typer.Option(None, help="Extrapolate the order to this many parameters."),
    out: Optional[Path] = typer.Option(None, help="Folder for ladder.md, ladder.json and ladder.png, and each "
                                       "rung's report in OUT/ladder-<i>/ (default: results/<name>/ladder, the rungs' "
                                       "reports in results/<name>/ladder-<i>/)."),
    report_only: bool = typer.Option(False, "--report-only", help="Write the report of the rungs so far; train "
                                     "nothing. The settings are the stored ladder's: any left out are read from "
                                     "it, any given must match it."),
    **shared,
):
    """Does the winner still win when the model grows? Retrain the search's top placements and the
    baselines at three or more sizes (rungs), tokens growing with parameters, on fresh seeds; report
    each rung's ranking, rank agreement across rungs, every reversal, and power-law fits. Part of the
    same study: resumable, shared by workers, deduplicated by (architecture, rung). A ladder already
    stored keeps its settings (those left out are read from it, those given must match it); --rungs
    with the stored rungs and one more after them adds a rung."""
    from . import _yaml
    from .jobs import stage_job
    from .ranking import DEFAULT_AGAINST
    from .stages.ladder import plan_rungs, resolve_ladder

    given = {"tokens_per_param": tokens_per_param, "max_steps": max_steps, "lr": lr, "target": target}
    given = {**{k: v for k, v in given.items() if v is not None}, **_sweep_settings(shared), **_stage_settings(shared)}
    if name is not None:
        given["name"] = name
    if recipe is not None:
        given["recipe"] = _yaml.loads(recipe, "--recipe")
        if not isinstance(given["recipe"], dict):
            raise NormsearchError(f"--recipe must be a mapping of recipe overrides, e.g. "
                                  f"'{{data.path: /data/fineweb10B}}', not {recipe!r}")
    if preset is not None:
        from .stages.ladder import PRESETS

        if preset not in PRESETS:
            from .errors import unknown

            raise NormsearchError(f"--preset: {unknown('preset', preset, PRESETS)}")
        given = {**PRESETS[preset], **given, "recipe": {**PRESETS[preset]["recipe"], **given.get("recipe", {})}}
        if given["recipe"].get("data.corpus") == "bin" and not given["recipe"].get("data.path"):
            raise NormsearchError(f"--preset {preset} trains on pre-tokenized GPT-2 BPE files this machine has "
                                  f"(nanoGPT's train.bin and val.bin; nothing is downloaded): give their folder with "
                                  f"--recipe '{{data.path: DIR}}'")
    if rungs is not None:
        given["rungs"] = _yaml.loads(rungs, "--rungs")
        if not isinstance(given["rungs"], list):
            raise NormsearchError(f"--rungs must be a list of model overrides, smallest first, e.g. "
                                  f"'[{{n_layers: 2}}, {{n_layers: 4}}, {{n_layers: 8}}]', not {rungs!r}")
    parent = _stage_parent(**shared)
    cfg = resolve_ladder(parent, given, report_only)
    plan_rungs(parent.recipe, cfg)  # the rungs checked (and required) before anything trains
    if not report_only:
        _launch(stage_job("ladder", parent, ladder=cfg), shared["jobs"], None, shared["verbose"])
    if shared["measure_throughput"]:
        from .stages.ladder import ladder_handles

        _measure_stages([h for _, h in ladder_handles(parent, cfg)])
    from .report import write_ladder_report

    bases = cfg.baselines if cfg.baselines is not None else parent.recipe.search.baselines
    folder = out or parent.folder / ("ladder" + (f"-{cfg.name}" if cfg.name else ""))
    path = write_ladder_report(parent, cfg, folder, list(bases) or list(DEFAULT_AGAINST), rungs_dir=out)
    typer.echo(f"ladder report: {path} (with ladder.json and ladder.png; each rung's report in "
               f"{out or parent.folder}/ladder-{cfg.name + '-' if cfg.name else ''}<i>/)")


@app.command(context_settings=OVERRIDES)
@user_errors
def validate(
    ctx: typer.Context,
    recipe: Path = typer.Argument(..., help="The recipe YAML."),
    storage: Optional[str] = typer.Option(None, help="The storage URL run would be given (env:VAR allowed)."),
    name: Optional[str] = typer.Option(None, help="The study name run would be given."),
):
    """Check everything run would refuse, without training or writing anything: the recipe, its space
    (large enough for search.trials), the data (readable, long enough for the context), the storage
    URL and the folders. Takes run's overrides: --search.trials 20."""
    from .checks import check_recipe, recipe_summary
    from .recipe import load_recipe

    r = load_recipe(recipe, list(ctx.args) + (["--name", name] if name else []))
    problems = check_recipe(r, storage=storage)
    if problems:
        raise NormsearchError("; ".join(problems))
    typer.echo(recipe_summary(r, recipe, storage, storage_option(storage) if storage else r.storage_url))


# The options of the commands that read a study, defined once.
READ_OPTIONS = (
    ("study", Optional[str], typer.Argument(None, help="A results folder (results/<name>) or a recipe file.")),
    ("storage", Optional[str], typer.Option(None, "--storage", help="Optuna storage URL.")),
    ("study_name", Optional[str], typer.Option(None, "--study-name", help="Study name in that storage.")),
)


@app.command()
@user_errors
@shared_options(*READ_OPTIONS)
def status(**shared):
    """Finished / running / failed / pruned trials, the workers, and the best so far."""
    from .search import status_text
    from .stages import stage_status

    handle = _read_study(**shared)
    typer.echo("\n".join([status_text(handle), *stage_status(handle)]))


@app.command()
@user_errors
@shared_options(*READ_OPTIONS)
def report(
    against: list[str] = typer.Option([], "--against", help="Also compare with this baseline (repeatable)."),
    out: Optional[Path] = typer.Option(None, help="Folder for report.md, ranking.csv/json and plots "
                                       "(default: the study's results folder). It must be new, empty, or hold "
                                       "an earlier report."),
    overwrite: bool = typer.Option(False, help="Write into an --out folder that holds other files."),
    measure_throughput: bool = typer.Option(False, "--measure-throughput", help="First time every ranked "
                                            "architecture's training step, interleaved in one process, into the "
                                            "study's throughput.json: the tokens/s ratios then come from it."),
    **shared,
):
    """Rank the architectures of a study against the baselines and write the report."""
    from .report import check_out_dir

    if out is not None:
        check_out_dir(out, overwrite)
    from .ranking import DEFAULT_AGAINST

    handle = _read_study(**shared)
    if measure_throughput:
        from .records import STAGE_SEP

        if STAGE_SEP in handle.study.study_name:  # its model, batch or context may not be the study's recipe's
            parent, kind = handle.study.study_name.split(STAGE_SEP, 1)
            command = "ladder" if kind.startswith("ladder") else "robustness" if kind.startswith("robust") else None
            raise NormsearchError(
                f"--measure-throughput: {handle.study.study_name!r} is a stage of study {parent!r}, whose model may "
                f"not be the study's recipe's; measure it with "
                + (f"`normsearch {command} STUDY --report-only --measure-throughput`" if command else
                   f"`normsearch report` on the study {parent!r}"))
        from ._cost_bench import measure_study
        from .ranking import rank

        typer.echo(f"wrote {measure_study(handle, rank(handle, against=[]), echo=typer.echo)}")
    _print_report(handle, out or handle.folder, [*DEFAULT_AGAINST, *against], overwrite=overwrite or out is None,
                  required_against=against)


def _read_study(study: Optional[str], storage: Optional[str], study_name: Optional[str]):
    """The study a reading command names (a mistyped SQLite path is an error, not a new database)."""
    from .search import open_results

    return open_results(study, read_only(study, storage), study_name)


def _print_report(handle, folder: Path, against=None, overwrite: bool = True, required_against=()):
    """Write the report, then print what it says: the confirmed ranking first when there is one (100
    columns), the verdicts against each baseline, and the report's path."""
    from .ranking import DEFAULT_AGAINST
    from .report import terminal_summary, write_report

    result = write_report(handle, folder, against=DEFAULT_AGAINST if against is None else against,
                          overwrite=overwrite, required_against=required_against)
    typer.echo(terminal_summary(result))


@app.command("export")
@user_errors
@shared_options(*READ_OPTIONS)
def export_cmd(
    out: Path = typer.Option(..., "--out", "-o", help="The folder to write spec.yaml, config.json, model.py, "
                             "norms.py, model.safetensors and README.md to."),
    rank: Optional[int] = typer.Option(None, "--rank", help="The K-th architecture of the ranking."),
    trial: Optional[int] = typer.Option(None, "--trial", help="The architecture trial N evaluated."),
    baseline: Optional[str] = typer.Option(None, "--baseline", help="A baseline of the study, by name."),
    retrain: bool = typer.Option(False, help="Train it again instead of using the kept weights."),
    steps: Optional[int] = typer.Option(None, help="Retrain for this many steps (implies --retrain)."),
    overwrite: bool = typer.Option(False, help="Replace an earlier export in --out."),
    **shared,
):
    """Export an architecture of a study as a standalone PyTorch module (torch alone needed)."""
    at_least(1, steps=steps, rank=rank)
    at_least(0, trial=trial)
    if out.exists() and not out.is_dir():
        raise NormsearchError(f"--out {out}: a file, not a folder")
    study, study_name = shared["study"], shared["study_name"]
    storage = read_only(study, shared["storage"])
    from .export import EXPORT_FILES, export
    from .progress import RunBar

    with RunBar() as bar:
        path = export(study, out, rank=rank, trial=trial, baseline=baseline, retrain=retrain, steps=steps,
                      storage=storage, study_name=study_name, overwrite=overwrite, progress=bar)
    typer.echo(f"exported to {path}: {', '.join(EXPORT_FILES)}")
    typer.echo(f"  load it: import sys; sys.path.insert(0, {str(path)!r}); from model import from_pretrained; "
               f"model = from_pretrained()")


bench_app = typer.Typer(cls=Group, help="Benchmarks: speed against a reference measured in the same run.",
                        no_args_is_help=True)
app.add_typer(bench_app, name="bench")


@bench_app.command("kernels", context_settings=OVERRIDES)
@user_errors
def bench_kernels(ctx: typer.Context):
    """Norm kernels on a CUDA GPU: Triton against torch eager, torch.compile and Liger-Kernel, in GB/s
    and as a fraction of the copy bandwidth (options: --tokens, --hidden, --ops, --providers, --out)."""
    from .kernels.bench import main as bench_main

    raise typer.Exit(bench_errors(bench_main, list(ctx.args)))


@bench_app.command("options", context_settings=OVERRIDES)
@user_errors
def bench_options(ctx: typer.Context):
    """What each norm option costs: Pre-LN with one option at a time (gains, q/k/v, ctx, embed norm, residual
    scalars, x0, sinks, gate) and the 2026 baselines, training tokens/s as a ratio to Pre-LN measured in the
    same run (options: --layers, --d-model, --context, --batch, --rounds, --only, --json)."""
    from ._option_cost import main as bench_main

    raise typer.Exit(bench_errors(bench_main, list(ctx.args)))


@bench_app.command("trial", context_settings=OVERRIDES)
@user_errors
def bench_trial(ctx: typer.Context):
    """The training loop of a trial against a bare PyTorch loop on the same model and batches: the ratio
    of training tokens/s, and what the diagnostics cost (options: --steps, --repeats, --layers, ...)."""
    from .benchmark import main as bench_main

    raise typer.Exit(bench_errors(bench_main, list(ctx.args)))


from . import cli_ablate, cli_robustness  # noqa: E402  (commands of their own modules, registered last)

cli_robustness.register(app)
cli_ablate.register(app)


def main():
    app()


if __name__ == "__main__":
    sys.exit(main())
