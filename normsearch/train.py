"""One run: a placement, a seed and a learning rate, trained for a fixed budget on real
text and scored on held-out text, with the diagnostics the papers use to explain a result.

    result = train_run(placement, model_cfg, data_cfg, train_cfg, seed=0, lr=3e-3)

Lightning (``lightning.pytorch``) runs the loop: AdamW, linear warmup then cosine (or linear or
constant) decay, gradient clipping, a step budget. Evaluation and diagnostics run every
``train.eval_every`` steps and at the end, never in between, so they cost nothing per step.
A NaN/Inf loss or a loss far above its start stops the run early and records ``diverged``; it never
raises. The result is a plain record that a study stores.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import signal
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Protocol

import lightning.pytorch as pl
import torch
import torch.nn.functional as F

from .config import ModelConfig
from .data import DataConfig, Tokens, bits_per_byte, load_tokens
from .errors import NormsearchError
from .kernels import resolve_backend, triton_version
from .model import Transformer, build_model, is_norm_parameter
from .recipe import TrainConfig
from .records import RunResult
from .spec import BLOCK_SITES, Placement

log = logging.getLogger("normsearch")

DIAG_WINDOWS = 8  # validation windows used for the gradient and logit diagnostics
EVAL_BATCH = 32
READ_EVERY = 16  # on a GPU, the training loss is read back once every this many steps


class Progress(Protocol):
    def start(self, label: str, total_steps: int) -> None: ...
    def update(self, step: int, loss: float, tokens_per_s: float) -> None: ...
    def end(self, result: RunResult) -> None: ...


# --------------------------------------------------------------------------------------------------
# Lightning pieces


def lr_lambda(train: TrainConfig) -> Callable[[int], float]:
    """Multiplier of the peak learning rate at optimizer step ``s`` (0-based)."""
    W, S, floor = train.warmup, train.steps, train.min_lr_ratio

    def f(s: int) -> float:
        if W and s < W:
            return (s + 1) / W
        if train.schedule == "constant":
            return 1.0
        t = (s - W) / max(1, S - W)
        t = min(max(t, 0.0), 1.0)
        decay = 0.5 * (1 + math.cos(math.pi * t)) if train.schedule == "cosine" else 1.0 - t
        return floor + (1.0 - floor) * decay

    return f


def optimizer(model: Transformer, train: TrainConfig, lr: float):
    """AdamW with weight decay on matrices and embeddings, none on norm parameters, and the
    warmup-then-decay schedule stepped every optimizer step."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if is_norm_parameter(name) or p.ndim < 2 else decay).append(p)
    groups = [{"params": decay, "weight_decay": train.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=lr, betas=(train.beta1, train.beta2), foreach=True)
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(train))


class RunModule(pl.LightningModule):
    """The model of one placement, its loss and its optimiser."""

    def __init__(self, model: Transformer, train: TrainConfig, lr: float, compiled: bool = False):
        super().__init__()
        self.model, self.train_cfg, self.lr = model, train, lr
        # the training forward compiled; evaluation and diagnostics run the model as it is (outside
        # the module's children, so that parameters and state are the model's alone)
        object.__setattr__(self, "step_model", torch.compile(model) if compiled else model)

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self.step_model(x)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))

    def configure_optimizers(self):
        opt, sched = optimizer(self.model, self.train_cfg, self.lr)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


class _Batches(torch.utils.data.IterableDataset):
    def __init__(self, tokens: Tokens, context: int, batch: int, seed: int):
        self.args = (context, batch, seed)
        self.tokens = tokens

    def __iter__(self):
        for x, y in self.tokens.train_batches(*self.args):
            yield torch.from_numpy(x), torch.from_numpy(y)


# --------------------------------------------------------------------------------------------------
# Evaluation and diagnostics


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
            gains[site] = [_mean(getattr(n, "weight", None)) for n in norms]
            if any(hasattr(n, "alpha") for n in norms):
                alphas[site] = [_mean(getattr(n, "alpha", None)) for n in norms]
    for site in ("embed", "final"):
        n = model.norms[site]
        if n.present:
            gains[site] = [_mean(getattr(n, "weight", None))]
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


# --------------------------------------------------------------------------------------------------
# The run


def _precision(train: TrainConfig, accelerator: str) -> str:
    if train.precision != "auto":
        if accelerator == "cpu" and train.precision == "16-mixed":
            raise NormsearchError("train.precision 16-mixed needs a GPU; use 32-true or bf16-mixed on CPU")
        return train.precision
    return "bf16-mixed" if accelerator == "gpu" else "32-true"


def _compiled(train: TrainConfig, accelerator: str) -> bool:
    """``train.compile``: auto compiles on GPUs only. On CPU, at this project's model sizes, compiling
    did not pay for itself (results/throughput/README.md)."""
    return accelerator == "gpu" if train.compile == "auto" else bool(train.compile)


def _tf32(precision: str, accelerator: str) -> bool:
    """TF32 matmuls under 32-true on GPUs that have them (Ampere and later); True when on."""
    if accelerator != "gpu" or precision != "32-true" or torch.cuda.get_device_capability()[0] < 8:
        return False
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    return True


def _accelerator(train: TrainConfig) -> str:
    if train.device == "cuda" and not torch.cuda.is_available():
        raise NormsearchError("train.device is cuda but no CUDA device is available; use device: auto or cpu")
    if train.device == "cpu":
        return "cpu"
    return "gpu" if torch.cuda.is_available() else "cpu"


@contextlib.contextmanager
def quiet(verbose: bool):
    """Silence Lightning's banners and warnings unless ``verbose``."""
    if verbose:
        yield
        return
    loggers = [logging.getLogger(n) for n in ("lightning", "lightning.pytorch", "lightning.fabric")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, lv in zip(loggers, levels):
            lg.setLevel(lv)


def train_run(
    placement: Placement | str,
    model: ModelConfig,
    data: DataConfig,
    train: TrainConfig,
    *,
    seed: int,
    lr: float,
    tokens: Tokens | None = None,
    progress: Progress | None = None,
    on_eval: Callable[[int, float], bool] | None = None,
    checkpoint: str | Path | None = None,
    verbose: bool = False,
    label: str | None = None,
) -> RunResult:
    """Train ``placement`` once and score it. ``on_eval(step, val_bpb)`` is called at every
    evaluation; returning True stops the run as pruned. ``checkpoint``: write the final weights
    (safetensors) there."""
    if isinstance(placement, str):
        from .baselines import baseline

        label = label or placement
        placement = baseline(placement)
    label = label or placement.name
    if train.devices > 1 and "LOCAL_RANK" not in os.environ:
        if train.strategy == "fsdp" and _accelerator(train) == "cpu":
            raise NormsearchError("train.strategy fsdp needs CUDA GPUs; use train.strategy: ddp on CPU")
        return _run_distributed(placement, model, data, train, seed=seed, lr=lr, checkpoint=checkpoint,
                                verbose=verbose, label=label, progress=progress)
    rank, world = int(os.environ.get("RANK", 0)), train.devices
    tokens = tokens if tokens is not None else load_tokens(data)
    if tokens.vocab_size > model.vocab_size:
        raise NormsearchError(
            f"the data has {tokens.vocab_size} token ids but model.vocab_size is {model.vocab_size}; "
            f"set model.vocab_size >= {tokens.vocab_size}"
        )
    accelerator = _accelerator(train)
    precision = _precision(train, accelerator)
    kernels = resolve_backend(train.kernels, placement.kinds())
    if train.threads:
        torch.set_num_threads(train.threads)

    with quiet(verbose):
        pl.seed_everything(seed, workers=False, verbose=False)
        net = build_model(placement, model, kernels=kernels)
        compiled = _compiled(train, accelerator)
        module = RunModule(net, train, lr, compiled)
        device = torch.device("cuda" if accelerator == "gpu" else "cpu")
        result = RunResult(
            arch_id=net.arch_id, label=label, placement=placement.to_dict(), n_layers=model.n_layers,
            seed=seed, lr=lr, value=None, n_params=net.num_parameters(),
            n_norm_params=net.num_parameters(norms_only=True), precision=precision, kernels=kernels,
            triton_version=triton_version() if kernels == "triton" else None,
            device=torch.cuda.get_device_name(device) if accelerator == "gpu" else "cpu",
            data_key=tokens.key, bytes_per_token=tokens.bytes_per_token, torch_version=torch.__version__,
            unigram_bpb=tokens.unigram_bpb(),
            compiled=compiled, tf32=_tf32(precision, accelerator),
        )
        windows = torch.from_numpy(tokens.val_windows(model.context_length, data.eval_windows))
        monitor = _Monitor(result, train, windows, tokens.bytes_per_token, precision, progress, on_eval,
                           tokens_per_step=train.batch_size * model.context_length * world)
        data_seed = seed if world == 1 else seed * 1000 + rank  # each rank its own batches
        loader = torch.utils.data.DataLoader(
            _Batches(tokens, model.context_length, train.batch_size, data_seed), batch_size=None,
            num_workers=0, pin_memory=accelerator == "gpu",
        )
        trainer = pl.Trainer(
            accelerator=accelerator, devices=train.devices, strategy=_strategy(train),
            precision=precision, max_steps=train.steps, max_epochs=-1,
            gradient_clip_val=train.grad_clip or None, callbacks=[monitor],
            logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
            num_sanity_val_steps=0, limit_val_batches=0, deterministic=False, barebones=False,
            use_distributed_sampler=False,
        )
        if progress:
            progress.start(label or result.arch_id, train.steps)
        start = time.perf_counter()
        _fit(trainer, module, loader)
        result.wall_time = time.perf_counter() - start
        result.steps = monitor.steps
        result.tokens_per_s = monitor.steps * monitor.tokens_per_step / max(monitor.train_time, 1e-9)
        if not result.diverged and result.curve:
            result.value = result.curve[-1]["val_bpb"]
        if checkpoint is not None and not result.diverged and trainer.is_global_zero:
            from .checkpoint import save_weights

            save_weights(net, checkpoint)
    if progress:
        progress.end(result)
    return result


def _fit(trainer, module, loader) -> None:
    """``trainer.fit``, except that Ctrl-C stays a KeyboardInterrupt: Lightning catches it, ignores
    SIGINT from then on and exits the process with code 1, which would leave the study no chance to
    mark the trial for a rerun."""
    handler = signal.getsignal(signal.SIGINT)
    try:
        trainer.fit(module, train_dataloaders=loader)
    except SystemExit:
        if not trainer.interrupted:
            raise
        signal.signal(signal.SIGINT, handler)
        raise KeyboardInterrupt from None


def _strategy(train: TrainConfig):
    if train.devices == 1:
        return "auto"
    if train.strategy == "fsdp":
        return "fsdp"
    from lightning.pytorch.strategies import DDPStrategy

    backend = "nccl" if _accelerator(train) == "gpu" else "gloo"
    return DDPStrategy(process_group_backend=backend)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(rank: int, world: int, port: int, queue, kwargs: dict) -> None:
    """One process of a trial on several devices. Lightning sees LOCAL_RANK and does not launch
    processes itself; rank 0 sends the result back."""
    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": str(world),
                       "RANK": str(rank), "LOCAL_RANK": str(rank), "NODE_RANK": "0"})
    try:
        result = train_run(**kwargs)
        if rank == 0:
            queue.put(("ok", result.to_dict()))
    except BaseException as e:  # the parent turns it into an error of its own
        queue.put(("error", f"rank {rank}: {type(e).__name__}: {e}", isinstance(e, NormsearchError)))
        raise SystemExit(1) from None


def _run_distributed(placement, model, data, train, *, seed, lr, checkpoint, verbose, label, progress):
    """A trial on ``train.devices`` devices (DDP or FSDP). The caller decided the architecture; every
    rank trains that one, and only rank 0's result comes back (so only it reaches the study).
    Pruning is not available here: the ranks run in their own processes."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    port = _free_port()
    kwargs = {"placement": placement, "model": model, "data": data, "train": train, "seed": seed, "lr": lr,
              "checkpoint": checkpoint, "verbose": verbose, "label": label}
    if progress:
        progress.start(f"{label} on {train.devices} devices ({train.strategy})", train.steps)
    procs = [ctx.Process(target=_rank_main, args=(r, train.devices, port, queue, kwargs), daemon=False)
             for r in range(train.devices)]
    for p in procs:
        p.start()
    try:
        for p in procs:
            p.join()
    except KeyboardInterrupt:
        for p in procs:
            p.terminate()
        raise
    messages = []
    while not queue.empty():
        messages.append(queue.get())
    errors = [m for m in messages if m[0] == "error"]
    if errors:
        kind = NormsearchError if errors[0][2] else RuntimeError
        raise kind(errors[0][1])
    ok = [m[1] for m in messages if m[0] == "ok"]
    if len(ok) != 1 or any(p.exitcode for p in procs):
        raise RuntimeError(f"a distributed trial ended without a result (exit codes {[p.exitcode for p in procs]})")
    result = RunResult.from_dict(ok[0])
    if progress:
        progress.end(result)
    return result


class _Monitor(pl.Callback):
    """Records the loss every step, stops diverged runs, evaluates every ``eval_every`` steps."""

    def __init__(self, result: RunResult, train: TrainConfig, windows: torch.Tensor, bytes_per_token: float,
                 precision: str, progress: Progress | None, on_eval, tokens_per_step: int):
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


def summarize(result: RunResult) -> str:
    """A few lines for the terminal."""
    head = result.outcome()
    if result.diverged:
        head += f": {result.diverged_reason}"
    elif not result.pruned:
        head += f" after {result.steps} steps"
    return "\n".join([
        f"{result.label or 'placement'} [{result.arch_id}] seed {result.seed}, lr {result.lr:g}: {head}",
        f"  {result.tokens_per_s:,.0f} tokens/s, {result.wall_time:.1f} s, {result.n_params:,} parameters "
        f"({result.n_norm_params:,} in norms), {result.spikes} loss spikes",
        f"  {result.device}, precision {result.precision}, kernels {result.kernels}"
        + (f" (Triton {result.triton_version})" if result.triton_version else ""),
    ])


run_trial = train_run  # the public name before the rename; `normsearch.run_trial` still works
