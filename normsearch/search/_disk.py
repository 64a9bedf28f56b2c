"""The results on disk: every finished run and architecture is written under ``results/<name>/runs/``
before it goes to storage, so a result outlives a database that was down when it finished; the next
``normsearch run`` sends storage whatever it lacks. The best seed's weights are kept in
``checkpoints/``."""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

from ..records import A_HEARTBEAT, ArchRecord, RunResult, parse_run_key, run_stem
from ..storage import retry

log = logging.getLogger("normsearch")


def write_json(path: Path, data: dict) -> None:
    """Atomically: a reader sees the old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, default=float))
    os.replace(tmp, path)


def run_path(runs_dir: Path, arch: str, seed: int, lr: float, suffix: str = ".json", tag: str = "") -> Path:
    return runs_dir / arch / f"{run_stem(seed, lr, tag)}{suffix}"


def read_run(path: Path) -> RunResult:
    return RunResult.from_dict(json.loads(path.read_text()))


def add_finished(study, record: ArchRecord, user_attrs: dict[str, Any]) -> None:
    """Store a finished architecture as a new trial (from disk, or after this trial was taken for dead)."""
    import optuna
    from optuna.distributions import json_to_distribution

    state = getattr(optuna.trial.TrialState, record.state)
    attrs = {**user_attrs, **record.to_attrs()}
    attrs.pop(A_HEARTBEAT, None)
    retry(lambda: study.add_trial(optuna.trial.create_trial(
        state=state, values=record.values if state.name == "COMPLETE" else None,
        params=record.params or {},
        distributions={k: json_to_distribution(v) for k, v in (record.distributions or {}).items()},
        user_attrs=attrs, system_attrs={"restored": True},  # not a proposal of its own (search._propose)
    )), "store a result from disk")


def sync_local_results(handle) -> int:
    """Send storage the finished architectures that are on disk (``runs/*/arch.json``) but not in
    the study, e.g. because the database was down when they finished. Returns how many."""
    from ._census import census
    from ._liveness import busy_elsewhere

    c = census(handle.study)
    grace = handle.recipe.search.grace
    # an architecture still in training elsewhere, or being stored right now by a live worker that
    # shares this folder, is not sent: its worker stores it (or it is reaped and retried)
    busy = {t.user_attrs.get("arch_id") for t in c.running if busy_elsewhere(t, grace)}
    sent = 0
    for path in sorted(handle.runs_dir.glob("*/arch.json")):
        record = ArchRecord.from_json(json.loads(path.read_text()))
        if record.arch_id in c.done or record.arch_id in busy or record.state != "COMPLETE":
            continue
        runs = {}
        for key in record.runs:
            seed, lr, tag = parse_run_key(key)
            f = path.parent / f"seed{seed}_lr{lr}{'_' + tag if tag else ''}.json"
            if f.is_file():
                runs[key] = read_run(f).compact()
        if len(runs) != len(record.runs):
            continue
        add_finished(handle.study, record, runs)
        sent += 1
        log.warning("sent architecture %s (%s) from %s to storage", record.arch_id, record.label, path.parent)
    return sent


def keep_best_checkpoint(handle, arch: str, seed: int, lr: float, value: float, variant: dict | None = None) -> None:
    """Keep the weights of the best seed at the chosen cell as checkpoints/<arch>.safetensors, and drop
    the other runs' weights."""
    from ..grid import variant_tag

    src = run_path(handle.runs_dir, arch, seed, lr, ".safetensors", variant_tag(variant or {}))
    if src.is_file():
        handle.checkpoints_dir.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, handle.checkpoints_dir / f"{arch}.safetensors")
        write_json(handle.checkpoints_dir / f"{arch}.json", {"arch_id": arch, "seed": seed, "lr": lr, "value": value,
                                                              **({"variant": variant} if variant else {})})
    for f in (handle.runs_dir / arch).glob("*.safetensors"):
        f.unlink()
