"""Liveness: which worker runs a trial, its heartbeat, and reaping the trials of dead workers.

A worker on this host is dead when its process is gone; one elsewhere when its heartbeat is
``search.grace`` seconds old and this process then watched it stand still, overdue, for two heartbeat
intervals (so clocks that disagree between machines, or a database outage that held the heartbeat
back, are no evidence of death: an outage this process did not meet itself, because it was not
reading the database then, ends before the watch does). A reaped trial is marked FAIL and enqueued
again, up to :data:`MAX_RETRIES` times.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time

from .. import storage as _storage
from ..records import A_BASELINE, A_CONTROL, A_FAILED, A_HEARTBEAT, A_LABEL, A_PROPOSAL, A_WORKER
from ..storage import retry
from . import _optuna

log = logging.getLogger("normsearch")

MAX_RETRIES = 3


def worker_host() -> str:
    """This machine's name in worker ids: ``$NORMSEARCH_WORKER_HOST``, else the hostname. Set it where
    machines share a hostname but not their processes (containers cloned from one image, pods with
    host networking): a worker whose host name matches takes the process id for one on its own
    machine, and a pid it cannot see for a dead worker."""
    return os.environ.get("NORMSEARCH_WORKER_HOST") or socket.gethostname()


def worker_id() -> str:
    return f"{worker_host()}:{os.getpid()}"


def alive_here(worker: str | None) -> bool | None:
    """True/False when ``worker`` ran on this host (its process exists or not); None otherwise."""
    if not worker or ":" not in worker:
        return None
    host, _, pid = worker.rpartition(":")
    if host != worker_host() or not pid.isdigit():
        return None
    if int(pid) == os.getpid():
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def busy_elsewhere(trial, grace: float) -> bool:
    """A running trial whose worker is alive, here or (by a recent heartbeat) elsewhere."""
    ua = trial.user_attrs
    alive = alive_here(ua.get(A_WORKER))
    return alive is True or (alive is None and time.time() - (ua.get(A_HEARTBEAT) or 0) < grace)


# trial -> (the heartbeat last read, when this process first read that value; time.monotonic())
_watched: dict[tuple, tuple[float, float]] = {}


def _silent_for(study, t, beat: float, now: float) -> float:
    """How long this process has watched the trial's heartbeat stand still since it first read it
    overdue (the caller asks only then), not counting time before this process's own last storage
    trouble (a worker cannot beat while the database is down, so an outage is no evidence of death)."""
    key = (study.study_name, _optuna.trial_id(t))
    seen = _watched.get(key)
    if seen is None or seen[0] != beat:
        _watched[key] = (beat, now)
        return 0.0
    return now - max(seen[1], _storage.last_trouble())


def reap_dead_trials(study, grace: float, heartbeat: float | None = None) -> list[int]:
    """Fail the running trials whose worker is gone and enqueue each for a retry. Returns their
    numbers. A worker elsewhere must have a heartbeat ``grace`` old that this process then watched
    stand still for twice the heartbeat interval (``heartbeat``, default ``grace / 2``): the watch
    starts at the first read that finds it overdue, never at an earlier read that found it fresh, so a
    silence this process did not watch (a database restart between two of its reads, which its
    connection pool may have healed without an error it could note) proves nothing."""
    from ._census import census

    confirm = 2 * heartbeat if heartbeat else grace / 2
    reaped = []
    running = census(study).running
    ids = {_optuna.trial_id(t) for t in running}
    for key in [k for k in _watched if k[0] == study.study_name and k[1] not in ids]:
        del _watched[key]  # finished since
    for t in running:
        ua = t.user_attrs
        alive = alive_here(ua.get(A_WORKER))
        if alive is True:
            continue
        if alive is None:
            last = ua.get(A_HEARTBEAT) or (t.datetime_start.timestamp() if t.datetime_start else time.time())
            if time.time() - last < grace:
                _watched.pop((study.study_name, _optuna.trial_id(t)), None)  # fresh: no watch yet
                continue
            if _silent_for(study, t, last, time.monotonic()) < confirm:
                continue
            why = f"no heartbeat for {time.time() - last:.0f} s"
        else:
            why = "its process is gone"
        tid = _optuna.trial_id(t)
        try:  # the reason first: a finished trial takes no more attributes
            retry(lambda tid=tid, why=why: _optuna.set_attr(study, tid, A_FAILED, f"dead worker: {why}"),
                  "record a dead trial")
            ok = retry(lambda tid=tid: _optuna.set_failed(study, tid), "mark a dead trial")
        except Exception as e:  # another worker got there first
            if _optuna.is_finished_error(e):
                continue
            raise
        _watched.pop((study.study_name, tid), None)
        if ok:
            enqueue_retry(study, t)
            reaped.append(t.number)
            log.warning("trial %d of %s was left running by a dead worker (%s); it will be retried",
                        t.number, ua.get(A_WORKER), why)
    return reaped


def enqueue_retry(study, t) -> None:
    """Enqueue a failed trial's point again (its baseline name, control index, label and proposal number
    kept), at most MAX_RETRIES times."""
    import optuna

    history = list(t.system_attrs.get("retry_history", [])) + [t.number]
    if len(history) > MAX_RETRIES:
        log.warning("trial %d failed %d times; not retrying it again", t.number, len(history))
        return
    keep = {k: v for k, v in t.user_attrs.items() if k in (A_BASELINE, A_CONTROL, A_LABEL, A_PROPOSAL)}
    retry(lambda: study.add_trial(optuna.trial.create_trial(
        state=optuna.trial.TrialState.WAITING, params=t.params, distributions=t.distributions,
        user_attrs=keep, system_attrs={"failed_trial": t.number, "retry_history": history},
    )), "enqueue a retry")


class Heartbeat:
    """Writes the time into a running trial every ``interval`` seconds, so other workers can tell a
    long trial from a dead one (it beats for as long as the trial runs, however long that is)."""

    def __init__(self, study, trial_id: int, interval: float):
        self.study, self.trial_id, self.interval = study, trial_id, interval
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._beat, daemon=True, name="normsearch-heartbeat")

    def _beat(self):
        wait = self.interval
        while not self.stopped.wait(wait):
            try:
                _optuna.set_attr(self.study, self.trial_id, A_HEARTBEAT, time.time())
                wait = self.interval
            except Exception as e:  # a missed beat is not fatal; a finished trial ends the loop
                if _optuna.is_finished_error(e):
                    return
                _storage.note_trouble()
                wait = min(self.interval, 1.0)  # the database is back soon: beat as soon as it is
                log.debug("heartbeat failed: %s", e)

    def __enter__(self):
        retry(lambda: _optuna.set_attr(self.study, self.trial_id, A_HEARTBEAT, time.time()), "write the heartbeat")
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stopped.set()
        self.thread.join(timeout=5)
