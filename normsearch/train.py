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
from typing import Callable, Protocol

import lightning.pytorch as pl
import torch
import torch.nn.functional as F

from .config import ModelConfig
from .data import DataConfig, Tokens, cache_root, load_tokens
from .errors import NormsearchError
from .kernels import resolve_backend, triton_version
from .model import Transformer, build_model
from .recipe import TrainConfig
from .records import RunResult
from ._monitor import Monitor
from .spec import Placement

log = logging.getLogger("normsearch")



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
    """AdamW with weight decay on matrices and embeddings, none on norm parameters, each group's lr
    and decay as the model's parametrization says (:meth:`Transformer.param_groups`), and the
    warmup-then-decay schedule stepped every optimizer step."""
    groups = model.param_groups(lr, train.weight_decay, train.gain_decay)
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


# --------------------------------------------------------------------------------------------------
# The run


def _precision(train: TrainConfig, accelerator: str, model: ModelConfig, data: DataConfig) -> tuple[str, dict | None]:
    """The run's precision, and for ``auto`` what was chosen and why (``RunResult.precision_choice``):
    bf16-mixed on a GPU; on a CPU the faster of fp32 and bf16 autocast at ``model``'s shape, measured
    once per shape and machine (:mod:`normsearch._precision`; torch's threads must be the run's)."""
    if train.precision != "auto":
        if accelerator == "cpu" and train.precision == "16-mixed":
            raise NormsearchError("train.precision 16-mixed needs a GPU; use 32-true or bf16-mixed on CPU")
        return train.precision, None
    from ._precision import choose

    choice = choose(model, train.batch_size, _precision_cache(data) if accelerator == "cpu" else None, accelerator)
    return choice.chosen, choice.to_dict()


def _precision_cache(data: DataConfig) -> Path | None:
    """Where ``auto``'s measurements are cached: the token cache's root (None: not writable, measure again)."""
    try:
        return cache_root(data)
    except NormsearchError:
        return None


def _compiled(train: TrainConfig, accelerator: str) -> bool:
    """``train.compile``: auto compiles on GPUs only. On CPU, at this project's model sizes, compiling
    did not pay for itself (results/throughput/README.md)."""
    return accelerator == "gpu" if train.compile == "auto" else bool(train.compile)


def _cpu_capability() -> str:
    """The instruction set torch's CPU kernels dispatch to (AVX2, AVX512, ...): a run's sums can differ
    between machines that differ in it."""
    try:
        return str(torch.backends.cpu.get_cpu_capability())
    except Exception:  # an older torch
        return ""


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
    log_dir: str | Path | None = None,
    log_group: str = "normsearch",
    test_bytes: int | None = None,
) -> RunResult:
    """Train ``placement`` once and score it. ``on_eval(step, val_bpb)`` is called at every
    evaluation; returning True stops the run as pruned. ``checkpoint``: write the final weights
    (safetensors) there. ``log_dir``/``log_group``: where ``train.logger`` writes the run's curves
    (the study's ``results/<name>/logs`` and name). ``test_bytes``: score the run on the test split
    of at least that many bytes (:meth:`normsearch.data.Tokens.test_windows`) instead of the
    validation windows, with the evaluation's bootstrap standard error (a confirmation run)."""
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
    if train.threads:
        torch.set_num_threads(train.threads)
    precision, precision_choice = _precision(train, accelerator, model, data)  # before seeding anything
    kernels = resolve_backend(train.kernels, placement.kinds())

    with quiet(verbose):
        pl.seed_everything(seed, workers=False, verbose=False)
        net = build_model(placement, model, kernels=kernels)
        compiled = _compiled(train, accelerator)
        module = RunModule(net, train, lr, compiled)
        device = torch.device("cuda" if accelerator == "gpu" else "cpu")
        result = RunResult(
            arch_id=net.arch_id, label=label, placement=placement.to_dict(), n_layers=model.n_layers,
            seed=seed, lr=lr, value=None, n_params=net.num_parameters(),
            n_norm_params=net.num_parameters(norms_only=True), precision=precision,
            precision_choice=precision_choice, kernels=kernels,
            triton_version=triton_version() if kernels == "triton" else None,
            device=torch.cuda.get_device_name(device) if accelerator == "gpu" else "cpu",
            data_key=tokens.key, bytes_per_token=tokens.bytes_per_token, torch_version=torch.__version__,
            unigram_bpb=tokens.unigram_bpb(model.context_length, data.eval_windows),
            compiled=compiled, tf32=_tf32(precision, accelerator), threads=torch.get_num_threads(),
            cpu=_cpu_capability(),
        )
        windows = torch.from_numpy(tokens.val_windows(model.context_length, data.eval_windows))
        monitor = Monitor(result, train, windows, tokens.bytes_per_token, precision, progress, on_eval,
                           tokens_per_step=train.batch_size * model.context_length * world)
        from .curves import make_logger, run_name

        logger = make_logger(train.logger, log_dir if rank == 0 else None, log_group,
                             run_name(label, net.arch_id, seed, lr))
        data_seed = seed if world == 1 else seed * 1000 + rank  # each rank its own batches
        loader = torch.utils.data.DataLoader(
            _Batches(tokens, model.context_length, train.batch_size, data_seed), batch_size=None,
            num_workers=0, pin_memory=accelerator == "gpu",
        )
        trainer = pl.Trainer(
            accelerator=accelerator, devices=train.devices, strategy=_strategy(train),
            precision=precision, max_steps=train.steps, max_epochs=-1,
            gradient_clip_val=train.grad_clip or None, callbacks=[monitor],
            logger=logger if logger is not None else False, enable_checkpointing=False, enable_progress_bar=False,
            enable_model_summary=False,
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
            if test_bytes:
                _score_on_test(result, net, tokens, model, data, test_bytes, monitor)
        if checkpoint is not None and not result.diverged and trainer.is_global_zero:
            from .checkpoint import save_weights

            save_weights(net, checkpoint)
    if progress:
        progress.end(result)
    return result


def _score_on_test(result: RunResult, net, tokens: Tokens, model: ModelConfig, data: DataConfig, test_bytes: int,
                   monitor) -> None:
    """The run's value on the test split, and the evaluation's own noise (bootstrap SE over windows)."""
    from ._monitor import bootstrap_se, window_losses

    windows = torch.from_numpy(tokens.test_windows(model.context_length, test_bytes, data.eval_windows))
    device = next(net.parameters()).device
    was = net.training
    net.eval()
    with torch.no_grad():
        per_window = window_losses(net, windows.to(device), monitor._autocast(device)).double().cpu().numpy()
    net.train(was)
    to_bpb = 1.0 / (math.log(2) * tokens.bytes_per_token)
    result.val_bpb = result.value
    result.value = float(per_window.mean() * to_bpb)
    result.metric = "test_bpb"
    result.test_windows = len(per_window)
    result.test_se = bootstrap_se(per_window * to_bpb)
    result.unigram_bpb = tokens.unigram_bpb_on(windows.numpy())


def _fit(trainer, module, loader) -> None:
    """``trainer.fit``, except that Ctrl-C stays a KeyboardInterrupt (and a SIGTERM its Terminated):
    Lightning catches it, ignores SIGINT from then on and exits the process with code 1, which would
    leave the study no chance to mark the trial for a rerun."""
    handler = signal.getsignal(signal.SIGINT)
    try:
        trainer.fit(module, train_dataloaders=loader)
    except SystemExit as e:
        if not trainer.interrupted:
            raise
        signal.signal(signal.SIGINT, handler)
        # the interrupt Lightning caught (its exit(1) is raised while handling it): a SIGTERM stays a SIGTERM
        caught = e.__context__
        raise (caught if isinstance(caught, KeyboardInterrupt) else KeyboardInterrupt()) from None


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
        f"  {result.device}, precision {result.precision}"
        + (f" (auto: {result.precision_choice['reason']})" if result.precision_choice else "")
        + f", kernels {result.kernels}"
        + (f" (Triton {result.triton_version})" if result.triton_version else ""),
    ])


run_trial = train_run  # the public name before the rename; `normsearch.run_trial` still works
