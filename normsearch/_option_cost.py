"""What each norm option costs per second: Pre-LN, then Pre-LN with one option of issue 28 (and the 2026
baselines) at a time, every variant's full training step timed in one process, interleaved round-robin
(normsearch._cost_bench.measure_archs), each printed as tokens/s and as a ratio to Pre-LN measured in the same
run. ``normsearch bench options`` (or ``python benchmarks/option_cost.py``)::

    normsearch bench options                       # the speedrun study's shape: 4 layers, d_model 64, context 64
    normsearch bench options --d-model 256 --json results/repro/repro-speedrun/option_cost.json

The options are the search space's (search_spaces/speedrun.yaml): the gain of every norm (weightless, 1 + w),
the q/k and v norms, the context norm, the embedding norm, the residual scalars (modded-nanogpt's per
sublayer, nanochat's per block), x0 re-injection (at the block's input, with the attention branch), sinks
(which replace SDPA's fused kernel by an explicit softmax), the elementwise gate; weight decay on gains costs no
compute and is left out. A ratio is a median over rounds, with the quartiles of Pre-LN's rounds beside it as
the noise to read it against.
"""

from __future__ import annotations

import argparse
import json
import sys

PRE_LN = {"norm": "rmsnorm", "block": {"attn_in": True, "ffn_in": True}, "final": True}


def _with(**change) -> dict:
    d = {**PRE_LN, "block": dict(PRE_LN["block"])}
    block = change.pop("block", {})
    d["block"].update(block)
    d.update(change)
    return d


#: label -> a placement spec (a mapping) or a baseline's name.
VARIANTS: dict[str, object] = {
    "pre_ln": PRE_LN,
    "gain none (weightless)": _with(norm={"kind": "rmsnorm", "gain": "none"}),
    "gain one_plus (1 + w)": _with(norm={"kind": "rmsnorm", "gain": "one_plus"}),
    "+ q k norms": _with(block={"q": True, "k": True}),
    "+ v norm": _with(block={"v": True}),
    "+ ctx norm": _with(block={"ctx": True}),
    "+ embed norm": _with(embed=True),
    "+ residual scalars (sublayer)": _with(residual="scalars"),
    "+ residual lambdas (block)": _with(residual="lambdas"),
    "+ x0 at input": _with(x0="input"),
    "+ x0 with attention": _with(x0="attn"),
    "+ sinks": _with(sinks=True),
    "+ gate elementwise": _with(gate="elementwise"),
    "modded_nanogpt": "modded_nanogpt",
    "nanochat": "nanochat",
    "qwen3_next": "qwen3_next",
    "deepseek_v4": "deepseek_v4",
}


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="normsearch bench options", description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--steps", type=int, default=5, help="timed steps per variant per round")
    ap.add_argument("--only", default=None, help="comma-separated labels to measure besides pre_ln")
    ap.add_argument("--json", default=None, help="also write the numbers here")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    from ._cost_bench import measure_archs
    from .config import ModelConfig
    from .errors import NormsearchError

    variants = dict(VARIANTS)
    if args.only:
        wanted = [w.strip() for w in args.only.split(",") if w.strip()]
        unknown = [w for w in wanted if w not in variants]
        if unknown:
            raise NormsearchError(f"bench options --only: unknown variant {unknown[0]!r}; known: {', '.join(variants)}")
        variants = {k: v for k, v in variants.items() if k == "pre_ln" or k in wanted}
    cfg = ModelConfig(n_layers=args.layers, d_model=args.d_model, n_heads=args.heads, context_length=args.context,
                      vocab_size=args.vocab)
    measured = measure_archs(variants, cfg, args.batch, threads=args.threads, rounds=args.rounds, steps=args.steps,
                             echo=print)
    ref = measured["pre_ln"]
    print(f"\n{args.layers} layers, d_model {args.d_model}, {args.heads} heads, context {args.context}, batch "
          f"{args.batch}, {args.threads} thread(s), fp32, torch kernels; median of {args.rounds} rounds")
    width = max(map(len, measured))
    print(f"{'variant':<{width}}  tokens/s  [q1, q3]            ratio to pre_ln")
    rows = []
    for k, m in measured.items():
        ratio = m.tokens_per_s / ref.tokens_per_s
        rows.append({"variant": k, "tokens_per_s": m.tokens_per_s, "q1": m.q1, "q3": m.q3, "ratio": ratio})
        print(f"{k:<{width}}  {m.tokens_per_s:8,.0f}  [{m.q1:,.0f}, {m.q3:,.0f}]  {ratio:6.3f}")
    print(f"(pre_ln's own rounds spread {ref.spread:.1%} of its median: ratios within that are noise)")
    if args.json:
        from pathlib import Path

        shape = {"n_layers": args.layers, "d_model": args.d_model, "n_heads": args.heads, "context": args.context,
                 "vocab": args.vocab, "batch": args.batch, "threads": args.threads, "rounds": args.rounds,
                 "steps": args.steps}
        Path(args.json).write_text(json.dumps({"shape": shape, "rows": rows}, indent=2) + "\n")
        print(f"written: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
