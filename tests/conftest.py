import os
import signal
import subprocess
import tempfile

import pytest

# Tests never write to the user's cache: one fresh cache folder per test session.
os.environ["NORMSEARCH_CACHE"] = tempfile.mkdtemp(prefix="normsearch-test-cache-")


@pytest.fixture(autouse=True)
def _sigint_as_it_was():
    """A test that leaves Ctrl-C ignored in this process (Lightning sets SIGINT to SIG_IGN when it
    catches a KeyboardInterrupt) would leave it ignored in every process the later tests start: an
    ignored signal stays ignored across exec, and Python then installs no KeyboardInterrupt."""
    handler = signal.getsignal(signal.SIGINT)
    yield
    if signal.getsignal(signal.SIGINT) is not handler:
        signal.signal(signal.SIGINT, handler)


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
    from tiny import write_tiny_recipe

    folder = tmp_path_factory.mktemp("tiny-study")
    handle = run_study(load_recipe(write_tiny_recipe(folder, name="shared", trials=2)))
    return handle.folder
