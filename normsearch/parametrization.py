"""How the init, the learning rate and two forward multipliers depend on the width: the Maximal
Update Parametrization (muP) for Adam, Yang et al. 2022 (Tensor Programs V), written out here
instead of depending on the ``mup`` package (docs/parametrization.md says why).

Every rule is a power of the width multiplier ``m = d_model / mup_base_width``
(:attr:`normsearch.config.ModelConfig.width_mult`). Under ``standard``, ``m`` is 1 and every factor
below is exactly 1: standard parametrization is muP at its base width, so a mup model at
``d_model == mup_base_width`` is the standard model, bit for bit.

A parameter's role decides its rules (Table 3 and Table 8 of the paper, with base shapes):

========  ==========================================  ==========  ============  ============
role      which parameters                            init std    Adam lr       weight decay
========  ==========================================  ==========  ============  ============
input     token and position embeddings               x 1         x 1           x 1
hidden    every matrix inside a block (q, k, v, W_o,   x m^-1/2    x 1/m         x m
          the FFN, the elementwise attention gate)
readout   matrices from the width to a fixed size     x 1/m       x 1/m         x m
          (the per-head attention gate)
output    the LM head (tied or not)                   x 1         x 1           x 1
vector    norm gains and biases, branch gains         (as set)    x 1           (none)
========  ==========================================  ==========  ============  ============

and in the forward: logits x 1/m (the output multiplier of Table 8, which keeps a tied head
possible), attention logits scaled by 1/sqrt(d_head) x m^-1/2, which is sqrt(base_head)/d_head
with the number of heads fixed (1/d attention, equal to 1/sqrt(d_head) at the base width). Weight
decay is AdamW's decoupled decay, multiplied by m where the learning rate is divided by m, so that
lr x weight_decay (the decay per step, and its timescale 1 / (lr wd)) does not change with width.

Torch-free: the model and the optimiser ask it for numbers.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

#: role -> (init std, Adam lr, weight decay) as exponents of the width multiplier m
RULES: dict[str, tuple[float, float, float]] = {
    "input": (0.0, 0.0, 0.0),
    "hidden": (-0.5, -1.0, 1.0),
    "readout": (-1.0, -1.0, 1.0),
    "output": (0.0, 0.0, 0.0),
    "vector": (0.0, 0.0, 0.0),
}


def init_mult(role: str, m: float) -> float:
    """The factor on the init std (of the standard init computed at the base width)."""
    return m ** RULES[role][0]


def lr_mult(role: str, m: float) -> float:
    """The factor on the learning rate that the recipe (or a sweep) gives."""
    return m ** RULES[role][1]


def wd_mult(role: str, m: float) -> float:
    """The factor on ``train.weight_decay`` (where it applies at all)."""
    return m ** RULES[role][2]


def output_mult(m: float) -> float:
    """The factor on the logits."""
    return 1.0 / m


def attention_scale(head_dim: int, m: float) -> float | None:
    """The attention logits' scale; None where it is SDPA's own 1/sqrt(head_dim) (m == 1)."""
    return None if m == 1.0 else 1.0 / math.sqrt(head_dim * m)


def param_groups(params: Iterable[tuple[str, Any, str, bool]], lr: float, weight_decay: float,
                 m: float) -> list[dict]:
    """AdamW's parameter groups from ``(name, parameter, role, decays[, lr factor])`` in model order: one group
    per (lr, weight decay), in the order they first appear, each with its ``lr``, its
    ``weight_decay`` and ``roles`` (the roles in it). Under standard (m == 1): the decayed
    parameters and the others, as before muP existed."""
    groups: dict[tuple[float, float], dict] = {}
    for _, p, role, decays, *factor in params:
        key = (lr * lr_mult(role, m) * (factor[0] if factor else 1.0),
               weight_decay * wd_mult(role, m) if decays else 0.0)
        group = groups.setdefault(key, {"params": [], "lr": key[0], "weight_decay": key[1], "roles": []})
        group["params"].append(p)
        if role not in group["roles"]:
            group["roles"].append(role)
    return list(groups.values())
