"""The kernel tests run the Triton kernels on the CPU through Triton's interpreter.

``TRITON_INTERPRET`` must be set when ``@triton.jit`` runs, that is when
``normsearch.kernels.triton_norms`` is first imported, so it is set here at import time and the
module imported at once. Then the variable is put back as it was, so that tests elsewhere in the same
session still see a machine without CUDA, and it is set again around each test in this folder
(``resolve_backend`` reads it when called). On a CUDA machine the variable defaults to 0: the
kernels are compiled and the same tests run on the GPU (``TRITON_INTERPRET=1`` forces the
interpreter there).
"""

import os
import zlib

import pytest

def _has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


_saved = os.environ.get("TRITON_INTERPRET")
# the interpreter only where there is no CUDA device: on a GPU the kernels are compiled and tested there
os.environ.setdefault("TRITON_INTERPRET", "0" if _has_cuda() else "1")
INTERPRET = os.environ["TRITON_INTERPRET"] == "1"
try:
    import normsearch.kernels.triton_norms  # noqa: F401  (defines the kernels while the variable is set)
except ImportError:
    pass  # no Triton: the modules that need it skip themselves
finally:
    if _saved is None:
        del os.environ["TRITON_INTERPRET"]
    else:
        os.environ["TRITON_INTERPRET"] = _saved


@pytest.fixture(autouse=True)
def _interpret(monkeypatch):
    if INTERPRET:
        monkeypatch.setenv("TRITON_INTERPRET", "1")


@pytest.fixture
def device():
    """Where the kernels' tensors live: the CPU under the interpreter, else the GPU."""
    if INTERPRET:
        return "cpu"
    import torch

    if not torch.cuda.is_available():
        pytest.skip("TRITON_INTERPRET is off and there is no CUDA device")
    return "cuda"


@pytest.fixture
def gen(request):
    """A generator seeded by the test's name: fresh data for every case, the same on every run."""
    import torch

    return torch.Generator().manual_seed(zlib.crc32(request.node.name.encode()))
