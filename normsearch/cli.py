"""The command line: thin Typer commands over plain functions.

Heavy imports (torch, lightning, optuna, matplotlib) happen inside the commands that need them, so
``normsearch --help`` is instant. Bad input prints one line, ``error: ...``, and exits with code 2.
"""

from __future__ import annotations

import functools
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
    interrupted_code,
    read_only,
    stop_on_sigterm,
    storage_option,
)
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


def user_errors(fn):
    """Run a command; a NormsearchError becomes one line on stderr and exit code 2."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except NormsearchError as e:
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(2) from None

    return wrapper


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


def _placement(name_or_file: str, kind: str):
    from .baselines import BASELINES, baseline
    from .spec import Placement

    path = Path(name_or_file)
    if path.suffix in (".yaml", ".yml") or path.is_file():
        if not path.is_file():
            raise NormsearchError(f"{path}: no such spec file")
        placement = Placement.load(path)
        return placement.with_name(placement.name or path.stem), None
    p = baseline(name_or_file, kind)
    return p, BASELINES[name_or_file].source


@app.command("baselines")
@user_errors
def baselines_cmd(
    as_json: bool = typer.Option(False, "--json", help="Print the canonical specs as JSON."),
    kind: str = typer.Option("rmsnorm", help="Norm kind of the baselines (dyt stays DyT)."),
    layers: int = typer.Option(4, help="Depth used to resolve per-layer rules and arch ids."),
):
    """List the built-in baselines: their sites and their source (a legend of the short site names
    follows the list)."""
    from .baselines import BASELINES, baselines

    at_least(1, layers=layers)
    specs = baselines(kind)
    if as_json:
        out = [
            {"name": n, "source": BASELINES[n].source, "notes": BASELINES[n].notes,
             "arch_id": p.arch_id(layers), "sites": p.resolve(layers).describe(), "placement": p.to_dict()}
            for n, p in specs.items()
        ]
        typer.echo(json.dumps(out, indent=2))
        return
    from .legend import site_legend

    width = max(map(len, specs))
    for n, p in specs.items():
        r = p.resolve(layers)
        typer.echo(f"{n:<{width}}  {r.arch_id}  {r.describe()}")
        typer.echo(f"{'':<{width}}  {BASELINES[n].source}: {BASELINES[n].notes}")
    typer.echo("\n" + site_legend())


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
    from .config import ModelConfig
    from .show import show_text

    placement, source = _placement(spec, kind)
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

    r = load_recipe(recipe, ctx.args)
    p, _ = _placement(placement, r.search.norm_kind)
    ensure_runnable(r, only=("data", "vocabulary", "cache"))
    from .progress import RunBar
    from .train import summarize, train_run

    with RunBar() as bar:
        result = train_run(p, r.model, r.data, r.train, seed=r.train.seeds[0] if seed is None else seed,
                           lr=r.train.lr[0] if lr is None else lr, progress=bar, verbose=verbose,
                           checkpoint=checkpoint, log_dir=r.folder / "logs", log_group=r.name)
    typer.echo(json.dumps(result.to_dict(), indent=1) if as_json else summarize(result))


def _console():
    """stdout; at least 160 columns wide when it is not a terminal, so tables stay readable in logs."""
    from rich.console import Console

    console = Console()
    if not console.is_terminal:
        console = Console(width=max(console.width, 160))
    return console


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
    worker_index: int = typer.Option(0, hidden=True, help="Offset of this worker's sampler seed."),
    progress_json: Optional[str] = typer.Option(None, hidden=True, help="Report progress as JSON lines, as WORKER."),
):
    """Run the search: baselines first, then searched placements, until the recipe's trials are done.

    Running it again resumes; running it on several processes or machines with one --storage makes
    them workers of one study. Any recipe field can be overridden: --search.trials 20."""
    from .checks import ensure_runnable
    from .recipe import load_recipe

    extra = list(ctx.args) + (["--name", name] if name else [])
    r = load_recipe(recipe, extra)
    url = storage_option(storage)
    ensure_runnable(r, storage=url)
    stop_on_sigterm()
    _setup_logging(verbose)
    if progress_json is None and (devices is not None or jobs != "1"):
        from .search._workers import parse_jobs

        if _run_workers(recipe, extra, r, devices, parse_jobs(jobs or r.search.jobs), storage, verbose):
            return
    from .progress import JsonLines
    from .progress import RunBar
    from .ranking import DEFAULT_AGAINST
    from .search import StudyInterrupted, run_study

    display = JsonLines(progress_json) if progress_json else RunBar(study=r.name)
    try:
        with display as bar:
            handle = run_study(r, storage=url, display=bar, verbose=verbose, seed_offset=worker_index)
            if r.confirm is not None:  # the confirmation stage, once the search is done
                from .stages.confirm import run_confirm

                run_confirm(handle, r.confirm, r.search.racing, bar, verbose)
    except (StudyInterrupted, KeyboardInterrupt):
        typer.echo(f"interrupted: finished trials are kept; run the same command to resume study {r.name!r}",
                   err=True)
        raise typer.Exit(interrupted_code()) from None
    if not progress_json:
        _print_report(handle, handle.folder, DEFAULT_AGAINST)


def _run_workers(recipe: Path, extra: list[str], r, devices: Optional[str], jobs, storage: Optional[str],
                 verbose: bool) -> bool:
    """Several worker processes on one study (--jobs, one or more per GPU with --devices), their
    progress shown together; then the report. False when one worker in this process will do."""
    from .progress import WorkersView
    from .ranking import DEFAULT_AGAINST
    from .search import open_results
    from .search._workers import cuda_devices, device_groups, plan_workers, run_workers, uses_gpu

    groups = device_groups(devices, r.train.devices) if devices is not None else None
    workers = plan_workers(jobs, r, groups, uses_gpu(r))
    if groups is None and len(workers) == 1:
        return False
    if groups is not None and not cuda_devices():
        typer.echo(f"warning: no CUDA device here: {len(workers)} workers run on the CPU", err=True)
    from .search import open_study

    url = open_study(r, storage).storage_url  # created (and the recipe checked) once, before the workers
    names = [w.name for w in workers]
    with WorkersView(r.name, names) as view:
        codes = run_workers(recipe, extra, workers, url, verbose, view, sigterm=lambda: interrupted_code() == 143)
    _workers_ended(codes, names, "trials", f"study {r.name!r}")
    handle = open_results(None, url, r.name)
    _print_report(handle, r.folder, DEFAULT_AGAINST)
    return True


def _workers_ended(codes: list[int], names: list[str], kept: str, what: str) -> None:
    """After local workers: exit as interrupted when they were, one error line when any failed."""
    if any(c in (130, 143) for c in codes):
        typer.echo(f"interrupted: finished {kept} are kept; run the same command to resume {what}", err=True)
        raise typer.Exit(interrupted_code())
    if any(codes):
        raise NormsearchError(f"workers {', '.join(n for n, c in zip(names, codes) if c)} failed (exit codes "
                              f"{codes}); their errors are above; finished {kept} are kept")


@app.command()
@user_errors
def confirm(
    study: str = typer.Argument(..., help="A results folder (results/<name>) or the recipe file of a finished search."),
    top: Optional[int] = typer.Option(None, help="Found placements to confirm, best first (default: the recipe's "
                                      "confirm.top, else 3)."),
    seeds: Optional[int] = typer.Option(None, help="Fresh seeds per architecture (default: confirm.seeds, else 3)."),
    baselines: Optional[str] = typer.Option(None, help="Baselines to confirm beside them, comma-separated "
                                            "(default: the search's)."),
    first_seed: Optional[int] = typer.Option(None, help="The first fresh seed (default 1000)."),
    racing: Optional[int] = typer.Option(None, help="Race: add up to this many runs, one seed at a time, to the "
                                         "architectures whose rank interval reaches the leader's (default: "
                                         "search.racing)."),
    storage: Optional[str] = typer.Option(None, help="Optuna storage URL of the study."),
    study_name: Optional[str] = typer.Option(None, help="Study name in that storage."),
    jobs: Optional[str] = typer.Option(None, "--jobs", "-j", help="Local workers (default: as for run)."),
    threads: Optional[int] = typer.Option(None, "--train.threads", help="CPU threads per worker."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Show Lightning's and Optuna's own output."),
    progress_json: Optional[str] = typer.Option(None, hidden=True, help="Report progress as JSON lines, as WORKER."),
    worker_index: int = typer.Option(0, hidden=True, help="Unused; workers share the stage's fixed list."),
):
    """Confirm a finished search: retrain its top placements and the baselines on fresh seeds, each at
    the learning rate the search chose for it, scored on the test split. Part of the same study:
    resumable, shared by workers, deduplicated. The report then leads with the confirmed verdicts."""
    from dataclasses import replace

    from .recipe import ConfirmConfig, RacingConfig

    at_least(0, racing=racing)
    url = read_only(study, storage)
    stop_on_sigterm()
    _setup_logging(verbose)
    from .search import StudyInterrupted, open_results
    from .stages.confirm import run_confirm

    parent = open_results(study, url, study_name)
    cfg = parent.recipe.confirm or ConfirmConfig()
    changes = {k: v for k, v in (("top", top), ("seeds", seeds), ("first_seed", first_seed)) if v is not None}
    if baselines is not None:
        changes["baselines"] = [b.strip() for b in baselines.split(",") if b.strip()]
    cfg = replace(cfg, **changes)
    race = parent.recipe.search.racing
    if racing is not None:
        race = replace(race or RacingConfig(), budget=racing) if racing > 0 else None
    if threads is not None:
        parent.recipe = replace(parent.recipe, train=replace(parent.recipe.train, threads=threads))
    if progress_json is None and jobs != "1":
        from .search._workers import parse_jobs

        if _confirm_workers(study, parent, cfg, race, parse_jobs(jobs or parent.recipe.search.jobs), verbose):
            return
    from .progress import JsonLines, RunBar

    display = JsonLines(progress_json) if progress_json else RunBar(study=f"{parent.recipe.name}/confirm")
    try:
        with display as bar:
            run_confirm(parent, cfg, race, bar, verbose)
    except (StudyInterrupted, KeyboardInterrupt):
        typer.echo(f"interrupted: finished runs are kept; run the same command to resume the confirmation of "
                   f"{parent.recipe.name!r}", err=True)
        raise typer.Exit(interrupted_code()) from None
    if not progress_json:
        from .ranking import DEFAULT_AGAINST

        _print_report(parent, parent.folder, DEFAULT_AGAINST)


def _confirm_workers(study: str, parent, cfg, race, jobs, verbose: bool) -> bool:
    """``confirm --jobs N``: the stage is created here (its list fixed once), then N workers train it."""
    from .progress import WorkersView
    from .ranking import DEFAULT_AGAINST
    from .stages.confirm import open_confirm
    from .search._workers import plan_workers, run_workers, uses_gpu

    workers = plan_workers(jobs, parent.recipe, None, uses_gpu(parent.recipe))
    if len(workers) == 1:
        return False
    open_confirm(parent, cfg, race)
    extra = ["--top", str(cfg.top), "--seeds", str(cfg.seeds), "--first-seed", str(cfg.first_seed),
             "--baselines", ",".join(cfg.baselines if cfg.baselines is not None else parent.recipe.search.baselines),
             "--racing", str(race.budget if race else 0), "--study-name", parent.study.study_name]
    names = [w.name for w in workers]
    with WorkersView(f"{parent.recipe.name}/confirm", names) as view:
        codes = run_workers(Path(study), extra, workers, parent.storage_url, verbose, view,
                            sigterm=lambda: interrupted_code() == 143, command="confirm")
    _workers_ended(codes, names, "runs", "the confirmation")
    _print_report(parent, parent.folder, DEFAULT_AGAINST)
    return True


@app.command()
@user_errors
def ladder(
    study: str = typer.Argument(..., help="A results folder (results/<name>) or the recipe file of a finished search."),
    rungs: Optional[str] = typer.Option(None, help="Model overrides per rung, smallest first, as YAML: "
                                        "'[{n_layers: 2}, {n_layers: 4}, {n_layers: 8}]' (default: ladder.rungs)."),
    top: Optional[int] = typer.Option(None, help="Found placements to retrain (default: ladder.top, else 2)."),
    baselines: Optional[str] = typer.Option(None, help="Baselines beside them, comma-separated (default: the "
                                            "search's)."),
    seeds: Optional[int] = typer.Option(None, help="Fresh seeds per architecture and rung (default 2)."),
    first_seed: Optional[int] = typer.Option(None, help="The first fresh seed (default 2000)."),
    tokens_per_param: Optional[float] = typer.Option(None, help="Training tokens per run = this x parameters "
                                                     "(default: the search's steps at every rung)."),
    max_steps: Optional[int] = typer.Option(None, help="Cap on steps per run."),
    lr: Optional[str] = typer.Option(None, help="auto | sweep | transfer (auto: transfer under muP when the rungs "
                                     "vary the width alone, else sweep; transfer elsewhere is refused)."),
    lr_extend: Optional[int] = typer.Option(None, help="Points the sweep may add past an end that holds the best, "
                                            "per rung (default: train.lr_extend)."),
    target: Optional[float] = typer.Option(None, help="Extrapolate the order to this many parameters."),
    out: Optional[Path] = typer.Option(None, help="Folder for ladder.md, ladder.json and ladder.png, and each "
                                       "rung's report in OUT/ladder-<i>/ (default: results/<name>/ladder, the rungs' "
                                       "reports in results/<name>/ladder-<i>/)."),
    report_only: bool = typer.Option(False, "--report-only", help="Write the report of the rungs so far; train "
                                     "nothing. The settings are the stored ladder's: any left out are read from "
                                     "it, any given must match it."),
    storage: Optional[str] = typer.Option(None, help="Optuna storage URL of the study."),
    study_name: Optional[str] = typer.Option(None, help="Study name in that storage."),
    jobs: Optional[str] = typer.Option(None, "--jobs", "-j", help="Local workers (default: as for run)."),
    threads: Optional[int] = typer.Option(None, "--train.threads", help="CPU threads per worker."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Show Lightning's and Optuna's own output."),
    progress_json: Optional[str] = typer.Option(None, hidden=True, help="Report progress as JSON lines, as WORKER."),
    worker_index: int = typer.Option(0, hidden=True, help="Unused; workers share the rungs' fixed lists."),
):
    """Does the winner still win when the model grows? Retrain the search's top placements and the
    baselines at three or more sizes (rungs), tokens growing with parameters, on fresh seeds; report
    each rung's ranking, rank agreement across rungs, every reversal, and power-law fits. Part of the
    same study: resumable, shared by workers, deduplicated by (architecture, rung). A ladder already
    stored keeps its settings (those left out are read from it, those given must match it); --rungs
    with the stored rungs and one more after them adds a rung."""
    from dataclasses import replace

    from . import _yaml

    url = read_only(study, storage)
    stop_on_sigterm()
    _setup_logging(verbose)
    from .search import StudyInterrupted, open_results
    from .stages.ladder import plan_rungs, resolve_ladder, run_ladder, write_ladder_report

    parent = open_results(study, url, study_name)
    given = {"top": top, "seeds": seeds, "first_seed": first_seed, "tokens_per_param": tokens_per_param,
             "max_steps": max_steps, "lr": lr, "target": target, "lr_extend": lr_extend}
    given = {k: v for k, v in given.items() if v is not None}
    if rungs is not None:
        given["rungs"] = _yaml.loads(rungs, "--rungs")
        if not isinstance(given["rungs"], list):
            raise NormsearchError(f"--rungs must be a list of model overrides, smallest first, e.g. "
                                  f"'[{{n_layers: 2}}, {{n_layers: 4}}, {{n_layers: 8}}]', not {rungs!r}")
    if baselines is not None:
        given["baselines"] = [b.strip() for b in baselines.split(",") if b.strip()]
    cfg = resolve_ladder(parent, given, report_only)
    plan_rungs(parent.recipe, cfg)  # the rungs checked (and required) before anything trains
    if threads is not None:
        parent.recipe = replace(parent.recipe, train=replace(parent.recipe.train, threads=threads))
    from .ranking import DEFAULT_AGAINST

    bases = cfg.baselines if cfg.baselines is not None else parent.recipe.search.baselines
    against = list(bases) or list(DEFAULT_AGAINST)
    folder = out or parent.folder / "ladder"
    if not report_only:
        if progress_json is None and jobs != "1":
            from .search._workers import parse_jobs

            _ladder_workers(study, parent, cfg, parse_jobs(jobs or parent.recipe.search.jobs), verbose)
        else:
            from .progress import JsonLines, RunBar

            display = JsonLines(progress_json) if progress_json else RunBar(study=f"{parent.recipe.name}/ladder")
            try:
                with display as bar:
                    run_ladder(parent, cfg, bar, verbose)
            except (StudyInterrupted, KeyboardInterrupt):
                typer.echo(f"interrupted: finished runs are kept; run the same command to resume the ladder of "
                           f"{parent.recipe.name!r}", err=True)
                raise typer.Exit(interrupted_code()) from None
    if not progress_json:
        path = write_ladder_report(parent, cfg, folder, against, rungs_dir=out)
        typer.echo(f"ladder report: {path} (with ladder.json and ladder.png; each rung's report in "
                   f"{out or parent.folder}/ladder-<i>/)")


def _ladder_workers(study: str, parent, cfg, jobs, verbose: bool) -> None:
    """``ladder --jobs N``: the rungs are created here (their lists fixed once), then N workers train them."""
    from .progress import WorkersView
    from .recipe import to_mapping
    from .stages.ladder import open_rungs, run_ladder
    from .search._workers import plan_workers, run_workers, uses_gpu

    workers = plan_workers(jobs, parent.recipe, None, uses_gpu(parent.recipe))
    if len(workers) == 1:
        from .progress import RunBar

        with RunBar(study=f"{parent.recipe.name}/ladder") as bar:
            run_ladder(parent, cfg, bar, verbose)
        return
    open_rungs(parent, cfg)
    d = to_mapping(cfg)
    bases = cfg.baselines if cfg.baselines is not None else parent.recipe.search.baselines  # [] is no baseline
    extra = ["--rungs", json.dumps(d["rungs"]), "--top", str(cfg.top), "--seeds", str(cfg.seeds), "--first-seed",
             str(cfg.first_seed), "--baselines", ",".join(bases), "--lr", cfg.lr,
             "--study-name", parent.study.study_name]
    for key, flag in (("tokens_per_param", "--tokens-per-param"), ("max_steps", "--max-steps"),
                      ("lr_extend", "--lr-extend")):
        if d[key] is not None:
            extra += [flag, str(d[key])]
    names = [w.name for w in workers]
    with WorkersView(f"{parent.recipe.name}/ladder", names) as view:
        codes = run_workers(Path(study), extra, workers, parent.storage_url, verbose, view,
                            sigterm=lambda: interrupted_code() == 143, command="ladder")
    _workers_ended(codes, names, "runs", "the ladder")


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
    from ._secrets import mask_url
    from .baselines import baseline
    from .checks import check_recipe
    from .recipe import load_recipe

    r = load_recipe(recipe, list(ctx.args) + (["--name", name] if name else []))
    problems = check_recipe(r, storage=storage)
    if problems:
        raise NormsearchError("; ".join(problems))
    L = r.model.n_layers
    t = r.train
    lines = [f"recipe {r.name!r} ({recipe}) is valid",
             f"  model: {L} layers, d_model {r.model.d_model}, {r.model.n_heads} heads, "
             f"context {r.model.context_length}, {r.model.ffn}",
             f"  data: {r.data.corpus}" + (f" {r.data.path}" if r.data.path else "") + f", {r.data.tokenizer} tokens",
             f"  budget per run: {t.steps} steps x {t.batch_size} x {r.model.context_length} tokens; "
             f"{len(t.seeds)} seed(s) x {len(t.lr)} learning rate(s) = {len(t.runs)} runs per architecture"]
    if r.space is not None:
        params = ", ".join(f"{k} ({len(v)})" for k, v in r.space.distributions().items())
        lines.append(f"  space: {r.space.source or 'inline'}: {r.space.size():,} points; choices: {params}")
    else:
        lines.append("  space: none (baselines only)")
    base = []
    for b in r.search.baselines:
        p = baseline(b, r.search.norm_kind)
        inside = r.space is not None and r.space.params_of(p, L) is not None
        base.append(f"{b}{'' if inside else ' (outside the space)'}")
    lines.append(f"  baselines ({len(base)}): {', '.join(base)}")
    n = len(r.search.baselines) + r.search.trials
    lines.append(f"  search: {r.search.sampler} sampler, {r.search.trials} searched architectures, "
                 f"pruner {r.search.pruner}, objective {r.search.objective}; at most {n * len(t.runs)} runs"
                 + (f" and {n * t.lr_extend * len(t.seeds)} more where the sweep extends past an end"
                    if t.lr_extend else ""))
    if r.confirm is not None:
        c = r.confirm
        k = c.top + len(c.baselines if c.baselines is not None else r.search.baselines)
        race = f", racing up to {r.search.racing.budget} more" if r.search.racing else ""
        lines.append(f"  then confirm: the top {c.top} and the baselines on {c.seeds} fresh seeds from {c.first_seed}, "
                     f"scored on a {c.test_bytes:,}-byte test split; {k * c.seeds} runs{race}")
    where = storage or r.storage
    shown = mask_url(storage_option(storage) if storage else r.storage_url)
    lines.append(f"  storage: {where + ' = ' if where and where.startswith('env:') else ''}{shown}")
    typer.echo("\n".join(lines))


@app.command()
@user_errors
def status(
    study: Optional[str] = typer.Argument(None, help="A results folder (results/<name>) or a recipe file."),
    storage: Optional[str] = typer.Option(None, help="Optuna storage URL."),
    study_name: Optional[str] = typer.Option(None, help="Study name in that storage."),
):
    """Finished / running / failed / pruned trials, the workers, and the best so far."""
    storage = read_only(study, storage)
    from .search import open_results, status_text
    from .search._stages import stage_status

    handle = open_results(study, storage, study_name)
    typer.echo("\n".join([status_text(handle), *stage_status(handle)]))


@app.command()
@user_errors
def report(
    study: Optional[str] = typer.Argument(None, help="A results folder (results/<name>) or a recipe file."),
    storage: Optional[str] = typer.Option(None, help="Optuna storage URL."),
    study_name: Optional[str] = typer.Option(None, help="Study name in that storage."),
    against: list[str] = typer.Option([], "--against", help="Also compare with this baseline (repeatable)."),
    out: Optional[Path] = typer.Option(None, help="Folder for report.md, ranking.csv/json and plots "
                                       "(default: the study's results folder). It must be new, empty, or hold "
                                       "an earlier report."),
    overwrite: bool = typer.Option(False, help="Write into an --out folder that holds other files."),
):
    """Rank the architectures of a study against the baselines and write the report."""
    from .report import check_out_dir

    if out is not None:
        check_out_dir(out, overwrite)
    storage = read_only(study, storage)
    from .ranking import DEFAULT_AGAINST
    from .search import open_results

    handle = open_results(study, storage, study_name)
    _print_report(handle, out or handle.folder, [*DEFAULT_AGAINST, *against], overwrite=overwrite or out is None)


def _print_report(handle, folder: Path, against, overwrite: bool = True):
    from .report import ranking_table, write_report

    ranking = write_report(handle, folder, against=against, overwrite=overwrite)
    _console().print(ranking_table(ranking))
    typer.echo(f"report: {folder / 'report.md'} (with ranking.csv, ranking.json and plots)")


@app.command("export")
@user_errors
def export_cmd(
    study: Optional[str] = typer.Argument(None, help="A results folder (results/<name>) or a recipe file."),
    out: Path = typer.Option(..., "--out", "-o", help="The folder to write spec.yaml, config.json, model.py, "
                             "norms.py, model.safetensors and README.md to."),
    rank: Optional[int] = typer.Option(None, "--rank", help="The K-th architecture of the ranking."),
    trial: Optional[int] = typer.Option(None, "--trial", help="The architecture trial N evaluated."),
    baseline: Optional[str] = typer.Option(None, "--baseline", help="A baseline of the study, by name."),
    retrain: bool = typer.Option(False, help="Train it again instead of using the kept weights."),
    steps: Optional[int] = typer.Option(None, help="Retrain for this many steps (implies --retrain)."),
    storage: Optional[str] = typer.Option(None, help="Optuna storage URL."),
    study_name: Optional[str] = typer.Option(None, help="Study name in that storage."),
    overwrite: bool = typer.Option(False, help="Replace an earlier export in --out."),
):
    """Export an architecture of a study as a standalone PyTorch module (torch alone needed)."""
    at_least(1, steps=steps, rank=rank)
    at_least(0, trial=trial)
    if out.exists() and not out.is_dir():
        raise NormsearchError(f"--out {out}: a file, not a folder")
    storage = read_only(study, storage)
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


@bench_app.command("trial", context_settings=OVERRIDES)
@user_errors
def bench_trial(ctx: typer.Context):
    """The training loop of a trial against a bare PyTorch loop on the same model and batches: the ratio
    of training tokens/s, and what the diagnostics cost (options: --steps, --repeats, --layers, ...)."""
    from .benchmark import main as bench_main

    raise typer.Exit(bench_errors(bench_main, list(ctx.args)))


def _setup_logging(verbose: bool):
    import logging

    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(message)s")


def main():
    app()


if __name__ == "__main__":
    sys.exit(main())
