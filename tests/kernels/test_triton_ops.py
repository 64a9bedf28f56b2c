"""The Triton norms as torch ops: compiled without graph breaks, strided inputs read in place, rows
wider than one block looped over, and the output dtypes torch's norms give.

Under the CPU interpreter the ops are ``custom_op``\\ s (``wrap_triton`` cannot trace interpreted
kernels) and dynamo keeps each as one node; compiled on CUDA they are ``triton_op``\\ s. Either way the
graph-break count is what is tested, with the ``aot_eager`` backend (AOTAutograd traces the registered
backward too) so that the test stays fast on a CPU.
"""

import pytest

pytest.importorskip("triton", reason="Triton is not installed (pip install 'normsearch[triton]')")

import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from normsearch.baselines import baselines  # noqa: E402
from normsearch.config import ModelConfig  # noqa: E402
from normsearch.kernels import TorchKernel  # noqa: E402
from normsearch.kernels import triton_jit, triton_norms  # noqa: E402
from normsearch.model import build_model  # noqa: E402

from test_triton_norms import CASES, TOL, assert_close, compare, make_params, randn, reference  # noqa: E402

KINDS = {"rmsnorm": CASES[0], "layernorm": CASES[2], "dyt": CASES[5]}


def _block(w, a, b):
    """A small module's forward on every Triton op: a fused add + RMSNorm, LayerNorm, DyT."""
    rms, ln, dyt = (triton_norms.kernel(k) for k in ("rmsnorm", "layernorm", "dyt"))

    def fn(x, h):
        s, y = rms.add(x, h, {"weight": w}, {"eps": 1e-5})
        y = ln.forward(y, {"weight": w, "bias": b}, {"eps": 1e-5})
        return s + dyt.forward(y, {"alpha": a, "weight": w, "bias": b}, {})

    return fn


def test_compiled_block_is_one_graph_and_matches_float64(gen, device):
    w = randn((24,), gen, torch.float32, device, 0.3, 1.0).requires_grad_()
    b = randn((24,), gen, torch.float32, device, 0.3).requires_grad_()
    a = torch.tensor(0.7, device=device, requires_grad=True)
    x, h = (randn((3, 5, 24), gen, torch.float32, device).requires_grad_() for _ in range(2))
    fn = _block(w, a, b)

    torch._dynamo.reset()
    explained = torch._dynamo.explain(fn)(x, h)
    assert explained.graph_break_count == 0, explained.break_reasons
    assert explained.graph_count == 1
    graph = explained.graphs[0]
    ops = {str(n.target) for n in graph.graph.nodes if n.op == "call_function"}
    assert {"normsearch.norm_fwd.default", "normsearch.dyt_fwd.default"} <= ops, ops

    torch._dynamo.reset()
    counter = torch._dynamo.testing.CompileCounterWithBackend("aot_eager")
    out = torch.compile(fn, backend=counter, fullgraph=True)(x, h)
    g = randn(out.shape, gen, torch.float32, device)
    grads = torch.autograd.grad(out, (x, h, w, b, a), g)
    assert counter.frame_count == 1

    leaves64 = [t.detach().double().requires_grad_() for t in (x, h, w, b, a)]
    x64, h64, w64, b64, a64 = leaves64
    s64 = x64 + h64
    y64 = reference("rmsnorm", s64, {"weight": w64}, {"eps": 1e-5})
    y64 = reference("layernorm", y64, {"weight": w64, "bias": b64}, {"eps": 1e-5})
    out64 = s64 + reference("dyt", y64, {"alpha": a64, "weight": w64, "bias": b64}, {})
    want = torch.autograd.grad(out64, leaves64, g.double())
    pairs = {"out": (out, out64)} | {f"grad {i}": (gt, wt) for i, (gt, wt) in enumerate(zip(grads, want))}
    assert_close(pairs, torch.float32)


def test_model_on_triton_kernels_compiles_without_graph_breaks(device):
    """hybridnorm: q/k/v norms per head on slices of the fused projection, and fused post norms."""
    cfg = ModelConfig(vocab_size=32, n_layers=1, d_model=24, n_heads=2, context_length=8)
    model = build_model(baselines("rmsnorm")["hybridnorm"], cfg, kernels="triton").to(device)
    idx = torch.randint(0, 32, (2, 8), device=device)
    torch._dynamo.reset()
    explained = torch._dynamo.explain(model)(idx)
    assert explained.graph_break_count == 0, explained.break_reasons
    assert explained.graph_count == 1


class _Copies(TorchDispatchMode):
    """Records the copying aten ops called (outside the norm ops' own bodies)."""

    COPIES = ("aten._to_copy", "aten.clone", "aten.copy_", "aten.contiguous")

    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if str(func.overloadpacket).startswith(self.COPIES):
            self.seen.append(str(func))
        return func(*args, **(kwargs or {}))


@pytest.fixture
def contiguous_calls(monkeypatch):
    """The tensors ``.contiguous()`` copied while the test ran (inside the ops too)."""
    copied = []
    real = torch.Tensor.contiguous

    def spy(self, *args, **kwargs):
        out = real(self, *args, **kwargs)
        if out.data_ptr() != self.data_ptr():
            copied.append(tuple(self.shape))
        return out

    monkeypatch.setattr(torch.Tensor, "contiguous", spy)
    return copied


@pytest.mark.parametrize("per_head", [False, True], ids=["full_width", "per_head"])
@pytest.mark.parametrize("kind", list(KINDS))
def test_slices_of_a_fused_projection_are_read_in_place(kind, per_head, gen, device, contiguous_calls):
    """k of ``qkv(x).split(C, -1)``, whole or as (B, T, heads, head_dim): rows 3C apart."""
    _, o = KINDS[kind]
    C, heads = 24, 2
    qkv = randn((2, 5, 3 * C), gen, torch.float32, device, scale=2.0, shift=0.5).requires_grad_()
    k = qkv.split(C, dim=-1)[1]
    x = k.unflatten(-1, (heads, C // heads)) if per_head else k
    A, G, N = triton_jit.row_layout(x.shape)
    t, sa, sg = triton_jit.rows_of(x, A, G, N)
    assert t.data_ptr() == x.data_ptr()
    assert (sa, sg) == ((3 * C, C // heads) if per_head else (5 * 3 * C, 3 * C))
    p = make_params(kind, o, N, gen, torch.float32, device)
    assert_close(compare(kind, o, x, None, p, None, randn(x.shape, gen, torch.float32, device)), torch.float32)
    assert contiguous_calls == []


def test_a_transposed_input_is_still_right(gen, device):
    """Features not contiguous: the one case that is copied."""
    kind, o = KINDS["layernorm"]
    base = randn((3, 40, 7), gen, torch.float32, device).requires_grad_()
    x = base.transpose(1, 2)
    p = make_params(kind, o, 40, gen, torch.float32, device)
    assert_close(compare(kind, o, x, None, p, None, randn(x.shape, gen, torch.float32, device)), torch.float32)


@pytest.mark.parametrize("fused", [False, True], ids=["norm", "add_norm"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("case", [CASES[0], CASES[2], CASES[5]], ids=list(KINDS))
def test_rows_wider_than_a_block_are_looped_over(case, dtype, fused, gen, device, monkeypatch):
    """MAX_BLOCK_N lowered to 32: rows of 100 take four chunks, the last one partial, and several
    backward programs add into their partial-gradient rows chunk by chunk."""
    monkeypatch.setattr(triton_jit, "MAX_BLOCK_N", 32)
    kind, o = case
    shape = (37, 100)
    _, block_n, _, chunked = triton_jit.tiling(*shape)
    assert block_n == 32 and chunked
    x = randn(shape, gen, dtype, device, scale=2.0, shift=0.5).requires_grad_()
    h = randn(shape, gen, dtype, device).requires_grad_() if fused else None
    p = make_params(kind, o, shape[-1], gen, dtype, device)
    grad_s = randn(shape, gen, dtype, device) if fused else None
    assert_close(compare(kind, o, x, h, p, grad_s, randn(shape, gen, dtype, device)), dtype)


def test_wide_layernorm_statistics_hold_far_from_zero(gen, device, monkeypatch):
    """Chunked LayerNorm combines per-chunk means and deviations: accurate for a row with a mean of
    1000 and unit spread, where sum(x^2) / N - mean^2 would lose all but a few bits in float32."""
    monkeypatch.setattr(triton_jit, "MAX_BLOCK_N", 16)
    kind, o = KINDS["layernorm"]
    x = randn((4, 70), gen, torch.float32, device, scale=1.0, shift=1000.0).requires_grad_()
    p = make_params(kind, o, 70, gen, torch.float32, device)
    assert_close(compare(kind, o, x, None, p, None, randn(x.shape, gen, torch.float32, device)), torch.float32)


@pytest.mark.parametrize("kind", list(KINDS))
def test_dtypes_under_bf16_autocast_match_torch(kind, gen, device):
    """The model under bf16-mixed: an fp32 residual stream, bf16 branches and q/k/v, fp32 parameters.
    Each output's dtype is what the torch kernel gives, and the fused add casts nothing first."""
    _, o = KINDS[kind]
    tri, ref = triton_norms.kernel(kind), TorchKernel(kind)
    p = make_params(kind, o, 16, gen, torch.float32, device)
    stream = randn((2, 3, 16), gen, torch.float32, device).requires_grad_()
    branch = randn((2, 3, 16), gen, torch.bfloat16, device).requires_grad_()
    with torch.autocast(device, dtype=torch.bfloat16):
        assert tri.forward(branch, p, o).dtype == ref.forward(branch, p, o).dtype
        with _Copies() as copies:
            s, y = tri.add(stream, branch, p, o)
        assert copies.seen == []
        s_ref, y_ref = ref.add(stream, branch, p, o)
    assert (s.dtype, y.dtype) == (s_ref.dtype, y_ref.dtype) == (torch.float32, y_ref.dtype)
    torch.testing.assert_close(s, s_ref)
    torch.testing.assert_close(y, y_ref.to(y.dtype), rtol=TOL[torch.bfloat16], atol=TOL[torch.bfloat16])
    (y.float().sum() + s.sum()).backward()
    assert stream.grad.dtype == torch.float32 and branch.grad.dtype == torch.bfloat16


def test_torch_autocasts_its_norms_to_float32_on_cuda_only():
    """Read from torch's dispatcher: CUDA autocast runs rms_norm and layer_norm in float32 (so
    do ours there); on the CPU it leaves them alone."""
    assert triton_norms._AUTOCAST_FP32["cuda"] == {"rms_norm", "layer_norm"}
    assert triton_norms._AUTOCAST_FP32["cpu"] == set()
