"""What a norm costs per second, measured under control: every architecture of a study's ranking trains a few
steps in one process, the architectures interleaved round-robin (``normsearch report STUDY --measure-throughput``),
and the tokens/s are stored in ``throughput.json`` in the study's results folder, which every later ranking of that
shape reads instead of the runs' recordings (:func:`normsearch._throughput.add_speedups`).

Why: the tokens/s a run records are whatever its machine gave it. On a shared machine (other workers, other jobs)
they vary by 10-40% between runs of one architecture and their medians by 3x across architectures whose norms
cost a few percent, so a tokens/s ratio read off them is mostly contention. Timing every architecture in one
process, in rounds that visit each in turn (each round starting one further along), lets drift and contention
hit all of them alike; the median over rounds discards the rounds a burst of load spoiled.

What is timed: the full training step (forward, cross-entropy, backward, gradient clipping, AdamW) of a throwaway
model of each placement at the study's model shape, batch, context, thread count (``train.threads``, else 1) and
compared precision, on random tokens, after a few warm-up steps; torch's random state and thread count are as
they were afterwards. Every model is built up front (memory: all the architectures' weights, gradients and AdamW
moments at once). Torch is imported only when measuring.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

FILE = "throughput.json"
VERSION = 1
WARMUP = 3  # untimed steps per architecture first
ROUNDS = 30  # rounds; each times every architecture once, in turn (the ratios' intervals need 6 or more)
STEPS = 5  # steps per architecture per round
SHAPE = ("n_layers", "d_model", "n_heads", "ffn", "ffn_hidden", "vocab_size", "context_length", "rope",
         "tie_embeddings")


@dataclass
class Measured:
    """One architecture's training tokens/s: the median over rounds, the quartiles of the per-round values."""

    tokens_per_s: float
    q1: float
    q3: float
    rounds: list[float] = field(default_factory=list)  # tokens/s in each round, in round order
    label: str = ""

    @property
    def spread(self) -> float:
        """The interquartile range over the median."""
        return (self.q3 - self.q1) / self.tokens_per_s if self.tokens_per_s else 0.0


def shape_key(model, batch_size: int, threads: int, precision: str | None) -> dict:
    """What a measurement depends on besides the machine: the model's shape, the batch, the threads and the
    precision. A stored measurement is used only by a ranking whose key is equal."""
    return {**{k: getattr(model, k) for k in SHAPE}, "batch_size": int(batch_size), "threads": int(threads),
            "precision": precision or "32-true"}


def study_key(recipe, precision: str | None) -> dict:
    return shape_key(recipe.model, recipe.train.batch_size, recipe.train.threads or 1, precision)


def measure_archs(placements: dict[str, object], model, batch_size: int, *, threads: int = 1,
                  precision: str | None = "32-true", device: str = "cpu", kernels: dict[str, str] | None = None,
                  warmup: int = WARMUP, rounds: int = ROUNDS, steps: int = STEPS,
                  echo: Callable[[str], None] | None = None) -> dict[str, Measured]:
    """Training tokens/s of every placement (``placements``: key -> a Placement, baseline name or spec mapping)
    at ``model`` (a ModelConfig) and ``batch_size``: ``warmup`` steps each, then ``rounds`` rounds that time
    ``steps`` steps of every placement in turn (round i starts at the i-th). ``kernels``: key -> torch or triton
    (default torch). ``echo``: told the plan and its estimated time after the warm-up."""
    import torch

    from ._precision import train_step
    from .model import build_model

    if not placements:
        return {}
    keys = list(placements)
    dtype = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}.get(precision or "")
    dev = torch.device(device)
    ctx, vocab = model.context_length, model.vocab_size
    before = torch.get_num_threads()
    torch.set_num_threads(max(1, int(threads)))
    try:
        with torch.random.fork_rng(devices=[dev.index or 0] if dev.type == "cuda" else []):
            torch.manual_seed(0)
            nets = {k: build_model(placements[k], model, kernels=(kernels or {}).get(k, "torch")).to(dev)
                    for k in keys}
            opts = {k: torch.optim.AdamW(n.param_groups(1e-3, 0.1), lr=1e-3) for k, n in nets.items()}
            data = torch.randint(0, vocab, (batch_size, ctx + 1), generator=torch.Generator().manual_seed(0)).to(dev)
            x, y = data[:, :-1], data[:, 1:].reshape(-1)

            def step(k: str) -> None:
                train_step(nets[k], opts[k], x, y, torch.autocast(dev.type, dtype=dtype) if dtype is not None else None)

            def sync() -> None:
                if dev.type == "cuda":
                    torch.cuda.synchronize(dev)

            t0 = time.perf_counter()
            for k in keys:
                for _ in range(max(1, warmup)):
                    step(k)
            sync()
            per_step = (time.perf_counter() - t0) / (len(keys) * max(1, warmup))
            if echo:
                echo(f"measuring {len(keys)} architecture(s) interleaved: {rounds} round(s) of {steps} step(s) each "
                     f"({len(keys) * rounds * steps} timed steps, about {len(keys) * rounds * steps * per_step:.0f} s)")
            per_round: dict[str, list[float]] = {k: [] for k in keys}
            tokens = batch_size * ctx * steps
            for i in range(rounds):
                for k in keys[i % len(keys):] + keys[:i % len(keys)]:
                    sync()
                    t = time.perf_counter()
                    for _ in range(steps):
                        step(k)
                    sync()
                    per_round[k].append(tokens / (time.perf_counter() - t))
    finally:
        torch.set_num_threads(before)
    return {k: _summary(v) for k, v in per_round.items()}


def _summary(values: list[float]) -> Measured:
    med = statistics.median(values)
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive") if len(values) > 1 else (med, med, med)
    return Measured(med, q1, q3, list(values))


def measure_study(handle, ranking, *, warmup: int = WARMUP, rounds: int = ROUNDS, steps: int = STEPS,
                  echo: Callable[[str], None] | None = None) -> Path:
    """Measure every ranked architecture of ``ranking`` (``rank(handle)``; the caller ranks, so that this
    module stays below the ranking, which reads its file) at ``handle``'s recipe's shape, batch, threads and
    the ranking's compared precision, and write ``throughput.json`` into its results folder (returned)."""
    import torch

    from ._precision import cpu_name

    rows = [r for r in ranking.ranked if r.placement]
    recipe, precision = handle.recipe, ranking.judgement.precision
    cuda = recipe.train.device != "cpu" and torch.cuda.is_available()
    threads = recipe.train.threads or 1
    measured = measure_archs({r.arch_id: r.placement for r in rows}, recipe.model, recipe.train.batch_size,
                             threads=threads, precision=precision, device="cuda" if cuda else "cpu",
                             kernels={r.arch_id: "triton" if cuda and r.kernels == "triton" else "torch" for r in rows},
                             warmup=warmup, rounds=rounds, steps=steps, echo=echo)
    for r in rows:
        measured[r.arch_id].label = r.label
    meta = {"key": study_key(recipe, precision), "study": ranking.study, "cpu": cpu_name(),
            "device": torch.cuda.get_device_name() if cuda else "cpu", "threads": threads, "torch": torch.__version__,
            "precision": precision or "32-true", "batch": [recipe.train.batch_size, recipe.model.context_length],
            "warmup": warmup, "rounds": rounds, "steps": steps, "date": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "method": "every architecture's training step (forward, backward, clipping, AdamW) in one process, "
                      "interleaved round-robin; per architecture the median over rounds of its tokens/s"}
    return write_measurement(handle.folder, measured, meta)


def write_measurement(folder: Path, measured: dict[str, Measured], meta: dict) -> Path:
    """``throughput.json`` in ``folder``: ``meta`` (``key``: :func:`shape_key`; the machine, torch, the date,
    the plan) and per arch_id its tokens/s, quartiles, spread and per-round values."""
    path = Path(folder) / FILE
    data = {"version": VERSION, "meta": meta,
            "archs": {k: {**asdict(m), "spread": m.spread} for k, m in measured.items()}}
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, path)
    return path


def read_measurement(folder: Path | None, key: dict, stage: bool = False) -> tuple[dict[str, Measured], dict] | None:
    """(arch_id -> :class:`Measured`, meta) from ``folder``'s ``throughput.json`` (for a ``stage``, else from
    the study's folder above it) when its key equals ``key``; None when there is none, it is unreadable or it
    was measured for another shape, batch, thread count or precision. The meta gains ``spread_range``: the
    smallest and largest of the architectures' spreads."""
    if folder is None:
        return None
    for where in [Path(folder)] + ([Path(folder).parent] if stage else []):
        try:
            data = json.loads((where / FILE).read_text())
        except (OSError, ValueError):
            continue
        try:
            if data.get("version") != VERSION or (data.get("meta") or {}).get("key") != key:
                continue
            archs = {k: Measured(float(v["tokens_per_s"]), float(v["q1"]), float(v["q3"]),
                                 [float(x) for x in v.get("rounds") or []], str(v.get("label") or ""))
                     for k, v in data["archs"].items()}
        except (AttributeError, KeyError, TypeError, ValueError):
            continue
        spreads = [m.spread for m in archs.values()] or [0.0]
        return archs, {**data["meta"], "spread_range": [min(spreads), max(spreads)]}
    return None
