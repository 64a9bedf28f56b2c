"""Run-level sharing between the workers of one machine: claims on runs, and the cores they share.

A **claim** says which worker trains one run (one seed at one learning rate of one architecture):
``results/<name>/runs/<arch>/seed{s}_lr{lr}.claim``, holding the worker's id. It appears atomically
(a locked temporary file hard-linked into place, which fails when the claim exists, like
``O_CREAT | O_EXCL``) and its worker holds an exclusive ``flock`` on it for as long as it trains the
run. The kernel drops that lock when the process dies, ``kill -9`` included, so a claim whose lock
can be taken is stale, whatever its pid says (and a recycled pid cannot keep a dead claim alive):
the next worker takes it over. Claims are for workers that share a machine and a results folder
(``normsearch run --jobs N``, or several ``run`` commands on one host); workers on other machines
never claim runs of each other's architectures.

The **registry** counts the normsearch workers on this host (one pid file each in a temporary
folder), so that workers started by hand split the cores between them instead of each taking all
of them.
"""

from __future__ import annotations

import fcntl
import logging
import os
import tempfile
from pathlib import Path

log = logging.getLogger("normsearch")


class Claim:
    """A held claim on a run; :meth:`release` (or leaving the ``with`` block) removes it."""

    def __init__(self, path: Path, fd: int):
        self.path, self.fd = path, fd

    def release(self) -> None:
        if self.fd < 0:
            return
        try:
            self.path.unlink()  # under the lock: whoever opened it meanwhile sees that it is gone
        except FileNotFoundError:
            pass
        os.close(self.fd)
        self.fd = -1

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()


def claim_path(run_json: Path) -> Path:
    return run_json.with_suffix(".claim")


def _lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


def try_claim(run_json: Path, worker: str) -> Claim | None:
    """Claim the run whose result goes to ``run_json``: a new claim, or a stale one taken over.
    None when a live worker holds it or the run is on disk already."""
    path = claim_path(run_json)
    path.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(20):  # each pass loses a race to a worker that made progress
        if run_json.is_file():
            return None
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, worker.encode())
        try:
            os.link(tmp, path)  # atomic; fails when a claim is there
            os.unlink(tmp)
            if run_json.is_file():  # finished between the check and the claim
                Claim(path, fd).release()
                return None
            return Claim(path, fd)
        except FileExistsError:
            os.unlink(tmp)
            os.close(fd)
        taken = _take_over(path, run_json, worker)
        if taken is not None:
            return taken or None
    return None


def _take_over(path: Path, run_json: Path, worker: str):
    """The existing claim at ``path``: a Claim when it was stale and is now ours, False when a live
    worker holds it, None when it vanished (try again)."""
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return None
    if not _lock(fd):
        os.close(fd)
        return False
    try:
        same = os.stat(path).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        same = False
    if not same:  # released (and perhaps claimed anew) between our open and our lock
        os.close(fd)
        return None
    old = os.pread(fd, 200, 0).decode(errors="replace")
    os.ftruncate(fd, 0)
    os.pwrite(fd, worker.encode(), 0)
    if run_json.is_file():
        Claim(path, fd).release()
        return False
    log.warning("took over the run %s from %s, whose worker is gone", run_json.stem, old or "a worker")
    return Claim(path, fd)


def held_by_live_worker(run_json: Path) -> bool:
    """Whether a live worker holds the claim on this run (without taking it)."""
    try:
        fd = os.open(claim_path(run_json), os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        if _lock(fd):
            fcntl.flock(fd, fcntl.LOCK_UN)
            return False
        return True
    finally:
        os.close(fd)


def clear_stale(run_json: Path) -> None:
    """Remove the claim of a run that is already on disk when no live worker holds it (its worker was
    killed between writing the run and releasing the claim)."""
    path = claim_path(run_json)
    if not path.exists():
        return
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        if _lock(fd):  # under the lock, as Claim.release removes it
            path.unlink(missing_ok=True)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


# -- the workers on this host and their cores -------------------------------------------------------


def cores() -> int:
    """The cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS
        return os.cpu_count() or 1


def _registry() -> Path:
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return Path(os.environ.get("NORMSEARCH_REGISTRY") or Path(tempfile.gettempdir()) / f"normsearch-workers-{uid}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Registered:
    """This process, listed among the normsearch workers on this host while the block runs."""

    def __enter__(self):
        folder = _registry()
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / str(os.getpid())
        self.path.write_text("")
        return self

    def __exit__(self, *exc):
        self.path.unlink(missing_ok=True)


def live_workers() -> int:
    """The normsearch workers running on this host (this one included, when registered); pid files
    of dead workers are removed on the way."""
    folder = _registry()
    n = 0
    for f in folder.glob("*") if folder.is_dir() else []:
        if not f.name.isdigit():
            continue
        if _alive(int(f.name)):
            n += 1
        else:
            f.unlink(missing_ok=True)
    return max(n, 1)


def thread_share(workers: int | None = None) -> int:
    """Threads for one worker's training when ``train.threads`` is not set: the cores split
    between the normsearch workers on this host."""
    return max(1, cores() // (workers or live_workers()))
