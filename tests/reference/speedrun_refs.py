"""References for four baselines' decoder blocks, written line by line from their authors' code.

Each function computes what the authors' code computes for ONE decoder block (plus, for the
model ends, the embedding-side x0 and the final norm), in plain torch, with no dtype casts of its
own, so that it runs in float64 and can be compared block for block with normsearch's model.

Sources (each comment below cites ``file:line @ commit``):

- modded-nanogpt: github.com/KellerJordan/modded-nanogpt, ``train_gpt.py`` @ f411b3d346aa52d3504324ca93c230fd84c6c07f
  (abbreviated ``MNG:line``).
- nanochat: github.com/karpathy/nanochat, ``nanochat/gpt.py`` @ 92d63d4e8bb4df75c3b71618f31ddde2378b2bcd
  (abbreviated ``NC:line``; other files of that commit are named in full).
- Qwen3-Next: Hugging Face transformers 5.25.0 (the PyPI wheel),
  ``transformers/models/qwen3_next/modeling_qwen3_next.py`` (abbreviated ``QN:line``); the same code is in
  github.com/huggingface/transformers @ 7515843b617551b008901620ca58f1208bbc330d (older layout, same equations).
- DeepSeek-V4: Hugging Face transformers 5.25.0 (the PyPI wheel),
  ``transformers/models/deepseek_v4/modeling_deepseek_v4.py`` (abbreviated ``DS:line``; it is generated from
  ``modular_deepseek_v4.py`` of the same wheel, cited ``DSmod:line`` where that is the clearer place); the same
  equations are in github.com/huggingface/transformers @ 7fa433e14f25c22fcfad82ab1871efca572d58b5.

Conventions of these references (not the authors'):

- Weights are in ``nn.Linear`` layout, (out_features, in_features), applied as ``F.linear(x, w)``.
- ``rope`` is a callable on (B, H, T, head_dim) tensors; ``scale`` is the causal softmax's scale of the
  attention logits (``None``: the authors' default where they have one); ``mlp`` is a callable on the
  normalised (B, T, C) input. These are the parts that are not the norm scheme and are our model's choice.
- Attention is dense and causal (no sliding windows, no varlen documents, no KV cache).
- The authors compute their RMSNorms in float32 (Qwen3-Next, DeepSeek-V4) or in the activation dtype
  (modded-nanogpt, nanochat: ``F.rms_norm`` with ``eps=None``, i.e. ``torch.finfo(x.dtype).eps``). These
  references keep the dtype of their input, so float64 stays float64; every norm takes ``eps`` (default: the
  authors') so our model's epsilon can be plugged in.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "causal_attention",
    "softmax_with_sink",
    "modded_nanogpt_norm",
    "modded_nanogpt_qkvo",
    "modded_nanogpt_attention",
    "modded_nanogpt_mudd_gate",
    "modded_nanogpt_block",
    "modded_nanogpt_x0",
    "modded_nanogpt_final",
    "nanochat_norm",
    "nanochat_attention",
    "nanochat_block",
    "nanochat_x0",
    "nanochat_final",
    "qwen3_next_rmsnorm",
    "qwen3_next_fuse_q_gate",
    "qwen3_next_attention",
    "qwen3_next_block",
    "qwen3_next_x0",
    "qwen3_next_final",
    "deepseek_v4_rmsnorm",
    "deepseek_v4_unweighted_rmsnorm",
    "deepseek_v4_attention",
    "deepseek_v4_hyper_connection",
    "deepseek_v4_block",
    "deepseek_v4_x0",
    "deepseek_v4_final",
]

Rope = Callable[[Tensor], Tensor]
Mlp = Callable[[Tensor], Tensor]


# --------------------------------------------------------------------------------------------------
# Shared pieces


def _rms(x: Tensor, eps: float | None) -> Tensor:
    """x / sqrt(mean(x^2) + eps) over the last dim, weightless, in x's dtype (``F.rms_norm`` with
    ``eps=None`` takes ``torch.finfo(x.dtype).eps``, as the authors' ``F.rms_norm`` calls do)."""
    return F.rms_norm(x, (x.size(-1),), None, eps)


def _repeat_kv(x: Tensor, n_rep: int) -> Tensor:
    """(B, H_kv, T, D) -> (B, H_kv * n_rep, T, D), each KV head repeated for its group of query heads
    (QN:192-201 ``repeat_kv``; DS:714-723 is the same function)."""
    if n_rep == 1:
        return x
    B, H, T, D = x.shape
    return x[:, :, None].expand(B, H, n_rep, T, D).reshape(B, H * n_rep, T, D)


def _causal_logits(q: Tensor, k: Tensor, scale: float) -> Tensor:
    """scale * q k^T with the future masked to -inf; q, k (B, H, T, D) -> (B, H, T, T)."""
    T, S = q.size(-2), k.size(-2)
    logits = torch.matmul(q, k.transpose(-1, -2)) * scale
    future = torch.ones(T, S, dtype=torch.bool, device=q.device).triu(S - T + 1)
    return logits.masked_fill(future, float("-inf"))


def causal_attention(q: Tensor, k: Tensor, v: Tensor, scale: float) -> Tensor:
    """Plain causal softmax attention, (B, H, T, D) each (k, v may have fewer heads: repeated as in
    grouped-query attention) -> (B, H, T, D). What ``flash_attn_func(causal=True, softmax_scale=scale)``
    (MNG:1139-1141, NC:110) and HF's ``eager_attention_forward`` (QN:204-226) compute without windows."""
    n_rep = q.size(1) // k.size(1)
    k, v = _repeat_kv(k, n_rep), _repeat_kv(v, n_rep)
    return torch.matmul(torch.softmax(_causal_logits(q, k, scale), dim=-1), v)


def softmax_with_sink(logits: Tensor, sink: Tensor) -> Tensor:
    """Attention probabilities with a per-head sink logit that joins the softmax and takes no value,
    as gpt-oss and DeepSeek-V4 write it (``eager_attention_forward``: DS:742-750, the same lines as
    transformers 5.25.0 ``models/gpt_oss/modeling_gpt_oss.py:241-249``).

    logits: (B, H, Tq, Tk), already scaled and masked (-inf where masked); sink: (H,), NOT scaled.
    Returns (B, H, Tq, Tk): the sink's column is dropped, so rows sum to less than 1."""
    B, H, Tq, _ = logits.shape
    sinks = sink.reshape(1, -1, 1, 1).expand(B, H, Tq, 1)  # DS:742
    combined_logits = torch.cat([logits, sinks], dim=-1)  # DS:743
    combined_logits = combined_logits - combined_logits.max(dim=-1, keepdim=True).values  # DS:748
    probs = F.softmax(combined_logits, dim=-1, dtype=combined_logits.dtype)  # DS:749
    return probs[..., :-1]  # DS:750 "we drop the sink here"


def _default_scale(head_dim: int, scale: float | None) -> float:
    return head_dim**-0.5 if scale is None else scale


# --------------------------------------------------------------------------------------------------
# modded-nanogpt (KellerJordan/modded-nanogpt, train_gpt.py @ f411b3d)
#
# Residual update of a plain layer i (MNG:1598, 1638, 1643, 1665):
#   x = resid_lambdas[i, 0] * x + post_lambdas[i, 0] * attn(norm(x)) + x0 * x0_gate_i
#   x = resid_lambdas[i, 1] * x + post_lambdas[i, 1] * mlp(norm(x))
# norm() is weightless RMSNorm everywhere (MNG:952-953); QK norm is applied BEFORE RoPE (MNG:1106-1109).


def modded_nanogpt_norm(x: Tensor, eps: float | None = None) -> Tensor:
    """``norm(x) = F.rms_norm(x, (x.size(-1),))`` (MNG:952-953): weightless, eps=None."""
    return _rms(x, eps)


def modded_nanogpt_qkvo(w_q: Tensor, w_k: Tensor, w_v: Tensor, w_o: Tensor) -> Tensor:
    """The authors' per-layer attention weight ``qkvo_w`` (4*dim, dim) from four (dim, dim) matrices in
    nn.Linear layout: rows [0, dim) give q, [dim, 2 dim) k, [2 dim, 3 dim) v (MNG:1103 reads
    ``qkvo_w[:3*dim]`` and splits the 3*H heads into q, k, v in that order), rows [3 dim, 4 dim) are the
    output projection (MNG:1161 ``F.linear(y, qkvo_w[3*dim:])``); assembled at MNG:1523-1525."""
    return torch.cat([w_q, w_k, w_v, w_o], dim=0)


def modded_nanogpt_attention(
    x_normed: Tensor,
    qkvo_w: Tensor,
    sa_lambdas: Tensor,
    n_heads: int,
    rope: Rope,
    scale: float,
    attn_gate: Tensor | None = None,
    eps: float | None = None,
) -> Tensor:
    """``CausalSelfAttention.forward`` for a non-paired layer (MNG:1093-1162), without value embeddings
    (aux_v), XSA, key offset, dynamic composition (dc) or sliding windows.

    x_normed: (B, T, dim), the already-normalised input (the caller does ``norm(x)``, MNG:1598).
    qkvo_w: (4*dim, dim), see ``modded_nanogpt_qkvo``.  sa_lambdas: (2,), init (0.5, 1.0) (MNG:1344):
    [0] multiplies the q, k, v weights, [1] the output weight.  scale: the softmax scale; the authors pass
    ``yarn.attn_scale`` = 0.1 at start (MNG:1035), later multiplied by 0.2*ln(new/old window)+1 (MNG:1055).
    attn_gate: optional (B, T, n_heads) per-head multiplier of the attention output, used as is (no sigmoid)
    on layers 3 and 10 (MNG:1159, 1240)."""
    B, T, dim = x_normed.shape
    head_dim = dim // n_heads
    # MNG:1103: one linear for q, k, v with sa_lambdas[0] folded into the weight
    q, k, v = (
        F.linear(x_normed, sa_lambdas[0] * qkvo_w[: dim * 3]).view(B, T, 3 * n_heads, head_dim).chunk(3, dim=-2)
    )
    q, k = _rms(q, eps), _rms(k, eps)  # MNG:1106 "QK norm", weightless, per head (over head_dim)
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # (B, H, T, hd) for rope and the attention core
    q, k = rope(q), rope(k)  # MNG:1109 yarn.rotary, after the QK norm
    y = causal_attention(q, k, v, scale)  # MNG:1139-1141 flash_attn_varlen_func(causal=True, softmax_scale=...)
    y = y.transpose(1, 2)  # (B, T, H, hd), MNG:1150
    if attn_gate is not None:
        y = y * attn_gate.view(B, T, n_heads, 1)  # MNG:1159
    y = y.contiguous().view(B, T, n_heads * head_dim)  # MNG:1160
    return F.linear(y, sa_lambdas[1] * qkvo_w[dim * 3 :])  # MNG:1161 "sa_lambdas[1] pre-multiplied to O"


def modded_nanogpt_mudd_gate(x: Tensor, w1: Tensor, w2: Tensor, b2: Tensor, gate_scale: Tensor) -> Tensor:
    """``forward_mudd_gate`` (MNG:1465-1467): the small network that produces the per-token x0 gates
    (and the attention, bigram, XSA, skip and dc gates):
        (gelu(x W1^T) W2^T + b2) * _mudd_gate_scale
    w1: (64, dim) kaiming-uniform (MNG:1446-1449); w2: (n_coef, 64) zeros (MNG:1447); b2: (n_coef,) zeros on
    the x0 lanes (MNG:1452-1463); gate_scale: scalar, init 0.1, learnable (MNG:1437).
    Which lane is whose x0 gate: gate[..., 18 + 2*j] for layers (0, 1, 2, 3) from the pre gate computed on x0
    (MNG:1469-1475, 1551), and for layers (4, 5, 7, 8, 9) from the post gate computed on the un-normalised
    residual x at the start of layer 4 (MNG:1477-1484, 1580-1581). Each x0 gate is ONE scalar per token,
    linear (no sigmoid), 0 at init (w2 = 0 and b2 = 0 on those lanes)."""
    h = F.gelu(F.linear(x, w1))  # MNG:1466
    return (F.linear(h, w2) + b2) * gate_scale  # MNG:1467


def modded_nanogpt_block(
    x: Tensor,
    x0: Tensor,
    *,
    qkvo_w: Tensor,
    sa_lambdas: Tensor,
    resid_lambda: Tensor,
    post_lambda: Tensor,
    x0_gate: Tensor,
    mlp: Mlp,
    rope: Rope,
    scale: float,
    n_heads: int,
    attn_gate: Tensor | None = None,
    attn_input: Tensor | None = None,
    eps: float | None = None,
) -> Tensor:
    """One plain layer of ``GPT.forward`` (MNG:1596-1668, the non-MUDD branch), bigram injection left out.

    x, x0: (B, T, dim); x0 is ``norm(embedding)`` (``modded_nanogpt_x0``).
    resid_lambda, post_lambda: (2,) = rows resid_lambdas[i], post_lambdas[i] ([0] attention, [1] MLP);
    init sqrt(1.1) and 1 (MNG:1334-1338); the authors cast them to bfloat16 in the forward (MNG:1509-1512).
    x0_gate: (B, T, 1), the layer's lane of ``modded_nanogpt_mudd_gate``.
    attn_input: the tensor whose norm feeds the attention; the authors use ``cache.get(7, x)``
    (MNG:1598), i.e. layer 7's output for layers 8, 9, 10 and x otherwise. Default: x."""
    attn_in_normed = modded_nanogpt_norm(x if attn_input is None else attn_input, eps)  # MNG:1598
    attn_out = modded_nanogpt_attention(attn_in_normed, qkvo_w, sa_lambdas, n_heads, rope, scale, attn_gate, eps)
    x = resid_lambda[0] * x + post_lambda[0] * attn_out + x0 * x0_gate  # MNG:1638
    normed = modded_nanogpt_norm(x, eps)  # MNG:1643
    return resid_lambda[1] * x + post_lambda[1] * mlp(normed)  # MNG:1665


def modded_nanogpt_x0(embedded: Tensor, eps: float | None = None) -> Tensor:
    """``x = x0 = norm(x[None])`` (MNG:1549): the embedding (after the smear, MNG:1546-1548, left out here)
    normalised without weight; the residual stream starts as x0 (MNG:1561)."""
    return modded_nanogpt_norm(embedded, eps)


def modded_nanogpt_final(x: Tensor, eps: float | None = None) -> Tensor:
    """``x = norm(x)`` (MNG:1682) before lm_head; the post-loop MUDD residual mix (MNG:1678-1680) before it and
    the 23*sigmoid((logits+5)/7.5) soft cap after it (MNG:1690) are left out."""
    return modded_nanogpt_norm(x, eps)


# --------------------------------------------------------------------------------------------------
# nanochat (karpathy/nanochat, nanochat/gpt.py @ 92d63d4)
#
#   x = resid_lambdas[i] * x + x0_lambdas[i] * x0         (NC:500, before the block)
#   x = x + attn(norm(x));  x = x + mlp(norm(x))           (NC:151-152)
# norm() is weightless (NC:42-43); QK norm AFTER RoPE, then q, k *= 1.2 (NC:101-104).


def nanochat_norm(x: Tensor, eps: float | None = None) -> Tensor:
    """``norm(x) = F.rms_norm(x, (x.size(-1),))`` (NC:42-43): weightless, eps=None."""
    return _rms(x, eps)


def nanochat_attention(
    x_normed: Tensor,
    c_q: Tensor,
    c_k: Tensor,
    c_v: Tensor,
    c_proj: Tensor,
    n_head: int,
    rope: Rope,
    scale: float | None = None,
    n_kv_head: int | None = None,
    qk_gain: float = 1.2,
    eps: float | None = None,
) -> Tensor:
    """``CausalSelfAttention.forward`` (NC:84-128) without value embeddings (NC:94-97), windows or KV cache.

    c_q: (n_head*hd, C), c_k, c_v: (n_kv_head*hd, C), c_proj: (C, C), nn.Linear layout (NC:77-80).
    scale: None = the flash-attention / SDPA default 1/sqrt(hd) (NC:110; nanochat/flash_attention.py:88 passes no
    scale). qk_gain: the constant 1.2 multiplying q and k after their norm (NC:103-104)."""
    B, T, C = x_normed.shape
    head_dim = C // n_head
    n_kv_head = n_head if n_kv_head is None else n_kv_head
    q = F.linear(x_normed, c_q).view(B, T, n_head, head_dim).transpose(1, 2)  # NC:89
    k = F.linear(x_normed, c_k).view(B, T, n_kv_head, head_dim).transpose(1, 2)  # NC:90
    v = F.linear(x_normed, c_v).view(B, T, n_kv_head, head_dim).transpose(1, 2)  # NC:91
    q, k = rope(q), rope(k)  # NC:101, BEFORE the QK norm
    q, k = _rms(q, eps), _rms(k, eps)  # NC:102 "QK norm", weightless, per head
    q = q * qk_gain  # NC:103
    k = k * qk_gain  # NC:104
    y = causal_attention(q, k, v, _default_scale(head_dim, scale))  # NC:110
    y = y.transpose(1, 2).contiguous().view(B, T, -1)  # NC:126
    return F.linear(y, c_proj)  # NC:127


def nanochat_block(
    x: Tensor,
    x0: Tensor,
    *,
    c_q: Tensor,
    c_k: Tensor,
    c_v: Tensor,
    c_proj: Tensor,
    resid_lambda: Tensor,
    x0_lambda: Tensor,
    mlp: Mlp,
    rope: Rope,
    n_head: int,
    scale: float | None = None,
    n_kv_head: int | None = None,
    qk_gain: float = 1.2,
    eps: float | None = None,
) -> Tensor:
    """The x0 mix of ``GPT.forward`` (NC:500) followed by ``Block.forward`` (NC:150-153).

    resid_lambda, x0_lambda: scalars resid_lambdas[i], x0_lambdas[i]; init 1.15 - 0.10*i/(L-1) and
    0.20 - 0.15*i/(L-1) (NC:237-241)."""
    x = resid_lambda * x + x0_lambda * x0  # NC:500
    x = x + nanochat_attention(nanochat_norm(x, eps), c_q, c_k, c_v, c_proj, n_head, rope, scale, n_kv_head, qk_gain, eps)  # NC:151
    return x + mlp(nanochat_norm(x, eps))  # NC:152


def nanochat_x0(embedded: Tensor, eps: float | None = None) -> Tensor:
    """``x = norm(wte(idx))`` (NC:471-473); x0 = x (NC:495) is taken after the smear (NC:476-480, left out)."""
    return nanochat_norm(embedded, eps)


def nanochat_final(
    x: Tensor, eps: float | None = None, x_backout: Tensor | None = None, backout_lambda: Tensor | None = None
) -> Tensor:
    """``x = norm(x)`` (NC:508) before lm_head; optionally the backout before it, ``x - backout_lambda *
    x_backout`` with x_backout the output of layer n_layer // 2 (NC:497, 503-507). The 15*tanh(logits/15)
    soft cap after lm_head (NC:511-515) is left out."""
    if x_backout is not None:
        x = x - backout_lambda * x_backout  # NC:507
    return nanochat_norm(x, eps)  # NC:508


# --------------------------------------------------------------------------------------------------
# Qwen3-Next (transformers 5.25.0, models/qwen3_next/modeling_qwen3_next.py), full-attention layers
#
#   h = x + o_proj( attn( q_norm(q), k_norm(k), v ) * sigmoid(gate) ),   q, k, v, gate from input_layernorm(x)
#   out = h + mlp(post_attention_layernorm(h))                                  (QN:990-1022)
# Every RMSNorm is x_hat * (1 + w) with w zero-initialised (QN:126-140, 1051-1053); q/k norms are per head
# (over head_dim) and come BEFORE RoPE (QN:275-280).


def qwen3_next_rmsnorm(x: Tensor, weight: Tensor, eps: float = 1e-6) -> Tensor:
    """``Qwen3NextRMSNorm`` (QN:126-140): x * rsqrt(mean(x^2) + eps) * (1 + weight); weight init zeros (QN:130,
    QN:1051-1053). The authors compute it in float32 (``x.float()``, QN:136) and cast back (QN:140); here in x's
    dtype. eps default: ``rms_norm_eps`` = 1e-6 (configuration_qwen3_next.py:97)."""
    return _rms(x, eps) * (1.0 + weight)  # QN:133 (_norm), QN:139


def qwen3_next_fuse_q_gate(w_q: Tensor, w_gate: Tensor, n_heads: int) -> Tensor:
    """The authors' ``q_proj`` weight (2*H*hd, C) from separate query and gate weights (H*hd, C) each: its
    output is viewed as (..., H, 2*hd) and split in halves, query first, gate second, per head (QN:270-273)."""
    C = w_q.size(1)
    return torch.cat([w_q.view(n_heads, -1, C), w_gate.view(n_heads, -1, C)], dim=1).reshape(-1, C)


def qwen3_next_attention(
    x_normed: Tensor,
    q_proj: Tensor,
    k_proj: Tensor,
    v_proj: Tensor,
    o_proj: Tensor,
    q_norm_weight: Tensor,
    k_norm_weight: Tensor,
    n_heads: int,
    rope: Rope,
    scale: float | None = None,
    n_kv_heads: int | None = None,
    eps: float = 1e-6,
) -> Tensor:
    """``Qwen3NextAttention.forward`` (QN:259-304), no biases (``attention_bias`` False by default).

    q_proj: (2*H*hd, C), query and gate interleaved per head (see ``qwen3_next_fuse_q_gate``);
    k_proj, v_proj: (H_kv*hd, C); o_proj: (C, H*hd); q_norm_weight, k_norm_weight: (hd,), zero init, shared
    by all heads (QN:253-256). scale: None = head_dim**-0.5 (QN:238). The authors' rope is partial
    (partial_rotary_factor 0.25, configuration_qwen3_next.py:124; QN:178-187): that is ``rope``'s business."""
    B, T, C = x_normed.shape
    head_dim = q_proj.size(0) // (2 * n_heads)
    n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
    # QN:270-273: q_proj output viewed (B, T, H, 2*hd) and chunked into query and gate, per head and channel
    query_states, gate = torch.chunk(F.linear(x_normed, q_proj).view(B, T, -1, head_dim * 2), 2, dim=-1)
    gate = gate.reshape(B, T, -1)  # QN:273, (B, T, H*hd)
    query_states = qwen3_next_rmsnorm(query_states, q_norm_weight, eps).transpose(1, 2)  # QN:275
    key_states = qwen3_next_rmsnorm(F.linear(x_normed, k_proj).view(B, T, n_kv_heads, head_dim), k_norm_weight, eps)
    key_states = key_states.transpose(1, 2)  # QN:276
    value_states = F.linear(x_normed, v_proj).view(B, T, n_kv_heads, head_dim).transpose(1, 2)  # QN:277
    query_states, key_states = rope(query_states), rope(key_states)  # QN:279-280, AFTER the q/k norms
    attn_output = causal_attention(query_states, key_states, value_states, _default_scale(head_dim, scale))  # QN:285-298
    attn_output = attn_output.transpose(1, 2).reshape(B, T, -1).contiguous()  # QN:224 transpose, QN:300
    attn_output = attn_output * torch.sigmoid(gate)  # QN:301: elementwise (per head and channel) output gate
    return F.linear(attn_output, o_proj)  # QN:303


def qwen3_next_block(
    x: Tensor,
    *,
    input_layernorm_weight: Tensor,
    post_attention_layernorm_weight: Tensor,
    q_proj: Tensor,
    k_proj: Tensor,
    v_proj: Tensor,
    o_proj: Tensor,
    q_norm_weight: Tensor,
    k_norm_weight: Tensor,
    n_heads: int,
    mlp: Mlp,
    rope: Rope,
    scale: float | None = None,
    n_kv_heads: int | None = None,
    eps: float = 1e-6,
) -> Tensor:
    """``Qwen3NextDecoderLayer.forward`` (QN:981-1024) for a ``full_attention`` layer; the authors' MLP is a
    MoE (QN:970-975), passed in as ``mlp``."""
    residual = x  # QN:990
    h = qwen3_next_rmsnorm(x, input_layernorm_weight, eps)  # QN:992
    h = qwen3_next_attention(h, q_proj, k_proj, v_proj, o_proj, q_norm_weight, k_norm_weight, n_heads, rope, scale, n_kv_heads, eps)
    h = residual + h  # QN:1013
    residual = h  # QN:1016
    h = qwen3_next_rmsnorm(h, post_attention_layernorm_weight, eps)  # QN:1017
    return residual + mlp(h)  # QN:1018-1022


def qwen3_next_x0(embedded: Tensor) -> Tensor:
    """No norm or scale on the embedding: ``hidden_states = inputs_embeds`` (QN:1092, 1117)."""
    return embedded


def qwen3_next_final(x: Tensor, norm_weight: Tensor, eps: float = 1e-6) -> Tensor:
    """``hidden_states = self.norm(hidden_states)`` (QN:1068, 1131): a 1+w RMSNorm, w zero init."""
    return qwen3_next_rmsnorm(x, norm_weight, eps)


# --------------------------------------------------------------------------------------------------
# DeepSeek-V4 (transformers 5.25.0, models/deepseek_v4), dense-attention reading
#
# "Dense reading": the sliding window (128) and the compressed KV entries of CSA/HCA layers (DS:838-855)
# are replaced by plain causal attention over all earlier tokens; everything else as the authors have it:
#   streams (B, T, N, C), N = hc_mult:
#   post, comb, u = attn_hc(streams);  streams = post * attn(input_layernorm(u)) + comb^T streams
#   post, comb, u = ffn_hc(streams);   streams = post * mlp(post_attention_layernorm(u)) + comb^T streams
# q: q_a_proj -> q_a_norm (weighted, over q_lora_rank) -> q_b_proj -> q_b_norm (weightless, per head) -> RoPE;
# kv: kv_proj (ONE head shared by K and V) -> kv_norm (weighted, over head_dim) -> RoPE; per-head sinks;
# RoPE undone on the output (V = K carried it).


def deepseek_v4_rmsnorm(x: Tensor, weight: Tensor, eps: float = 1e-6) -> Tensor:
    """``DeepseekV4RMSNorm`` (DS:45-59; DSmod:67-68 takes it from Olmo2): weight * x * rsqrt(mean(x^2)+eps),
    weight init ones (DS:51). The authors compute in float32 (DS:56) and keep these modules in float32
    (DS ``_keep_in_fp32_modules_strict``); here in x's dtype. eps: ``rms_norm_eps`` 1e-6
    (configuration_deepseek_v4.py:166)."""
    return weight * _rms(x, eps)  # DS:57-59


def deepseek_v4_unweighted_rmsnorm(x: Tensor, eps: float = 1e-6) -> Tensor:
    """``DeepseekV4UnweightedRMSNorm`` (DS:65-71): x * rsqrt(mean(x^2) + eps), no weight."""
    return _rms(x, eps)


def deepseek_v4_attention(
    x_normed: Tensor,
    *,
    q_a_proj: Tensor,
    q_a_norm_weight: Tensor,
    q_b_proj: Tensor,
    kv_proj: Tensor,
    kv_norm_weight: Tensor,
    sinks: Tensor,
    n_heads: int,
    rope: Rope,
    rope_inverse: Rope,
    scale: float | None = None,
    o_proj: Tensor | None = None,
    o_a_proj: Tensor | None = None,
    o_b_proj: Tensor | None = None,
    o_groups: int | None = None,
    eps: float = 1e-6,
) -> Tensor:
    """``DeepseekV4Attention.forward`` (DS:811-881) in the dense reading (no compressor, no window).

    q_a_proj: (q_lora_rank, C); q_a_norm_weight: (q_lora_rank,); q_b_proj: (H*hd, q_lora_rank);
    kv_proj: (H_kv*hd, C), the authors' H_kv = 1 (DS:799; num_key_value_groups = H, DS:787);
    kv_norm_weight: (hd,); sinks: (H,), zero init (DS:805, 1279).
    Output projection: either ``o_proj`` (C, H*hd), or the authors' grouped low-rank pair ``o_a_proj``
    (o_groups*o_lora_rank, H*hd/o_groups) and ``o_b_proj`` (C, o_groups*o_lora_rank) (DS:801-804, 313-342, 878-880).
    rope / rope_inverse: rotate by +theta / -theta at each token's own position (the authors rotate the
    trailing qk_rope_head_dim = 64 of 512 channels, interleaved pairs, DS:352-369; rope_inverse is their
    ``apply_rotary_pos_emb(..., cos, -sin)``, DS:876). scale: None = head_dim**-0.5 (DS:793)."""
    B, T, C = x_normed.shape
    q_residual = deepseek_v4_rmsnorm(F.linear(x_normed, q_a_proj), q_a_norm_weight, eps)  # DS:826
    head_dim = q_b_proj.size(0) // n_heads
    q = F.linear(q_residual, q_b_proj).view(B, T, n_heads, head_dim).transpose(1, 2)  # DS:827
    q = deepseek_v4_unweighted_rmsnorm(q, eps)  # DS:828, per head, no weight
    q = rope(q)  # DS:829, AFTER the norms
    kv = deepseek_v4_rmsnorm(F.linear(x_normed, kv_proj), kv_norm_weight, eps)  # DS:831 (norm over head_dim)
    kv = kv.view(B, T, -1, head_dim).transpose(1, 2)  # DS:831
    kv = rope(kv)  # DS:832
    # DS:853-868 -> eager_attention_forward (DS:726-754) with key = value = kv and s_aux = sinks
    kv_rep = _repeat_kv(kv, n_heads // kv.size(1))  # DS:736-737
    logits = _causal_logits(q, kv_rep, _default_scale(head_dim, scale))  # DS:738-740
    attn_weights = softmax_with_sink(logits, sinks)  # DS:742-750
    attn_output = torch.matmul(attn_weights, kv_rep)  # DS:752, (B, H, T, hd)
    attn_output = rope_inverse(attn_output).transpose(1, 2)  # DS:753 + DS:876: undo RoPE on V's rope slice
    if o_proj is not None:
        return F.linear(attn_output.reshape(B, T, -1), o_proj)
    grouped = attn_output.reshape(B, T, o_groups, -1)  # DS:878
    w = o_a_proj.view(o_groups, -1, grouped.size(-1))  # DS:339: block-diagonal, group g uses rows [g*r, (g+1)*r)
    grouped = torch.einsum("btgi,gri->btgr", grouped, w).flatten(2)  # DS:336-342, 879
    return F.linear(grouped, o_b_proj)  # DS:880


def deepseek_v4_hyper_connection(
    hidden_streams: Tensor,
    fn: Tensor,
    base: Tensor,
    scale: Tensor,
    sinkhorn_iters: int = 20,
    hc_eps: float = 1e-6,
    eps: float = 1e-6,
) -> tuple[Tensor, Tensor, Tensor]:
    """``DeepseekV4HyperConnection.forward`` (DS:951-995), manifold-constrained hyper-connections (mHC).

    hidden_streams: (B, T, N, C). fn: ((2+N)*N, N*C), init normal(0, initializer_range=0.02) (DS:1281);
    base: ((2+N)*N,), init zeros (DS:1282); scale: (3,), init ones (DS:1283). hc_mult N = 4,
    hc_sinkhorn_iters 20, hc_eps 1e-6 (configuration_deepseek_v4.py:146-148).
    Returns post (B, T, N), comb (B, T, N, N) (doubly stochastic by Sinkhorn), collapsed (B, T, C)."""
    B, T, N, C = hidden_streams.shape
    flattened = deepseek_v4_unweighted_rmsnorm(hidden_streams.reshape(B, T, N * C), eps)  # DS:966-967
    flattened = F.linear(flattened, fn)  # DS:969
    pre_w, post_w, comb_w = flattened.split([N, N, N * N], dim=-1)  # DS:971
    pre_b, post_b, comb_b = base.split([N, N, N * N])  # DS:972
    pre_scale, post_scale, comb_scale = scale.unbind(0)  # DS:973
    comb_w = comb_w.view(B, T, N, N)  # DS:975
    comb_b = comb_b.view(N, N)  # DS:976
    pre = torch.sigmoid(pre_w * pre_scale + pre_b) + hc_eps  # DS:979
    post = 2 * torch.sigmoid(post_w * post_scale + post_b)  # DS:980
    comb = torch.softmax(comb_w * comb_scale + comb_b, dim=-1) + hc_eps  # DS:981
    comb = comb / (comb.sum(dim=-2, keepdim=True) + hc_eps)  # DS:987
    for _ in range(sinkhorn_iters - 1):  # DS:988-990
        comb = comb / (comb.sum(dim=-1, keepdim=True) + hc_eps)
        comb = comb / (comb.sum(dim=-2, keepdim=True) + hc_eps)
    collapsed = (pre.unsqueeze(-1) * hidden_streams).sum(dim=2)  # DS:994
    return post, comb, collapsed


def deepseek_v4_block(
    hidden_streams: Tensor,
    *,
    input_layernorm_weight: Tensor,
    post_attention_layernorm_weight: Tensor,
    attn_hc: tuple[Tensor, Tensor, Tensor],
    ffn_hc: tuple[Tensor, Tensor, Tensor],
    attn: dict,
    mlp: Mlp,
    rope: Rope,
    rope_inverse: Rope,
    n_heads: int,
    scale: float | None = None,
    sinkhorn_iters: int = 20,
    hc_eps: float = 1e-6,
    eps: float = 1e-6,
) -> Tensor:
    """``DeepseekV4DecoderLayer.forward`` (DS:1174-1198), dense attention; the authors' MLP is a MoE (DS:1166),
    passed in as ``mlp``.

    hidden_streams: (B, T, N, C). attn_hc, ffn_hc: (fn, base, scale) of the two hyper-connections
    (DS:1171-1172). attn: keyword arguments of ``deepseek_v4_attention`` for the weights (q_a_proj,
    q_a_norm_weight, q_b_proj, kv_proj, kv_norm_weight, sinks, and o_proj or o_a_proj/o_b_proj/o_groups).
    With N = 1 the mHC reduces to streams = post * F(norm(u)) + comb * streams with comb = 1 (up to hc_eps)
    and post = 2*sigmoid(s * fn . rms(u) + b), a data-dependent scalar branch gate."""
    post, comb, collapsed = deepseek_v4_hyper_connection(hidden_streams, *attn_hc, sinkhorn_iters, hc_eps, eps)  # DS:1188
    attn_output = deepseek_v4_attention(
        deepseek_v4_rmsnorm(collapsed, input_layernorm_weight, eps),  # DS:1189
        n_heads=n_heads, rope=rope, rope_inverse=rope_inverse, scale=scale, eps=eps, **attn,
    )
    # DS:1190-1192: new[k] = post[k] * attn + sum_j comb[j, k] * streams[j]
    hidden_streams = post.unsqueeze(-1) * attn_output.unsqueeze(-2) + torch.matmul(comb.transpose(-1, -2), hidden_streams)
    post, comb, collapsed = deepseek_v4_hyper_connection(hidden_streams, *ffn_hc, sinkhorn_iters, hc_eps, eps)  # DS:1194
    mlp_output = mlp(deepseek_v4_rmsnorm(collapsed, post_attention_layernorm_weight, eps))  # DS:1195
    return post.unsqueeze(-1) * mlp_output.unsqueeze(-2) + torch.matmul(comb.transpose(-1, -2), hidden_streams)  # DS:1196-1198


def deepseek_v4_x0(embedded: Tensor, hc_mult: int = 4) -> Tensor:
    """``inputs_embeds.unsqueeze(2).expand(-1, -1, hc_mult, -1)`` (DS:1356): the embedding, not normalised
    or scaled, copied into the N residual streams."""
    return embedded.unsqueeze(2).expand(-1, -1, hc_mult, -1).contiguous()


def deepseek_v4_final(
    hidden_streams: Tensor,
    hc_fn: Tensor,
    hc_base: Tensor,
    hc_scale: Tensor,
    norm_weight: Tensor,
    hc_eps: float = 1e-6,
    eps: float = 1e-6,
) -> Tensor:
    """``self.norm(self.hc_head(hidden_states))`` (DS:1373): ``DeepseekV4HyperHead`` (DS:998-1014) collapses
    the N streams with pre = sigmoid(hc_scale * hc_fn . rms(streams) + hc_base) + hc_eps (hc_fn (N, N*C) normal
    0.02, hc_base zeros, hc_scale ones: DS:1285-1287), then the weighted RMSNorm ``norm`` (DS:1311)."""
    B, T, N, C = hidden_streams.shape
    flat = deepseek_v4_unweighted_rmsnorm(hidden_streams.reshape(B, T, N * C), eps)  # DS:1011
    mixes = F.linear(flat, hc_fn)  # DS:1012
    pre = torch.sigmoid(mixes * hc_scale + hc_base) + hc_eps  # DS:1013
    collapsed = (pre.unsqueeze(-1) * hidden_streams).sum(dim=2)  # DS:1014
    return deepseek_v4_rmsnorm(collapsed, norm_weight, eps)  # DS:1373

