"""Studies on a real PostgreSQL server: several workers, a worker killed mid-trial, the database
restarted mid-run, results that storage lost, and the one-line errors.

The server comes from ``.ci/postgres.sh start`` (CI runs it), which exports
``NORMSEARCH_TEST_PG_URL`` and ``NORMSEARCH_TEST_PG_DIR``; without the URL these tests are skipped.
Restarting the server needs ``NORMSEARCH_TEST_PG_DIR`` too. Every test works in its own study
(a unique name), so they share the one database. The errors that need no server always run.
"""

import datetime
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner

from normsearch.cli import app
from normsearch.ranking import rank
from normsearch.recipe import load_recipe
from normsearch.records import A_ARCH, A_REUSED, A_WORKER
from normsearch.search import census, open_results, reap_dead_trials, run_study

ROOT = Path(__file__).resolve().parents[2]
PG_URL = os.environ.get("NORMSEARCH_TEST_PG_URL")
PG_DIR = os.environ.get("NORMSEARCH_TEST_PG_DIR")

needs_pg = pytest.mark.skipif(
    not PG_URL, reason="NORMSEARCH_TEST_PG_URL is not set: start a server with "
                       "`eval \"$(.ci/postgres.sh start)\"` to run the PostgreSQL tests")
needs_pg_control = pytest.mark.skipif(
    not (PG_URL and PG_DIR), reason="restarting the database needs NORMSEARCH_TEST_PG_URL and NORMSEARCH_TEST_PG_DIR "
                                    "(a server started by .ci/postgres.sh)")

# A space of 4 networks (attn_in x ffn_in; final fixed), pre_ln among them; post_ln outside it.
RECIPE = """
name: {name}
model: {{n_layers: 2, d_model: 32, n_heads: 2, context_length: 32}}
data: {{eval_windows: 8}}
train: {{steps: {steps}, batch_size: 4, warmup: 2, eval_every: {eval_every}, lr: [3.0e-3], seeds: [0, 1], threads: 1}}
space:
  kind: rmsnorm
  sites: {{attn_in: [none, norm], ffn_in: [none, norm], final: [norm]}}
search: {{sampler: {sampler}, trials: {trials}, baselines: {baselines}, heartbeat: 1, grace: 5, startup_trials: 2,
         jobs: 1}}
results_dir: {results}
"""


def recipe(tmp_path, name, *, steps=10, eval_every=5, trials=3, sampler="grid", baselines="[pre_ln, post_ln]",
           results="results"):
    path = tmp_path / f"{name}-{results}.yaml"
    path.write_text(RECIPE.format(name=name, steps=steps, eval_every=eval_every, trials=trials, sampler=sampler,
                                  baselines=baselines, results=tmp_path / results))
    return path


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


class Worker:
    """``python -m normsearch ARGS`` in the background; its output goes to files (no pipe to fill)."""

    def __init__(self, tmp_path, *args, host=None, env=None):
        self.log = tmp_path / f"worker-{uuid.uuid4().hex[:6]}"
        extra = {"PYTHONUNBUFFERED": "1", **(env or {})}
        if host:
            extra["NORMSEARCH_WORKER_HOST"] = host
        self.out, self.err = open(f"{self.log}.out", "w"), open(f"{self.log}.err", "w")
        self.proc = subprocess.Popen([sys.executable, "-m", "normsearch", *map(str, args)], cwd=ROOT,
                                     env={**os.environ, **extra}, stdout=self.out, stderr=self.err)

    def wait(self, timeout=600) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            self.out.close()
            self.err.close()

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.wait(30)

    @property
    def stdout(self) -> str:
        return Path(f"{self.log}.out").read_text()

    @property
    def stderr(self) -> str:
        return Path(f"{self.log}.err").read_text()


@pytest.fixture
def workers():
    started: list[Worker] = []
    yield started
    for w in started:  # a failed test leaves no worker behind
        if w.proc.poll() is None:
            w.kill()


def wait_for(cond, timeout=300, what="condition", procs=()):
    start = time.time()
    while time.time() - start < timeout:
        if cond():
            return
        for w in procs:
            assert w.proc.poll() is None, f"worker exited ({w.proc.returncode}) while waiting for {what}: {w.stderr}"
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def running_with_a_finished_run(study_name: str, key: str = "run:%") -> int:
    """How many RUNNING trials of the study already stored one of their runs (halfway through), or
    with ``key="arch_id"``, are training at all."""
    import psycopg

    try:
        with psycopg.connect(PG_URL, connect_timeout=5) as con:
            row = con.execute(
                "select count(distinct t.trial_id) from trials t join studies s on s.study_id = t.study_id "
                "join trial_user_attributes a on a.trial_id = t.trial_id "
                "where s.study_name = %s and t.state = 'RUNNING' and a.key like %s", (study_name, key)).fetchone()
    except psycopg.Error:  # the tables do not exist yet, or the server is restarting
        return 0
    return row[0]


def pg(command: str):
    subprocess.run(["bash", str(ROOT / ".ci" / "postgres.sh"), command, PG_DIR], check=True, timeout=120)


def trained_per_arch(study) -> dict[str, int]:
    """arch_id -> number of finished trials that trained it (not reused)."""
    out: dict[str, int] = {}
    for t in study.get_trials(deepcopy=False):
        if t.state.name in ("COMPLETE", "PRUNED") and t.user_attrs.get(A_REUSED) is None:
            out[t.user_attrs[A_ARCH]] = out.get(t.user_attrs[A_ARCH], 0) + 1
    return out


def failures(study) -> list[str]:
    return [t.user_attrs.get("failure", "") for t in study.get_trials(deepcopy=False) if t.state.name == "FAIL"]


def scores(study) -> dict[str, list]:
    """Every architecture's runs: (seed, lr, final loss), the numbers any ranking is built from."""
    return {r.arch_id: sorted((x.seed, x.lr, x.value) for x in r.runs) for r in rank(study).rows}


def disk_matches_storage(handle):
    """Every architecture finished on disk (runs/*/arch.json) is finished in storage with the same
    values, and the other way round."""
    import json

    on_disk = {}
    for path in handle.runs_dir.glob("*/arch.json"):
        record = json.loads(path.read_text())
        on_disk[record["arch_id"]] = record["values"]
    done = census(handle.study).done
    assert set(on_disk) == set(done)
    for arch, t in done.items():
        assert t.values == on_disk[arch], arch


# -- several workers ---------------------------------------------------------------------------------


@needs_pg
def test_three_workers_train_every_architecture_once_and_rank_like_one(tmp_path, workers):
    """Three workers on one PostgreSQL study cover the 4-point grid and the baselines: every
    architecture trained exactly once, and the ranking is the one a single worker gets alone."""
    name = unique("three")
    path = recipe(tmp_path, name)
    single = recipe(tmp_path, name, results="single")  # same study, a single worker on SQLite
    workers += [Worker(tmp_path, "run", path, "--storage", PG_URL) for _ in range(3)]
    workers.append(Worker(tmp_path, "run", single))
    for w in workers:
        assert w.wait() == 0, w.stderr
    shared = open_results(tmp_path / "results" / name, storage=PG_URL).study
    alone = open_results(tmp_path / "single" / name).study

    per_arch = trained_per_arch(shared)
    assert len(per_arch) == 5 and all(n == 1 for n in per_arch.values()), per_arch  # 4 grid points + post_ln
    c = census(shared)
    assert c.searched_done == 3 and c.baselines_done == {"pre_ln", "post_ln"}
    assert all(f.startswith("surplus") for f in failures(shared)), failures(shared)
    seen = {t.user_attrs[A_WORKER] for t in shared.get_trials(deepcopy=False) if t.user_attrs.get(A_WORKER)}
    assert len(seen) >= 2, seen  # (a worker that starts late may find the work done)

    assert set(trained_per_arch(alone)) == set(per_arch)
    mine, theirs = scores(shared), scores(alone)
    assert mine.keys() == theirs.keys()
    for arch in mine:  # training is deterministic on CPU
        assert [v for *_, v in mine[arch]] == pytest.approx([v for *_, v in theirs[arch]], rel=1e-9, abs=1e-12)
        assert [k[:2] for k in mine[arch]] == [k[:2] for k in theirs[arch]]
    # the same rows with the same outcomes (labels differ: trial numbers depend on the workers' order)
    outcome = lambda s: sorted((r.arch_id, r.n_failed, r.score_mean) for r in rank(s).rows)  # noqa: E731
    assert outcome(shared) == outcome(alone)
    for w in workers[:3]:
        assert "pre_ln" in w.stdout  # each ends with the ranked table


# -- a worker killed mid-trial -----------------------------------------------------------------------


@needs_pg
def test_worker_killed_mid_trial_is_detected_by_heartbeat_and_retried(tmp_path, workers):
    """kill -9 of a worker halfway through its trial, seen from another host (its process id means
    nothing there): the heartbeat stops, the other worker declares the trial dead after `grace`,
    retries it, reuses the run that was finished, and nothing is trained twice."""
    name = unique("killed")
    path = recipe(tmp_path, name, steps=600, eval_every=200, trials=0, baselines="[pre_ln]")  # runs of seconds
    a = Worker(tmp_path, "run", path, "--storage", PG_URL, host="host-a")
    workers.append(a)
    wait_for(lambda: running_with_a_finished_run(name, "arch_id"), what="a trial in training", procs=[a])
    b = Worker(tmp_path, "run", path, "--storage", PG_URL, host="host-b")  # waits: the only trial is taken
    workers.append(b)
    wait_for(lambda: running_with_a_finished_run(name), what="a trial halfway", procs=[a, b])
    a.proc.send_signal(signal.SIGKILL)
    killed_at = datetime.datetime.now()
    a.wait(30)
    assert b.wait() == 0, b.stderr

    study = open_results(tmp_path / "results" / name, storage=PG_URL).study
    dead = [t for t in study.get_trials() if t.state.name == "FAIL"]
    assert len(dead) == 1, failures(study)
    assert re.fullmatch(r"dead worker: no heartbeat for \d+ s", dead[0].user_attrs["failure"])
    assert dead[0].user_attrs[A_WORKER].startswith("host-a:")
    detection = (dead[0].datetime_complete - killed_at).total_seconds()
    print(f"\ndead trial detected {detection:.1f} s after kill -9 (grace 5 s, heartbeat 1 s)")
    assert 3 <= detection < 60, detection  # by the heartbeat (grace), not by a pid check
    retried = [t for t in study.get_trials() if t.system_attrs.get("failed_trial") == dead[0].number]
    assert len(retried) == 1 and retried[0].state.name == "COMPLETE"
    assert retried[0].user_attrs[A_WORKER].startswith("host-b:")
    assert trained_per_arch(study) == {dead[0].user_attrs[A_ARCH]: 1}
    # the run the killed worker had finished was not trained again
    runs = sorted((tmp_path / "results" / name / "runs" / dead[0].user_attrs[A_ARCH]).glob("seed0_*.json"))
    assert runs and datetime.datetime.fromtimestamp(runs[0].stat().st_mtime) < killed_at


def test_death_by_heartbeat_needs_a_heartbeat_that_stood_still_while_watched(tmp_path):
    """No server needed. A trial of another host is dead when its heartbeat is `grace` old by the
    clock and this process watched it stand still for two heartbeat intervals, none of that across
    a storage outage of its own; a heartbeat that moves is alive whatever the clocks say."""
    import optuna

    from normsearch import storage

    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'hb.db'}", study_name=unique("hb"))
    silent, ahead, behind = (study.ask() for _ in range(3))
    now = time.time()
    for t, worker in ((silent, "elsewhere:1"), (ahead, "elsewhere:2"), (behind, "elsewhere:3")):
        study._storage.set_trial_user_attr(t._trial_id, A_WORKER, worker)
    study._storage.set_trial_user_attr(silent._trial_id, "heartbeat", now - 60)

    def beat():  # live workers on machines whose clocks are an hour ahead and an hour behind
        study._storage.set_trial_user_attr(ahead._trial_id, "heartbeat", time.time() + 3600)
        study._storage.set_trial_user_attr(behind._trial_id, "heartbeat", time.time() - 3600)

    grace, heartbeat = 2.0, 0.5  # watched for 1 s
    beat()
    assert reap_dead_trials(study, grace, heartbeat) == []  # first sight: nothing is dead yet
    time.sleep(0.6)
    beat()
    storage.note_trouble()  # this process just met an outage: the silence so far proves nothing
    assert reap_dead_trials(study, grace, heartbeat) == []
    time.sleep(0.6)
    beat()
    assert reap_dead_trials(study, grace, heartbeat) == []  # 0.6 s watched since the outage
    time.sleep(0.6)
    beat()
    assert reap_dead_trials(study, grace, heartbeat) == [silent.number]
    assert study._storage.get_trial(silent._trial_id).user_attrs["failure"].startswith("dead worker: no heartbeat for 6")
    assert {t.number for t in census(study).running} == {ahead.number, behind.number}


def test_a_heartbeat_read_fresh_then_overdue_is_watched_from_the_overdue_read(tmp_path):
    """No server needed. The reaper read the heartbeat fresh, then, after a gap in which it did not read
    the database (and so met no outage of its own, though the database may have restarted), read it
    overdue: the silence it did not watch proves nothing. The trial is dead only once this process has
    watched it overdue and standing still for two heartbeat intervals."""
    import optuna

    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'hb.db'}", study_name=unique("hb"))
    t = study.ask()
    study._storage.set_trial_user_attr(t._trial_id, A_WORKER, "elsewhere:1")
    study._storage.set_trial_user_attr(t._trial_id, "heartbeat", time.time())
    grace, heartbeat = 1.0, 0.25  # watched for 0.5 s
    assert reap_dead_trials(study, grace, heartbeat) == []  # fresh
    time.sleep(1.2)  # overdue, and unchanged for longer than the watch since the first read
    assert reap_dead_trials(study, grace, heartbeat) == []  # but first read overdue only now
    time.sleep(0.6)
    assert reap_dead_trials(study, grace, heartbeat) == [t.number]


# -- the database restarted mid-run -------------------------------------------------------------------


@needs_pg_control
def test_database_restarts_mid_run_workers_carry_on(tmp_path, workers):
    """Two workers; the database goes away for longer than `grace` while trials train, and later
    restarts again: the workers wait with backoff and finish, nobody takes a live trial for dead,
    every architecture is trained once, and what is on disk is what storage holds."""
    name = unique("restart")
    path = recipe(tmp_path, name, steps=20, trials=3)
    two = [Worker(tmp_path, "run", path, "--storage", PG_URL) for _ in range(2)]
    workers += two
    wait_for(lambda: running_with_a_finished_run(name), what="a trial halfway", procs=two)
    pg("down")
    time.sleep(7)  # longer than grace: every heartbeat is 7 s old when the database comes back
    pg("up")
    handle = open_results(tmp_path / "results" / name, storage=PG_URL)
    # a later trial in training (its runs may be shared by both workers, so none need have finished yet)
    wait_for(lambda: len(census(handle.study).done) >= 2 and running_with_a_finished_run(name, key="arch_id"),
             what="a later trial", procs=two)
    pg("restart")
    for w in two:
        assert w.wait() == 0, w.stderr
    assert any("storage error while trying to" in w.stderr for w in two)  # the outage was felt, and waited out

    per_arch = trained_per_arch(handle.study)
    assert len(per_arch) == 5 and all(n == 1 for n in per_arch.values()), per_arch
    assert all(f.startswith("surplus") for f in failures(handle.study)), failures(handle.study)
    disk_matches_storage(handle)


@needs_pg_control
def test_a_result_storage_missed_is_sent_by_the_next_run(tmp_path, workers):
    """The database goes down right after a trial's result is written to runs/ and before it is
    stored: the worker gives up (one line, exit 2) and the next `normsearch run` sends the result
    from disk instead of training it again."""
    name = unique("lost")
    path = recipe(tmp_path, name, trials=0, baselines="[pre_ln]")
    script = tmp_path / "down_after_disk.py"
    script.write_text(textwrap.dedent(f"""
        import subprocess, sys
        import normsearch.search._loop as loop
        from normsearch.cli import main

        write = loop.write_json

        def write_then_stop_the_database(path, data):
            write(path, data)
            if path.name == "arch.json":
                subprocess.run(["bash", {str(ROOT / ".ci" / "postgres.sh")!r}, "down", {PG_DIR!r}], check=True)

        loop.write_json = write_then_stop_the_database
        sys.argv = ["normsearch", "run", {str(path)!r}, "--storage", {PG_URL!r}]
        sys.exit(main())
    """))
    try:
        first = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=300,
                               env={**os.environ, "NORMSEARCH_STORAGE_PATIENCE": "3"})
    finally:
        pg("up")
    assert first.returncode == 2, first.stderr
    last = first.stderr.strip().splitlines()[-1]
    assert last.startswith("error: storage unreachable for ") and "while trying to store" in last, first.stderr
    arch_json = list((tmp_path / "results" / name / "runs").glob("*/arch.json"))
    assert len(arch_json) == 1
    handle = open_results(tmp_path / "results" / name, storage=PG_URL)
    assert not census(handle.study).done  # storage lacks it

    before = {p: p.stat().st_mtime for p in arch_json[0].parent.glob("seed*.json")}
    again = Worker(tmp_path, "run", path, "--storage", PG_URL)
    workers.append(again)
    assert again.wait() == 0, again.stderr
    assert "sent architecture" in again.stderr
    assert {p: p.stat().st_mtime for p in arch_json[0].parent.glob("seed*.json")} == before  # nothing retrained
    assert list(trained_per_arch(handle.study).values()) == [1]
    c = census(handle.study)
    assert c.baselines_done == {"pre_ln"}
    disk_matches_storage(handle)
    # the trial the first worker left running was reaped (its process is gone) and its retry reused the result
    assert any(f.startswith("dead worker: its process is gone") for f in failures(handle.study))


# -- one-line errors ---------------------------------------------------------------------------------

runner = CliRunner()


def one_line_error(r) -> str:
    assert r.exit_code == 2, (r.exit_code, r.output, r.exception)
    assert r.output.startswith("error: ") and r.output.count("\n") == 1, r.output
    assert "Traceback" not in r.output
    return r.output


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_postgres_is_one_line_and_exit_2(tmp_path):
    """No server needed: nothing listens on the port."""
    url = f"postgresql://u:secret@127.0.0.1:{closed_port()}/db"
    path = recipe(tmp_path, "unreachable")
    for args in (["run", str(path), "--storage", url], ["status", "--storage", url, "--study-name", "x"],
                 ["report", "--storage", url, "--study-name", "x"]):
        out = one_line_error(runner.invoke(app, args))
        assert "cannot open storage postgresql://u:***@127.0.0.1:" in out and "connection refused" in out, out
        assert "secret" not in out
    # and from a real process: nothing but that line on stderr
    p = subprocess.run([sys.executable, "-m", "normsearch", "status", "--storage", url, "--study-name", "x"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and p.stderr.startswith("error: cannot open storage") and p.stderr.count("\n") == 1, \
        p.stderr


@needs_pg
def test_wrong_password_missing_study_and_missing_database_are_one_line_and_exit_2(tmp_path):
    wrong = re.sub(r"(://[^:/@]+:)[^@]*@", r"\1not-the-password@", PG_URL)
    path = recipe(tmp_path, "wrongpw")
    for args in (["run", str(path), "--storage", wrong], ["status", "--storage", wrong, "--study-name", "x"]):
        out = one_line_error(runner.invoke(app, args))
        assert "password authentication failed for user" in out and "not-the-password" not in out, out

    name = unique("nosuch")
    for command in ("status", "report"):
        out = one_line_error(runner.invoke(app, [command, "--storage", PG_URL, "--study-name", name]))
        assert f"no study named {name!r}" in out and "***@" in out, out
        # a recipe whose study is not in that storage
        out = one_line_error(runner.invoke(app, [command, str(recipe(tmp_path, name)), "--storage", PG_URL]))
        assert f"no study named {name!r}" in out, out

    nodb = PG_URL.rsplit("/", 1)[0] + "/no_such_database"
    out = one_line_error(runner.invoke(app, ["status", "--storage", nodb, "--study-name", "x"]))
    assert 'database "no_such_database" does not exist' in out, out


@needs_pg
def test_run_and_status_on_postgres_in_process(tmp_path):
    """The plain path, in this process: a study on PostgreSQL, resumed, and its status."""
    name = unique("plain")
    handle = run_study(load_recipe(recipe(tmp_path, name, trials=1, sampler="tpe")), storage=PG_URL)
    assert census(handle.study).searched_done == 1
    n = len(handle.study.get_trials())
    run_study(load_recipe(recipe(tmp_path, name, trials=1, sampler="tpe")), storage=PG_URL)  # nothing more to do
    assert len(handle.study.get_trials()) == n
    r = runner.invoke(app, ["status", "--storage", PG_URL, "--study-name", name])
    assert r.exit_code == 0 and "1/1 searched" in r.output and "2/2 baselines" in r.output, r.output
    assert "***@127.0.0.1" in r.output
