import functools
import inspect
import os
import re
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

# Tests never write to the user's cache: one fresh cache folder per test session.
os.environ["NORMSEARCH_CACHE"] = tempfile.mkdtemp(prefix="normsearch-test-cache-")


#: the signal state the session started with, put back after every test
_SIGNALS = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
_MASK = signal.pthread_sigmask(signal.SIG_BLOCK, [])


@pytest.fixture(autouse=True)
def _signals_as_they_were():
    """Ctrl-C and SIGTERM as the session started, and no signal blocked, after every test (and so
    before the next one, whatever a session fixture did before it started):

    - a test that leaves Ctrl-C ignored in this process (Lightning sets SIGINT to SIG_IGN when it
      catches a KeyboardInterrupt) would leave it ignored in every process the later tests start: an
      ignored signal stays ignored across exec, and Python then installs no KeyboardInterrupt; a
      blocked signal stays blocked across exec the same way;
    - an in-process ``run`` (CliRunner) installs normsearch's SIGTERM handler here
      (``cli_support.stop_on_sigterm``), which would turn a SIGTERM sent to pytest itself (CI's
      timeout) into a Terminated in whatever test runs then, and leaves ``interrupted_code()``
      answering 143 for a later Ctrl-C once a SIGTERM was seen."""
    yield
    for sig, handler in _SIGNALS.items():
        if signal.getsignal(sig) is not handler:
            signal.signal(sig, handler)
    if signal.pthread_sigmask(signal.SIG_BLOCK, []) != _MASK:
        signal.pthread_sigmask(signal.SIG_SETMASK, _MASK)
    support = sys.modules.get("normsearch.cli_support")
    if support is not None:
        support._SIGTERM["received"] = False
    while getattr(sys.unraisablehook, "_normsearch", False):  # cli_support._raise_again, after a SIGTERM
        sys.unraisablehook = sys.unraisablehook.args[1]


@pytest.fixture(autouse=True)
def _no_process_outlives_its_test(monkeypatch):
    """Every process a test starts (itself, or through the code under test) is gone when the test ends:
    one still running then (a test that failed or timed out before it waited) is killed with its process
    group, so that it cannot hold the machine, a port or a lock for the tests after it."""
    started = []

    class Tracked(subprocess.Popen):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            started.append(self)

    monkeypatch.setattr(subprocess, "Popen", Tracked)
    yield
    for proc in started:
        if proc.poll() is not None:
            continue
        try:
            if os.getpgid(proc.pid) == proc.pid:  # a session of its own (start_new_session): its workers too
                os.killpg(proc.pid, signal.SIGKILL)
            else:
                proc.kill()
        except ProcessLookupError:
            pass
        proc.wait(timeout=30)


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models: torch's threads only add overhead, and stall badly on a busy machine."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture
def tiny_config():
    from normsearch.config import ModelConfig

    return ModelConfig(vocab_size=64, n_layers=4, d_model=32, n_heads=4, context_length=16)


@pytest.fixture
def text_folder(tmp_path):
    """A small local corpus: 20 documents of a few KB each, each with a unique marker."""
    folder = tmp_path / "corpus"
    folder.mkdir()
    words = "the of and to a in that is was he for it with as his on be at by had".split()
    import random

    rng = random.Random(0)
    for i in range(20):
        body = " ".join(rng.choice(words) for _ in range(600))
        (folder / f"doc{i:02d}.txt").write_text(f"MARKER{i:02d}X {body}\n")
    return folder


@pytest.fixture(scope="session")
def tiny_study(tmp_path_factory):
    """A finished tiny study (2 baselines + 2 searched architectures): its results folder."""
    from normsearch.recipe import load_recipe
    from normsearch.search import run_study
    from tiny import LEARNING, write_tiny_recipe

    folder = tmp_path_factory.mktemp("tiny-study")  # runs that learn: chosen cells and kept weights to export
    handle = run_study(load_recipe(write_tiny_recipe(folder, name="shared", trials=2, plots=True, **LEARNING)))
    return handle.folder


# --------------------------------------------------------------------------------------------------
# The `slow` marker, applied by rule
#
# `python -m pytest -m "not slow" -n auto` is the quick loop (about 1650 tests in 3 minutes on 2 cores); CI
# runs everything.

TESTS = Path(__file__).resolve().parent

#: what makes a test slow when it is in the test's own source, in one of its fixtures' (every fixture it
#: uses, directly or through other fixtures, defined under tests/) or in a helper of its module that it
#: calls (a function defined under tests/, read to a fixed point: a helper that calls a slow helper is slow)
TRAINS = r"""
      \brun_(?:study|stage|confirm|ladder)\(                        # trains a study, or a stage of one
    | \binvoke\(\s*\w+\s*,\s*\[\s*["'](?:run|train|confirm|ladder|bench)["']   # a CLI command that trains, in-process
"""
SLOW_SOURCE = re.compile(TRAINS + r"""
    | \bsubprocess\b | \bPopen\b | \bsys\.executable\b               # another process (`python -m normsearch`, ...)
    | \bmultiprocessing\b | \bos\.fork\(
    | \bwrite_report\(                                              # a whole report: nine PNG plots, 3-5 s
""", re.VERBOSE)
#: what makes a fixture shared by a module or the session slow: training; a process or a report it
#: starts once is a few seconds shared by all the tests that use it (90 export tests share one process)
SLOW_SHARED = re.compile(TRAINS, re.VERBOSE)
#: ``time.sleep(n)``: slow from one second on
SLEEP = re.compile(r"\btime\.sleep\(\s*([0-9]*\.?[0-9]+)\s*\)")
#: over ~2 s on a 2-core machine for a reason the rule cannot read (a compile, a large model, the
#: slowness of a library): node ids without their parameters
SLOW_TESTS = {
    "tests/kernels/test_triton_ops.py::test_compiled_block_is_one_graph_and_matches_float64",  # torch.compile
    "tests/test_compile.py::test_compile_auto_is_off_on_cpu_and_a_compiled_run_matches_eager",  # torch.compile
    "tests/test_readme.py::test_the_quickstart_command_runs_as_written",  # a study, its command read from the README
    "tests/test_secrets.py::test_nothing_a_study_writes_holds_the_password",  # a study, its commands in a loop
    "tests/search/test_devices.py::test_a_trial_on_two_processes_returns_rank_zeros_result",  # DDP: 2 processes
    "tests/search/test_postgres.py::test_death_by_heartbeat_needs_a_heartbeat_that_stood_still_while_watched",  # waits
    "tests/stats/test_stats.py::test_holm_keeps_the_familywise_error",  # 400 simulated studies
    "tests/stats/test_ladder.py::test_the_interval_widens_as_seed_noise_grows",  # 3000 draws
    "tests/test_spec.py::test_any_spec_round_trips_and_hashes_stably",  # hypothesis
    "tests/test_parametrization.py::test_coordinate_check_of_the_change_in_activations",  # 5 steps at 4 widths, twice
    "tests/test_ranking.py::test_sqlite_study_and_results_folder",  # a study in SQLite
    "tests/test_ranking.py::test_the_sampler_objective_does_not_change_the_ranking",  # ranks twice, 2 s
    "tests/test_ranking.py::test_running_study_is_flagged_and_failures_listed",  # ranks twice, 2 s
}


def _source(obj) -> str:
    try:
        return inspect.getsource(obj)
    except (OSError, TypeError):
        return ""


def _ours(fn) -> bool:
    try:
        return Path(inspect.getsourcefile(fn)).resolve().is_relative_to(TESTS)
    except TypeError:
        return False


def _slow_text(src: str, pattern=SLOW_SOURCE) -> str | None:
    """Why this source is slow, or None."""
    m = pattern.search(src)
    if m:
        return " ".join(m.group(0).split())
    for sleep in SLEEP.finditer(src) if pattern is SLOW_SOURCE else ():
        if float(sleep.group(1)) >= 1:
            return sleep.group(0)
    return None


@functools.lru_cache(maxsize=None)
def _slow_helpers(module, pattern=SLOW_SOURCE) -> dict[str, str]:
    """name -> why, for the functions a module can call (its own and those it imported from tests/)
    that are slow."""
    funcs = {name: _source(f) for name, f in vars(module).items() if inspect.isfunction(f) and _ours(f)}
    slow = {n: why for n, src in funcs.items() if (why := _slow_text(src, pattern))}
    grown = True
    while grown:
        grown = False
        for name, src in funcs.items():
            if name not in slow:
                callee = next((m for m in slow if re.search(rf"\b{re.escape(m)}\(", src)), None)
                if callee:
                    slow[name], grown = f"{callee}(): {slow[callee]}", True
    return slow


def _why_slow_function(fn, pattern=SLOW_SOURCE) -> str | None:
    src = _source(fn)
    why = _slow_text(src, pattern)
    if why:
        return why
    module = inspect.getmodule(fn)
    if module is None:
        return None
    for name, reason in _slow_helpers(module, pattern).items():
        if name != fn.__name__ and re.search(rf"\b{re.escape(name)}\(", src):
            return f"{name}(): {reason}"
    return None


def why_slow(item) -> str | None:
    """Why a collected test is slow (the `slow` marker's rule), or None. A test is slow when it

    - trains a study or a stage (``run_study``, ``run_stage``, ``run_confirm``, ``run_ladder``, or the
      CLI's ``run``/``train``/``confirm``/``ladder``/``bench`` through CliRunner), writes a whole
      report (``write_report``: nine plots), or starts another process (``subprocess``, ``Popen``,
      ``sys.executable``, ``multiprocessing``): in its own body, in a helper of its module it calls,
      or in a function-scoped fixture it uses;
    - uses a fixture shared by its module or the session that trains (``tiny_study``, ``searched``,
      ``laddered``, ... are found this way, as is any fixture written later that does the same); a
      shared fixture that only starts a process or writes a report costs its few seconds once, for
      every test that uses it, and leaves them in the quick loop. Fixtures named ``_...`` are the
      autouse guards above, not work, and are not read;
    - sleeps a second or more (``time.sleep(n)``, n >= 1);
    - needs a PostgreSQL server (a ``skipif`` on ``NORMSEARCH_TEST_PG_URL``): it starts workers on it;
    - or is listed in :data:`SLOW_TESTS` (over ~2 s for a reason the source does not show).

    The rule reads source, so it stays true as tests are added; a new test over ~2 s that it misses
    goes into SLOW_TESTS (``pytest -m "not slow" --durations=20`` shows them)."""
    if item.nodeid.split("[")[0] in SLOW_TESTS:
        return "listed in SLOW_TESTS"
    for mark in item.iter_markers("skipif"):
        if "NORMSEARCH_TEST_PG" in str(mark.kwargs.get("reason", "")):
            return "a PostgreSQL server"
    fn = getattr(item, "function", None)
    if fn is not None and (why := _why_slow_function(fn)):
        return why
    info = getattr(item, "_fixtureinfo", None)
    for name in getattr(item, "fixturenames", ()):
        if name.startswith("_") or info is None:
            continue
        for fixturedef in info.name2fixturedefs.get(name, ()):
            func = fixturedef.func
            pattern = SLOW_SOURCE if fixturedef.scope == "function" else SLOW_SHARED
            if _ours(func) and (why := _why_slow_function(func, pattern)):
                return f"fixture {name}: {why}"
    return None


@pytest.hookimpl(tryfirst=True)  # before -m deselects
def pytest_collection_modifyitems(config, items):
    for item in items:
        why = why_slow(item)
        if why:
            item.add_marker(pytest.mark.slow(why=why))
