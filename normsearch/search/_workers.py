"""Local workers: one ``normsearch run`` process per GPU (or per group of ``train.devices`` GPUs), all
on one study, their progress shown together."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
from pathlib import Path

from ..errors import NormsearchError
from ..recipe import Recipe

log = logging.getLogger("normsearch")


def device_groups(devices: str, per_worker: int) -> list[list[int]]:
    """``"0,1,2,3"`` with ``train.devices: 2`` -> ``[[0, 1], [2, 3]]``; checked against this machine."""
    import torch

    try:
        ids = [int(x) for x in devices.split(",") if x.strip()]
    except ValueError:
        raise NormsearchError(f"--devices {devices!r}: give GPU ids separated by commas, e.g. 0,1,2,3") from None
    if not ids or len(ids) % per_worker:
        raise NormsearchError(f"--devices {devices}: {len(ids)} GPUs do not split into workers of "
                              f"train.devices={per_worker}")
    available = torch.cuda.device_count()
    if available and max(ids) >= available:
        raise NormsearchError(f"--devices {devices}: this machine has {available} CUDA devices (0..{available - 1})")
    return [ids[i:i + per_worker] for i in range(0, len(ids), per_worker)]


#: the storage URL for worker processes: passed in their environment, never on their command line
WORKER_STORAGE = "NORMSEARCH_WORKER_STORAGE"


def run_on_devices(recipe_path: Path, extra: list[str], recipe: Recipe, groups: list[list[int]], url: str,
                   verbose: bool, view, sigterm=lambda: False) -> list[int]:
    """Start one worker per group with ``CUDA_VISIBLE_DEVICES`` set to it, feed their progress (JSON
    lines) to ``view.handle``, and wait for them. Returns their exit codes. A Ctrl-C reaches the
    workers too, and they mark their trials before they exit with 130; a SIGTERM reaches this process
    only (``sigterm()`` says which it was), so it is passed on to them."""
    names = worker_names(groups)
    procs = []
    for i, (g, worker) in enumerate(zip(groups, names)):
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": ",".join(map(str, g)), WORKER_STORAGE: url}
        cmd = [sys.executable, "-m", "normsearch", "run", str(recipe_path), *extra,
               "--storage", f"env:{WORKER_STORAGE}", "--worker-index", str(i), "--progress-json", worker]
        cmd += ["--verbose"] if verbose else []
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True))
    readers = [threading.Thread(target=lambda p=p: [view.handle(line) for line in p.stdout], daemon=True)
               for p in procs]
    for t in readers:
        t.start()
    try:
        codes = [p.wait() for p in procs]
    except KeyboardInterrupt:  # the workers got the same Ctrl-C: let them mark their trials
        if sigterm():
            for p in procs:
                if p.poll() is None:
                    p.terminate()
        codes = [p.wait() for p in procs]
    for t in readers:
        t.join(timeout=5)
    return codes


def worker_names(groups: list[list[int]]) -> list[str]:
    return [f"gpu{','.join(map(str, g))}" for g in groups]
