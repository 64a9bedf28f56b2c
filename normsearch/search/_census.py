"""Where a study stands: finished architectures, running and waiting trials, and ``normsearch status``."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ..grid import plan
from ..records import A_ARCH, A_BASELINE, A_CONTROL, A_FAILED, A_HEARTBEAT, A_LABEL, A_REUSED, A_WORKER, run_keys
from ..storage import mask, retry


@dataclass
class Census:
    """Where a study stands."""

    done: dict[str, Any] = field(default_factory=dict)  # key (arch_id; a stage's task) -> first finished trial
    baselines_done: set[str] = field(default_factory=set)
    baseline_archs: set[str] = field(default_factory=set)
    searched: set[str] = field(default_factory=set)  # keys of finished trials that are not baselines nor controls
    controls_done: set[int] = field(default_factory=set)  # control proposals (search.control) finished, by index
    running: list[Any] = field(default_factory=list)
    waiting: list[Any] = field(default_factory=list)
    failed: list[Any] = field(default_factory=list)
    trials: list[Any] = field(default_factory=list)  # every trial, as read

    @property
    def searched_done(self) -> int:
        """Distinct architectures the search found: not the baselines', nor the ones only control
        proposals drew (they come on top of search.trials)."""
        return len(self.searched - self.baseline_archs)

    def status_line(self) -> str:
        """``best 2.8946 (t6)  best baseline 2.8986 (hybridnorm)``, from the objective values."""
        best = best_base = None
        for t in self.done.values():
            if t.state.name != "COMPLETE" or t.values is None:
                continue
            v = t.values[0]
            if t.user_attrs.get(A_BASELINE):
                if best_base is None or v < best_base[0]:
                    best_base = (v, t.user_attrs[A_BASELINE])
            if best is None or v < best[0]:
                best = (v, t.user_attrs.get(A_LABEL) or f"t{t.number}")
        parts = []
        if best:
            parts.append(f"best {best[0]:.4f} ({best[1]})")
        if best_base:
            parts.append(f"best baseline {best_base[0]:.4f} ({best_base[1]})")
        return "  ".join(parts)


def census(study, exclude_number: int | None = None, trials: list | None = None, key: str = A_ARCH) -> Census:
    """Where ``study`` stands, its finished trials keyed by the user attribute ``key`` (the architecture;
    a stage's task)."""
    from optuna.trial import TrialState

    c = Census()
    if trials is None:
        trials = retry(lambda: study.get_trials(deepcopy=False), "read the trials")
    c.trials = trials
    for t in trials:
        if t.number == exclude_number:
            continue
        ua = t.user_attrs
        if ua.get(A_BASELINE) and ua.get(A_ARCH) and t.state != TrialState.FAIL:
            c.baseline_archs.add(ua[A_ARCH])
        if t.state in (TrialState.COMPLETE, TrialState.PRUNED) and ua.get(key):
            c.done.setdefault(ua[key], t)
            if ua.get(A_BASELINE):
                c.baselines_done.add(ua[A_BASELINE])
            elif ua.get(A_CONTROL) is not None:
                c.controls_done.add(int(ua[A_CONTROL]))
            else:
                c.searched.add(ua[key])
        elif t.state == TrialState.RUNNING:
            c.running.append(t)
        elif t.state == TrialState.WAITING:
            c.waiting.append(t)
        elif t.state == TrialState.FAIL:
            c.failed.append(t)
    return c


def status_text(handle) -> str:
    """Trials by state, the running ones and their workers, the best so far against the baselines."""
    study = handle.study
    trials = retry(lambda: study.get_trials(deepcopy=False), "read the trials")
    states = Counter(t.state.name for t in trials)
    c = census(study, trials=trials)
    r = handle.recipe
    lines = [
        f"study {study.study_name!r} in {mask(handle.storage_url)}",
        f"  architectures: {len(c.done)} finished ({len(c.baselines_done)}/{len(r.search.baselines)} baselines, "
        f"{c.searched_done}/{r.search.trials} searched"
        + (f", {len(c.controls_done)}/{max(r.search.control, len(c.controls_done))} controls: uniform draws, "
           f"labelled c<j>)" if r.search.control or c.controls_done else ")"),
        "  trials: " + ", ".join(f"{states.get(k, 0)} {k.lower()}" for k in ("COMPLETE", "PRUNED", "RUNNING", "FAIL",
                                                                          "WAITING")),
    ]
    reused = sum(1 for t in trials if t.user_attrs.get(A_REUSED) is not None)
    if reused:
        lines.append(f"  {reused} proposal{'s' if reused > 1 else ''} repeated an evaluated architecture and reused "
                     f"its result")
    for t in c.running:
        ua = t.user_attrs
        beat = ua.get(A_HEARTBEAT)
        ago = f", heartbeat {time.time() - beat:.0f} s ago" if beat else ""
        done = len(run_keys(ua))
        control = " (control)" if ua.get(A_CONTROL) is not None else ""
        planned = len(plan(r.train, ua.get(A_BASELINE)))  # before the sweep refines around the chosen cell
        of = f"{planned}" if not (r.train.lr_extend or r.train.lr_resolution) else f"{planned}+"
        lines.append(f"  running: trial {t.number} {ua.get(A_LABEL, '')}{control} [{ua.get(A_ARCH, '?')}] "
                     f"on {ua.get(A_WORKER, '?')}, run {done + 1}/{of}{ago}")
    failed = Counter((t.user_attrs.get(A_FAILED) or "error").split(":")[0] for t in c.failed)
    if failed:
        lines.append("  failed: " + ", ".join(f"{n} {why}" for why, n in failed.items()))
    workers = Counter(t.user_attrs.get(A_WORKER) for t in trials if t.user_attrs.get(A_WORKER))
    if workers:
        lines.append("  workers: " + ", ".join(f"{w} ({n} trials)" for w, n in workers.most_common()))
    line = c.status_line()
    if line:
        lines.append("  " + line)
    return "\n".join(lines)
