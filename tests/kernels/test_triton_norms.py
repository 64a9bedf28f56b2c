"""The Triton norm kernels against float64 references written from the definitions, and a whole model
on Triton kernels against the same model on torch's.

Under the CPU interpreter (see conftest.py) one program instance costs about a millisecond, so the
sizes stay small but awkward: hidden sizes that are not powers of two, a single row, more rows than
one tile, rows wider than a tile.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

triton = pytest.importorskip("triton", reason="Triton is not installed (pip install 'normsearch[triton]')")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from normsearch.baselines import baselines  # noqa: E402
from normsearch.config import ModelConfig  # noqa: E402
from normsearch.errors import NormsearchError  # noqa: E402
from normsearch.kernels import get_kernel, resolve_backend, triton_status  # noqa: E402
from normsearch.kernels import triton_norms  # noqa: E402
from normsearch.model import Norm, build_model  # noqa: E402
from normsearch.norms import NORM_KINDS  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

#: (kind, options) with every parameter set a kind can hold.
CASES = [
    ("rmsnorm", {"eps": 1e-5, "gain": True}),
    ("rmsnorm", {"eps": 1e-5, "gain": False}),
    ("layernorm", {"eps": 1e-5, "gain": True, "bias": True}),
    ("layernorm", {"eps": 1e-5, "gain": True, "bias": False}),
    ("layernorm", {"eps": 1e-5, "gain": False, "bias": False}),
    ("dyt", {"alpha_init": 0.5, "gain": True, "bias": True}),
    ("dyt", {"alpha_init": 0.5, "gain": False, "bias": False}),
]
#: one row; several leading dims; more rows than a tile holds (32 of 128 columns); wider than a tile.
SHAPES = [(1, 33), (2, 5, 33), (257, 100), (3, 5000)]
#: max abs error / max abs reference, per input dtype
TOL = {torch.float32: 1e-5, torch.bfloat16: 1e-2, torch.float16: 1e-2}


def _case_id(case):
    kind, o = case
    return kind + "".join(f"-{k}" for k in ("gain", "bias") if o.get(k))


def randn(shape, gen, dtype, device, scale=1.0, shift=0.0):
    return (torch.randn(shape, generator=gen, dtype=torch.float64) * scale + shift).to(device, dtype)


def make_params(kind, o, n, gen, dtype, device):
    """The kind's parameters, perturbed from their initial values so that each one matters."""
    p = {}
    for name, (shape, init) in NORM_KINDS[kind].parameters(o).items():
        scale = 0.2 if name == "alpha" else 0.5
        p[name] = randn((n,) if shape == "dim" else (), gen, dtype, device, scale, init).requires_grad_()
    return p


def reference(kind, x, p, o):
    """The kind's definition, written out (run in float64)."""
    if kind == "rmsnorm":
        y = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + o["eps"])
    elif kind == "layernorm":
        c = x - x.mean(-1, keepdim=True)
        y = c / torch.sqrt(c.pow(2).mean(-1, keepdim=True) + o["eps"])
    else:
        y = torch.tanh(p["alpha"] * x)
    if "weight" in p:
        y = y * p["weight"]
    if "bias" in p:
        y = y + p["bias"]
    return y


def rel_err(got, want) -> float:
    return ((got.double() - want).abs().max() / want.abs().max()).item()


def compare(kind, o, x, h, p, grad_s, grad_y):
    """Runs the Triton kernel (fused with the add of ``h`` unless it is None) and the float64
    reference with upstream gradients ``grad_s`` / ``grad_y`` (either may be None: output unused).
    Returns {output or gradient name: (triton tensor, float64 reference)}."""
    k = triton_norms.kernel(kind)
    leaves = {"x": x} | ({} if h is None else {"h": h}) | {f"d{n}": t for n, t in p.items()}
    leaves64 = {n: t.detach().double().requires_grad_() for n, t in leaves.items()}
    p64 = {n: leaves64[f"d{n}"] for n in p}
    if h is None:
        outs = {"y": k.forward(x, p, o)}
        outs64 = {"y": reference(kind, leaves64["x"], p64, o)}
    else:
        s, y = k.add(x, h, p, o)
        # The norm reads s as stored, rounded to the inputs' dtype (as torch's x + h then norm(s)
        # does), so the reference normalises the kernel's s; s itself is checked against the exact
        # sum. (Triton's interpreter truncates float32 to bfloat16 where a GPU rounds to nearest: an
        # ill-conditioned sum such as DyT's alpha gradient would see that bias, not the kernel's.)
        exact = leaves64["x"] + leaves64["h"]
        stored = exact + (s.detach().double() - exact).detach()  # the gradient passes as is
        outs, outs64 = {"s": s, "y": y}, {"s": exact, "y": reference(kind, stored, p64, o)}
    upstream = {"s": grad_s, "y": grad_y}
    used = [n for n in outs if upstream[n] is not None]
    got = torch.autograd.grad([outs[n] for n in used], list(leaves.values()), [upstream[n] for n in used],
                              allow_unused=True, materialize_grads=True)
    want = torch.autograd.grad([outs64[n] for n in used], list(leaves64.values()),
                               [upstream[n].double() for n in used], allow_unused=True, materialize_grads=True)
    pairs = {n: (outs[n], outs64[n]) for n in outs}
    pairs |= {f"grad {n}": (g, w) for n, g, w in zip(leaves, got, want)}
    for n, t in leaves.items():  # shapes and dtypes come back as they went in
        assert pairs[f"grad {n}"][0].shape == t.shape and pairs[f"grad {n}"][0].dtype == t.dtype
    for n in outs:
        assert outs[n].shape == x.shape and outs[n].dtype == x.dtype
    return pairs


def assert_close(pairs, dtype):
    for name, (got, want) in pairs.items():
        assert not got.isnan().any(), f"{name}: NaN"
        err = rel_err(got, want)
        assert err < TOL[dtype], f"{name}: max abs error / max abs reference = {err:.2e} in {dtype}"


@pytest.mark.parametrize("fused", [False, True], ids=["norm", "add_norm"])
@pytest.mark.parametrize("dtype", list(TOL), ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_kernel_matches_the_float64_definition(case, shape, dtype, fused, gen, device):
    kind, o = case
    x = randn(shape, gen, dtype, device, scale=2.0, shift=0.5).requires_grad_()
    h = randn(shape, gen, dtype, device).requires_grad_() if fused else None
    p = make_params(kind, o, shape[-1], gen, dtype, device)
    grad_s = randn(shape, gen, dtype, device) if fused else None
    assert_close(compare(kind, o, x, h, p, grad_s, randn(shape, gen, dtype, device)), dtype)


@pytest.mark.parametrize("kind,o", [CASES[0], CASES[2], CASES[5]], ids=["rmsnorm", "layernorm", "dyt"])
def test_fused_add_with_one_output_unused(kind, o, gen, device):
    """A post norm discards s (its gradient is None, not zeros); a caller may also use s alone."""
    shape = (9, 40)
    x, h = (randn(shape, gen, torch.float32, device).requires_grad_() for _ in range(2))
    p = make_params(kind, o, shape[-1], gen, torch.float32, device)
    g = randn(shape, gen, torch.float32, device)
    assert_close(compare(kind, o, x, h, p, None, g), torch.float32)
    pairs = compare(kind, o, x, h, p, g, None)
    assert pairs["grad x"][0].equal(g) and pairs["grad h"][0].equal(g)
    assert all(pairs[f"grad d{n}"][0].abs().max() == 0 for n in p)


@pytest.mark.parametrize("view", [False, True], ids=["leaves", "views_of_leaves"])
def test_fused_add_gradients_of_leaves_accumulate_apart(view, gen, device):
    """x and h get one gradient tensor from the fused backward; as leaves' .grad they must still be
    two tensors, or a second backward would add into both at once."""
    k = triton_norms.kernel("rmsnorm")
    a, b = (randn((2, 3, 16), gen, torch.float32, device).requires_grad_() for _ in range(2))
    g = randn((2, 3, 16), gen, torch.float32, device)
    for _ in range(2):
        x, h = (a.transpose(0, 1), b.transpose(0, 1)) if view else (a, b)
        _, y = k.add(x, h, {}, {"eps": 1e-5})
        y.backward(g.transpose(0, 1) if view else g)
    assert a.grad.data_ptr() != b.grad.data_ptr()
    a1, b1 = (t.detach().requires_grad_() for t in (a, b))
    _, y = k.add(a1, b1, {}, {"eps": 1e-5})
    y.backward(g)
    torch.testing.assert_close(a.grad, 2 * a1.grad)
    torch.testing.assert_close(b.grad, 2 * b1.grad)


def test_strided_input(gen, device):
    """Inputs need not be contiguous (q/k/v are slices of one projection)."""
    kind, o = CASES[2]
    base = randn((3, 100, 7), gen, torch.float32, device).requires_grad_()
    x = base.transpose(1, 2)  # (3, 7, 100) with the features 7 apart
    p = make_params(kind, o, 100, gen, torch.float32, device)
    assert_close(compare(kind, o, x, None, p, None, randn(x.shape, gen, torch.float32, device)), torch.float32)


#: a tiny model; d_model 24 with 2 heads gives head_dim 12 for q/k/v norms at head granularity
TINY = ModelConfig(vocab_size=32, n_layers=2, d_model=24, n_heads=2, context_length=8)


@pytest.mark.parametrize("name,kind", [
    ("peri_ln", "rmsnorm"),      # norms before and after each sublayer, a final norm
    ("hybridnorm", "rmsnorm"),   # q/k/v norms per head, a post norm fused with the attention add
    ("olmo2", "rmsnorm"),        # q/k norms over the full width
    ("post_ln", "rmsnorm"),      # both post norms fused with their adds, s unused
    ("post_ln", "layernorm"),
    ("pre_ln", "layernorm"),     # ffn_in fused with the attention add
    ("dyt", "rmsnorm"),          # DyT everywhere
])
def test_model_on_triton_kernels_matches_torch(name, kind, gen, device):
    placement = baselines(kind)[name]
    ref = build_model(placement, TINY, kernels="torch").to(device)
    with torch.no_grad():  # move the norm parameters off their initial 1 / 0 / alpha_init
        for n, t in ref.named_parameters():
            if ".norms." in f".{n}":
                t.add_(randn(t.shape, gen, t.dtype, device, scale=0.3))
    tri = build_model(placement, TINY, kernels="triton").to(device)
    tri.load_state_dict(ref.state_dict())
    norms = [m for m in tri.modules() if isinstance(m, Norm)]
    assert norms and all(type(m.kernel).__module__ == triton_norms.__name__ for m in norms)

    idx = torch.randint(0, TINY.vocab_size, (2, TINY.context_length), generator=gen).to(device)
    target = torch.randint(0, TINY.vocab_size, (2, TINY.context_length), generator=gen).to(device)
    losses = []
    for m in (ref, tri):
        loss = F.cross_entropy(m(idx).flatten(0, 1), target.flatten())
        loss.backward()
        losses.append(loss.detach())
    assert rel_err(losses[1], losses[0].double()) < 1e-5
    # Both sides sum in float32 in different orders; scalar gradients such as DyT's alpha sum over
    # the whole batch with cancellation, so they match to about 1e-5 rather than 1e-7.
    grads = dict(tri.named_parameters())
    for n, t in ref.named_parameters():
        err = rel_err(grads[n].grad, t.grad.double())
        assert err < 1e-4, f"{name} ({kind}) {n}: gradient differs by {err:.2e}"


def test_kernel_for_every_kind_with_triton_code_and_an_error_for_others():
    for kind in ("rmsnorm", "layernorm", "dyt"):
        k = get_kernel(kind, "triton")
        assert callable(k.forward) and callable(k.add)
    with pytest.raises(NormsearchError, match="no Triton kernel for norm kind 'scalenorm'"):
        triton_norms.kernel("scalenorm")


def test_unsupported_input_is_a_one_line_error(device):
    k = triton_norms.kernel("rmsnorm")
    with pytest.raises(NormsearchError, match="not torch.float64; use kernels: torch"):
        k.forward(torch.ones(2, 8, dtype=torch.float64, device=device), {}, {"eps": 1e-5})
    with pytest.raises(NormsearchError, match="not torch.int64; use kernels: torch"):
        k.add(torch.ones(2, 8, device=device), torch.ones(2, 8, dtype=torch.int64, device=device), {}, {"eps": 1e-5})


def test_resolve_backend_runs_triton_under_the_interpreter():
    ok, version = triton_status()
    assert ok and version == triton.__version__
    assert resolve_backend("triton") == "triton"


def test_triton_without_cuda_or_interpreter_says_why():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["CUDA_VISIBLE_DEVICES"] = ""  # no GPU, even on a machine that has one
    code = ("from normsearch.errors import NormsearchError\n"
            "from normsearch.kernels import resolve_backend\n"
            "try:\n    resolve_backend('triton')\n"
            "except NormsearchError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True,
                         timeout=300, check=True).stdout
    assert out.startswith("kernels: triton was requested but cannot run here"), out
    assert "there is no CUDA device" in out and out.count("\n") == 1


def test_kernels_are_a_registry_keyed_by_kind_and_a_kind_without_one_runs_on_torch(monkeypatch, caplog):
    from normsearch.kernels import missing_triton_kernels
    from normsearch.norms import NormKind, register_norm

    assert set(triton_norms.KERNELS) == {"rmsnorm", "layernorm", "dyt"}
    with pytest.raises(NormsearchError, match="unknown norm kind 'nosuchkind'"):
        triton_norms.register_kernel("nosuchkind", lambda: None)

    @register_norm
    class Plain(NormKind):
        name = "plain_kernels_test"
        options = {}

        @staticmethod
        def parameters(o):
            return {}

        @staticmethod
        def forward(x, p, o):
            return x

    try:
        assert missing_triton_kernels(["rmsnorm", "plain_kernels_test"]) == ["plain_kernels_test"]
        with pytest.raises(NormsearchError) as e:
            resolve_backend("triton", ["rmsnorm", "plain_kernels_test"])
        assert "no Triton kernel" in str(e.value) and "use kernels: torch or auto" in str(e.value)
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # auto would pick triton
        assert resolve_backend("auto", ["rmsnorm"]) == "triton"
        with caplog.at_level("WARNING", logger="normsearch"):
            assert resolve_backend("auto", ["rmsnorm", "plain_kernels_test"]) == "torch"
        assert "'plain_kernels_test' has no Triton kernel" in caplog.text
        # a kind given a kernel in the registry runs on it
        triton_norms.register_kernel("plain_kernels_test", lambda: triton_norms.KERNELS["rmsnorm"]())
        assert resolve_backend("triton", ["plain_kernels_test"]) == "triton"
    finally:
        triton_norms.KERNELS.pop("plain_kernels_test", None)
        NORM_KINDS.pop("plain_kernels_test")
