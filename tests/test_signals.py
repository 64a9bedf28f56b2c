"""SIGTERM (Slurm, Kubernetes, ``timeout``) stops a worker like Ctrl-C: within seconds, its trial
marked for a rerun, and the same command resumes."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

from tiny import write_tiny_recipe


def _running(db) -> int:
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1) as con:
            return con.execute("SELECT count(*) FROM trials WHERE state = 'RUNNING'").fetchone()[0]
    except sqlite3.Error:
        return 0


def test_sigterm_stops_a_run_and_the_rerun_resumes(tmp_path):
    recipe = write_tiny_recipe(tmp_path, name="term", steps=150, trials=0)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), *sys.path])}
    cmd = [sys.executable, "-m", "normsearch", "run", str(recipe)]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    db = tmp_path / "results" / "term" / "study.db"
    deadline = time.monotonic() + 240
    while not _running(db) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert proc.poll() is None, proc.communicate()
    time.sleep(0.5)
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    took = time.monotonic() - sent
    assert proc.returncode == 143, (out, err)
    assert took < 10, took
    assert "interrupted: finished trials are kept" in err and "Traceback" not in err, err
    with sqlite3.connect(db) as con:
        states = [s for (s,) in con.execute("SELECT state FROM trials ORDER BY number")]
    assert "RUNNING" not in states and "FAIL" in states and "WAITING" in states, states  # marked for a rerun
    with sqlite3.connect(db) as con:
        why = [json.loads(v) for (v,) in con.execute("SELECT value_json FROM trial_user_attributes WHERE key = 'failure'")]
    assert why == ["interrupted (SIGTERM)"], why
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    with sqlite3.connect(db) as con:
        states = [s for (s,) in con.execute("SELECT state FROM trials ORDER BY number")]
    assert states.count("COMPLETE") == 2 and "RUNNING" not in states and "WAITING" not in states, states


def test_sigterm_while_waiting_for_a_dead_database():
    """The storage retry loop sleeps between tries; SIGTERM ends that wait at once."""
    code = (
        "import sys, time\n"
        "from sqlalchemy.exc import OperationalError\n"
        "from normsearch.cli_support import stop_on_sigterm\n"
        "from normsearch.storage import retry\n"
        "def down():\n    raise OperationalError('SELECT 1', {}, ConnectionRefusedError('server gone'))\n"
        "stop_on_sigterm()\n"
        "print('waiting', flush=True)\n"
        "try:\n    retry(down, 'read the trials', patience=600)\n"
        "except KeyboardInterrupt:\n    print('stopped', flush=True); sys.exit(143)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), *sys.path])}
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline().strip() == "waiting"
    time.sleep(2.0)  # in the backoff's sleep by now
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 143 and "stopped" in out, (out, err)
    assert time.monotonic() - sent < 3
