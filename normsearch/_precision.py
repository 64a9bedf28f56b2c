"""``train.precision: auto``: bf16-mixed on a GPU; on a CPU, whichever of fp32 and bf16 autocast trains
this model shape faster here, by measurement.

Whether bf16 autocast pays on a CPU depends on the CPU (AMX or AVX512-BF16 units, or neither), the
shape and the threads: on this project's CPU it is slower at every size tried (0.4-0.64x the tokens/s
of fp32), on others it can be twice as fast for wide models. So ``auto`` times a few optimizer steps
(forward, backward, clipping, AdamW) of the run's model shape at the run's batch, context and thread
count, in fp32 and under bf16 autocast, and takes bf16-mixed only when it gives at least :data:`MARGIN`
times fp32's tokens/s. The measurement runs on a throwaway model of a fixed reference placement
(:data:`REFERENCE`), so every architecture of a study gets the same answer on one machine, under
``torch.random.fork_rng`` and before the run seeds anything: it changes no result.

The answer is cached in ``<cache root>/precision/<key>.json`` (the token cache's root,
:func:`normsearch.data.cache_root`), keyed by the CPU's model name and instruction set, the torch
version, the thread count and the shape: one measurement per shape and machine, the workers of one
machine serialised on a lock so that they measure once and agree. Torch is imported only when measuring.
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import hashlib
import json
import logging
import math
import os
import platform
import time
from dataclasses import asdict, dataclass
from pathlib import Path

log = logging.getLogger("normsearch")

MARGIN = 1.1  # bf16-mixed only when its tokens/s are at least this many times fp32's
REFERENCE = "pre_ln"  # the placement measured: the answer is per shape, the same for every architecture
ROUNDS = 3  # timed rounds per precision, interleaved; the fastest round of each counts
ROUND_S = 0.1  # a round lasts about this long (at least one step, at most MAX_STEPS)
MAX_STEPS = 16
WARMUP = 1  # untimed steps per precision first (the step timed to size the rounds is a second)
KEY_VERSION = 1


@dataclass
class PrecisionChoice:
    """What ``auto`` chose and why: recorded with every run as ``RunResult.precision_choice``."""

    chosen: str  # 32-true or bf16-mixed
    fp32_tok_s: float | None = None  # measured training tokens/s (None on a GPU, or when not measured)
    bf16_tok_s: float | None = None
    ratio: float | None = None  # bf16_tok_s / fp32_tok_s
    margin: float | None = None
    cached: bool = False  # read from the cache rather than measured by this run
    reason: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def decide(fp32_tok_s: float, bf16_tok_s: float | None, margin: float | None = None) -> PrecisionChoice:
    """bf16-mixed when ``bf16_tok_s >= margin * fp32_tok_s`` (default :data:`MARGIN`), else 32-true (also when
    bf16 could not run)."""
    margin = MARGIN if margin is None else margin
    if bf16_tok_s is None or not fp32_tok_s > 0:
        return PrecisionChoice("32-true", fp32_tok_s, bf16_tok_s, None, margin,
                               reason="bf16 autocast could not be measured here")
    ratio = bf16_tok_s / fp32_tok_s
    chosen = "bf16-mixed" if ratio >= margin else "32-true"
    return PrecisionChoice(chosen, fp32_tok_s, bf16_tok_s, ratio, margin,
                           reason=f"bf16 autocast gave {ratio:.2f}x the tokens/s of fp32 "
                                  f"({'>=' if chosen == 'bf16-mixed' else '<'} {margin:g}x)")


def choose(model, batch_size: int, cache_dir: Path | None, accelerator: str = "cpu") -> PrecisionChoice:
    """The precision ``auto`` means for this run: ``model`` a ModelConfig, ``batch_size`` the run's batch,
    ``cache_dir`` the cache root (None: measure, cache nothing). Torch's thread count must already be the
    run's. Logs the choice."""
    if accelerator != "cpu":
        return PrecisionChoice("bf16-mixed", reason="a GPU: bf16-mixed without measuring")
    key = cache_key(model, batch_size)
    path = None if cache_dir is None else Path(cache_dir) / "precision" / f"{_digest(key)}.json"
    try:
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        log.warning("cannot cache the precision measurement in %s: %s", path.parent, e)
        path = None
    if path is None:
        choice = _measured(model, batch_size)
    else:
        with _locked(path.with_suffix(".lock")):
            choice = _read(path, key)
            if choice is None:
                choice = _measured(model, batch_size)
                _write(path, key, choice)
    log.info("train.precision auto: %s: %s, at %d thread(s)%s", choice.chosen, choice.reason, key["threads"],
             " (cached)" if choice.cached else "")
    return choice


def cache_key(model, batch_size: int) -> dict:
    """What the answer depends on: the machine, torch, the threads and the shape."""
    import torch

    shape = {k: getattr(model, k) for k in ("n_layers", "d_model", "n_heads", "ffn", "ffn_hidden", "vocab_size",
                                            "context_length", "rope", "tie_embeddings")}
    return {"version": KEY_VERSION, "cpu": cpu_name(), "capability": _capability(), "torch": torch.__version__,
            "threads": torch.get_num_threads(), "shape": {**shape, "batch_size": batch_size}}


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what the platform says."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _capability() -> str:
    import torch

    try:
        return str(torch.backends.cpu.get_cpu_capability())
    except Exception:  # an older torch
        return ""


def _digest(key: dict) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


@contextlib.contextmanager
def _locked(path: Path):
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # drops the lock


def _read(path: Path, key: dict) -> PrecisionChoice | None:
    """The cached measurement for ``key``, decided again under today's :data:`MARGIN`; None when absent."""
    try:
        data = json.loads(path.read_text())
        if data.get("key") != key:
            return None
        choice = decide(float(data["fp32_tok_s"]), data.get("bf16_tok_s"))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    choice.cached = True
    return choice


def _write(path: Path, key: dict, choice: PrecisionChoice) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    data = {"key": key, "fp32_tok_s": choice.fp32_tok_s, "bf16_tok_s": choice.bf16_tok_s,
            "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S")}
    try:
        tmp.write_text(json.dumps(data, indent=1) + "\n")
        os.replace(tmp, path)
    except OSError as e:  # a cache that cannot be written: the answer still holds for this run
        log.warning("could not cache the precision measurement in %s: %s", path, e)


def _measured(model, batch_size: int) -> PrecisionChoice:
    fp32, bf16 = measure(model, batch_size)
    return decide(fp32, bf16)


def train_step(net, opt, x, y, cast=None) -> None:
    """One training step as a run takes it (forward under ``cast``, an autocast context or None,
    cross-entropy, backward, clipping at 1, the optimizer's step): what the measurements time."""
    import torch
    import torch.nn.functional as F

    with cast if cast is not None else contextlib.nullcontext():
        logits = net(x)
        loss = F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)


def measure(model, batch_size: int, rounds: int = ROUNDS, round_s: float = ROUND_S) -> tuple[float, float | None]:
    """Training tokens/s of ``model`` (a ModelConfig) at ``batch_size`` in fp32 and under bf16 autocast
    (None when bf16 fails here): forward, backward, clipping and AdamW on a throwaway model of
    :data:`REFERENCE`, the two precisions' rounds interleaved, the fastest round of each. Torch's random
    state is as it was afterwards."""
    import torch

    from .model import build_model

    ctx, vocab = model.context_length, model.vocab_size
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        net = build_model(REFERENCE, model, kernels="torch")
        nets = {"fp32": net, "bf16": copy.deepcopy(net)}
        opts = {k: torch.optim.AdamW(n.param_groups(1e-3, 0.1), lr=1e-3, foreach=True) for k, n in nets.items()}
        data = torch.randint(0, vocab, (batch_size, ctx + 1), generator=torch.Generator().manual_seed(0))
        x, y = data[:, :-1], data[:, 1:].reshape(-1)

        def step(k: str) -> None:
            train_step(nets[k], opts[k], x, y, torch.autocast("cpu", dtype=torch.bfloat16) if k == "bf16" else None)

        def timed(k: str, n: int) -> float:
            t = time.perf_counter()
            for _ in range(n):
                step(k)
            return (time.perf_counter() - t) / n

        kinds = ["fp32", "bf16"]
        try:
            for _ in range(WARMUP):
                step("bf16")
        except (RuntimeError, TypeError) as e:  # bf16 autocast unsupported here
            log.info("bf16 autocast failed on this CPU (%s): fp32", e)
            kinds = ["fp32"]
        for _ in range(WARMUP):
            step("fp32")
        one = max(timed(k, 1) for k in kinds)
        n = max(1, min(MAX_STEPS, math.ceil(round_s / max(one, 1e-9))))
        best = {k: math.inf for k in kinds}
        for _ in range(rounds):
            for k in kinds:
                best[k] = min(best[k], timed(k, n))
    tokens = batch_size * ctx
    return tokens / best["fp32"], (tokens / best["bf16"] if "bf16" in best else None)
