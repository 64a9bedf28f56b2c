"""How much the trial machinery costs: normsearch's trial (Lightning, divergence checks, progress,
evaluation hooks) against a bare PyTorch loop on the same model, the same batches and the same
optimiser, measured in one process, alternating so that machine noise hits both alike.

    python benchmarks/trial_overhead.py            # or: normsearch bench trial
    python benchmarks/trial_overhead.py --layers 12 --steps 300 --repeats 5

Prints the training tokens/s of each (median over repeats), their ratio (target: >= 0.95), and what
one evaluation with its diagnostics costs, as a share of training time at ``--eval-every`` (target:
diagnostics <= 5% of step time)."""

from __future__ import annotations

import argparse
import statistics
import sys
import time


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="benchmarks/trial_overhead.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--placement", default="peri_ln")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--kernels", choices=["auto", "torch", "triton"], default="auto",
                    help="norm kernels of both sides (auto: triton on CUDA)")
    ap.add_argument("--compile", choices=["auto", "true", "false"], default="false",
                    help="torch.compile the model on both sides")
    return ap.parse_args(argv)


def bare_loop(placement, model_cfg, train, tokens, seed: int, lr: float, device, compiled: bool = False) -> float:
    """Training tokens/s of the plainest loop that does the same work: forward, loss, backward,
    clipping, AdamW with the same schedule, the same kernels, precision and compilation as the
    trial, the loss read back as often as the trial reads it."""
    import contextlib

    import torch
    import torch.nn.functional as F

    from .kernels import resolve_backend
    from .model import build_model
    from ._monitor import READ_EVERY
    from .train import optimizer

    torch.manual_seed(seed)
    model = build_model(placement, model_cfg, kernels=resolve_backend(train.kernels)).to(device)
    opt, sched = optimizer(model, train, lr)
    step_model = torch.compile(model) if compiled else model
    bf16 = train.precision.startswith("bf16")
    autocast = (lambda: torch.autocast(device.type, dtype=torch.bfloat16)) if bf16 else contextlib.nullcontext
    read_every = 1 if device.type == "cpu" else READ_EVERY
    batches = tokens.train_batches(model_cfg.context_length, train.batch_size, seed)
    start = None
    for step in range(train.steps + 1):
        if step == 1:  # like the trial's timer, from the end of the first step
            start = time.perf_counter()
        x, y = (torch.from_numpy(a).to(device) for a in next(batches))
        with autocast():
            logits = step_model(x)
        loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), y.view(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), train.grad_clip)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        if step % read_every == 0:
            loss.item()
    return train.steps * train.batch_size * model_cfg.context_length / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    from .config import ModelConfig
    from .data import DataConfig, load_tokens
    from .model import build_model
    from .recipe import TrainConfig
    from ._monitor import _diagnostics, evaluate
    from .train import train_run

    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model_cfg = ModelConfig(n_layers=args.layers, d_model=args.d_model, n_heads=args.heads,
                            context_length=args.context)
    data = DataConfig()
    # the trial times from its first step; give the bare loop one more step so both time args.steps
    train = TrainConfig(steps=args.steps, batch_size=args.batch, warmup=min(20, args.steps),
                        eval_every=args.eval_every, precision="32-true" if device.type == "cpu" else "bf16-mixed",
                        kernels=args.kernels, compile={"true": True, "false": False}.get(args.compile, "auto"),
                        threads=args.threads)
    compiled = train.compile is True or (train.compile == "auto" and device.type == "cuda")
    tokens = load_tokens(data)
    bare, ours = [], []
    for i in range(args.repeats):
        runs = [("bare", lambda i=i: bare_loop(args.placement, model_cfg, train, tokens, i, 3e-3, device,
                                                             compiled)),
                ("ours", lambda i=i: train_run(args.placement, model_cfg, data, train, seed=i, lr=3e-3,
                                               tokens=tokens).tokens_per_s)]
        for name, fn in runs if i % 2 == 0 else runs[::-1]:
            (bare if name == "bare" else ours).append(fn())

    # one evaluation and its diagnostics, against the time of a training step
    model = build_model(args.placement, model_cfg).to(device)
    windows = torch.from_numpy(tokens.val_windows(args.context, data.eval_windows)).to(device)
    from contextlib import nullcontext

    t = time.perf_counter()
    for _ in range(3):
        evaluate(model, windows, nullcontext)
    t_eval = (time.perf_counter() - t) / 3
    t = time.perf_counter()
    for _ in range(3):
        _diagnostics(model, windows, nullcontext)
    t_diag = (time.perf_counter() - t) / 3
    b, o = statistics.median(bare), statistics.median(ours)
    step = args.batch * args.context / o
    per_interval = args.eval_every * step
    print(f"model: {args.placement}, {args.layers} layers, d_model {args.d_model}, batch {args.batch} x "
          f"{args.context} tokens, {args.steps} steps, {args.repeats} repeats, {device}, "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads, precision {train.precision}, "
          f"kernels {args.kernels}, compiled {compiled} (both sides)")
    print(f"bare PyTorch loop : {b:10,.0f} tokens/s  (runs: {', '.join(f'{x:,.0f}' for x in bare)})")
    print(f"normsearch trial  : {o:10,.0f} tokens/s  (runs: {', '.join(f'{x:,.0f}' for x in ours)})")
    print(f"ratio normsearch / bare: {o / b:.3f}  (target >= 0.95)")
    print(f"one training step: {step * 1e3:.2f} ms; validation evaluation: {t_eval * 1e3:.1f} ms; "
          f"diagnostics: {t_diag * 1e3:.1f} ms")
    print(f"at eval_every={args.eval_every}: diagnostics cost {t_diag / per_interval:.1%} of training time, "
          f"the whole evaluation {(t_eval + t_diag) / per_interval:.1%} (target: diagnostics <= 5%)")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
