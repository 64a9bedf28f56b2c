"""Local workers: ``--jobs N`` and ``--devices``. Each worker is one process running the same job
(:class:`normsearch.jobs.Job`: a search, a confirmation or a ladder) on the same study (with
``--devices``, on its own GPU or group of ``train.devices`` GPUs; ``--jobs`` workers per group), their
progress shown together. On CPU the cores are split between the workers: ``--jobs auto`` picks the
split that is fastest for the model's size. The job reaches a worker typed, as JSON in its
environment, with its share of the cores; the storage URL in its environment too, never on a
command line.

Workers of one machine share work by the run (:mod:`._claims`): one with no architecture of its own
trains a run of another's, so a study with few architectures left still fills the machine.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field

from ..errors import NormsearchError
from ..recipe import Recipe
from ._claims import cores

log = logging.getLogger("normsearch")

# The d_model from which one run trains faster on 2 threads than two runs on 1 thread each do
# together. Measured on the 2-core machine this project is developed on: quickstart (d_model 64)
# trains 28-34k tokens/s on 2 threads, 23k + 24k on two 1-thread runs side by side. Wider models
# spend more of a step in large matrix products, which use more threads well.
THREADS_BY_WIDTH = ((512, 1), (1024, 2), (2048, 4))  # (d_model below this, threads per job)
MAX_THREADS_PER_JOB = 8


def threads_per_job(recipe: Recipe) -> int:
    """The fastest threads per run for this model on CPU (see THREADS_BY_WIDTH)."""
    for width, threads in THREADS_BY_WIDTH:
        if recipe.model.d_model < width:
            return threads
    return MAX_THREADS_PER_JOB


def parse_jobs(value) -> int | str:
    """``--jobs`` / ``search.jobs``: a positive integer or ``auto``."""
    if value is None or value == "auto":
        return "auto"
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise NormsearchError(f"--jobs {value!r}: give a number of workers (>= 1) or auto") from None
    if n < 1:
        raise NormsearchError(f"--jobs {value}: give a number of workers (>= 1) or auto")
    return n


@dataclass
class Worker:
    name: str
    env: dict = field(default_factory=dict)  # added to this process's environment
    threads: int | None = None  # its train.threads


def plan_workers(jobs: int | str, recipe: Recipe, groups: list[list[int]] | None, gpu: bool) -> list[Worker]:
    """The local workers of ``--jobs`` (and ``--devices``: that many per GPU group), each with its
    share of the cores as its ``train.threads`` unless the recipe sets it. ``auto`` is one worker
    per GPU group on GPUs; on CPU it splits the cores by :func:`threads_per_job`, into no more
    workers than the study has runs."""
    threads = recipe.train.threads
    if jobs == "auto":
        if gpu or groups is not None:
            jobs = 1
        else:
            per = threads or min(threads_per_job(recipe), cores())
            runs = (len(recipe.search.baselines) + recipe.search.trials) * len(recipe.train.runs)
            jobs, threads = max(1, min(cores() // per, runs)), per
    total = jobs * (len(groups) if groups else 1)
    threads = threads or max(1, cores() // total)
    if groups is None:
        return [Worker(f"job{i}", threads=threads) for i in range(jobs)]
    out = []
    for g in groups:
        ids = ",".join(map(str, g))
        for j in range(jobs):
            out.append(Worker(f"gpu{ids}" + (f"/{j}" if jobs > 1 else ""), {"CUDA_VISIBLE_DEVICES": ids}, threads))
    return out


#: device nodes that a CUDA (or ROCm) GPU's driver creates; with none of them there is no GPU to count
GPU_NODES = ("/dev/nvidiactl", "/dev/nvidia0", "/proc/driver/nvidia", "/dev/kfd", "/dev/dxg")


def cuda_devices() -> int:
    """The CUDA devices torch sees, without importing torch (2 s before the first worker starts) on a
    Linux machine with no GPU driver at all (elsewhere the driver's files are not known: torch is asked)."""
    if os.environ.get("CUDA_VISIBLE_DEVICES") in ("", "-1"):
        return 0
    if sys.platform == "linux" and not any(map(os.path.exists, GPU_NODES)):
        return 0
    import torch

    return torch.cuda.device_count()


def uses_gpu(recipe: Recipe) -> bool:
    """Whether the recipe's runs train on this machine's GPUs."""
    return recipe.train.device != "cpu" and bool(cuda_devices())


def device_groups(devices: str, per_worker: int) -> list[list[int]]:
    """``"0,1,2,3"`` with ``train.devices: 2`` -> ``[[0, 1], [2, 3]]``; checked against this machine."""
    try:
        ids = [int(x) for x in devices.split(",") if x.strip()]
    except ValueError:
        raise NormsearchError(f"--devices {devices!r}: give GPU ids separated by commas, e.g. 0,1,2,3") from None
    if not ids or len(ids) % per_worker:
        raise NormsearchError(f"--devices {devices}: {len(ids)} GPUs do not split into workers of "
                              f"train.devices={per_worker}")
    available = cuda_devices()
    if available and max(ids) >= available:
        raise NormsearchError(f"--devices {devices}: this machine has {available} CUDA devices (0..{available - 1})")
    return [ids[i:i + per_worker] for i in range(0, len(ids), per_worker)]


#: the storage URL for worker processes: passed in their environment, never on their command line
WORKER_STORAGE = "NORMSEARCH_WORKER_STORAGE"
#: the job (JSON), the worker's name, its index and --verbose, in a worker process's environment
WORKER_JOB, WORKER_NAME, WORKER_INDEX, WORKER_VERBOSE = ("NORMSEARCH_JOB", "NORMSEARCH_WORKER_NAME",
                                                         "NORMSEARCH_WORKER_INDEX", "NORMSEARCH_WORKER_VERBOSE")


def _die_with_parent():  # pragma: no cover - runs in the child between fork and exec
    """A worker whose parent is gone (``kill -9`` of ``normsearch run --jobs``) goes too; its trial
    is then reaped as a dead worker's and retried, as the parent's would be."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def run_workers(job, workers: list[Worker], url: str, verbose: bool, view, sigterm=lambda: False) -> list[int]:
    """Start the workers of ``job`` (a :class:`normsearch.jobs.Job`), feed their progress (JSON lines)
    to ``view.handle``, and wait for them. Returns their exit codes. A Ctrl-C reaches the workers too,
    and they mark their trials before they exit with 130; a SIGTERM reaches this process only
    (``sigterm()`` says which it was), so it is passed on to them."""
    import json

    procs = []
    for i, w in enumerate(workers):
        env = {**os.environ, **w.env, WORKER_STORAGE: url, WORKER_NAME: w.name, WORKER_INDEX: str(i),
               WORKER_JOB: json.dumps(job.with_threads(w.threads).to_json()), WORKER_VERBOSE: "1" if verbose else ""}
        procs.append(subprocess.Popen([sys.executable, "-m", "normsearch._worker"], env=env, stdout=subprocess.PIPE,
                                      text=True, preexec_fn=_die_with_parent if sys.platform == "linux" else None))
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
