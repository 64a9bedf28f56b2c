"""Factorial ablation between two architectures (``normsearch ablate``): which sites where a winner A and
another architecture B differ carry the gap between them? Every combination of those sites (2^k; the
half fraction of resolution k when k > 5; or the sites named), each trained at A's chosen cell (its
learning rate and init) on fresh seeds and scored on the test split, optionally with an init factor
(A's chosen init against B's). ``leave_one_out`` trains A with each single change instead (each norm
of A's removed, each empty site filled from B), the cheap answer when the factorial is too big.

Each ablation is a stage of the study (``<study>/ablate-<i>``, results in ``results/<study>/ablate-<i>/``),
a new index per distinct (A, B, leave-one-out); the same pair again resumes its stage: resumable after
``kill -9``, shared by workers, deduplicated (a combination whose network and init equal another's is
trained once; A and B are corners of the design). Its settings are stored: a command that gives
other ones is refused naming the stored value, one that leaves them out takes them from storage.
The design (:mod:`._ablate_design`) is stored with the stage; the statistics are
:mod:`normsearch.stats.ablate`'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from ..config import from_mapping, to_mapping
from ..errors import NormsearchError, closest, unknown
from ..grid import variant_tag
from ..sections import AblateConfig
from ..search import StudyHandle
from ..spec import SITES
from ._ablate_design import (ABBREV, FACTORS, INIT, Side, changes, combinations, defining_relation, differing,
                             fraction_of, single_changes)
from ._stage import A_STAGE, Entry, Stage, find_stage, open_stage, run_stage, stage_names, stage_recipe

PREFIX = "ablate-"
LOO = "leave-one-out"
SETTINGS = ("sites", "seeds", "first_seed", "design", "init", "test_bytes")  # compared with the stored ones


def kind_of(index: int) -> str:
    return f"{PREFIX}{index}"


@dataclass
class Plan:
    """A resolved ablation: its settings, stage kind, the two sides and the combinations to train."""

    cfg: AblateConfig
    kind: str
    stored: bool  # the stage exists: running resumes it
    a: Side
    b: Side
    factors: list[str]
    fraction: str  # full | half | leave-one-out
    combos: list[dict] = field(default_factory=list)
    n_layers: int = 0

    @property
    def seeds(self) -> list[int]:
        return list(range(self.cfg.first_seed, self.cfg.first_seed + self.cfg.seeds))

    def entries(self) -> list[Entry]:
        """One entry per distinct (network, init): a combination equal to another is trained once."""
        out: dict[tuple[str, str], Entry] = {}
        for c in self.combos:
            key = (c["arch_id"], variant_tag(c["variant"]))
            out.setdefault(key, Entry(label=c["label"], arch_id=c["arch_id"], placement=c["placement"],
                                      lr=[float(self.a.lr)], variant=dict(c["variant"])))
            c["entry"] = out[key].label
        return list(out.values())

    def design(self) -> dict:
        side = lambda s: {"label": s.label, "arch_id": s.arch_id, "lr": s.lr, "variant": s.variant,  # noqa: E731
                          "init": s.init, "sites": s.placement.resolve(self.n_layers).describe()}
        self.entries()  # each combination's entry
        return {"a": side(self.a), "b": side(self.b), "factors": self.factors, "fraction": self.fraction,
                "relation": defining_relation(self.factors, self.fraction), "inits": self.cfg.init,
                "combos": self.combos}


# --------------------------------------------------------------------------------------------------
# A and B


def _study_archs(parent: StudyHandle) -> tuple[dict[str, dict], dict[str, str]]:
    """The study's architectures: {label: placement dict} from its finished trials, and each network's
    label as the ranking gives it ({arch_id: the baseline's name, else its first trial's label})."""
    from ..records import ArchRecord
    from ..storage import retry

    labels: dict[str, dict] = {}
    by_id: dict[str, str] = {}
    trials = sorted(retry(lambda: parent.study.get_trials(deepcopy=False), "read the study"), key=lambda t: t.number)
    for t in trials:
        rec = ArchRecord.from_trial(t)
        if t.state.name in ("COMPLETE", "PRUNED") and rec.arch_id and rec.placement:
            labels.setdefault(rec.label, rec.placement)
            if rec.baseline:
                labels.setdefault(rec.baseline, rec.placement)
                by_id[rec.arch_id] = rec.baseline
            by_id.setdefault(rec.arch_id, rec.label)
    return labels, by_id


def _side(parent: StudyHandle, name: str, archs: dict[str, dict], by_id: dict[str, str]) -> Side:
    """A label of the study, a baseline's name or a spec file, as a side (its chosen cell not yet read)."""
    from ..baselines import BASELINES, baseline
    from ..spec import Placement

    n = parent.recipe.model.n_layers
    if name in archs:
        p = Placement.from_dict(archs[name])
    elif name in BASELINES:
        p = baseline(name, parent.recipe.search.norm_kind)
    elif Path(name).suffix in (".yaml", ".yml") or Path(name).is_file():
        if not Path(name).is_file():
            raise NormsearchError(f"--between {name}: no such spec file")
        p = Placement.load(name)
    else:
        hint = closest(name, [*archs, *BASELINES])
        raise NormsearchError(f"--between {name!r}: study {parent.recipe.name!r} has no architecture of that name, "
                              f"and it is neither a baseline nor a spec file ("
                              + (f"did you mean {hint}?" if hint else f"its architectures: {', '.join(archs)}") + ")")
    arch_id = p.arch_id(n)
    label = by_id.get(arch_id) or (name if name in BASELINES else p.name or Path(name).stem)
    return Side(label, p.with_name(p.name or label), arch_id)


def _chosen_cells(parent: StudyHandle, sides: list[Side]) -> None:
    """Each side's chosen cell, init and the wall time of its runs, from the study's ranking (in place)."""
    from ..ranking import rank

    rows = {r.arch_id: r for r in rank(parent, against=[]).rows}
    for s in sides:
        r = rows.get(s.arch_id)
        if r is None:
            continue
        s.wall_time, s.n_runs = float(r.wall_time or 0.0), int(r.n_runs or 0)
        if r.best_lr is not None:
            s.lr, s.variant = float(r.best_lr), dict(r.variant)
            s.init = s.variant.get("init", parent.recipe.model.init)


# --------------------------------------------------------------------------------------------------
# Settings: resolved, and checked against the stored ones


def stored_ablations(parent: StudyHandle) -> dict[str, dict]:
    """The ablations stored with the study: kind -> its stage attribute (settings, design)."""
    out = {}
    for kind in stage_names(parent):
        if kind.startswith(PREFIX):
            study = find_stage(parent, kind)
            info = (study.user_attrs.get(A_STAGE) or {}) if study is not None else {}
            if info.get("settings") is not None:
                out[kind] = info
    return out


def _inits(value: list[str] | None, a: Side, b: Side) -> list[str] | None:
    from ..grid import init_kinds

    if value is None or value == ["none"]:
        return None
    if value == ["swap"]:
        if b.init is None:
            raise NormsearchError(f"--init swap: {b.label} has no chosen init in this study (it never trained "
                                  f"there); name the two with --init {a.init},gpt")
        value = [a.init, b.init]
    for v in value:
        if v not in init_kinds():
            raise NormsearchError(f"--init {v!r}: not an init; known: {', '.join(init_kinds())}")
    if value[0] == value[1]:
        from ..baselines import paper_init

        other = paper_init(b.label) if paper_init(b.label) not in (None, value[0]) else "<another>"
        raise NormsearchError(f"--init: {a.label} and {b.label} both get init {value[0]}: an init factor needs two "
                              f"levels; name them with --init {value[0]},{other}")
    return list(value)


def _given_text(key: str, value) -> str:
    if isinstance(value, list):
        return ",".join(map(str, value))
    return "none" if value is None else str(value)


def plan(parent: StudyHandle, given: dict) -> Plan:
    """The ablation the command asks for, resolved and checked (one NormsearchError line for anything
    wrong), with its stage: the stored one for this pair (a given setting that differs is refused,
    naming the stored value; one left out is taken from it) or a new index."""
    cfg0 = from_mapping(AblateConfig, given, "ablate")
    n = parent.recipe.model.n_layers
    name_a, name_b = cfg0.between
    if name_a == name_b:
        raise NormsearchError(f"--between names {name_a} twice; give two architectures (A, the reference, then B)")
    archs, by_id = _study_archs(parent)
    a, b = _side(parent, name_a, archs, by_id), _side(parent, name_b, archs, by_id)
    if a.arch_id == b.arch_id:
        raise NormsearchError(f"--between {name_a} {name_b}: the same network (arch_id {a.arch_id}): they differ in "
                              f"no site, so there is nothing to ablate")
    differ = differing(a.placement, b.placement, n)
    allowed = differ if not cfg0.leave_one_out else [f for f, _ in changes(a, b, n)]
    for s in cfg0.sites or []:
        if s not in FACTORS:
            raise NormsearchError(f"--sites: {unknown('site', s, SITES)}")
        if s not in allowed:
            raise NormsearchError(f"--sites {s}: {a.label} and {b.label} do not differ there"
                                  + (" (nor does A have a norm there)" if cfg0.leave_one_out else "")
                                  + f"; they differ at {', '.join(differ)}")
    if cfg0.leave_one_out and "design" in given:
        raise NormsearchError("--design chooses the factorial's fraction; --leave-one-out trains no factorial")
    stored = stored_ablations(parent)
    kind = next((k for k, info in stored.items() if (info.get("design") or {}).get("a", {}).get("arch_id") == a.arch_id
                 and info["design"].get("b", {}).get("arch_id") == b.arch_id
                 and bool(info["settings"].get("leave_one_out")) == cfg0.leave_one_out), None)
    was = stored[kind]["settings"] if kind else {}
    _chosen_cells(parent, [a, b])
    if a.lr is None:
        raise NormsearchError(f"--between {name_a}: study {parent.recipe.name!r} has no chosen cell for it (it never "
                              f"trained there, or every run failed); every combination trains at A's cell: put "
                              f"first an architecture that has one")
    want = {**{k: was[k] for k in SETTINGS if k in was}, **given}
    if kind:
        want["between"] = was["between"]
    cfg = from_mapping(AblateConfig, want, "ablate")
    sites = list(cfg.sites) if cfg.sites is not None else (differ if not cfg.leave_one_out else None)
    inits = _inits(cfg.init, a, b)
    factors = list(sites or []) + ([INIT] if inits and not cfg.leave_one_out else [])
    fraction = LOO if cfg.leave_one_out else fraction_of(cfg.design, len(factors))
    if fraction == "half" and len(factors) < 5:
        raise NormsearchError(f"--design half: a half fraction of {len(factors)} factors has resolution "
                              f"{len(factors)}, below V (two-way interactions aliased); use --design full "
                              f"({2 ** len(factors)} combinations)")
    test_bytes = cfg.test_bytes or (parent.recipe.confirm.test_bytes if parent.recipe.confirm else 100_000)
    cfg = replace(cfg, sites=sites, init=inits, design=fraction if fraction != LOO else "auto", test_bytes=test_bytes)
    for k in SETTINGS:
        if kind and k in given and k in was and to_mapping(cfg)[k] != was[k]:
            raise NormsearchError(f"the ablation of {a.label} vs {b.label} (stage {kind} of study "
                                  f"{parent.recipe.name!r}) was started with --{k.replace('_', '-')} "
                                  f"{_given_text(k, was[k])}, not {_given_text(k, to_mapping(cfg)[k])}; leave "
                                  f"it out to use the stored value")
    overlap = set(range(cfg.first_seed, cfg.first_seed + cfg.seeds)) & set(parent.recipe.train.seeds)
    if overlap:
        raise NormsearchError(f"ablation seeds {sorted(overlap)} were search seeds; give a --first-seed above "
                              f"{max(parent.recipe.train.seeds)}")
    index = max([int(k[len(PREFIX):]) for k in stored if k[len(PREFIX):].isdigit()], default=-1) + 1
    p = Plan(cfg, kind or kind_of(index), kind is not None, a, b, factors, fraction, n_layers=n)
    if kind:  # the stored design, whatever the study's ranking says now
        d = stored[kind]["design"]
        p.combos, a.lr, a.variant = d["combos"], d["a"]["lr"], d["a"]["variant"]
    elif cfg.leave_one_out:
        p.combos = single_changes(a, b, n, sites, inits)
    else:
        p.combos = combinations(a, b, factors, fraction, n, inits)
    return p


# --------------------------------------------------------------------------------------------------
# The stage


def ablate_recipe(parent, kind: str, seeds: list[int], lr: float):
    """The search's recipe for an ablation's runs: the fresh seeds, A's chosen learning rate alone."""
    return stage_recipe(parent, kind, train=replace(parent.train, seeds=list(seeds), lr=[lr], lr_extend=0,
                                                      lr_resolution=None))


def _find(parent: StudyHandle, cfg: AblateConfig) -> str | None:
    """The stored stage of ``cfg``'s pair (as the command resolved it), or None."""
    for kind, info in stored_ablations(parent).items():
        s = info["settings"]
        if s.get("between") == list(cfg.between) and bool(s.get("leave_one_out")) == cfg.leave_one_out:
            return kind
    return None


def open_ablation(parent: StudyHandle, cfg: AblateConfig) -> tuple[StudyHandle, Stage]:
    """Create or resume the ablation ``cfg`` (resolved by :func:`plan`) as a stage of the study."""
    kind = _find(parent, cfg)
    settings = to_mapping(cfg)

    def make() -> Stage:
        p = plan(parent, {k: v for k, v in settings.items() if v is not None
                          and not (k == "design" and cfg.leave_one_out)})
        entries = p.entries()
        return Stage(p.kind, settings, entries, ablate_recipe(parent.recipe, p.kind, p.seeds, p.a.lr), p.seeds,
                     test_bytes=cfg.test_bytes, design=p.design())

    if kind is None:
        stage = make()
        kind = stage.kind
        handle, stage = open_stage(parent, kind, settings, lambda: stage)
    else:
        handle, stage = open_stage(parent, kind, settings, lambda: Stage(kind, settings, [], parent.recipe, []))
    lr = stage.entries[0].lr[0]
    stage.recipe = handle.recipe = ablate_recipe(parent.recipe, kind, stage.seeds, lr)
    stage.test_bytes = cfg.test_bytes
    return handle, stage


def run_ablation(parent: StudyHandle, cfg: AblateConfig, display=None, verbose: bool = False) -> StudyHandle:
    """Train the ablation to the end as one worker of it. Returns the stage's handle."""
    handle, stage = open_ablation(parent, cfg)
    return run_stage(handle, stage, display, verbose)


def ablation_handle(parent: StudyHandle, cfg: AblateConfig) -> tuple[StudyHandle, dict]:
    """The stored ablation of ``cfg``'s pair, to report on: (its handle, its stage attribute)."""
    kind = _find(parent, cfg)
    if kind is None:
        raise NormsearchError(f"study {parent.recipe.name!r} has no ablation of {' vs '.join(cfg.between)}; run "
                              f"`normsearch ablate` first")
    study = find_stage(parent, kind)
    info = study.user_attrs[A_STAGE]
    recipe = ablate_recipe(parent.recipe, kind, info["seeds"], info["entries"][0]["lr"][0])
    return StudyHandle(recipe, study, parent.storage_url, parent.folder / kind), info


# --------------------------------------------------------------------------------------------------
# --dry-run


def dry_run(parent: StudyHandle, p: Plan, jobs=None) -> str:
    """The design in words: the combinations, their sites, the run count and the time it would take at
    the study's own runs' mean wall time. Reads only."""
    entries = p.entries()
    runs = len(entries) * p.cfg.seeds
    a, b = p.a, p.b
    k = len(p.factors)
    head = (f"ablation of {a.label} vs {b.label} in study {parent.recipe.name!r}: "
            + (f"stored as stage {p.kind}; running it resumes it" if p.stored else f"a new stage, {p.kind}"))
    if p.fraction == LOO:
        what = f"leave-one-out: {a.label} with each single change ({len(p.combos) - 2}), beside {a.label} and {b.label}"
    elif p.fraction == "half":
        what = (f"half fraction of 2^{k}: {2 ** (k - 1)} combinations, {defining_relation(p.factors, p.fraction)}, "
                f"resolution {k}" + ("" if all(c["in_design"] for c in p.combos) else
                                     f"; {a.label}'s corner trained beside it for the gap"))
    else:
        what = f"full factorial: 2^{k} = {2 ** k} combinations"
    init = f"; init {p.cfg.init[0]} ({a.label}) vs {p.cfg.init[1]} ({b.label})" if p.cfg.init else ""
    lines = [head, f"factors ({k or len(p.combos) - 2}): {', '.join(p.factors) or 'the single changes below'}{init}",
             f"design: {what}",
             f"every combination at {a.label}'s chosen cell: lr {a.lr:g}"
             + (f", {', '.join(f'{k_} {v}' for k_, v in a.variant.items())}" if a.variant else "")
             + (" (the init as the combination says)" if p.cfg.init else "")
             + f"; seeds {p.seeds[0]}-{p.seeds[-1]}; scored on the test split ({p.cfg.test_bytes:,} bytes)", ""]
    diffs = [c.get("change") or ", ".join(ABBREV.get(f, f) for f in c.get("from_b", [])) or "-" for c in p.combos]
    w1 = max(len(c["label"]) for c in p.combos) + 2
    w2 = max(len(d) for d in [*diffs, "from " + b.label]) + 2
    lines.append(f"  {'combination':<{w1}}{('change' if p.fraction == LOO else 'from ' + b.label):<{w2}}sites")
    for c, diff in zip(p.combos, diffs):
        twin = f"  (trained as {c['entry']})" if c["entry"] != c["label"] else ""
        lines.append(f"  {c['label']:<{w1}}{diff:<{w2}}{c['sites']}{twin}")
    per_run = (a.wall_time + b.wall_time) / (a.n_runs + b.n_runs) if a.n_runs + b.n_runs else None
    workers = _workers(parent, jobs)
    lines.append("")
    twins = len(p.combos) - len(entries)
    cost = (f"{len(entries)} architectures to train" + (f" ({twins} combinations trained as another)" if twins else "")
            + f", {p.cfg.seeds} seeds each: {runs} runs.")
    if per_run:
        total = runs * per_run
        cost += (f" The study's runs of {a.label} and {b.label} took {per_run:.1f} s each on average: about "
                 f"{_duration(total)} of training" + (f", about {_duration(total / workers)} on {workers} workers"
                                                      if workers > 1 else "") + ".")
    lines += [cost, "Nothing trained, nothing written (--dry-run)."]
    return "\n".join(lines)


def _workers(parent: StudyHandle, jobs) -> int:
    from ..search import parse_jobs, plan_workers, uses_gpu

    jobs = parse_jobs(jobs if jobs is not None else parent.recipe.search.jobs)
    return max(1, len(plan_workers(jobs, parent.recipe, None, uses_gpu(parent.recipe))))


def _duration(s: float) -> str:
    return f"{s / 3600:.1f} h" if s >= 5400 else f"{s / 60:.0f} min" if s >= 90 else f"{s:.0f} s"
