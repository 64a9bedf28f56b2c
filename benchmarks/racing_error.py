"""How often racing the confirmation's seeds makes a false claim, against the fixed design it replaces.

A simulation with the statistics the ranking uses (``normsearch.stats.analyse``: per-architecture
variances, Holm over every comparison with a baseline) and racing's rule as ``stages/racing.py`` applies
it (the contenders are the architectures whose 95% rank interval reaches the leader's; each gets one
fresh seed a round, by P(best), until P(best) >= ``p_best``, they separate, or fewer than 2 runs of the
budget are left). The truth is the committed repro confirmation (results/repro/repro-search/confirm):
each architecture's mean and seed SD, with the found placements' true means set to Pre-LN's, so that
every "a found placement beats Pre-LN" is false. A study is the fixed design (``--seeds`` seeds each)
or that design raced with ``--budget`` extra runs. Prints, per design, the share of studies with at
least one false "beats Pre-LN" claim (Wilson 95% interval).

    python benchmarks/racing_error.py --studies 1000          # the figures in docs/statistics.md
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
TRUTH = ROOT / "results" / "repro" / "repro-search" / "confirm" / "ranking.json"


def truth() -> tuple[dict[str, float], dict[str, float], list[str], list[str]]:
    """Means and SDs of the committed confirmation; the found placements' means set to Pre-LN's."""
    rows = json.loads(TRUTH.read_text())["rows"]
    mean = {r["label"]: r["score_mean"] for r in rows if r["score_mean"] is not None}
    sd = {r["label"]: float(np.std(list(r["seeds"].values()), ddof=1)) for r in rows if len(r["seeds"]) > 1}
    found = [r["label"] for r in rows if not r["is_baseline"] and r["label"] in sd]
    bases = [r["label"] for r in rows if r["is_baseline"] and r["label"] in sd]
    for f in found:
        mean[f] = mean["pre_ln"]
    return mean, sd, found, bases


def claims(samples: dict[str, dict[int, float]], found: list[str], bases: list[str], alpha: float):
    """The analysis of one study: (stats, false 'beats pre_ln' claims)."""
    from normsearch.stats import Run, analyse

    runs = [Run(a, s, 1e-3, v) for a, seeds in samples.items() for s, v in seeds.items()]
    st = analyse(runs, against=bases, compared=list(samples), alpha=alpha, n_draws=2000)
    false = [c for c in st.comparisons if c.arch in found and c.against == "pre_ln" and c.verdict == "better"]
    return st, false


def race(samples, draw, found, bases, budget: int, p_best: float, alpha: float):
    """Rounds of racing on ``samples`` (in place); returns the final analysis."""
    spent = 0
    while True:
        st, false = claims(samples, found, bases, alpha)
        order = list(st.archs)
        leader = st.archs[order[0]]
        if leader.p_best is not None and leader.p_best >= p_best:
            return false
        contenders = [a for a in order if st.archs[a].rank_low <= leader.rank_high]
        left = budget - spent
        if len(contenders) <= 1 or left < 2:
            return false
        contenders.sort(key=lambda a: -(st.archs[a].p_best or 0.0))
        for a in contenders[:left]:
            samples[a][max(samples[a]) + 1] = draw(a)
            spent += 1


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--studies", type=int, default=1000)
    ap.add_argument("--seeds", type=int, default=3, help="seeds per architecture of the fixed design")
    ap.add_argument("--budget", type=int, default=9, help="racing's extra runs (the repro recipe's)")
    ap.add_argument("--p-best", type=float, default=0.95)
    ap.add_argument("--alpha", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    from normsearch.stats import wilson

    mean, sd, found, bases = truth()
    rng = np.random.default_rng(args.seed)
    counts = {"fixed": 0, "raced": 0}
    for _ in range(args.studies):
        def draw(a):
            return float(rng.normal(mean[a], sd[a]))

        samples = {a: {s: draw(a) for s in range(args.seeds)} for a in mean if a in sd}
        _, false = claims(samples, found, bases, args.alpha)
        counts["fixed"] += bool(false)
        counts["raced"] += bool(race(samples, draw, found, bases, args.budget, args.p_best, args.alpha))
    print(f"truth: {TRUTH.relative_to(ROOT)}, found placements {', '.join(found)} set to Pre-LN's mean "
          f"{mean['pre_ln']:.4f}; SDs {', '.join(f'{a} {sd[a]:.4f}' for a in sd)}")
    print(f"{args.studies} studies, {args.seeds} seeds each, racing budget {args.budget}, P(best) {args.p_best}, "
          f"Holm over every comparison with a baseline at alpha {args.alpha}")
    for design, k in counts.items():
        lo, hi = wilson(k, args.studies)
        print(f"  {design}: a false 'beats pre_ln' in {k}/{args.studies} = {k / args.studies:.1%} "
              f"[{lo:.1%}, {hi:.1%}] of studies")


if __name__ == "__main__":
    main()
