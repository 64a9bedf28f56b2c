"""Which layers a per-layer override addresses (a rule, as data), and layer lists as text. Torch-free;
:mod:`normsearch.spec` re-exports these names."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import SpecError, unknown

_RULES = ("index", "first", "last", "fraction", "every")


@dataclass(frozen=True)
class LayerSelector:
    """Which layers an override addresses: ``{index: [0, 5]}``, ``{first: k}``, ``{last: k}``,
    ``{fraction: [a, b]}`` (layers i with floor(a L) <= i < floor(b L)), ``{every: n, offset: o}``.
    Shorthands: an int or a list of ints means ``index``."""

    rule: str
    value: Any
    offset: int = 0

    @classmethod
    def parse(cls, value: Any, ctx: str = "") -> LayerSelector:
        if isinstance(value, LayerSelector):
            return value
        if isinstance(value, bool):
            raise SpecError(f"{ctx}layers: expected an index, a list or a rule, not {value!r}")
        if isinstance(value, int) or (isinstance(value, list) and value):
            value = {"index": value}
        if not isinstance(value, Mapping) or not value:
            raise SpecError(f"{ctx}layers: expected an index, a list of indices or one of "
                            f"{{{', '.join(_RULES)}}}, not {value!r}")
        d = dict(value)
        offset = d.pop("offset", 0)
        if len(d) != 1:
            raise SpecError(f"{ctx}layers: give exactly one rule of {', '.join(_RULES)}; got {list(value)}")
        (rule, v), = d.items()
        if rule not in _RULES:
            raise SpecError(f"{ctx}layers: {unknown('rule', rule, _RULES)}")
        if offset and rule != "every":
            raise SpecError(f"{ctx}layers: offset only goes with every")

        def _int(x, lo):
            if isinstance(x, bool) or not isinstance(x, int) or x < lo:
                raise SpecError(f"{ctx}layers.{rule}: expected an integer >= {lo}, not {x!r}")
            return x

        if rule == "index":
            items = v if isinstance(v, list) else [v]
            if not items:
                raise SpecError(f"{ctx}layers.index: empty list")
            for x in items:
                if isinstance(x, bool) or not isinstance(x, int):
                    raise SpecError(f"{ctx}layers.index: expected integers, not {x!r}")
            v = tuple(sorted(set(items)))
        elif rule in ("first", "last"):
            v = _int(v, 1)
        elif rule == "every":
            v = _int(v, 1)
            offset = _int(offset, 0)
        else:  # fraction
            ok = isinstance(v, (list, tuple)) and len(v) == 2 and all(
                isinstance(x, (int, float)) and not isinstance(x, bool) for x in v
            )
            if not ok or not 0 <= v[0] <= v[1] <= 1:
                raise SpecError(f"{ctx}layers.fraction: expected [start, end] with 0 <= start <= end <= 1, not {v!r}")
            v = (float(v[0]), float(v[1]))
        return cls(rule, v, offset)

    def layers(self, n_layers: int) -> list[int]:
        L = n_layers
        if self.rule == "index":
            for i in self.value:
                if not -L <= i < L:
                    raise SpecError(f"override addresses layer {i}, but the model has {L} layers (0..{L - 1})")
            return sorted({i % L for i in self.value})
        if self.rule in ("first", "last"):
            k = self.value
            if k > L:
                raise SpecError(f"override addresses the {self.rule} {k} layers, but the model has {L}")
            return list(range(k)) if self.rule == "first" else list(range(L - k, L))
        if self.rule == "every":
            if self.offset >= L:
                raise SpecError(f"override starts at layer {self.offset}, but the model has {L} layers")
            return list(range(self.offset, L, self.value))
        return fraction_layers(*self.value, L)

    def to_dict(self) -> dict[str, Any]:
        if self.rule == "index":
            return {"index": list(self.value)}
        if self.rule == "fraction":
            return {"fraction": list(self.value)}
        if self.rule == "every" and self.offset:
            return {"every": self.value, "offset": self.offset}
        return {self.rule: self.value}

    def describe(self) -> str:
        if self.rule == "index":
            return "layer" + ("s " if len(self.value) > 1 else " ") + ",".join(map(str, self.value))
        if self.rule == "fraction":
            return f"layers in [{self.value[0]:g}L, {self.value[1]:g}L)"
        if self.rule == "every":
            return f"every {self.value}th layer from {self.offset}"
        return f"{self.rule} {self.value} layers"


def layer_span(layers: Iterable[int]) -> str:
    """Layer indices as runs: ``[0, 2, 3, 4]`` -> ``0, 2-4``; ``[1, 2, 3]`` -> ``1-3``."""
    runs: list[list[int]] = []
    for i in layers:
        if runs and runs[-1][-1] == i - 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


def fraction_layers(start: float, end: float, n_layers: int) -> list[int]:
    """The layers i with floor(start L) <= i < floor(end L): a fraction of the depth."""
    return list(range(math.floor(start * n_layers + 1e-9), math.floor(end * n_layers + 1e-9)))
