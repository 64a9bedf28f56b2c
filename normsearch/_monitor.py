"""What a run records while it trains: the loss every step (divergence and spikes), and at every
evaluation the validation loss and the diagnostics the papers use to explain a result. A Lightning
callback over the run's :class:`normsearch.records.RunResult`; evaluation runs every
``train.eval_every`` steps and at the end, never in between."""

from __future__ import annotations

import contextlib
import math
import time
from typing import Any

import lightning.pytorch as pl
import torch
import torch.nn.functional as F

from .data import bits_per_byte
from .model import Transformer
from .recipe import TrainConfig
from .records import RunResult
from .spec import BLOCK_SITES

DIAG_WINDOWS = 8  # validation windows used for the gradient and logit diagnostics
EVAL_BATCH = 32
READ_EVERY = 16  # on a GPU, the training loss is read back once every this many steps


@torch.no_grad()
def evaluate(model: Transformer, windows: torch.Tensor, autocast) -> float:
    """Mean cross-entropy (nats per token) over the fixed validation windows."""
    total, count = 0.0, 0
    for chunk in windows.split(EVAL_BATCH):
        x, y = chunk[:, :-1], chunk[:, 1:]
        with autocast():
            logits = model(x)
        loss = F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), y.reshape(-1), reduction="sum")
        total += loss.item()
        count += y.numel()
    return total / count


def window_losses(model: Transformer, windows: torch.Tensor, autocast) -> torch.Tensor:
    """Mean cross-entropy (nats per token) of each window, for the test split and its noise."""
    out = []
    for chunk in windows.split(EVAL_BATCH):
        x, y = chunk[:, :-1], chunk[:, 1:]
        with autocast():
            logits = model(x)
        loss = F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), y.reshape(-1), reduction="none")
        out.append(loss.reshape(y.shape).mean(dim=1))
    return torch.cat(out)


def bootstrap_se(values) -> float:
    """The standard error of the mean of ``values`` under the bootstrap over them (the evaluation's own
    noise: which windows happened to be in the split), in closed form: the bootstrap distribution of a
    mean has variance exactly ``sum((v - mean)^2) / n^2``, which resampling only approximates."""
    import numpy as np

    v = np.asarray(values, dtype=np.float64)
    if len(v) < 2:
        return float("nan")
    return float(v.std(ddof=0) / np.sqrt(len(v)))


def _diagnostics(model: Transformer, windows: torch.Tensor, autocast) -> dict[str, Any]:
    """A few numbers per layer: residual-stream RMS (into and out of every block), gradient norm of
    each layer's FFN weights (Xiong et al. 2020), the largest attention logit (Wortsman et al.
    2023), and the mean gain (and DyT alpha) of every norm."""
    x, y = windows[:DIAG_WINDOWS, :-1], windows[:DIAG_WINDOWS, 1:]
    ffn = [[p for p in b.ffn.parameters()] for b in model.blocks]
    with torch.enable_grad(), model.probe_attention() as max_logits:
        with autocast():
            logits, hidden = model(x, return_hidden=True)
        loss = F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), y.reshape(-1))
        grads = torch.autograd.grad(loss, [p for ps in ffn for p in ps], allow_unused=True)
    it = iter(grads)
    grad_norm = []
    for ps in ffn:
        gs = [next(it) for _ in ps]
        grad_norm.append(math.sqrt(sum(float(g.float().pow(2).sum()) for g in gs if g is not None)))
    gains: dict[str, list[float | None]] = {}
    alphas: dict[str, list[float | None]] = {}
    for site in BLOCK_SITES:
        norms = [b.norms[site] for b in model.blocks]
        if any(n.present for n in norms):
            gains[site] = [_gain(n) for n in norms]
            if any(hasattr(n, "alpha") for n in norms):
                alphas[site] = [_mean(getattr(n, "alpha", None)) for n in norms]
    for site in ("embed", "final"):
        n = model.norms[site]
        if n.present:
            gains[site] = [_gain(n)]
            if hasattr(n, "alpha"):
                alphas[site] = [_mean(n.alpha)]
    return {
        "resid_rms": [float(h.detach().float().pow(2).mean().sqrt()) for h in hidden],
        "grad_norm": grad_norm,
        "max_logit": [float(t) for t in max_logits],
        "gains": gains,
        "alphas": alphas,
    }


def _mean(p) -> float | None:
    return None if p is None else float(p.detach().float().mean())


def _gain(norm) -> float | None:
    """A norm's mean gain as it multiplies: 1 + w under a ``one_plus`` gain, w otherwise; None without one."""
    w = getattr(norm, "weight", None)
    return None if w is None else _mean(w + 1.0 if getattr(norm, "one_plus", False) else w)


class Monitor(pl.Callback):
    """Records the loss every step, stops diverged runs, evaluates every ``eval_every`` steps."""

    def __init__(self, result: RunResult, train: TrainConfig, windows: torch.Tensor, bytes_per_token: float,
                 precision: str, progress, on_eval, tokens_per_step: int):
        super().__init__()
        self.result, self.train, self.windows, self.bpt = result, train, windows, bytes_per_token
        self.precision, self.progress, self.on_eval = precision, progress, on_eval
        self.tokens_per_step = tokens_per_step
        self.first_loss: float | None = None
        self.ema: float | None = None
        self.in_spike = False
        self.steps = 0
        self.eval_time = 0.0
        self.train_time = 0.0
        self.last_loss: float | None = None
        self.t0 = time.perf_counter()
        self.log_every = max(1, train.steps // 200)
        # On a GPU, reading the loss stalls the host until the step is done: read the losses of
        # READ_EVERY steps at once (a divergence is then seen at most that many steps late). On CPU
        # reading is free: every step.
        self.read_every = 1
        self.pending: list[tuple[int, torch.Tensor]] = []

    def _autocast(self, device):
        if self.precision.startswith("bf16"):
            return lambda: torch.autocast(device.type, dtype=torch.bfloat16)
        if self.precision.startswith("16"):
            return lambda: torch.autocast(device.type, dtype=torch.float16)
        return contextlib.nullcontext

    def _evaluate(self, trainer, module, step: int):
        t = time.perf_counter()
        model = module.model
        was_training = model.training
        model.eval()
        windows = self.windows.to(module.device)
        autocast = self._autocast(module.device)
        loss = evaluate(model, windows, autocast)
        bpb = bits_per_byte(loss, self.bpt)
        diag = _diagnostics(model, windows, autocast)
        model.train(was_training)
        self.result.curve.append({"step": step, "val_bpb": bpb, "train_loss": self.last_loss})
        self.result.diagnostics.append({"step": step, **diag})
        if trainer.logger is not None:
            from .curves import scalars

            trainer.logger.log_metrics({"val_bpb": bpb, **scalars(diag)}, step=step)
        self.eval_time += time.perf_counter() - t
        if not math.isfinite(bpb):
            self._diverge(trainer, step, "validation loss is not finite")
            return
        if self.on_eval is not None and step > 0 and self.on_eval(step, bpb):
            self.result.pruned = True
            trainer.should_stop = True

    def _diverge(self, trainer, step: int, reason: str):
        self.result.diverged, self.result.diverged_step, self.result.diverged_reason = True, step, reason
        trainer.should_stop = True

    def on_train_start(self, trainer, module):
        if module.device.type != "cpu":
            self.read_every = min(READ_EVERY, self.train.eval_every)
        self._evaluate(trainer, module, 0)
        self.t0, self.eval_time = time.perf_counter(), 0.0  # throughput is timed from here

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        step = trainer.global_step
        self.steps = step
        self.pending.append((step, (outputs["loss"] if isinstance(outputs, dict) else outputs).detach()))
        if step % self.read_every and step > 1 and step % self.train.eval_every and step < self.train.steps:
            return
        steps, losses = zip(*self.pending)
        self.pending = []
        values = torch.stack(losses).float().tolist() if len(losses) > 1 else [float(losses[0])]
        for s, loss in zip(steps, values):
            if self._step_end(trainer, module, s, loss):
                break
        if trainer.world_size > 1:  # every rank stops together, or DDP hangs: one all-reduce per read
            mine = self.result.diverged
            if trainer.strategy.reduce_boolean_decision(mine, all=False) and not mine:
                self._diverge(trainer, step, "the loss diverged on another device")

    def _step_end(self, trainer, module, step: int, loss: float) -> bool:
        """The checks of one step, given its loss; True when the run stops."""
        self.last_loss = loss
        if step % self.log_every == 0 or step == 1:
            self.result.train_loss.append([step, loss])
            if trainer.logger is not None:
                lr = trainer.optimizers[0].param_groups[0]["lr"] if trainer.optimizers else None
                trainer.logger.log_metrics({"train_loss": loss, **({"lr": lr} if lr is not None else {})}, step=step)
        if self.first_loss is None:
            self.first_loss = loss
        reason = None
        if not math.isfinite(loss):
            reason = "train loss is NaN or infinite"
        elif loss > self.train.diverge_factor * self.first_loss:
            reason = f"train loss {loss:.3g} > {self.train.diverge_factor:g} x first loss {self.first_loss:.3g}"
        if reason is not None:
            self._diverge(trainer, step, reason)
            return True
        if self.ema is not None and step > 10:
            spike = loss > self.train.spike_factor * self.ema
            if spike and not self.in_spike:
                self.result.spikes += 1
            self.in_spike = spike
        self.ema = loss if self.ema is None else 0.95 * self.ema + 0.05 * loss
        if step % self.train.eval_every == 0 or step >= self.train.steps:
            self._evaluate(trainer, module, step)
        if self.progress and (step % 5 == 0 or step >= self.train.steps):
            elapsed = max(time.perf_counter() - self.t0 - self.eval_time, 1e-9)
            self.progress.update(step, loss, step * self.tokens_per_step / elapsed)
        return trainer.should_stop

    def on_train_end(self, trainer, module):
        # Steady-state training throughput: from the first step to the last, evaluations excluded.
        self.train_time = time.perf_counter() - self.t0 - self.eval_time
        # A run stopped early by divergence keeps its curve; one stopped by pruning is scored at
        # its last evaluation. Make sure a finished run ends on an evaluation.
        res = self.result
        if not res.diverged and not res.pruned and (not res.curve or res.curve[-1]["step"] != self.steps):
            self._evaluate(trainer, module, self.steps)
