"""The report's files: ``report.md``, ``ranking.csv``, ``ranking.json`` and the plots, written only
into a folder the report owns."""

from __future__ import annotations

import csv
import json
import math
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from ..errors import NormsearchError
from ..ranking import DEFAULT_AGAINST, Ranking, rank
from ..records import jsonable
from ._analysis import Importance, SiteEffect, diagnostics_summary, site_effects, site_importance
from ._columns import COMPARISON_FIELDS, CSV, UNIT
from ._markdown import report_markdown

REPORT_FILES = ("report.md", "ranking.csv", "ranking.json")
# what a results folder holds besides the report (written by `normsearch run`; throughput.json by
# `normsearch report --measure-throughput`)
STUDY_FILES = ("recipe.yaml", "study.db", "runs", "checkpoints", "throughput.json")


@dataclass
class ReportResult(Ranking):
    """What :func:`write_report` wrote. It is the study's ranking (so code that took the return value
    for a :class:`Ranking` keeps working), with the report's path and, when the study has a
    confirmation stage, that stage's ranking (fresh seeds, test split) and the stage's attributes
    (its settings, seeds, entries and racing rounds). :func:`normsearch.report.terminal_summary`
    prints it."""

    path: Path | None = None  # report.md
    confirmed: Ranking | None = None
    confirm_attrs: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, ranking: Ranking, **extra) -> "ReportResult":
        return cls(**{f.name: getattr(ranking, f.name) for f in fields(Ranking)}, **extra)


def ranking_json(ranking: Ranking, effects: list[SiteEffect] | None = None,
                 importance: Importance | None = None, plots: dict[str, str] | None = None) -> dict[str, Any]:
    """Everything in the report as plain data; ``rows`` carry the ranked table and the comparisons."""
    from .._secrets import mask_recipe

    return jsonable({
        "study": ranking.study,
        "objective": ranking.objective,
        "unit": UNIT,
        "finished": ranking.finished,
        "trials": ranking.n_trials,
        "running": [asdict(t) for t in ranking.running_trials],
        "failures": [asdict(t) for t in ranking.failures],
        "against": ranking.against,
        "missing_against": ranking.missing_against,
        "n_layers": ranking.n_layers,
        "cost": asdict(ranking.cost),
        "judgement": _judgement(ranking),
        "rows": [r.to_dict() for r in ranking.rows],
        "diagnostics": diagnostics_summary(ranking),
        "site_effects": [asdict(e) for e in effects or []],
        "importance": asdict(importance) if importance is not None else None,
        "plots": plots or {},
        "recipe": mask_recipe(ranking.recipe.raw) if ranking.recipe is not None else {},
    })


def _judgement(ranking: Ranking) -> dict[str, Any]:
    j = {k: v for k, v in ranking.judgement.__dict__.items() if k != "search"}
    sv = ranking.judgement.search
    j["search"] = None if sv is None else sv.to_dict()  # trend, tests against uniform draws, front-loading
    return j


def _csv(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(v) if math.isfinite(v) else ""
    return str(v)


def write_csv(ranking: Ranking, path: Path) -> Path:
    """One line per architecture; each comparison as ``vs_<baseline>_<field>`` columns."""
    header = [c.key for c in CSV] + [f"vs_{a}_{f}" for a in ranking.against for f in COMPARISON_FIELDS]
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        for r in ranking.rows:
            line = [_csv(c.raw(r)) for c in CSV]
            for a in ranking.against:
                c = r.comparison(a)
                line += [_csv(getattr(c, k)) if c else "" for k in COMPARISON_FIELDS]
            w.writerow(line)
    return path


def _previous_plots(out_dir: Path) -> set[str]:
    """The plot files an earlier report in this folder wrote (from its ranking.json)."""
    try:
        data = json.loads((out_dir / "ranking.json").read_text())
        return {str(v) for v in (data.get("plots") or {}).values()}
    except (OSError, ValueError, AttributeError):
        return set()


def check_out_dir(out_dir: Path, overwrite: bool = False) -> None:
    """The report writes into a new or empty folder, a results folder of a study, or a folder that
    holds an earlier report; anything else needs ``overwrite`` (it would replace files of the user's)."""
    if out_dir.exists() and not out_dir.is_dir():
        raise NormsearchError(f"--out {out_dir}: a file, not a folder")
    if not out_dir.exists():
        from ..storage import folder_problem

        problem = folder_problem(out_dir, f"--out {out_dir}", create=True)
        if problem:
            raise NormsearchError(problem)
        return
    if overwrite:
        return
    names = {p.name for p in out_dir.iterdir()}
    ours = set(REPORT_FILES) | set(STUDY_FILES) | _previous_plots(out_dir)
    if not names or (names & {"ranking.json", "recipe.yaml"} and names <= ours):
        return
    others = sorted(names - ours)[:3]
    raise NormsearchError(f"--out {out_dir} holds files that are not a normsearch report ({', '.join(others)}"
                          f"{', ...' if len(names - ours) > 3 else ''}); give a new or empty folder, or --overwrite")


def write_report(handle_or_study, out_dir: Path, against=DEFAULT_AGAINST, objective: str | None = None,
                 evaluator=None, top: int = 3, overwrite: bool = False, required_against=()) -> ReportResult:
    """Rank the study and write ``report.md``, ``ranking.csv``, ``ranking.json`` and the PNG plots
    into ``out_dir`` (created; see :func:`check_out_dir` for which folders it writes into).
    ``handle_or_study``: a StudyHandle, an optuna Study or a results folder. ``evaluator``: an
    Optuna importance evaluator (default PED-ANOVA, see :func:`site_importance`). Returns the
    ranking as a :class:`ReportResult`, which also carries the confirmation's ranking and the
    report's path (print it with :func:`normsearch.report.terminal_summary`)."""
    from ..search import StudyHandle
    from . import _plots as P

    out_dir = Path(out_dir)
    check_out_dir(out_dir, overwrite)
    ranking = rank(handle_or_study, against=against, objective=objective, required_against=required_against)
    if P.searched(ranking):
        effects, importance = site_effects(ranking), site_importance(ranking, evaluator)
    else:  # a stage retrains a fixed list: no space to read
        effects, importance = [], Importance("none", note="a stage of the study: it searched no space")
    previous = _previous_plots(out_dir) if out_dir.is_dir() else set()
    out_dir.mkdir(parents=True, exist_ok=True)
    written: dict[str, str] = {}
    label = importance.evaluator + (f" (target_quantile={importance.target_quantile:g})"
                                    if importance.target_quantile else "")
    recipe = getattr(ranking, "recipe", None)
    drawn = P.all_figures(ranking, effects, importance.importances, label, top) if recipe is None or \
        recipe.report.plots else {}
    for name, fig in drawn.items():
        P.save(fig, out_dir / f"{name}.png")
        written[name] = f"{name}.png"
    for stale in previous - set(written.values()):  # a plot this report's earlier run drew that has no data now
        (out_dir / stale).unlink(missing_ok=True)
    files = {"csv": "ranking.csv", "json": "ranking.json"}
    write_csv(ranking, out_dir / files["csv"])
    data = ranking_json(ranking, effects, importance, written)
    confirmed = _confirmation(handle_or_study, ranking, out_dir, against)
    if confirmed is not None:
        from dataclasses import asdict

        from ._confirmed import primary_results

        design = (confirmed[3].get("stage") or {}).get("design")
        primary = [{k: v for k, v in asdict(c).items() if k not in ("sd_arch", "sd_against")}
                   for c in primary_results(confirmed[0], design)]
        data["confirmed"] = {"report": "confirm/report.md", "racing": confirmed[2],
                             "primary": jsonable(primary), "design": jsonable(design),
                             "power": design.get("target_power") if design else None,
                             "rows": [jsonable(r.to_dict()) for r in confirmed[0].ranked]}
    (out_dir / files["json"]).write_text(json.dumps(data, indent=1) + "\n")
    stages = []
    if isinstance(handle_or_study, StudyHandle) and P.searched(ranking):
        from ._ablate import ablation_lines

        stages = ablation_lines(handle_or_study, out_dir)
    (out_dir / "report.md").write_text(report_markdown(ranking, effects, importance, written, files, top,
                                                       confirmed=confirmed[1] if confirmed else None, stages=stages))
    return ReportResult.of(ranking, path=out_dir / "report.md", confirmed=confirmed[0] if confirmed else None,
                           confirm_attrs=confirmed[3] if confirmed else {})


def _confirmation(handle, search: Ranking, out_dir: Path, against):
    """The confirmation stage of a search (whose ranking is ``search``), when it has one: its own
    report written into ``out_dir/confirm``, and (its ranking, the headline lines, the racing summary,
    the stage study's attributes)."""
    from ..search import StudyHandle
    from ..stages import confirm_handle
    from ._confirmed import confirmed_lines, racing_summary

    from ..records import STAGE_SEP

    if not isinstance(handle, StudyHandle) or STAGE_SEP in handle.study.study_name:
        return None  # a stage (a rung, a variant) has no confirmation; its study's is not its own
    try:
        stage = confirm_handle(handle)
    except NormsearchError:  # a storage that cannot hold stages (an in-memory study)
        return None
    if stage is None:
        return None
    confirmed = write_report(stage, out_dir / "confirm", against=against, overwrite=True)
    attrs = dict(stage.study.user_attrs)
    seeds = (attrs.get("stage") or {}).get("seeds") or []
    return confirmed, confirmed_lines(search, confirmed, attrs, "confirm/report.md"), \
        racing_summary(attrs, confirmed, len(seeds)), attrs
