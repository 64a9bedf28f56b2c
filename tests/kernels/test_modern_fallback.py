"""The 2026 kinds have no Triton kernel: auto runs them (and every other norm of their model) on
torch, and triton refuses them, saying why."""

import pytest

pytest.importorskip("triton", reason="Triton is not installed (pip install 'normsearch[triton]')")

from normsearch.errors import NormsearchError  # noqa: E402
from normsearch.kernels import missing_triton_kernels, resolve_backend  # noqa: E402

NEW = ["derf", "seednorm", "ssnorm"]


def test_the_2026_kinds_have_no_triton_kernel():
    assert missing_triton_kernels(["rmsnorm", *NEW]) == sorted(NEW)


@pytest.mark.parametrize("kind", NEW)
def test_triton_is_refused_and_auto_falls_back(kind):
    with pytest.raises(NormsearchError, match=f"'{kind}' has no Triton kernel"):
        resolve_backend("triton", {"rmsnorm", kind})
    assert resolve_backend("auto", {"rmsnorm", kind}) == "torch"
